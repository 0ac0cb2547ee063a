"""Retention: a real store harvested from an OAI-PMH peer on 127.0.0.1 several times (a
record changing at every run, records rejected and fixed), then pruned as of a later moment
(the prune's ``now``, or the scheduler's injected clock): what stays, what goes, what the
report says; pruning beside a writer, interrupted at every batch, by the scheduler between
jobs, and by ``aggregator store prune``."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.config import (
    HarvestSettings,
    HttpSettings,
    RetentionSettings,
    Settings,
    SourceConfig,
    load_settings,
)
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.schedule.book import Book
from aggregator.schedule.runner import StoreJobs
from aggregator.schedule.scheduler import PRUNE, Scheduler
from aggregator.schedule.status import request_harvest
from aggregator.store.records import RecordStore
from aggregator.store.retention import PruneReport, give_back, prune

BASE = "http://127.0.0.1:8000/"
T0 = datetime(2024, 3, 1, tzinfo=UTC)
RUNS = 6  # harvests; record 0..3 change at every one
CHANGING = 4
LATER = timedelta(days=120)  # "now" of the prunes that age every job past 90 days


def item(i: int, run: int) -> OaiItem:
    return OaiItem(
        generate_identifier(i),
        T0 + timedelta(days=run),
        (),
        False,
        generate_dataset(i, revision=run),
    )


def bad(name: str, run: int) -> OaiItem:
    return OaiItem(f"oai:x:{name}", T0 + timedelta(days=run), (), False, b"<not-rdf/>")


@dataclass
class Harvested:
    store_path: Path
    state: Path
    items: MemoryItems
    settings: Settings


def harvest_history(tmp: Path, url: str, items: MemoryItems) -> Settings:
    """Six full harvests: records 0-3 change every time, 4-7 never; ``fixed`` is rejected by
    the first and stored by the second (its rejection closed); ``broken`` fails every time
    (one open rejection, brought up to date)."""
    source = SourceConfig(name="portal", type="oai-pmh", url=url)
    settings = Settings(
        config_path=None,
        store_path=tmp / "store",
        base_iri=BASE,
        http=HttpSettings(allow_private=True, retries=0),
        harvest=HarvestSettings(workers=0, batch_size=3),
        sources={"portal": source},
    )
    http = HttpClient(settings.http)
    with RecordStore(settings.store_path, BASE) as store:
        for run in range(RUNS):
            items.put(*(item(i, run) for i in range(CHANGING)))
            if run == 0:
                items.put(*(item(i, 0) for i in range(CHANGING, 8)), bad("fixed", 0))
            if run == 1:
                items.put(
                    OaiItem("oai:x:fixed", T0 + timedelta(days=1), (), False, generate_dataset(50))
                )
            items.put(bad("broken", run))
            job = run_source(settings, store, "portal", RunOptions(full=True), http=http)
            assert job.status == "succeeded", job.message
    return settings


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harvested]:
    """One harvested store, copied for each test (the harvests take a few seconds)."""
    tmp = tmp_path_factory.mktemp("retention")
    items = MemoryItems()
    with PeerServer(OaiPmhPeer(items, page_size=5)) as server:
        settings = harvest_history(tmp, f"{server.url}oai", items)
        yield Harvested(settings.store_path, settings.store_path / "state.sqlite3", items, settings)


@pytest.fixture
def harvested(template: Harvested, tmp_path: Path) -> Harvested:
    store_path = tmp_path / "store"
    shutil.copytree(template.store_path, store_path)
    settings = replace(template.settings, store_path=store_path)
    return Harvested(store_path, store_path / "state.sqlite3", template.items, settings)


def rows(state: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(state)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def table_counts(state: Path) -> dict[str, int]:
    tables = ("record_payloads", "payloads", "jobs", "job_errors", "rejections")
    return {t: rows(state, f"SELECT count(*) FROM {t}")[0][0] for t in tables}


def assert_no_dangling(state: Path) -> None:
    """What the store refers to is there: every record's payload and kept versions, every
    rejection's payload and job, every job error's job."""
    checks = {
        "record payload": "SELECT payload_sha FROM records WHERE payload_sha IS NOT NULL"
        " AND payload_sha NOT IN (SELECT sha256 FROM payloads)",
        "kept version": "SELECT payload_sha FROM record_payloads"
        " WHERE payload_sha NOT IN (SELECT sha256 FROM payloads)",
        "current version noted": "SELECT id FROM records WHERE payload_sha IS NOT NULL AND NOT"
        " EXISTS (SELECT 1 FROM record_payloads h WHERE h.record_id = records.id"
        " AND h.payload_sha = records.payload_sha)",
        "rejection payload": "SELECT id FROM rejections"
        " WHERE payload_sha NOT IN (SELECT sha256 FROM payloads)",
        "rejection job": "SELECT id FROM rejections WHERE job_id NOT IN (SELECT id FROM jobs)",
        "job error job": "SELECT job_id FROM job_errors WHERE job_id NOT IN (SELECT id FROM jobs)",
        "record job": "SELECT id FROM records WHERE job_id NOT IN (SELECT id FROM jobs)",
    }
    for what, sql in checks.items():
        assert rows(state, sql) == [], f"dangling: {what}"


def expected_kept_jobs(state: Path) -> set[int]:
    """The rule, read off the store: each source's latest job and every job a record, a
    checkpoint or an open rejection names."""
    kept = rows(state, "SELECT max(id) FROM jobs GROUP BY source")
    kept += rows(state, "SELECT job_id FROM records")
    kept += rows(state, "SELECT job_id FROM checkpoints")
    kept += rows(state, "SELECT job_id FROM rejections WHERE superseded_by IS NULL")
    return {int(r[0]) for r in kept}


def test_prune_keeps_the_last_versions_and_the_jobs_still_referred_to(
    harvested: Harvested,
) -> None:
    state = harvested.state
    before = table_counts(state)
    assert before["jobs"] == RUNS
    changing = [
        r[0]
        for r in rows(
            state,
            f"SELECT id FROM records WHERE local_id IN ({','.join('?' * CHANGING)})",
            *(generate_identifier(i) for i in range(CHANGING)),
        )
    ]
    history = rows(state, "SELECT record_id, seq, payload_sha FROM record_payloads")
    assert sum(1 for h in history if h[0] in changing) == CHANGING * RUNS  # every version noted
    kept_jobs = expected_kept_jobs(state)
    assert RUNS in kept_jobs and len(kept_jobs) < RUNS
    closed = rows(state, "SELECT id, job_id FROM rejections WHERE superseded_by IS NOT NULL")
    assert closed  # "fixed": rejected by job 1, stored by job 2
    policy = RetentionSettings(versions=3, batch=4)
    now = datetime.now(UTC) + LATER

    dry = prune(state, policy, now, dry_run=True)
    assert table_counts(state) == before  # a dry run removes nothing
    report = prune(state, policy, now)
    after = table_counts(state)
    assert report.rows == {t: before[t] - after[t] for t in before} == dry.rows
    assert report.payload_bytes == dry.payload_bytes > 0
    # each changing record keeps its last three payloads, newest first, current among them
    for rid in changing:
        kept = rows(
            state, "SELECT payload_sha FROM record_payloads WHERE record_id = ? ORDER BY seq", rid
        )
        newest = [h[2] for h in sorted(h for h in history if h[0] == rid)][-3:]
        assert [k[0] for k in kept] == newest
        assert rows(state, "SELECT payload_sha FROM records WHERE id = ?", rid)[0][0] == newest[-1]
    assert report.rows["record_payloads"] == CHANGING * (RUNS - 3)
    gone = {h[2] for h in history if h[0] in changing} - {
        r[0] for r in rows(state, "SELECT payload_sha FROM record_payloads")
    }
    assert len(gone) == CHANGING * (RUNS - 3)
    assert not rows(
        state,
        f"SELECT sha256 FROM payloads WHERE sha256 IN ({','.join('?' * len(gone))})",
        *gone,
    )
    # jobs: exactly those nothing refers to went, with their errors and closed rejections
    assert {r[0] for r in rows(state, "SELECT id FROM jobs")} == kept_jobs
    assert report.rows["jobs"] == RUNS - len(kept_jobs)
    assert {r[0] for r in rows(state, "SELECT DISTINCT job_id FROM job_errors")} <= kept_jobs
    assert report.rows["job_errors"] > 0
    for rid, job in closed:
        assert bool(rows(state, "SELECT 1 FROM rejections WHERE id = ?", rid)) == (job in kept_jobs)
    open_rejection = rows(state, "SELECT job_id FROM rejections WHERE superseded_by IS NULL")
    assert open_rejection and open_rejection[0][0] in kept_jobs
    assert_no_dangling(state)
    # the space: a new store gives freed pages back (auto_vacuum = INCREMENTAL)
    assert report.auto_vacuum == "incremental"
    assert report.free_after == 0 and report.returned_bytes == report.freed_bytes > 0
    assert report.batches >= report.rows["payloads"] // 4
    # a second prune finds nothing more
    again = prune(state, policy, now)
    assert set(again.rows.values()) == {0}


def test_recent_jobs_stay_and_versions_go_at_any_age(harvested: Harvested) -> None:
    state = harvested.state
    before = table_counts(state)
    report = prune(state, RetentionSettings(versions=5), datetime.now(UTC))
    assert report.rows["jobs"] == report.rows["job_errors"] == report.rows["rejections"] == 0
    assert report.rows["record_payloads"] == CHANGING * (RUNS - 5)
    assert table_counts(state)["jobs"] == before["jobs"]
    assert_no_dangling(state)


class StopAfter(threading.Event):
    """A stop request that comes after ``n`` batches (an interruption at a batch boundary:
    each batch is its own transaction, so a crash leaves what this leaves)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.left = n

    def is_set(self) -> bool:
        self.left -= 1
        return self.left < 0


