"""Schema versions of the state database: each migration from the schema of the version
before it (kept as SQL in tests/data/store_schemas/, built from the git history), a store
made by the last code before versions opened and upgraded, stores newer than the code
refused, readers that find an older schema saying what to do."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.config import HarvestSettings, HttpSettings, Settings, SourceConfig
from aggregator.core.errors import StoreVersionError
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store import migrations
from aggregator.store.migrations import LATEST, MIGRATIONS, schema_version, upgrade
from aggregator.store.records import ReadOnlyStore, RecordStore
from aggregator.store.state import StateDB

SCHEMAS = Path(__file__).parent / "data" / "store_schemas"
BASE = "http://127.0.0.1:8000/"
T0 = datetime(2024, 3, 1, tzinfo=UTC)


def load(sql_file: str, target: Path) -> Path:
    """A state database made from one of the kept dumps."""
    target.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(target)
    con.executescript((SCHEMAS / sql_file).read_text(encoding="utf-8"))
    con.close()
    return target


def connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def migrate_one(conn: sqlite3.Connection, version: int) -> None:
    """Run the one migration from ``version`` to the next, as upgrade() does."""
    assert schema_version(conn) == version
    conn.execute("BEGIN IMMEDIATE")
    MIGRATIONS[version](conn)
    conn.execute(f"PRAGMA user_version = {version + 1}")
    conn.execute("COMMIT")


def schema_of(conn: sqlite3.Connection) -> set[tuple[str, str, str]]:
    """Tables, indexes and triggers with their SQL, whitespace and IF NOT EXISTS aside."""
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL")
    return {
        (kind, name, " ".join(sql.replace("IF NOT EXISTS ", "").split()))
        for kind, name, sql in rows
    }


def names(conn: sqlite3.Connection, kind: str) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,))
    return {str(r[0]) for r in rows}


# -- migration 1: an unversioned store (the ad-hoc upgrades of before) -----------------------
def test_migration_1_brings_a_store_of_2026_11_22_to_the_baseline(tmp_path: Path) -> None:
    conn = connect(load("v0-8be0926.sql", tmp_path / "state.sqlite3"))
    assert schema_version(conn) == 0
    assert "set_counts" not in names(conn, "table") and "journal" not in names(conn, "table")
    migrate_one(conn, 0)
    tables = names(conn, "table")
    assert {"set_counts", "journal", "source_versions"} <= tables
    indexes = names(conn, "index")
    assert "records_pending" not in indexes and "records_journal" in indexes
    assert "rejections_open_record" in indexes
    # the set sizes, counted from the set index the store had
    counted = dict(conn.execute("SELECT set_spec, count(*) FROM record_sets GROUP BY set_spec"))
    assert dict(conn.execute("SELECT set_spec, n FROM set_counts")) == counted
    assert counted == {"source": 2, "source:portal": 2, "theme": 1, "theme:ENVI": 1}
    # two open rejections of one record: the older is closed by the job of the newer
    rejections = conn.execute("SELECT id, superseded_by FROM rejections ORDER BY id").fetchall()
    assert rejections == [(1, 2), (2, None)]
    # the ad-hoc flags are gone, the rows' pending mark (of that time: 1) is still there
    assert conn.execute("SELECT key FROM meta ORDER BY key").fetchall() == [("generation",)]
    assert conn.execute("SELECT id, pending FROM records WHERE pending != 0").fetchall() == [(1, 1)]


def test_migration_1_builds_the_set_index_of_a_store_made_before_it(tmp_path: Path) -> None:
    conn = connect(load("v0-8be0926.sql", tmp_path / "state.sqlite3"))
    conn.execute("DELETE FROM record_sets")
    conn.execute("DELETE FROM meta WHERE key = 'record_sets'")
    migrate_one(conn, 0)
    rows = conn.execute("SELECT record_id, set_spec FROM record_sets ORDER BY 1, 2").fetchall()
    assert rows == [
        (1, "source"),
        (1, "source:portal"),
        (1, "theme"),
        (1, "theme:ENVI"),
        (2, "source"),
        (2, "source:portal"),
    ]  # the rejected record is in no set
    assert dict(conn.execute("SELECT set_spec, n FROM set_counts"))["source"] == 2


# -- migration 2: the journal's marks in one place --------------------------------------------
def test_migration_2_moves_the_rows_marks_to_the_journal(tmp_path: Path) -> None:
    conn = connect(load("v1-main-9d4bea6.sql", tmp_path / "state.sqlite3"))
    migrate_one(conn, 0)  # main's store: version 0 with the baseline's tables
    # marks of a store made before the journal table (generation 1 for rows 1 and 2), and a
    # journal mark of a later write of row 2 (generation 7): the later one wins
    conn.execute("UPDATE records SET pending = 1 WHERE id IN (1, 2)")
    conn.execute("INSERT INTO journal (record_id, generation) VALUES (2, 7)")
    migrate_one(conn, 1)
    assert conn.execute("SELECT * FROM journal ORDER BY 1").fetchall() == [(1, 1), (2, 7)]
    assert conn.execute("SELECT count(*) FROM records WHERE pending != 0").fetchone() == (0,)
    assert "records_journal" not in names(conn, "index")


def test_the_journal_replay_reads_the_moved_marks(tmp_path: Path) -> None:
    path = load("v1-main-9d4bea6.sql", tmp_path / "state.sqlite3")
    conn = connect(path)
    conn.execute("UPDATE records SET pending = 3 WHERE id = 2")
    conn.close()
    db = StateDB(path)
    try:
        marks = [(r.id, r.pending) for r in db.pending_rows()]
        # row 2's moved mark, and migration 5's marks of the other active records (their
        # graphs are rebuilt without the shared statements at the writer's next open)
        assert (2, 3) in marks
        assert {rid for rid, _ in marks} == {
            r[0]
            for r in db.conn.execute("SELECT id FROM records WHERE status = 'active' OR id = 2")
        }
    finally:
        db.close()


# -- migration 3: payload histories ---------------------------------------------------------
def test_migration_3_keeps_each_records_payloads_from_now_on(tmp_path: Path) -> None:
    conn = connect(load("v2.sql", tmp_path / "state.sqlite3"))
    assert schema_version(conn) == 2
    current = dict(conn.execute("SELECT id, payload_sha FROM records"))
    held = conn.execute("SELECT count(*) FROM payloads").fetchone()[0]
    migrate_one(conn, 2)
    history = conn.execute("SELECT record_id, seq, payload_sha FROM record_payloads").fetchall()
    assert sorted(history) == sorted((rid, 1, sha) for rid, sha in current.items())
    assert held == len(current) + 2  # record 1's two replaced payloads: in no history
    # the triggers: a new payload is noted, a payload held again moves to the end
    conn.execute("UPDATE records SET payload_sha = 'new-one' WHERE id = 1")
    conn.execute("UPDATE records SET payload_sha = ? WHERE id = 1", (current[1],))
    conn.execute("UPDATE records SET status = status WHERE id = 1")  # no new payload: no row
    rows = conn.execute("SELECT seq, payload_sha FROM record_payloads WHERE record_id = 1")
    assert sorted(rows) == [(2, "new-one"), (3, current[1])]
    conn.execute("DELETE FROM records WHERE id = 1")  # (a purge): its history goes with it
    left = conn.execute("SELECT count(*) FROM record_payloads WHERE record_id = 1")
    assert left.fetchone() == (0,)


def test_a_failing_migration_leaves_the_store_at_its_version(tmp_path: Path) -> None:
    """Each migration is one transaction with its version: a failure changes nothing."""
    path = load("v2.sql", tmp_path / "state.sqlite3")
    conn = connect(path)
    conn.execute("CREATE TABLE record_payloads (x)")  # in the way of migration 3
    conn.close()
    with pytest.raises(sqlite3.OperationalError, match="record_payloads already exists"):
        StateDB(path)
    conn = connect(path)
    assert schema_version(conn) == 2
    assert "rejections_payload" not in names(conn, "index")  # its first statements undone


# -- the whole path ----------------------------------------------------------------------------
def test_new_and_upgraded_stores_have_the_same_schema(tmp_path: Path) -> None:
    fresh = StateDB(tmp_path / "new.sqlite3")
    assert [a.version for a in fresh.migrations] == list(range(1, LATEST + 1))
    expected = schema_of(fresh.conn)
    fresh.close()
    for dump in ("v0-8be0926.sql", "v1-main-9d4bea6.sql", "v2.sql"):
        db = StateDB(load(dump, tmp_path / dump / "state.sqlite3"))
        assert schema_version(db.conn) == LATEST
        assert schema_of(db.conn) == expected, dump
        db.close()


def test_every_migration_says_what_it_changed() -> None:
    assert len(MIGRATIONS) == LATEST
    for migration in MIGRATIONS:
        assert migration.__doc__ and migrations.summary(migration).endswith(".")


@pytest.fixture
def peer() -> Iterator[tuple[MemoryItems, str]]:
    items = MemoryItems(
        OaiItem(generate_identifier(i), T0 + timedelta(hours=i), (), False, generate_dataset(i))
        for i in range(3)
    )
    with PeerServer(OaiPmhPeer(items, page_size=7)) as server:
        yield items, f"{server.url}oai"


def test_a_store_made_by_main_opens_upgraded_and_harvests(
    tmp_path: Path, peer: tuple[MemoryItems, str]
) -> None:
    """The last store before versions (a dump of one made by main at 9d4bea6): the writer
    upgrades it at open, its rows read as before, and a harvest writes into it, its payload
    history growing with the record's new version."""
    items, url = peer
    store_path = tmp_path / "store"
    load("v1-main-9d4bea6.sql", store_path / "state.sqlite3")
    with RecordStore(store_path, BASE) as store:
        assert [a.version for a in store.db.migrations] == [1, 2, 3, 4, 5]
        assert store.db.counts_by_status("portal") == {"active": 3, "rejected": 1}
        record = store.record("portal", generate_identifier(1))
        assert record is not None and record.payload_sha
        assert store.payload(record.payload_sha) is not None
        items.put(
            OaiItem(
                generate_identifier(1),
                T0 + timedelta(days=30),
                (),
                False,
                generate_dataset(1, revision=3),
            )
        )
        source = SourceConfig(name="portal", type="oai-pmh", url=url)
        settings = Settings(
            config_path=None,
            store_path=store_path,
            base_iri=BASE,
            http=HttpSettings(allow_private=True, retries=0),
            harvest=HarvestSettings(workers=0),
            sources={"portal": source},
        )
        job = run_source(
            settings,
            store,
            "portal",
            RunOptions(full=True),
            http=HttpClient(settings.http),
        )
        assert job.status in ("succeeded", "partial")
        assert job.counters["updated"] >= 1
        history = store.db.conn.execute(
            "SELECT payload_sha FROM record_payloads WHERE record_id = ? ORDER BY seq",
            (record.id,),
        ).fetchall()
        new = store.record("portal", generate_identifier(1))
        assert new is not None and [h[0] for h in history] == [record.payload_sha, new.payload_sha]
        assert new.record_iri in store.graph_names()  # (the dump holds no graphs)
    with ReadOnlyStore(store_path, BASE) as reader:  # and readers read it
        assert reader.db.counts_by_status("portal")["active"] == 3


