"""``aggregator store stats|check|backup|restore|optimize|reindex`` on real on-disk stores
harvested from the OAI-PMH fixture peer (docs/store.md#maintenance)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyoxigraph import Literal, NamedNode, Quad, Store
from storecheck import assert_consistent

from aggregator.cli import main
from aggregator.config import HarvestSettings, HttpSettings, Settings, SourceConfig
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.schedule.book import Book
from aggregator.serve.dashboard.search import SearchIndex
from aggregator.store.records import RecordStore

BASE = "http://127.0.0.1:8000/"
T0 = datetime(2024, 3, 1, tzinfo=UTC)
ACTIVE, WITHDRAWN, REJECTED = 7, 2, 1


def item(i: int, day: int = 0) -> OaiItem:
    return OaiItem(generate_identifier(i), T0 + timedelta(days=day), (), False, generate_dataset(i))


@dataclass
class Harvested:
    store_path: Path
    settings: Settings
    config: Path
    url: str


def make_settings(store_path: Path, url: str) -> Settings:
    return Settings(
        config_path=None,
        store_path=store_path,
        base_iri=BASE,
        http=HttpSettings(allow_private=True, retries=0),
        harvest=HarvestSettings(workers=0, batch_size=3),
        sources={"portal": SourceConfig(name="portal", type="oai-pmh", url=url)},
    )


def write_config(folder: Path, url: str) -> Path:
    config = folder / "aggregator.toml"
    config.write_text(
        f'[store]\npath = "store"\nbase_iri = "{BASE}"\n\n'
        f'[sources.portal]\ntype = "oai-pmh"\nurl = "{url}"\n',
        encoding="utf-8",
    )
    return config


@pytest.fixture(scope="module")
def peer() -> Iterator[tuple[str, MemoryItems]]:
    items = MemoryItems()
    with PeerServer(OaiPmhPeer(items, page_size=5)) as server:
        yield f"{server.url}oai", items


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, peer: tuple[str, MemoryItems]) -> Path:
    """A store with active, withdrawn (deleted headers) and rejected records."""
    url, items = peer
    store_path = tmp_path_factory.mktemp("maintenance") / "store"
    settings = make_settings(store_path, url)
    items.put(*(item(i) for i in range(ACTIVE + WITHDRAWN)))
    items.put(OaiItem("oai:x:broken", T0, (), False, b"<not-rdf/>"))
    with RecordStore(store_path, BASE) as store:
        http = HttpClient(settings.http)
        job = run_source(settings, store, "portal", RunOptions(full=True), http=http)
        assert job.status == "succeeded", job.message
        for i in range(ACTIVE, ACTIVE + WITHDRAWN):
            items.delete(generate_identifier(i), T0 + timedelta(days=1))
        job = run_source(settings, store, "portal", RunOptions(full=True), http=http)
        assert job.status == "succeeded", job.message
    return store_path


@pytest.fixture
def harvested(template: Path, tmp_path: Path, peer: tuple[str, MemoryItems]) -> Harvested:
    store_path = tmp_path / "store"
    shutil.copytree(template, store_path)
    url = peer[0]
    return Harvested(store_path, make_settings(store_path, url), write_config(tmp_path, url), url)


def cli(config: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["-c", str(config), *args], catch_exceptions=False)
    return result.exit_code, result.output


def disk_bytes(folder: Path) -> tuple[int, dict[tuple[int, int], int]]:
    """Everything under ``folder`` on disk, each inode once; and the inodes."""
    inodes: dict[tuple[int, int], int] = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            st = os.stat(os.path.join(root, name), follow_symlinks=False)
            inodes[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return sum(inodes.values()), inodes


def alone_tables(store_path: Path) -> int:
    """Bytes of the snapshots' table files the live graph store no longer links (a
    checkpoint's own manifest and log are copies, always alone)."""
    _, graph_inodes = disk_bytes(store_path / "graphs")
    return sum(
        f.stat().st_size
        for f in (store_path / "snapshots").rglob("*.sst")
        if (f.stat().st_dev, f.stat().st_ino) not in graph_inodes
    )


def stats_json(config: Path) -> dict[str, Any]:
    code, out = cli(config, "store", "stats", "--json")
    assert code == 0, out
    result: dict[str, Any] = json.loads(out)
    return result


