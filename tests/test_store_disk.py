"""What a store costs on disk (issue 31): graph serialisations kept packed, the figures per
record of `aggregator store stats`, the compaction at the end of a large harvest and the
snapshot that no longer keeps compacted files alone. Real stores harvested from the local
OAI-PMH peer."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyoxigraph import RdfFormat, parse
from storecheck import assert_consistent

from aggregator.cli import main
from aggregator.config import HarvestSettings, HttpSettings, Settings, SourceConfig
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store import optimize, snapshots
from aggregator.store import state as state_module
from aggregator.store.journal import JobRow
from aggregator.store.migrations import PAGE_SIZE
from aggregator.store.packing import ZSTD_MAGIC, unpack_findings, unpack_graph
from aggregator.store.records import RecordStore
from aggregator.store.snapshots import snapshot_name
from aggregator.store.state import RecordRow, StateDB

BASE = "http://agg.example.org/"
T0 = datetime(2024, 3, 1, tzinfo=UTC)
RECORDS = 12
JOB_END_WAL = 32 + 4 * (24 + PAGE_SIZE)  # a write-ahead log of 4 pages at most: the job's end


def item(i: int, day: int = 0) -> OaiItem:
    """Record ``i``; on a later ``day``, with other content (another generated dataset)."""
    content = generate_dataset(i + 1000 * day)
    return OaiItem(generate_identifier(i), T0 + timedelta(days=day), (), False, content)


@pytest.fixture
def peer() -> Iterator[tuple[str, MemoryItems]]:
    items = MemoryItems()
    items.put(*(item(i) for i in range(RECORDS)))
    with PeerServer(OaiPmhPeer(items, page_size=5)) as server:
        yield f"{server.url}oai", items


def settings_for(store_path: Path, url: str, **harvest: Any) -> Settings:
    return Settings(
        config_path=None,
        store_path=store_path,
        base_iri=BASE,
        http=HttpSettings(allow_private=True, retries=0),
        harvest=replace(HarvestSettings(workers=0, batch_size=5), **harvest),
        sources={"portal": SourceConfig(name="portal", type="oai-pmh", url=url)},
    )


def harvest(settings: Settings, store: RecordStore) -> JobRow:
    job = run_source(
        settings, store, "portal", RunOptions(full=True), http=HttpClient(settings.http)
    )
    assert job.status == "succeeded", job.message
    return job


def harvested(tmp_path: Path, url: str) -> tuple[Path, list[RecordRow]]:
    """A store at ``tmp_path / "store"`` with the peer's records harvested once; its records."""
    store_path = tmp_path / "store"
    with RecordStore(store_path, BASE) as store:
        harvest(settings_for(store_path, url), store)
        return store_path, list(store.db.iter_records())


def job_facts(store: RecordStore, job: JobRow) -> dict[str, Any]:
    row = store.db.conn.execute("SELECT listing FROM jobs WHERE id = ?", (job.id,)).fetchone()
    facts: dict[str, Any] = json.loads(row[0])
    return facts


def cli(config: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["-c", str(config), *args], catch_exceptions=False)
    return result.exit_code, result.output


def write_config(folder: Path, url: str) -> Path:
    config = folder / "aggregator.toml"
    config.write_text(
        f'[store]\npath = "store"\nbase_iri = "{BASE}"\n\n'
        f'[sources.portal]\ntype = "oai-pmh"\nurl = "{url}"\n',
        encoding="utf-8",
    )
    return config


def snapshot_files_alone(store_path: Path) -> int:
    """Bytes of the snapshots' table files that the live graph store does not link."""
    live = {
        (st.st_dev, st.st_ino)
        for st in (f.stat() for f in (store_path / "graphs").iterdir() if f.is_file())
    }
    return sum(
        f.stat().st_size
        for f in (store_path / "snapshots").rglob("*.sst")
        if (f.stat().st_dev, f.stat().st_ino) not in live
    )