def test_a_prune_interrupted_at_any_batch_leaves_a_consistent_store_and_finishes_later(
    harvested: Harvested, tmp_path: Path
) -> None:
    policy = RetentionSettings(versions=2, batch=3)
    now = datetime.now(UTC) + LATER
    whole = tmp_path / "whole.sqlite3"
    shutil.copy(harvested.state, whole)
    full = prune(whole, policy, now)
    final = table_counts(whole)
    assert full.batches > 5
    for n in range(full.batches):
        copy = tmp_path / f"cut-{n}.sqlite3"
        shutil.copy(harvested.state, copy)
        cut = prune(copy, policy, now, stop=StopAfter(n))
        assert cut.stopped and cut.batches == n
        assert_no_dangling(copy)
        rest = prune(copy, policy, now)
        assert not rest.stopped
        assert table_counts(copy) == final, f"interrupted after {n} batch(es)"
        copy.unlink()


def test_readers_and_a_writer_go_on_while_a_prune_runs(harvested: Harvested) -> None:
    """Batches of one row: between them another connection writes (with a short busy
    timeout) and a reader reads; neither waits for the whole prune."""
    state = harvested.state
    stop = threading.Event()
    writes = reads = 0
    errors: list[BaseException] = []

    def beside() -> None:
        nonlocal writes, reads
        writer = sqlite3.connect(state, isolation_level=None, timeout=5)
        reader = sqlite3.connect(f"file:{state}?mode=ro", uri=True, timeout=5)
        try:
            while not stop.is_set():
                writer.execute("BEGIN IMMEDIATE")
                writer.execute(
                    "UPDATE jobs SET heartbeat = heartbeat WHERE id = (SELECT max(id) FROM jobs)"
                )
                writer.execute("COMMIT")
                writes += 1
                reader.execute("SELECT count(*) FROM payloads").fetchone()
                reads += 1
        except BaseException as err:
            errors.append(err)
        finally:
            writer.close()
            reader.close()

    thread = threading.Thread(target=beside)
    thread.start()
    try:
        report = prune(state, RetentionSettings(versions=1, batch=1), datetime.now(UTC) + LATER)
    finally:
        stop.set()
        thread.join(30)
    assert not errors
    assert report.batches >= sum(report.rows.values()) > 20
    assert writes > 0 and reads > 0
    assert_no_dangling(state)