# -- stats --------------------------------------------------------------------------------
def test_stats_counts_records_and_every_byte_beside_a_writer(harvested: Harvested) -> None:
    # the writer lock is held the whole time (as by a running harvest): stats takes none
    with RecordStore(harvested.store_path, BASE) as store:
        # a compaction after the last snapshot: its old files stay, held only by the snapshot
        store.graphs.store.optimize()  # type: ignore[attr-defined]
        report = stats_json(harvested.config)
        total, inodes = disk_bytes(harvested.store_path)
        code, text = cli(harvested.config, "store", "stats")
    assert code == 0, text
    assert report["records"]["portal"] == {
        "active": ACTIVE,
        "withdrawn": WITHDRAWN,
        "rejected": REJECTED,
        "flagged": 0,
    }
    assert report["record_count"] == ACTIVE + WITHDRAWN + REJECTED
    parts = report["parts"]
    assert report["total_bytes"] == total  # every file counted, hard links once
    _, graph_inodes = disk_bytes(harvested.store_path / "graphs")
    assert parts["graph store"] == sum(graph_inodes.values())
    _, snap_inodes = disk_bytes(harvested.store_path / "snapshots")
    alone = sum(size for key, size in snap_inodes.items() if key not in graph_inodes)
    assert parts["snapshots (held only by them)"] == alone
    assert alone_tables(harvested.store_path) > 0
    for part in ("state: records", "state: payloads and versions", "state: indexes"):
        assert parts[part] > 0, part
    assert report["bytes_per_record"] == round(total / report["record_count"])
    assert sum(inodes.values()) == total
    lines = text.splitlines()
    assert any(line.split()[:4] == ["portal", str(ACTIVE), str(WITHDRAWN), "1"] for line in lines)
    assert any(line.startswith("bytes per record: ") for line in lines)


def test_stats_without_a_store_says_so(tmp_path: Path) -> None:
    code, out = cli(write_config(tmp_path, "http://127.0.0.1:1/oai"), "store", "stats")
    assert code != 0
    assert "no store at" in out