# -- graph serialisations ---------------------------------------------------------------------
def test_graph_serialisations_are_kept_as_zstd_frames_and_older_rows_still_read(
    peer: tuple[str, MemoryItems], tmp_path: Path
) -> None:
    url, _ = peer
    store_path = tmp_path / "store"
    settings = settings_for(store_path, url, workers=1)  # packed in a worker process
    with RecordStore(store_path, BASE) as store:
        harvest(settings, store)
        kept = store.db.conn.execute(
            "SELECT id, dataset_iri, ntriples FROM records WHERE status = 'active' ORDER BY id"
        ).fetchall()
        assert len(kept) == RECORDS
        raw_total = packed_total = 0
        for rid, dataset_iri, packed in kept:
            assert packed[:4] == ZSTD_MAGIC
            ntriples = unpack_graph(packed)
            subjects = {str(t.subject) for t in parse(ntriples, format=RdfFormat.N_TRIPLES)}
            assert f"<{dataset_iri}>" in subjects
            assert store.db.graph_bytes(rid)[0] == ntriples
            raw_total += len(ntriples)
            packed_total += len(packed)
        assert packed_total * 3 < raw_total  # ~7x on these records
        # a row as a store made before kept it: the N-Triples as they are
        rid = kept[0][0]
        plain = unpack_graph(kept[0][2])
        store.db.conn.execute("UPDATE records SET ntriples = ? WHERE id = ?", (plain, rid))
        assert store.db.graph_bytes(rid)[0] == plain
        assert_consistent(store)  # the graphs agree with the packed and the plain rows
    code, out = cli(write_config(tmp_path, url), "store", "check")
    assert code == 0, out


# -- stats ------------------------------------------------------------------------------------
def test_stats_gives_the_bytes_per_record_of_each_part(
    peer: tuple[str, MemoryItems], tmp_path: Path
) -> None:
    url, _ = peer
    harvested(tmp_path, url)
    config = write_config(tmp_path, url)
    code, out = cli(config, "store", "stats", "--json")
    assert code == 0, out
    report = json.loads(out)
    per_record = report["bytes_per_record_by_part"]
    assert set(per_record) == set(report["parts"])
    for part, size in report["parts"].items():
        assert per_record[part] == pytest.approx(size / RECORDS, abs=0.1), part
    assert sum(per_record.values()) == pytest.approx(report["bytes_per_record"], abs=1)
    # the records' part: their rows, the set index, the journal, the shared statements' counts
    state = sqlite3.connect(f"file:{tmp_path / 'store' / 'state.sqlite3'}?mode=ro", uri=True)
    tables = ("records", "record_sets", "set_counts", "journal", "shared_triples")
    marks = ",".join("?" * len(tables))
    pages = state.execute(f"SELECT sum(pgsize) FROM dbstat WHERE name IN ({marks})", tables)
    assert report["parts"]["state: records"] == pages.fetchone()[0]
    state.close()
    code, text = cli(config, "store", "stats")
    assert code == 0, text
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("size on disk:"))
    assert header.split()[-2:] == ["per", "record"]
    graph = next(line for line in lines if line.strip().startswith("graph store"))
    kb = report["parts"]["graph store"] / RECORDS / 1024
    assert graph.split()[-2:] == [f"{kb:.1f}", "KB"]


# -- the compaction at the end of a large harvest ----------------------------------------------
def test_a_large_harvest_compacts_the_store_at_its_end_and_a_small_one_does_not(
    peer: tuple[str, MemoryItems], tmp_path: Path
) -> None:
    url, items = peer
    store_path = tmp_path / "store"
    settings = settings_for(store_path, url, optimize_after=RECORDS, optimize_share=0.2)
    with RecordStore(store_path, BASE) as store:
        job = harvest(settings, store)
        facts = job_facts(store, job)
        assert facts["optimized"]["written"] == RECORDS
        compacted = facts["optimized"]
        assert compacted["bytes_after"] > 0 and compacted["seconds"] >= 0
        # the state database's write-ahead log was checkpointed and truncated: it holds
        # only the job's end, written after
        assert os.path.getsize(store_path / "state.sqlite3-wal") <= JOB_END_WAL
        # the snapshot was taken after the compaction: it links the live store's files
        assert store.shelf is not None
        assert store.shelf.generation == store.db.generation()
        # 3 records changed: under optimize_after, so nothing is compacted
        items.put(*(item(i, day=1) for i in range(3)))
        job = harvest(settings, store)
        assert job.counters["updated"] == 3
        assert "optimized" not in job_facts(store, job)
        assert os.path.getsize(store_path / "state.sqlite3-wal") > JOB_END_WAL
        assert_consistent(store)
    # a job that writes optimize_after records but less than optimize_share of the store
    items.put(*(item(i, day=2) for i in range(4)))
    with RecordStore(store_path, BASE) as store:
        job = harvest(
            replace(
                settings, harvest=replace(settings.harvest, optimize_after=4, optimize_share=0.5)
            ),
            store,
        )
        assert job.counters["updated"] == 4
        assert "optimized" not in job_facts(store, job)  # 4 < 0.5 x 12