class Clock:
    def __init__(self, t: datetime) -> None:
        self.t = t

    def now(self) -> datetime:
        return self.t


def test_the_scheduler_prunes_once_a_day_between_jobs(tmp_path: Path) -> None:
    items = MemoryItems()
    with PeerServer(OaiPmhPeer(items, page_size=5)) as server:
        config = tmp_path / "aggregator.toml"
        config.write_text(
            f"""[store]
path = "store"
base_iri = "{BASE}"

[http]
allow_private = true
retries = 0

[harvest]
workers = 0

[schedule]
window = ""

[retention]
versions = 2

[sources.portal]
type = "oai-pmh"
url = "{server.url}oai"
schedule = "manual"
""",
            encoding="utf-8",
        )
        settings = load_settings(config)
        clock = Clock(datetime.now(UTC).replace(microsecond=0))
        book = Book(settings.store_path)
        jobs = StoreJobs(settings)
        sched = Scheduler(settings, book, jobs, clock=clock, prune=jobs.prune)
        try:
            for run in range(4):
                items.put(*(item(i, run) for i in range(3)))
                request_harvest(settings, "portal", full=True)
                assert sched.tick() == ["portal"]
                assert sched.pruning is None  # never while a job runs
                sched.wait(120)
                if run == 0:  # the first idle tick prunes (nothing yet to prune)
                    sched.tick()
                    sched.collect_prune(120)
                    first = book.last_maintenance(PRUNE)
                    assert first is not None and first[0] == clock.t
            state = settings.store_path / "state.sqlite3"
            assert rows(state, "SELECT count(*) FROM jobs")[0][0] == 4
            assert rows(state, "SELECT count(*) FROM record_payloads")[0][0] == 3 * 4
            clock.t += timedelta(hours=1)
            sched.tick()
            assert sched.pruning is None  # pruned less than a day ago
            clock.t += LATER  # four months later, idle: the daily prune runs
            sched.tick()
            assert sched.pruning is not None
            sched.collect_prune(120)
            assert sched.pruning is None
            done = book.last_maintenance(PRUNE)
            assert done is not None and done[0] == clock.t
            # jobs 1-3: every record was written again since, the latest job stays
            assert "  jobs: removed 3 row(s)" in done[1].splitlines()
            assert "  record_payloads: removed 6 row(s)" in done[1].splitlines()
            assert rows(state, "SELECT count(*) FROM record_payloads")[0][0] == 3 * 2
            assert rows(state, "SELECT id FROM jobs") == [(4,)]
            # the book's runs of those days went too, but the source's last one
            assert [r.id for r in book.runs()] == [4]
        finally:
            sched.shutdown(60)
            book.close()