def test_a_store_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    store_path = tmp_path / "store"
    path = load("v2.sql", store_path / "state.sqlite3")
    conn = connect(path)
    conn.execute(f"PRAGMA user_version = {LATEST + 1}")
    conn.close()
    with pytest.raises(StoreVersionError, match="newer than this ld-aggregator knows"):
        RecordStore(store_path, BASE)
    with pytest.raises(StoreVersionError, match="newer"):
        ReadOnlyStore(store_path, BASE)
    conn = connect(path)
    assert schema_version(conn) == LATEST + 1  # untouched
    assert conn.execute("SELECT count(*) FROM records").fetchone() == (4,)
    # the writer lock was let go: the next writer is told the same, not "busy"
    with pytest.raises(StoreVersionError):
        RecordStore(store_path, BASE)


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "aggregator.toml"
    config.write_text(
        '[store]\npath = "store"\nbase_iri = "http://127.0.0.1:8000/"\n', encoding="utf-8"
    )
    return config


def cli(config: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["-c", str(config), *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_commands_on_older_and_newer_stores(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    load("v1-main-9d4bea6.sql", tmp_path / "store" / "state.sqlite3")
    code, out = cli(config, "jobs")  # a reader: says what to do, changes nothing
    assert code == 2
    assert "schema version 0, older than this ld-aggregator's" in out
    assert "aggregator store upgrade" in out
    code, out = cli(config, "store", "upgrade")
    assert code == 0
    assert f"upgraded the state database from schema version 0 to {LATEST}:" in out
    assert "  3: Each record's payload history" in out
    code, out = cli(config, "jobs")
    assert code == 0 and "job 3 portal: succeeded" in out
    code, out = cli(config, "store", "upgrade")
    assert (code, out.strip()) == (
        0,
        f"the state database is at schema version {LATEST}: nothing to do",
    )
    conn = connect(tmp_path / "store" / "state.sqlite3")
    conn.execute(f"PRAGMA user_version = {LATEST + 5}")
    conn.close()
    for args in (("jobs",), ("store", "upgrade"), ("harvest", "--all")):
        code, out = cli(config, *args)
        assert code == 2, args
        assert f"schema version {LATEST + 5}, newer than" in out


def test_upgrade_runs_only_what_is_missing(tmp_path: Path) -> None:
    path = load("v2.sql", tmp_path / "state.sqlite3")
    conn = connect(path)
    applied = upgrade(conn, path)
    assert [(a.version, a.summary) for a in applied] == [
        (3, "Each record's payload history, for the retention of its last versions."),
        (4, "Records stored with violations are flagged (``records.flagged``)."),
        (5, "Statements about shared resources are counted, and kept once in the shared graph."),
    ]
    assert upgrade(conn, path) == []


def test_serve_upgrades_an_older_store_when_it_starts(
    tmp_path: Path, peer: tuple[MemoryItems, str]
) -> None:
    """A store whose snapshot is current but whose schema is older than the code: ``serve``
    opens it as the writer for a moment (which migrates it) before its readers start."""
    from storecheck import make_unversioned

    from aggregator.serve.supervisor import Supervisor
    from aggregator.store.names import StoreNames

    _, url = peer
    store_path = tmp_path / "store"
    settings = Settings(
        config_path=None,
        store_path=store_path,
        base_iri=BASE,
        http=HttpSettings(allow_private=True, retries=0),
        harvest=HarvestSettings(workers=0),
        sources={"portal": SourceConfig(name="portal", type="oai-pmh", url=url)},
    )
    with RecordStore(store_path, BASE) as store:
        run_source(settings, store, "portal", RunOptions(), http=HttpClient(settings.http))
    conn = connect(store_path / "state.sqlite3")
    make_unversioned(conn)  # as if the store had been written by the code before versions
    conn.close()
    sup = Supervisor(StoreNames(store_path, BASE), settings, "127.0.0.1", 0, processes=1)
    try:
        conn = connect(store_path / "state.sqlite3")
        assert schema_version(conn) == LATEST
        conn.close()
    finally:
        sup.stop()
