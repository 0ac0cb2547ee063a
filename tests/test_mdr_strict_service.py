"""A strict MDR service that is busy or whose clock runs behind ours: the harvester retries
whole calls, each signed afresh (a resent envelope would be refused as a replay), and ends
its windows a margin before its own now, so that no change falls between two runs."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from mdr_env import T0, MdrBench

from aggregator.demo.peers.mdr_pages import MdrPage, generate_page, iso, load_sample_pages
from aggregator.harvest.mdr import MdrHarvester

HOSPITALS = "https://portal.example.gov.in/health/hospitals.html"
ACT = "https://portal.example.gov.in/acts/right-to-services-act.html"


def bench_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kw: object) -> MdrBench:
    bench = MdrBench(tmp_path, load_sample_pages(), **kw)  # type: ignore[arg-type]
    monkeypatch.setattr(MdrHarvester, "clock", bench.clock)
    return bench


def test_transient_failures_are_retried_with_a_new_nonce_for_every_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each failure comes after the service accepted the token (its nonce is spent): 503,
    502 and 504 from a gateway, a connection dropped before the answer, an answer cut off
    mid-body. Resending the same envelope would be refused as a replay."""
    bench = bench_for(tmp_path, monkeypatch, retries=3)
    service = bench.service
    try:
        service.fail_next(503, "drop", operation="getStatus")
        service.fail_next("cut", 502, operation="getMetadataSize")
        service.fail_next(504, "drop", "cut", operation="getAllMetadata")
        job = bench.run()
        assert job.status == "succeeded", job.message
        assert service.refused == []  # no replay, no stale token
        assert (job.counters["added"], job.counters["rejected"]) == (5, 1)
        assert bench.store.checkpoint("portal") == "2026-01-11T23:55:00Z"
        # every attempt was signed afresh: as many distinct nonces as accepted requests
        nonces = [nonce for _, nonce in service.accepted]
        assert len(set(nonces)) == len(nonces)
        attempts = Counter(operation for operation, _ in service.accepted)
        assert attempts["getStatus"] == 1 + 2
        assert attempts["getMetadataSize"] == 11 + 2
        assert attempts["getAllMetadata"] == 6 + 3
        # one wait per retry, with the [http] backoff; the 503's Retry-After (1 s) honoured
        assert len(bench.sleeps) == 7
        assert bench.sleeps[0] == 1.0
    finally:
        bench.close()


def test_a_service_failing_every_attempt_fails_the_job_after_the_configured_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = bench_for(tmp_path, monkeypatch, retries=2)
    try:
        bench.service.fail_next("drop", "drop", "drop", operation="getStatus")
        job = bench.run()
        assert job.status == "failed"
        assert "MDR getStatus: cannot reach" in job.message
        assert "after 3 attempts" in job.message
        assert len(bench.sleeps) == 2
        assert bench.service.refused == []
        assert len({nonce for _, nonce in bench.service.accepted}) == 3
    finally:
        bench.close()


def test_changes_stamped_by_a_service_whose_clock_runs_behind_are_not_missed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service's clock runs 45 s behind ours (within the 60 s its token check allows).
    A page changed just after our run is stamped by the service with a time before our
    now: had the window ended at our now, the next run (which starts where this one
    ended) would never ask for it."""
    bench = bench_for(tmp_path, monkeypatch, clock_skew=timedelta(seconds=-45))
    try:
        first = bench.run()
        assert first.status == "succeeded", first.message
        last_end = max(end for _, _, end in bench.service.calls if end)
        # just after the run: the portal changes three pages, stamped by its own clock
        bench.clock.advance(1 / 60)
        assert bench.service.now() < T0
        published = generate_page(1, bench.service.now())
        bench.service.publish(published)
        bench.service.modify(HOSPITALS, title="Government Hospitals 2026")
        bench.service.exit(ACT)
        bench.clock.advance(60)
        second = bench.run()
        assert second.status == "succeeded", second.message
        c = second.counters
        assert (c["added"], c["updated"], c["withdrawn"]) == (1, 1, 1)
        assert bench.status(published.identifier) == "active"
        assert bench.status(ACT) == "withdrawn"
        # the first run's windows ended 300 s (the default margin) before its now; the
        # second run starts where the first ended: no gap, no overlap
        assert last_end == iso(T0 - timedelta(seconds=300))
        starts = [start for op, start, _ in bench.service.calls if op == "getMetadataSize"]
        assert starts[-1] == last_end
    finally:
        bench.close()


@pytest.mark.parametrize("margin", [0, 60])
def test_the_margin_at_the_end_of_the_windows_is_a_source_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, margin: int
) -> None:
    bench = bench_for(tmp_path, monkeypatch, options={"end_margin_seconds": margin})
    try:
        job = bench.run()
        assert job.status == "succeeded", job.message
        assert bench.store.checkpoint("portal") == iso(T0 - timedelta(seconds=margin))
    finally:
        bench.close()


def test_pages_of_the_last_minutes_wait_for_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = bench_for(tmp_path, monkeypatch)
    recent: MdrPage = generate_page(7, T0 - timedelta(seconds=100))  # inside the margin
    bench.service.publish(recent)
    try:
        assert bench.run().status == "succeeded"
        assert bench.status(recent.identifier) is None
        bench.clock.advance(10)
        assert bench.run().counters["added"] == 1
        assert bench.status(recent.identifier) == "active"
    finally:
        bench.close()