def test_a_harvest_of_several_sources_compacts_the_store_once_after_its_last_job(
    peer: tuple[str, MemoryItems], tmp_path: Path
) -> None:
    url, items = peer
    config = tmp_path / "aggregator.toml"
    config.write_text(
        f'[store]\npath = "store"\nbase_iri = "{BASE}"\n\n'
        "[http]\nallow_private = true\nretries = 0\n\n"
        "[harvest]\nworkers = 0\noptimize_after = 5\noptimize_share = 0.2\n\n"
        f'[sources.one]\ntype = "oai-pmh"\nurl = "{url}"\n\n'
        f'[sources.two]\ntype = "oai-pmh"\nurl = "{url}"\n',
        encoding="utf-8",
    )
    code, out = cli(config, "harvest", "--all")
    assert code == 0, out
    assert f"store: compacted once after the jobs ({2 * RECORDS} records written) in" in out
    with RecordStore(tmp_path / "store", BASE) as store:
        jobs = store.jobs.recent(None, 10)
        assert len(jobs) == 2
        for job in jobs:  # each was a large harvest: its compaction was left to the end
            facts = job_facts(store, job)
            assert facts["optimize_deferred"] == RECORDS and "optimized" not in facts
        assert store.shelf is not None and store.shelf.generation == store.db.generation()
        assert_consistent(store)
    items.put(*(item(i, day=1) for i in range(6)))
    code, out = cli(config, "harvest", "one", "--full")  # one source: compacted by its job
    assert code == 0 and "compacted once" not in out
    with RecordStore(tmp_path / "store", BASE) as store:
        facts = job_facts(store, store.jobs.recent("one", 1)[0])
        assert facts.get("optimized", {}).get("written") == 6, (out, facts)
        assert "optimize_deferred" not in facts