def cli(config: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["-c", str(config), *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_store_prune_command(harvested: Harvested, tmp_path: Path) -> None:
    config = tmp_path / "aggregator.toml"
    config.write_text(
        f'[store]\npath = "store"\nbase_iri = "{BASE}"\n\n[retention]\nversions = 3\n'
        "job_days = 0\nbatch = 2\n",
        encoding="utf-8",
    )
    before = table_counts(harvested.state)
    code, out = cli(config, "store", "prune", "--dry-run")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("retention: the last 3 version(s) of each record; jobs that")
    assert f"  record_payloads: would remove {CHANGING * (RUNS - 3)} row(s)" in lines
    assert "  (dry run: nothing was removed)" in lines
    assert table_counts(harvested.state) == before
    code, out = cli(config, "store", "prune", "--json")
    assert code == 0, out
    import json

    report = json.loads(out)
    assert report["rows"]["record_payloads"] == CHANGING * (RUNS - 3)
    assert report["rows"]["jobs"] == before["jobs"] - table_counts(harvested.state)["jobs"] > 0
    assert report["freed_bytes"] > 0 and report["auto_vacuum"] == "incremental"
    assert_no_dangling(harvested.state)
    code, out = cli(config, "store", "prune")
    assert code == 0
    assert "  payloads: removed 0 row(s)" in out.splitlines()
    assert "given back to the file system" in out


def test_an_older_store_reports_space_kept_for_reuse(harvested: Harvested) -> None:
    """A store whose file has no auto-vacuum (made before migrations): freed pages stay in
    the file, and the report says they are reused."""
    conn = sqlite3.connect(harvested.state, isolation_level=None)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")
    conn.close()
    report: PruneReport = prune(
        harvested.state, RetentionSettings(versions=1), datetime.now(UTC) + LATER
    )
    assert report.auto_vacuum == "none"
    assert report.pages_after == report.pages_before
    assert report.freed_bytes == (report.free_after - report.free_before) * report.page_size > 0
    assert any("reused by later writes" in line for line in report.lines())


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("versions = 0", "retention.versions = 0: must be at least 1"),
        ("batch = 0", "retention.batch = 0: must be at least 1"),
        ("job_days = -1", "retention.job_days = -1: must be at least 0"),
        ("keep = 3", "[retention]: unknown key(s) keep"),
    ],
)
def test_retention_settings_are_checked(tmp_path: Path, line: str, message: str) -> None:
    from aggregator.core.errors import ConfigError

    config = tmp_path / "aggregator.toml"
    config.write_text(f"[retention]\n{line}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert err.value.message == message


def test_retention_defaults() -> None:
    assert RetentionSettings() == RetentionSettings(
        versions=5, job_days=90.0, interval=86400.0, batch=500
    )


def test_giving_pages_back_frees_as_many_as_asked_in_one_transaction(tmp_path: Path) -> None:
    """``PRAGMA incremental_vacuum(N)`` through Python's ``execute`` frees one page, not N: a
    prune gave a big store's space back one transaction per page."""
    conn = sqlite3.connect(tmp_path / "s.sqlite3", isolation_level=None)
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute("VACUUM")
    conn.execute("CREATE TABLE t (x BLOB)")
    conn.executemany("INSERT INTO t VALUES (?)", [(b"x" * 2000,) for _ in range(400)])
    conn.execute("DELETE FROM t")
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    assert free > 150
    conn.execute("BEGIN IMMEDIATE")
    assert give_back(conn, 100) == 100
    conn.execute("COMMIT")
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] == free - 100
    conn.close()