def rows(state: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(state)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


# -- check --------------------------------------------------------------------------------


def break_store(store_path: Path) -> dict[str, str]:
    """Break the store in each way check knows, straight on disk; returns kind -> subject."""
    rows_by_status = {
        status: iri
        for iri, status in rows(
            store_path / "state.sqlite3",
            "SELECT record_iri, status FROM records ORDER BY id",
        )
    }
    active = [
        r[0]
        for r in rows(
            store_path / "state.sqlite3",
            "SELECT record_iri FROM records WHERE status = 'active' ORDER BY id",
        )
    ]
    withdrawn = rows_by_status["withdrawn"]
    store = Store(str(store_path / "graphs"))
    try:
        missing, different = NamedNode(active[0]), NamedNode(active[1])
        store.remove_graph(missing)
        quad = next(iter(store.quads_for_pattern(None, None, None, different)))
        store.remove(quad)  # one triple lost
        # the withdrawn record's graph gets a dataset again (as a lost removal would leave)
        for q in list(store.quads_for_pattern(None, None, None, NamedNode(active[2]))):
            store.add(Quad(q.subject, q.predicate, q.object, NamedNode(withdrawn)))
        ghost = f"{BASE}record/portal/ghost"
        store.add(
            Quad(NamedNode("http://x/s"), NamedNode("http://x/p"), Literal("o"), NamedNode(ghost))
        )
        # a shared statement lost from the shared graph (as a lost load would leave it)
        shared = NamedNode(f"{BASE}shared")
        store.remove(next(iter(store.quads_for_pattern(None, None, None, shared))))
        store.flush()
    finally:
        del store
    conn = sqlite3.connect(store_path / "state.sqlite3")
    with conn:
        rid = conn.execute("SELECT id FROM records WHERE record_iri = ?", (active[3],)).fetchone()
        conn.execute("DELETE FROM record_sets WHERE record_id = ?", rid)
        # ... and a count that says one more record states a statement than do
        conn.execute(
            "UPDATE shared_triples SET refs = refs + 1"
            " WHERE triple = (SELECT max(triple) FROM shared_triples)"
        )
    conn.close()
    return {
        "missing graph": active[0],
        "graph differs": active[1],
        "withdrawn record still in the graph store": withdrawn,
        "orphan graph": ghost,
        "set index": active[3],
        "shared graph": "1 statement(s)",
        "shared statement counts": "1 statement(s)",
    }


def test_check_finds_each_disagreement_and_repair_fixes_it(harvested: Harvested) -> None:
    code, out = cli(harvested.config, "store", "check")
    assert code == 0, out
    assert "graphs, records, the set index and the search index agree" in out
    broken = break_store(harvested.store_path)
    code, out = cli(harvested.config, "store", "check", "--json")
    assert code == 1, out
    report = json.loads(out)
    found = {(f["kind"], f["subject"]) for f in report["findings"]}
    assert set(broken.items()) <= found
    assert {k for k, _ in found} == set(broken) | {"set count"}  # nothing else
    assert report["records"] == ACTIVE + WITHDRAWN + REJECTED
    code, out = cli(harvested.config, "store", "check")
    assert code == 1
    assert "run `aggregator store check --repair`" in out
    code, out = cli(harvested.config, "store", "check", "--repair")
    assert code == 0, out
    assert "repaired 1: orphan graph" in out
    code, out = cli(harvested.config, "store", "check")
    assert code == 0, out
    with RecordStore(harvested.store_path, BASE) as store:
        assert_consistent(store)
        sets = rows(
            harvested.store_path / "state.sqlite3",
            "SELECT set_spec, n FROM set_counts WHERE n != 0 ORDER BY set_spec",
        )
        real = rows(
            harvested.store_path / "state.sqlite3",
            "SELECT set_spec, count(*) FROM record_sets GROUP BY set_spec ORDER BY set_spec",
        )
        assert sets == real


def test_check_refuses_while_a_writer_holds_the_store(harvested: Harvested) -> None:
    with RecordStore(harvested.store_path, BASE):
        code, out = cli(harvested.config, "store", "check")
    assert code == 1
    assert "is being written by process" in out


# -- backup and restore ---------------------------------------------------------------------
LIVE_RECORDS, LIVE_BATCH = 600, 5


def generation(state: Path) -> int:
    if not state.exists():
        return 0
    conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(row[0]) if row else 0
    except sqlite3.OperationalError:  # not made yet
        return 0
    finally:
        conn.close()


def test_backup_while_harvesting_restores_a_generation_the_store_had(tmp_path: Path) -> None:
    items = MemoryItems()
    items.put(*(item(i) for i in range(LIVE_RECORDS)))
    with PeerServer(OaiPmhPeer(items, page_size=10)) as server:
        url = f"{server.url}oai"
        settings = replace(
            make_settings(tmp_path / "store", url),
            harvest=HarvestSettings(workers=0, batch_size=LIVE_BATCH),
        )
        config = write_config(tmp_path, url)
        state = tmp_path / "store" / "state.sqlite3"
        failures: list[BaseException] = []
        live = RecordStore(settings.store_path, BASE, gather_records=1)

        def harvest() -> None:
            try:
                job = run_source(
                    settings, live, "portal", RunOptions(full=True), http=HttpClient(settings.http)
                )
                assert job.status == "succeeded", job.message
            except BaseException as err:  # raised in the test's thread below
                failures.append(err)

        start = generation(state)
        thread = threading.Thread(target=harvest)
        thread.start()
        try:
            deadline = time.monotonic() + 120
            while generation(state) < start + 10 and thread.is_alive():
                assert time.monotonic() < deadline, "the harvest did not start"
                time.sleep(0.02)
            code, out = cli(config, "store", "backup", str(tmp_path / "backup"), "--json")
            during = stats_json(config)  # stats, too, reads beside the harvest
            still_harvesting = thread.is_alive()
        finally:
            thread.join(300)
            live.close()
    assert not failures, failures
    assert code == 0, out
    assert still_harvesting, "the harvest ended before the backup: make it longer"
    taken = json.loads(out)
    end = generation(state)
    assert start + 10 <= taken["generation"] < end
    # every batch of the harvest added LIVE_BATCH records and counted one generation
    assert end - start == LIVE_RECORDS // LIVE_BATCH
    assert taken["records"] == LIVE_BATCH * (taken["generation"] - start)
    assert taken["records"] <= during["record_count"] < LIVE_RECORDS

    restored = tmp_path / "restored"
    restored.mkdir()
    config2 = restored / "aggregator.toml"
    config2.write_text(config.read_text(encoding="utf-8"), encoding="utf-8")
    code, out = cli(config2, "store", "restore", str(tmp_path / "backup"))
    assert code == 0, out
    assert f"at generation {taken['generation']}" in out
    assert "graphs, records, the set index and the search index agree" in out
    with RecordStore(restored / "store", BASE) as back:
        assert_consistent(back)  # every graph equals its record's state, nothing pending
        assert back.db.generation() == taken["generation"]
        held = {(r.local_id, r.content_hash) for r in back.db.iter_records()}
    with RecordStore(tmp_path / "store", BASE) as live_again:
        final = {(r.local_id, r.content_hash) for r in live_again.db.iter_records()}
    assert len(held) == taken["records"] and held < final


def test_backup_and_restore_refuse_folders_in_use(harvested: Harvested, tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "something").write_text("x", encoding="utf-8")
    code, out = cli(harvested.config, "store", "backup", str(busy))
    assert code == 1
    assert "is not empty: back up into a new or empty folder" in out
    book = Book(harvested.store_path)  # the scheduler's due times go with the backup
    book.conn.execute("INSERT INTO requests (source, full, requested) VALUES ('portal', 1, 'now')")
    book.close()
    code, out = cli(harvested.config, "store", "backup", str(tmp_path / "b"))
    assert code == 0, out
    assert f"backed up {ACTIVE + WITHDRAWN + REJECTED} record(s)" in out
    before = sorted(p.name for p in harvested.store_path.iterdir())
    code, out = cli(harvested.config, "store", "restore", str(tmp_path / "b"))
    assert code == 1
    assert "is not empty: restore into an empty folder" in out
    assert sorted(p.name for p in harvested.store_path.iterdir()) == before
    # a quiet store: the snapshot is at the state's generation, nothing is replayed
    assert json.loads((tmp_path / "b" / "backup.json").read_text(encoding="utf-8"))[
        "snapshot_generation"
    ] == generation(harvested.store_path / "state.sqlite3")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "aggregator.toml").write_text(
        harvested.config.read_text(encoding="utf-8"), encoding="utf-8"
    )
    code, out = cli(elsewhere / "aggregator.toml", "store", "restore", str(tmp_path / "b"))
    assert code == 0, out
    assert "(0 graph(s) brought up to that generation)" in out
    with RecordStore(elsewhere / "store", BASE) as back:
        assert_consistent(back)
    assert rows(elsewhere / "store" / "schedule.sqlite3", "SELECT source FROM requests") == [
        ("portal",)
    ]


