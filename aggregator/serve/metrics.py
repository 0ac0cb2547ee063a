"""``/metrics``: Prometheus text format (prometheus_client).

Two kinds of figures, gathered differently because ``serve`` runs several processes:

- **harvest figures** come from the state database at each scrape (any serving process
  reads it), so every process answers the same: jobs by source and status, records by source
  and outcome (the job counters summed), job durations, the last successful job's time,
  jobs running, records held by status, validation findings by step (validator) and
  severity; and from the scheduler's book, each source's circuit breaker and failures;
- **request figures** (OAI-PMH by verb and outcome, SPARQL by HTTP status) are counted in
  the process that answered. Under ``serve`` the supervisor gives its serving processes a
  shared folder (``PROMETHEUS_MULTIPROC_DIR``, prometheus_client's multiprocess mode): each
  process writes its counters to its own file there, and ``/metrics`` sums the files of all
  processes, those replaced after a SPARQL deadline included, so counters never go back.
  An app in a single process (tests, embedding) counts in memory.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from aggregator.serve.context import ServeContext

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


class RequestCounters:
    """The request counters of this process."""

    def __init__(self) -> None:
        # multiprocess mode: the counters live in the default registry's process files and
        # are read back by the MultiProcessCollector; otherwise in a registry of our own
        self.registry = None if _multiprocess() else CollectorRegistry()
        kwargs: dict[str, Any] = {} if self.registry is None else {"registry": self.registry}
        self.oai = Counter(
            "aggregator_oai_requests",
            "OAI-PMH requests answered, by verb and outcome (ok or the OAI error code)",
            ["verb", "outcome"],
            **kwargs,
        )
        self.sparql = Counter(
            "aggregator_sparql_requests",
            "SPARQL protocol requests answered, by HTTP status",
            ["status"],
            **kwargs,
        )

    def registry_for_scrape(self) -> CollectorRegistry:
        if self.registry is not None:
            return self.registry
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return registry


_counters: RequestCounters | None = None


def counters() -> RequestCounters:
    """This process's request counters (made once: metric names are process-wide)."""
    global _counters
    if _counters is None:
        _counters = RequestCounters()
    return _counters


class HarvestCollector(Collector):
    """Harvest and schedule figures read at each scrape."""

    def __init__(self, ctx: ServeContext) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[Metric]:
        db = self.ctx.read_db()
        jobs = CounterMetricFamily(
            "aggregator_harvest_jobs",
            "Harvest jobs run, by source and status",
            labels=["source", "status"],
        )
        for source, status, n in db.execute(
            "SELECT source, status, count(*) FROM jobs GROUP BY source, status"
        ):
            jobs.add_metric([source, status], n)
        yield jobs
        records = CounterMetricFamily(
            "aggregator_harvest_records",
            "Records dealt with by harvest jobs, by source and outcome",
            labels=["source", "outcome"],
        )
        totals: dict[tuple[str, str], int] = {}
        for source, counters_json in db.execute("SELECT source, counters FROM jobs"):
            for outcome, n in json.loads(counters_json or "{}").items():
                key = (source, outcome)
                totals[key] = totals.get(key, 0) + int(n)
        for (source, outcome), n in sorted(totals.items()):
            records.add_metric([source, outcome], n)
        yield records
        duration = GaugeMetricFamily(
            "aggregator_harvest_last_duration_seconds",
            "Duration of the last finished job of each source",
            labels=["source", "status"],
        )
        durations = CounterMetricFamily(
            "aggregator_harvest_duration_seconds",
            "Total time spent in finished jobs, by source",
            labels=["source"],
        )
        last_success = GaugeMetricFamily(
            "aggregator_harvest_last_success_timestamp_seconds",
            "End of the last succeeded job of each source (Unix time)",
            labels=["source"],
        )
        seconds = "(julianday(ended) - julianday(started)) * 86400"
        for source, status, took in db.execute(
            f"SELECT source, status, {seconds} FROM jobs j WHERE ended IS NOT NULL AND id ="
            " (SELECT max(id) FROM jobs WHERE source = j.source AND ended IS NOT NULL)"
        ):
            duration.add_metric([source, status], float(took or 0))
        for source, total in db.execute(
            f"SELECT source, sum({seconds}) FROM jobs WHERE ended IS NOT NULL GROUP BY source"
        ):
            durations.add_metric([source], float(total or 0))
        for source, ended in db.execute(
            "SELECT source, (julianday(max(ended)) - 2440587.5) * 86400 FROM jobs"
            " WHERE status = 'succeeded' GROUP BY source"
        ):
            last_success.add_metric([source], float(ended))
        yield duration
        yield durations
        yield last_success
        running = GaugeMetricFamily(
            "aggregator_harvest_jobs_in_progress", "Jobs running now, by source", labels=["source"]
        )
        for source in self.ctx.settings.sources:
            running.add_metric([source], 0)
        for source, n in db.execute(
            "SELECT source, count(*) FROM jobs WHERE status = 'running' GROUP BY source"
        ):
            running.add_metric([source], n)
        yield running
        held = GaugeMetricFamily(
            "aggregator_records", "Records held, by source and status", labels=["source", "status"]
        )
        for source, status, n in db.execute(
            "SELECT source, status, count(*) FROM records GROUP BY source, status"
        ):
            held.add_metric([source, status], n)
        yield held
        findings = CounterMetricFamily(
            "aggregator_validation_findings",
            "Per-record findings of harvest jobs, by step (validator) and severity",
            labels=["step", "severity"],
        )
        for stage, severity, n in db.execute(
            "SELECT stage, severity, count(*) FROM job_errors GROUP BY stage, severity"
        ):
            findings.add_metric([stage, severity], n)
        yield findings
        yield from self._schedule()

    def _schedule(self) -> Iterator[Metric]:
        from aggregator.schedule.book import BOOK_FILE

        path: Path = self.ctx.store.path / BOOK_FILE
        breaker = GaugeMetricFamily(
            "aggregator_source_breaker_open",
            "1 while a source's circuit breaker is open or probing",
            labels=["source"],
        )
        failures = GaugeMetricFamily(
            "aggregator_source_consecutive_failures",
            "Failed jobs in a row, by source",
            labels=["source"],
        )
        if path.exists():
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                rows = conn.execute("SELECT source, breaker, failures FROM sources").fetchall()
            except sqlite3.Error:
                rows = []
            finally:
                conn.close()
            for source, state, n in rows:
                breaker.add_metric([source], 0 if state == "closed" else 1)
                failures.add_metric([source], n)
        yield breaker
        yield failures


def routes(ctx: ServeContext) -> list[Route]:
    harvest = HarvestCollector(ctx)

    def metrics(request: Request) -> Response:
        registry = counters().registry_for_scrape()
        body = generate_latest(registry) + generate_latest(_Only(harvest))
        return Response(body, media_type=CONTENT_TYPE)

    return [Route("/metrics", metrics)]


class _Only(CollectorRegistry):
    """A registry of one collector (a fresh one each scrape: nothing kept between them)."""

    def __init__(self, collector: Collector) -> None:
        super().__init__(auto_describe=False)
        self.register(collector)
