"""Harvest events from run_source, against the real OAI-PMH fixture peer on 127.0.0.1 (and a
closed port for an unreachable source)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aggregator.config import HarvestSettings, HttpSettings, Settings, SourceConfig
from aggregator.core.events import (
    EventBus,
    HarvestEvent,
    JobFailed,
    JobFinished,
    JobRecovered,
    JobStarted,
    RecordRejected,
    SourceUnreachable,
)
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import run_source
from aggregator.net.client import HttpClient
from aggregator.store.journal import JobRow
from aggregator.store.records import RecordStore

BASE = "http://127.0.0.1:8000/"
T0 = datetime(2024, 3, 1, tzinfo=UTC)


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/oai"  # nothing listens there any more


class Env:
    def __init__(self, tmp: Path, url: str) -> None:
        self.source = SourceConfig(name="portal", type="oai-pmh", url=url)
        self.settings = Settings(
            config_path=None,
            store_path=tmp / "store",
            base_iri=BASE,
            http=HttpSettings(allow_private=True, retries=0, connect_timeout=2),
            harvest=HarvestSettings(workers=0),
            sources={"portal": self.source},
        )
        self.store = RecordStore(self.settings.store_path, BASE)
        self.bus = EventBus()
        self.seen: list[HarvestEvent] = []
        self.bus.subscribe(self.seen.append)

    def run(self, url: str | None = None) -> JobRow:
        source = replace(self.source, url=url) if url else self.source
        http = HttpClient(self.settings.http, sleep=lambda s: None)
        self.seen.clear()
        return run_source(self.settings, self.store, source, http=http, events=self.bus)

    def kinds(self) -> list[str]:
        return [type(e).__name__ for e in self.seen]


@pytest.fixture
def peer() -> Iterator[tuple[OaiPmhPeer, str]]:
    items = MemoryItems(
        OaiItem(generate_identifier(i), T0 + timedelta(hours=i), metadata=generate_dataset(i))
        for i in range(6)
    )
    peer = OaiPmhPeer(items, page_size=4)
    with PeerServer(peer) as server:
        yield peer, f"{server.url}oai"


@pytest.fixture
def env(tmp_path: Path, peer: tuple[OaiPmhPeer, str]) -> Iterator[Env]:
    e = Env(tmp_path, peer[1])
    yield e
    e.store.close()


def test_a_harvest_tells_its_start_its_rejections_and_its_end(
    env: Env, peer: tuple[OaiPmhPeer, str]
) -> None:
    bad = generate_identifier(2)
    peer[0].faults.hostile_identifier = bad
    peer[0].faults.hostile_kind = "entity"
    job = env.run()
    assert env.kinds() == ["JobStarted", "RecordRejected", "JobFinished"]
    started, rejected, finished = env.seen
    assert isinstance(started, JobStarted) and started.url == env.source.url
    assert (started.source, started.job_id, started.full) == ("portal", job.id, False)
    assert isinstance(rejected, RecordRejected)
    assert (rejected.local_id, rejected.step, rejected.rule) == (bad, "parse", "parseError")
    assert "entity" in rejected.message.lower(), rejected.message
    assert isinstance(finished, JobFinished)
    assert (finished.status, finished.counters["added"], finished.counters["rejected"]) == (
        "succeeded",
        5,
        1,
    )
    assert all(e.job_id == job.id for e in env.seen)


def test_an_unreachable_source_then_its_recovery(env: Env) -> None:
    down = closed_port_url()
    failed = env.run(url=down)
    assert failed.status == "failed"
    assert env.kinds() == ["JobStarted", "SourceUnreachable", "JobFailed", "JobFinished"]
    unreachable = env.seen[1]
    assert isinstance(unreachable, SourceUnreachable)
    assert unreachable.url.startswith(down.rsplit("/", 1)[0])
    assert unreachable.status is None  # nothing answered
    assert isinstance(env.seen[2], JobFailed) and env.seen[2].message == failed.message
    failed_again = env.run(url=down)
    assert "JobRecovered" not in env.kinds()
    recovered = env.run()
    assert recovered.status == "succeeded"
    assert env.kinds() == ["JobStarted", "JobRecovered", "JobFinished"]
    event = env.seen[1]
    assert isinstance(event, JobRecovered) and event.failed_job_id == failed_again.id
    env.run()
    assert env.kinds() == ["JobStarted", "JobFinished"]  # a success after a success


def test_an_http_error_status_is_an_unreachable_source_with_its_status(
    env: Env, peer: tuple[OaiPmhPeer, str]
) -> None:
    peer[0].faults.unavailable = 10
    env.run()
    [event] = [e for e in env.seen if isinstance(e, SourceUnreachable)]
    assert event.status == 503


def test_a_failing_subscriber_is_logged_and_breaks_nothing(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: HarvestEvent) -> None:
        raise RuntimeError("subscriber bug")

    env.bus.subscribe(broken, JobStarted, JobFinished)
    late: list[HarvestEvent] = []
    env.bus.subscribe(late.append)
    with caplog.at_level(logging.ERROR, logger="aggregator.events"):
        job = env.run()
    assert job.status == "succeeded"
    assert [type(e).__name__ for e in late] == ["JobStarted", "JobFinished"]
    failures = [r for r in caplog.records if "subscriber" in r.getMessage()]
    assert len(failures) == 2 and "subscriber bug" in (failures[0].exc_text or "")


def test_subscriptions_filter_by_kind_and_can_end(env: Env) -> None:
    finished: list[HarvestEvent] = []
    stop = env.bus.subscribe(finished.append, JobFinished, JobFailed)
    env.run()
    assert [type(e).__name__ for e in finished] == ["JobFinished"]
    stop()
    env.run()
    assert len(finished) == 1


def test_the_log_is_the_default_subscriber(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    http = HttpClient(env.settings.http, sleep=lambda s: None)
    with caplog.at_level(logging.INFO, logger="aggregator.events"):
        job = run_source(env.settings, env.store, "portal", http=http)
    lines = [r.getMessage() for r in caplog.records if r.name == "aggregator.events"]
    assert f"job {job.id} (portal) started: {env.source.url}" in lines
    assert f"job {job.id} (portal) finished: succeeded" in lines