# -- optimize -------------------------------------------------------------------------------
def test_optimize_compacts_and_frees_what_the_snapshot_and_the_state_held(
    harvested: Harvested,
) -> None:
    with RecordStore(harvested.store_path, BASE) as store:
        store.graphs.store.optimize()  # type: ignore[attr-defined]  # old files: the snapshot's
        start = store.db.generation()
    conn = sqlite3.connect(harvested.store_path / "state.sqlite3")
    conn.execute("CREATE TABLE scratch AS SELECT randomblob(4096) AS b FROM records, records")
    conn.execute("DROP TABLE scratch")  # free pages, as a prune leaves them
    conn.close()
    before = stats_json(harvested.config)["parts"]
    held_alone = before["snapshots (held only by them)"]
    assert alone_tables(harvested.store_path) > 0
    with RecordStore(harvested.store_path, BASE):
        code, out = cli(harvested.config, "store", "optimize")
    assert code == 1 and "is being written by process" in out
    code, out = cli(harvested.config, "store", "optimize", "--json")
    assert code == 0, out
    report = json.loads(out)
    after = stats_json(harvested.config)["parts"]
    other = "scheduler and other files"  # the writer's lock file says who held it, then not
    assert {p: n for p, n in report["after"].items() if p != other} == {
        p: n for p, n in after.items() if p != other
    }
    assert report["before"]["snapshots (held only by them)"] == held_alone
    assert after["snapshots (held only by them)"] < held_alone
    assert alone_tables(harvested.store_path) == 0
    state = ("state: free pages and log", "state: jobs and other tables")
    assert sum(after[p] for p in state) < sum(before[p] for p in state) - 50 * 4096
    assert report["total_after"] < report["total_before"]
    assert any("free page(s) given back" in s for s in report["steps"])
    code, out = cli(harvested.config, "store", "check")
    assert code == 0, out
    with RecordStore(harvested.store_path, BASE) as store:
        assert store.db.generation() == start + 1  # the compaction's own snapshot
        assert_consistent(store)
    code, out = cli(harvested.config, "store", "optimize", "--vacuum")
    assert code == 0, out
    assert "state database: VACUUM" in out


# -- reindex, and the side indexes in check ---------------------------------------------------
def searched(folder: Path, state: Path, text: str) -> tuple[int, list[str], dict[str, Any]]:
    """What the dashboard's search answers (total, hits, facet counts) from the index in
    ``folder`` (caught up first, as every search does)."""
    index = SearchIndex(folder, state)
    conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    try:
        index.catch_up(conn)
        res = index.search(conn, text, {}, limit=100)
        facets = {k: sorted((v.value, v.count) for v in vs) for k, vs in res.facets.items()}
        return res.total, sorted(h.dataset_iri for h in res.hits), facets
    finally:
        conn.close()
        index.close()


