"""The versions of the state database's schema, and the migrations between them.

The version is SQLite's ``PRAGMA user_version``: 0 in a store made before versions were kept
(and in an empty database), then the number of migrations applied. ``MIGRATIONS[n]`` takes a
store from version ``n`` to ``n + 1``; each runs in a transaction of its own that also sets
the new version, so a crash leaves the store at one version or the next, never between.

Only the writer migrates (:func:`upgrade`, when :class:`~aggregator.store.state.StateDB`
opens the store read-write: it holds the writer lock, so no two processes migrate at once;
readers in WAL mode see the old schema or the new). A new store is made the same way, by
every migration from an empty database, so new and upgraded stores cannot differ. A reader
that finds an older version says so (:func:`check_readable`); a store newer than the code is
refused by both with :class:`~aggregator.core.errors.StoreVersionError` (exit code 2).

To change the schema, append a migration: a function of the connection with a docstring
saying what changed (its first line is shown by ``aggregator store upgrade``), and a test
that builds the previous version's schema (``tests/data/store_schemas/``) and migrates it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aggregator.core.errors import StoreVersionError
from aggregator.store.record_sets import SetIndex
from aggregator.store.schema import BASELINE

Migration = Callable[[sqlite3.Connection], None]

# meta flags with which stores of version 0 said which ad-hoc upgrades they had
_BUILT_FLAGS = ("record_sets", "set_counts", "one_open_rejection")


def _statements(script: str) -> list[str]:
    """The statements of a script without triggers (``;`` ends each), comments dropped."""
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def _has_flag(conn: sqlite3.Connection, key: str) -> bool:
    return conn.execute("SELECT 1 FROM meta WHERE key = ?", (key,)).fetchone() is not None


def to_v1_baseline(conn: sqlite3.Connection) -> None:
    """A store made before versions were kept: brought to the schema of main at 9d4bea6.

    Creates what an older store lacks (``set_counts``, ``rejections``, ``source_versions``,
    ``journal``, their indexes), replaces the index ``records_pending`` by ``records_journal``,
    builds the OAI-PMH set index and the set sizes where the store never did (its meta flags
    ``record_sets`` and ``set_counts``), and closes duplicate open rejections of a record
    (stores that opened one per failure) before making them unique. The meta flags of these
    ad-hoc upgrades are then dropped: the version says it all. On an empty database this
    makes the version 1 tables."""
    conn.execute("DROP INDEX IF EXISTS records_pending")
    for statement in _statements(BASELINE):
        conn.execute(statement)
    sets = SetIndex(conn)
    indexed, counted = _has_flag(conn, "record_sets"), _has_flag(conn, "set_counts")
    if not indexed:  # a store made before the set index
        sets.fill()
    if not (indexed and counted):  # ... or before the set sizes: counted afresh
        sets.count_all()
    if not _has_flag(conn, "one_open_rejection"):
        _one_open_rejection(conn)
    conn.execute(
        f"DELETE FROM meta WHERE key IN ({','.join('?' * len(_BUILT_FLAGS))})", _BUILT_FLAGS
    )


def _one_open_rejection(conn: sqlite3.Connection) -> None:
    """Close every open rejection of a record but its newest, as superseded by the job of the
    newest (which did process the record again); then make the open one unique."""
    cur = conn.execute(
        "SELECT source, local_id, id, job_id FROM rejections WHERE superseded_by IS NULL"
        " ORDER BY source, local_id, id DESC"
    )
    closed: list[tuple[int, int]] = []
    newest: tuple[str, str, int] | None = None  # source, local_id, job of the newest
    for source, local_id, rid, job_id in cur.fetchall():
        if newest is not None and newest[:2] == (source, local_id):
            closed.append((newest[2], rid))
        else:
            newest = (source, local_id, job_id)
    conn.executemany("UPDATE rejections SET superseded_by = ? WHERE id = ?", closed)
    conn.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS rejections_open_record"
        " ON rejections (source, local_id) WHERE superseded_by IS NULL"
    )


def to_v2_journal_only(conn: sqlite3.Connection) -> None:
    """Journal marks live only in the ``journal`` table.

    Stores made before that table marked the rows themselves (``records.pending`` = the
    generation of the write, or 1 before generations). Such marks move to ``journal`` (a
    record marked in both keeps the table's, the later write), the rows are cleared and their
    index ``records_journal`` dropped; the replay at open then reads one place. The column
    ``records.pending`` stays, always 0 (dropping it would rewrite every row and its graph
    blobs)."""
    conn.execute(
        "INSERT OR IGNORE INTO journal (record_id, generation)"
        " SELECT id, pending FROM records WHERE pending != 0"
    )
    conn.execute("UPDATE records SET pending = 0 WHERE pending != 0")
    conn.execute("DROP INDEX IF EXISTS records_journal")


# A record's payloads, newest last: the trigger notes each payload a record takes, in the
# transaction of the write, so the history can never miss one.
_NOTE_PAYLOAD = """
    DELETE FROM record_payloads WHERE record_id = new.id AND payload_sha = new.payload_sha;
    INSERT INTO record_payloads (record_id, seq, payload_sha) VALUES (new.id,
        1 + coalesce((SELECT max(seq) FROM record_payloads WHERE record_id = new.id), 0),
        new.payload_sha);
"""


def to_v3_payload_history(conn: sqlite3.Connection) -> None:
    """Each record's payload history, for the retention of its last versions.

    ``record_payloads (record_id, seq, payload_sha)``: every payload a record has held, ``seq``
    growing with each new one (a payload held again moves to the end). Kept by triggers on
    ``records`` (insert, change of ``payload_sha``, delete), so every write path keeps it in
    its own transaction; filled with each record's current payload. Also indexes the payload
    references the pruning looks up (``record_payloads_sha``, ``rejections_payload``).
    Payloads that records held before this version are not in any history."""
    conn.execute(
        "CREATE TABLE record_payloads (record_id INTEGER NOT NULL, seq INTEGER NOT NULL,"
        " payload_sha TEXT NOT NULL, PRIMARY KEY (record_id, seq)) WITHOUT ROWID"
    )
    conn.execute("CREATE INDEX record_payloads_sha ON record_payloads (payload_sha)")
    conn.execute("CREATE INDEX rejections_payload ON rejections (payload_sha)")
    conn.execute(
        "INSERT INTO record_payloads (record_id, seq, payload_sha)"
        " SELECT id, 1, payload_sha FROM records WHERE payload_sha IS NOT NULL"
    )
    conn.execute(  # a new row's id has no history (a deleted row's history went with it)
        "CREATE TRIGGER record_payload_added AFTER INSERT ON records"
        " WHEN new.payload_sha IS NOT NULL BEGIN INSERT OR REPLACE INTO record_payloads"
        " (record_id, seq, payload_sha) VALUES (new.id, 1, new.payload_sha); END"
    )
    conn.execute(
        "CREATE TRIGGER record_payload_changed AFTER UPDATE OF payload_sha ON records"
        " WHEN new.payload_sha IS NOT NULL AND new.payload_sha IS NOT old.payload_sha"
        f" BEGIN {_NOTE_PAYLOAD} END"
    )
    conn.execute(
        "CREATE TRIGGER record_payloads_gone AFTER DELETE ON records"
        " BEGIN DELETE FROM record_payloads WHERE record_id = old.id; END"
    )


def to_v4_flagged_records(conn: sqlite3.Connection) -> None:
    """Records stored with violations are flagged (``records.flagged``).

    ``flagged`` is 1 for a record stored and published although it breaks a rule its source
    must fix (aggregator/validate/policy.py); the partial index ``records_flagged`` serves the
    dashboard's counts and filter. Records a lenient source stored before this version, whose
    findings hold a violation, are flagged. Adding a column with a constant default rewrites
    no row; only those records are updated."""
    conn.execute("ALTER TABLE records ADD COLUMN flagged INTEGER NOT NULL DEFAULT 0")
    conn.execute(
        "UPDATE records SET flagged = 1 WHERE status = 'active' AND findings != '[]'"
        " AND EXISTS (SELECT 1 FROM json_each(records.findings)"
        " WHERE json_extract(value, '$.severity') = 'violation')"
    )
    conn.execute("CREATE INDEX records_flagged ON records (source, status) WHERE flagged = 1")


#: meta key set while the graphs of a store made before version 5 still hold the shared
#: statements in each record's graph: the writer moves them when it opens the store
SHARED_SPLIT_PENDING = "shared_split_pending"


def to_v5_shared_statements(conn: sqlite3.Connection) -> None:
    """Statements about shared resources are counted, and kept once in the shared graph.

    ``shared_triples (triple, refs, generation)``: each statement the records leave to the
    shared graph (aggregator/store/shared.py) with the number of active records stating it,
    and the generation of its last change; ``shared_triples_zero`` finds those no record
    states any more. The graphs of a store that holds active records are rebuilt by the
    writer at its next open (``meta.shared_split_pending``): each record's graph loses the
    shared statements, which are counted and loaded once into the shared graph."""
    conn.execute(
        "CREATE TABLE shared_triples (triple BLOB PRIMARY KEY, refs INTEGER NOT NULL,"
        " generation INTEGER NOT NULL) WITHOUT ROWID"
    )
    conn.execute("CREATE INDEX shared_triples_zero ON shared_triples (generation) WHERE refs = 0")
    if conn.execute("SELECT 1 FROM records WHERE status = 'active' LIMIT 1").fetchone():
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, '1')", (SHARED_SPLIT_PENDING,)
        )
        # every active record is replayed at the writer's next open (``recovery.py``)
        conn.execute(
            "INSERT OR IGNORE INTO journal (record_id, generation) SELECT id,"
            " coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'generation'), 0)"
            " FROM records WHERE status = 'active'"
        )


MIGRATIONS: tuple[Migration, ...] = (
    to_v1_baseline,
    to_v2_journal_only,
    to_v3_payload_history,
    to_v4_flagged_records,
    to_v5_shared_statements,
)
LATEST = len(MIGRATIONS)
PAGE_SIZE = 16384  # bytes per page of a new state database (an older one keeps its own)


@dataclass(frozen=True, slots=True)
class Applied:
    """One migration run: the version it reached and what it changed (its docstring's
    first line)."""

    version: int
    summary: str


def summary(migration: Migration) -> str:
    return (migration.__doc__ or migration.__name__).strip().splitlines()[0]


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _is_empty(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is None


def _newer(version: int, path: Path | str) -> StoreVersionError:
    return StoreVersionError(
        f"the state database {path} has schema version {version}, newer than this"
        f" ld-aggregator knows (up to {LATEST}): it was written by a later release; run that"
        " release (or a newer one) on this store"
    )


def upgrade(conn: sqlite3.Connection, path: Path | str = "") -> list[Applied]:
    """Bring the database to :data:`LATEST`, one migration per transaction (the writer, when
    it opens the store; ``conn`` in autocommit mode). Returns the migrations run."""
    version = schema_version(conn)
    if version > LATEST:
        raise _newer(version, path)
    if version < LATEST and _is_empty(conn):
        # a new store: pages can be given back to the file system after a prune; pages of
        # 16 KB hold a record's row (~3.6 KB at 1M records) with less left unused than pages
        # of 4 KB did (docs/benchmarks.md#the-1m-run-issue-31)
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # first: auto_vacuum fixes the size
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    applied: list[Applied] = []
    for target in range(version + 1, LATEST + 1):
        migration = MIGRATIONS[target - 1]
        conn.execute("BEGIN IMMEDIATE")
        try:
            if schema_version(conn) != target - 1:  # another connection migrated meanwhile
                conn.execute("ROLLBACK")
                return applied + upgrade(conn, path)
            migration(conn)
            conn.execute(f"PRAGMA user_version = {target}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        applied.append(Applied(target, summary(migration)))
    return applied


def check_readable(conn: sqlite3.Connection, path: Path | str) -> None:
    """A reader's check: the schema is this code's (a writer upgrades an older one)."""
    version = schema_version(conn)
    if version > LATEST:
        raise _newer(version, path)
    if version < LATEST:
        raise StoreVersionError(
            f"the state database {path} has schema version {version}, older than this"
            f" ld-aggregator's ({LATEST}): run `aggregator store upgrade` (or any command that"
            " writes the store, such as a harvest or `serve`) to bring it up to date"
        )