def test_a_job_end_replaces_a_snapshot_that_holds_compacted_files_alone(
    peer: tuple[str, MemoryItems], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a store of 12 records holds kilobytes: no floor (32 MB by default) in this test
    monkeypatch.setattr(snapshots, "STALE_FLOOR", 0)
    url, items = peer
    store_path = tmp_path / "store"
    settings = settings_for(store_path, url)  # optimize_after 10,000: no compaction by jobs
    with RecordStore(store_path, BASE) as store:
        harvest(settings, store)
        items.put(*(item(i, day=1) for i in range(3)))
        harvest(settings, store)  # its snapshot: a second table file of each column family
        # a compaction after the job's snapshot (RocksDB's background compactions outlive
        # the job's last publish): the replaced files are the snapshot's alone
        store.graphs.store.optimize()  # type: ignore[attr-defined]
        alone = snapshot_files_alone(store_path)
        assert alone > 0
        generation = store.db.generation()
        job = harvest(settings, store)  # unchanged: writes nothing, would publish nothing
        assert job.counters["skipped"] == RECORDS
        assert job_facts(store, job)["stale_snapshot_released"] > 0
        assert snapshot_files_alone(store_path) < alone
        assert not (store_path / "snapshots" / snapshot_name(generation)).exists()
        assert store.db.generation() == generation + 1
    conn = sqlite3.connect(store_path / "state.sqlite3")
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == RECORDS
    conn.close()


def test_closing_the_store_replaces_a_snapshot_that_holds_compacted_files_alone(
    peer: tuple[str, MemoryItems], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshots, "STALE_FLOOR", 0)  # a store of kilobytes
    url, items = peer
    store_path = tmp_path / "store"
    settings = settings_for(store_path, url)
    with RecordStore(store_path, BASE) as store:
        harvest(settings, store)
        items.put(*(item(i, day=1) for i in range(3)))
        harvest(settings, store)
        store.graphs.store.optimize()  # type: ignore[attr-defined]  # as RocksDB may at any time
        alone = snapshot_files_alone(store_path)
        assert alone > 0
        generation = store.db.generation()
        stale = store_path / "snapshots" / snapshot_name(generation)
        assert stale.is_dir()
    # the writer published afresh as it closed, and the stale snapshot went (a compaction
    # RocksDB ran between that publish and the close may leave the fresh one a little)
    assert not stale.exists()
    assert snapshot_files_alone(store_path) < alone
    monkeypatch.setattr(snapshots, "STALE_FLOOR", 2**40)  # from now on: never stale
    with RecordStore(store_path, BASE) as store:
        reopened = store.db.generation()
        assert reopened > generation
        assert store.shelf is not None and store.shelf.generation == reopened
        assert_consistent(store)
    with RecordStore(store_path, BASE) as store:  # compacted files under the floor: kept
        store.graphs.store.optimize()  # type: ignore[attr-defined]
    with RecordStore(store_path, BASE) as store:
        assert store.db.generation() == reopened


def test_optimize_packs_the_graph_serialisations_an_older_store_kept_as_they_are(
    peer: tuple[str, MemoryItems], tmp_path: Path
) -> None:
    url, _ = peer
    store_path, _ = harvested(tmp_path, url)
    state = sqlite3.connect(store_path / "state.sqlite3")
    packed = dict(state.execute("SELECT id, ntriples FROM records WHERE ntriples IS NOT NULL"))
    with state:  # as stores before issue 31 kept them: the N-Triples as they are
        state.executemany(
            "UPDATE records SET ntriples = ? WHERE id = ?",
            [(unpack_graph(blob), rid) for rid, blob in packed.items()],
        )
    state.close()
    config = write_config(tmp_path, url)
    code, out = cli(config, "store", "optimize", "--json")
    assert code == 0, out
    report = json.loads(out)
    assert f"graph serialisations of {RECORDS} record(s) packed" in " ".join(report["steps"])
    assert report["after"]["state: records"] < report["before"]["state: records"]
    state = sqlite3.connect(store_path / "state.sqlite3")
    now = dict(state.execute("SELECT id, ntriples FROM records WHERE ntriples IS NOT NULL"))
    state.close()
    assert {rid: unpack_graph(blob) for rid, blob in now.items()} == {
        rid: unpack_graph(blob) for rid, blob in packed.items()
    }
    assert all(blob[:4] == ZSTD_MAGIC for blob in now.values())
    code, out = cli(config, "store", "check")
    assert code == 0, out
    code, out = cli(config, "store", "optimize", "--json")  # nothing left to pack
    assert "packed" not in " ".join(json.loads(out)["steps"])


def test_findings_are_kept_packed_in_pages_of_16_kb_and_optimize_packs_older_text(
    peer: tuple[str, MemoryItems], tmp_path: Path
) -> None:
    url, _ = peer
    store_path, records = harvested(tmp_path, url)
    rows = {r.id: r.findings for r in records}
    with_findings = {rid for rid, f in rows.items() if f != "[]"}
    assert with_findings  # the sample records get SHACL recommendations
    state = sqlite3.connect(store_path / "state.sqlite3")
    assert state.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE  # a new store's
    kept = dict(state.execute("SELECT id, findings FROM records"))
    assert all(kept[rid][:4] == ZSTD_MAGIC for rid in with_findings)
    assert {rid: unpack_findings(v) for rid, v in kept.items()} == rows
    with state:  # as stores before issue 31 kept them: JSON text
        state.executemany(
            "UPDATE records SET findings = ? WHERE id = ?", [(f, rid) for rid, f in rows.items()]
        )
    state.close()
    with RecordStore(store_path, BASE) as store:  # text still reads
        assert {r.id: r.findings for r in store.db.iter_records()} == rows
    config = write_config(tmp_path, url)
    code, out = cli(config, "store", "optimize", "--json")
    assert code == 0, out
    steps = " ".join(json.loads(out)["steps"])
    assert f"findings of {len(with_findings)} record(s) packed" in steps
    state = sqlite3.connect(store_path / "state.sqlite3")
    now = dict(state.execute("SELECT id, findings FROM records"))
    state.close()
    assert {rid: unpack_findings(v) for rid, v in now.items()} == rows
    assert all(now[rid][:4] == ZSTD_MAGIC for rid in with_findings)
    code, out = cli(config, "store", "optimize", "--json")  # nothing left to pack
    assert "findings of" not in " ".join(json.loads(out)["steps"])


_IDLE_READER = """
import sqlite3, sys
conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
print(conn.execute("SELECT count(*) FROM records").fetchone()[0], flush=True)
sys.stdin.read()
"""


def test_optimize_vacuum_gives_an_older_store_pages_of_16_kb_when_no_one_else_has_it_open(
    peer: tuple[str, MemoryItems], tmp_path: Path
) -> None:
    url, _ = peer
    store_path, records = harvested(tmp_path, url)
    rows = {r.id: (r.status, r.findings) for r in records}
    path = store_path / "state.sqlite3"
    state = sqlite3.connect(path, isolation_level=None)  # as stores before issue 31: 4 KB
    state.execute("PRAGMA journal_mode = DELETE")
    state.execute("PRAGMA page_size = 4096")
    state.execute("VACUUM")
    state.execute("PRAGMA journal_mode = WAL")
    assert state.execute("PRAGMA page_size").fetchone()[0] == 4096
    state.close()
    reader = subprocess.Popen(  # a serving process's idle connection
        [sys.executable, "-c", _IDLE_READER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == str(len(rows))
        config = write_config(tmp_path, url)
        code, out = cli(config, "store", "optimize", "--vacuum", "--json")
        assert code == 0, out
        steps = " ".join(json.loads(out)["steps"])
        assert "its pages stay at 4096 bytes: another process has it open" in steps
    finally:
        reader.communicate("", timeout=30)
    state = sqlite3.connect(path)
    assert state.execute("PRAGMA page_size").fetchone()[0] == 4096
    state.close()
    code, out = cli(config, "store", "optimize", "--vacuum", "--json")
    assert code == 0, out
    assert f"pages of 4096 -> {PAGE_SIZE} bytes" in " ".join(json.loads(out)["steps"])
    state = sqlite3.connect(path)
    assert state.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE
    assert state.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert state.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
    state.close()
    with RecordStore(store_path, BASE) as store:
        assert {r.id: (r.status, r.findings) for r in store.db.iter_records()} == rows
    code, out = cli(config, "store", "optimize", "--vacuum", "--json")  # already: plain VACUUM
    assert code == 0 and "pages" not in " ".join(json.loads(out)["steps"]).split("VACUUM")[1]


# -- the state database's write-ahead log -----------------------------------------------------
def test_the_write_ahead_log_file_is_cut_back_once_readers_let_it_start_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_module, "WAL_SIZE_LIMIT", 256 * 1024)
    path = tmp_path / "state.sqlite3"
    db = StateDB(path)
    wal = tmp_path / "state.sqlite3-wal"
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM records").fetchone()  # holds the state it read

    def write(n: int, start: int) -> None:
        for i in range(start, start + n):
            db.begin()
            db.put_payload(os.urandom(8192), "application/octet-stream")
            db.set_meta("i", str(i))
            db.commit()

    write(400, 0)  # ~3 MB the log cannot give back while the reader holds its state
    assert os.path.getsize(wal) > 2 * 2**20
    reader.execute("COMMIT")
    reader.close()
    db.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")  # as the automatic checkpoint does
    write(2, 400)  # the log starts over: the file is cut back to the limit
    assert os.path.getsize(wal) <= 256 * 1024
    db.close()


# -- the graph store's write-ahead logs ----------------------------------------------------------
def graph_logs(store_path: Path) -> int:
    return sum(f.stat().st_size for f in (store_path / "graphs").glob("*.log"))


def test_a_job_end_drops_the_write_ahead_logs_the_open_graph_store_kept(
    peer: tuple[str, MemoryItems], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RocksDB keeps the logs of graph replacements while the store is open, flushed or not:
    a long-lived writer (serve's scheduler) kept them for ever."""
    monkeypatch.setattr(optimize, "GRAPH_LOGS_FLOOR", 0)  # a store of kilobytes
    url, items = peer
    store_path = tmp_path / "store"
    settings = settings_for(store_path, url, optimize_after=0)  # no compaction by jobs
    with RecordStore(store_path, BASE) as store:
        harvest(settings, store)
        monkeypatch.setattr(optimize, "GRAPH_LOGS_SHARE", 1e9)  # kept, to see them grow
        items.put(*(item(i, day=1) for i in range(RECORDS)))
        job = harvest(settings, store)  # every record's graph replaced
        assert job.counters["updated"] == RECORDS
        kept = graph_logs(store_path)
        store.graphs.store.flush()  # type: ignore[attr-defined]
        assert graph_logs(store_path) == kept > 0  # a flush does not drop them
        monkeypatch.setattr(optimize, "GRAPH_LOGS_SHARE", 0.0)
        items.put(*(item(i, day=2) for i in range(3)))
        job = harvest(settings, store)
        facts = job_facts(store, job)
        assert facts["graph_logs_released"] > 0
        assert graph_logs(store_path) < kept
        # the reopened graph store goes on taking writes, and agrees with the state
        items.put(*(item(i, day=3) for i in range(2)))
        job = harvest(settings, store)
        assert job.counters["updated"] == 2
        assert_consistent(store)