def test_reindex_rebuilds_the_set_and_search_indexes(harvested: Harvested, tmp_path: Path) -> None:
    path, state = harvested.store_path, harvested.store_path / "state.sqlite3"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    want = searched(fresh, state, "")  # an index built from nothing
    assert want[0] == ACTIVE
    sets_before = rows(state, "SELECT * FROM record_sets ORDER BY record_id, set_spec")
    counts_before = rows(state, "SELECT * FROM set_counts ORDER BY set_spec")
    assert searched(path, state, "") == want
    active = [r[0] for r in rows(state, "SELECT id FROM records WHERE status = 'active'")]
    gone = rows(state, "SELECT id FROM records WHERE status = 'withdrawn'")[0][0]
    conn = sqlite3.connect(path / "search.sqlite3")
    with conn:  # one active record lost, a withdrawn one indexed
        conn.execute("DELETE FROM docs WHERE record_id = ?", (active[0],))
        conn.execute("DELETE FROM fts WHERE rowid = ?", (active[0],))
        conn.execute(
            "INSERT INTO docs VALUES (?, 'http://x/d', 'portal', 'Ghost', '2000')", (gone,)
        )
    conn.close()
    conn = sqlite3.connect(state)
    with conn:
        conn.execute("DELETE FROM record_sets WHERE record_id = ?", (active[1],))
        # a record withdrawn by a deleted header keeps the theme sets it was in, which its
        # row cannot tell any more (docs/store.md#maintenance): its source sets go here
        conn.execute(
            "DELETE FROM record_sets WHERE record_id = ? AND set_spec LIKE 'source%'", (gone,)
        )
        conn.execute("UPDATE set_counts SET n = n + 7 WHERE set_spec = 'source'")
        shared_before = conn.execute("SELECT triple, refs FROM shared_triples").fetchall()
        conn.execute("UPDATE shared_triples SET refs = refs + 2")  # counts a side index holds
    conn.close()
    assert searched(path, state, "") != want
    code, out = cli(harvested.config, "store", "check", "--json")
    assert code == 1, out
    found = {(f["kind"], f["subject"]) for f in json.loads(out)["findings"]}
    by_kind: dict[str, set[str]] = {}
    for kind, subject in found:
        by_kind.setdefault(kind, set()).add(subject)
    # the ghost document has no words in the full-text table either
    assert by_kind.pop("search index") == {f"record id {active[0]}", f"record id {gone}", "fts"}
    assert by_kind.pop("set index") == {
        f"{BASE}record/portal/{record_key(state, rid)}" for rid in (active[1], gone)
    }
    assert {"source", "source:portal"} <= by_kind.pop("set count")  # and the lost themes'
    assert by_kind.pop("shared statement counts") == {f"{len(shared_before)} statement(s)"}
    assert not by_kind
    code, out = cli(harvested.config, "store", "reindex")
    assert code == 0, out
    assert f"search index: rebuilt from {ACTIVE + WITHDRAWN + REJECTED} record(s)" in out
    assert f"shared statements: {len(shared_before)} counted afresh (corrected" in out
    assert rows(state, "SELECT triple, refs FROM shared_triples") == shared_before
    assert rows(state, "SELECT * FROM record_sets ORDER BY record_id, set_spec") == sets_before
    assert rows(state, "SELECT * FROM set_counts ORDER BY set_spec") == counts_before
    assert searched(path, state, "") == want
    code, out = cli(harvested.config, "store", "check")
    assert code == 0, out


def record_key(state: Path, rid: int) -> str:
    iri = rows(state, "SELECT record_iri FROM records WHERE id = ?", rid)[0][0]
    return str(iri).rsplit("/", 1)[1]


def test_check_repair_rebuilds_a_search_index_that_disagrees(harvested: Harvested) -> None:
    path, state = harvested.store_path, harvested.store_path / "state.sqlite3"
    want = searched(path, state, "")
    conn = sqlite3.connect(path / "search.sqlite3")
    with conn:
        conn.execute("DELETE FROM docs")
    conn.close()
    code, out = cli(harvested.config, "store", "check", "--repair")
    assert code == 0, out
    assert f"repaired {ACTIVE}: search index" in out
    assert searched(path, state, "") == want
