"""The SQLite side of the record store: record state, the write journal, payloads, jobs.

SQLite is the authority on each record's state. A write first commits the new state of a
batch here and, in the same transaction, marks each record in the ``journal`` table with the
batch's generation (record id -> generation), then brings the graph store to that state, then
deletes the marks that still hold that generation: a later batch that wrote the same record
again keeps its own mark. Whatever the moment a process dies, the rows hold either the old or
the new state, and rows still marked are compared with the graph store, and repaired, when
the store is next opened. (The marks have a table of their own: a mark kept in the record's
row would rewrite the whole row, graph blobs and all, when cleared. :mod:`.migrations` brings
older layouts to this one.)

The schema is versioned (``PRAGMA user_version``): opening the database read-write runs the
migrations of :mod:`aggregator.store.migrations` it has not had yet.

The same rows carry the canonical N-Triples of each dataset, so the republishing layer can
serve records without touching the graph store (whose datatypes change on insert).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aggregator.store.migrations import Applied, upgrade
from aggregator.store.packing import (
    pack,
    pack_findings,
    pack_graph,
    unpack,
    unpack_findings,
    unpack_graph,
)
from aggregator.store.record_sets import SetIndex
from aggregator.store.versions import rows_in_chunks

_NO_SHARING = threading.RLock()  # the read-only connection: its own thread's lock only
GENERATION = "generation"  # meta key: batches of graph changes committed so far
#: bytes the write-ahead log file is cut back to when the log starts over (issue 31)
WAL_SIZE_LIMIT = 32 * 2**20

RECORD_COLUMNS = (
    "id, source, local_id, record_iri, dataset_iri, status, content_hash, first_seen, modified,"
    " source_datestamp, job_id, seen_job, format, payload_sha, url, themes, findings, flagged,"
    " pending"
)
FINDINGS_AT = 16  # the place of ``findings`` in RECORD_COLUMNS and RecordRow


@dataclass(frozen=True, slots=True)
class RecordRow:
    """One record's state as held in SQLite (without its graph bytes)."""

    id: int
    source: str
    local_id: str
    record_iri: str
    dataset_iri: str | None
    status: str
    content_hash: str | None
    first_seen: str
    modified: str
    source_datestamp: str | None
    job_id: int | None
    seen_job: int | None
    format: str | None
    payload_sha: str | None
    url: str | None
    themes: str
    findings: str
    flagged: int  # 1: stored with violations its source must fix (validate/policy.py)
    pending: int  # the generation of its journal mark (pending_rows only; else 0)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> RecordRow:
        values = list(row)
        values[FINDINGS_AT] = unpack_findings(values[FINDINGS_AT])  # kept packed
        return cls(*values)


@dataclass(slots=True)
class RecordWrite:
    """The complete new state of one record, as decided by the pipeline."""

    source: str
    local_id: str
    record_iri: str
    dataset_iri: str | None
    status: str
    content_hash: str | None
    first_seen: str
    modified: str
    source_datestamp: str | None
    job_id: int
    format: str | None
    payload_sha: str | None
    url: str | None
    themes: str
    ntriples: bytes  # canonical N-Triples of the dataset graph ('' unless active)
    catalog_ntriples: bytes
    findings: str
    existed: bool  # a graph may exist already and must be replaced
    packed_ntriples: bytes = b""  # stored forms prepared by the worker (else packed here)
    packed_catalog: bytes = b""
    nquads: bytes = b""  # dataset + catalogue facts as N-Quads in record_iri, prepared
    shared: bytes = b""  # with nquads: the statements it leaves to the shared graph (shared.py)
    # ``modified`` is replaced by the commit's stamp (``commit_barrier.py``): set for every
    # write that changes what readers see (new, changed, withdrawn, status changed)
    modified_at_commit: bool = False
    flagged: bool = False  # stored with violations its source must fix (validate/policy.py)


class SerialCursor(sqlite3.Cursor):
    """A cursor of a :class:`SerialConnection` that reads each row under ``serial``: a query
    whose rows are read after another thread began a transaction on the shared connection
    waits for that transaction to end, instead of reading its uncommitted writes."""

    connection: SerialConnection

    def __next__(self) -> Any:
        with self.connection.serial:
            return super().__next__()

    def fetchone(self) -> Any:
        with self.connection.serial:
            return super().fetchone()

    def fetchmany(self, size: int | None = 1) -> list[Any]:
        with self.connection.serial:
            return super().fetchmany(self.arraysize if size is None else size)

    def fetchall(self) -> list[Any]:
        with self.connection.serial:
            return super().fetchall()


class SerialConnection(sqlite3.Connection):
    """A connection several threads of the writer share (the scheduler runs jobs of several
    sources at once): each statement runs under ``serial``, and :meth:`StateDB.begin` holds it
    until the transaction ends, so one thread's statements never land inside another's
    transaction, and its rows are read under it too (:class:`SerialCursor`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.serial = threading.RLock()

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        with self.serial:
            return self.cursor(SerialCursor).execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        with self.serial:
            return super().executemany(sql, parameters)

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        with self.serial:
            return super().executescript(sql_script)


class StateDB:
    """Thin typed access to the SQLite file. One connection, used by the owning process
    (by several of its threads in turn: :class:`SerialConnection`)."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self.migrations: list[Applied] = []  # what opening it read-write migrated
        if read_only:  # a reader beside the writer (WAL): never a write, never a lock wait
            target = f"file:{path}?mode=ro" if path.exists() else "file::memory:"
            self.conn = sqlite3.connect(
                target, uri=True, isolation_level=None, check_same_thread=False
            )
            self.conn.execute("PRAGMA busy_timeout = 10000")
            if not path.exists():  # nothing harvested yet: an empty store to read
                upgrade(self.conn)
            self.sets = SetIndex(self.conn)
            return
        self.conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, factory=SerialConnection
        )
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute("PRAGMA busy_timeout = 60000")
        self.conn.execute("PRAGMA cache_size = -32768")  # 32 MB: lookups stay off the disk
        self.conn.execute("PRAGMA foreign_keys = ON")
        self.migrations = upgrade(self.conn, path)  # the writer brings the schema up to date
        self.conn.execute("PRAGMA journal_mode = WAL")  # after: a new store's auto_vacuum first
        # the write-ahead log grows while readers hold old states, and the file stays at its
        # largest unless SQLite truncates it when the log starts over
        self.conn.execute(f"PRAGMA journal_size_limit = {int(WAL_SIZE_LIMIT)}")
        # Which records a running job has seen: needed only until that job decides its
        # withdrawals, so a connection-local table (a crash ends the job, which then withdraws
        # nothing); marking a record here costs no write to its row. Its rollback journal is
        # kept in memory (one batch's pages): as a file, created and deleted at every commit,
        # it made a batch of marks cost several times more (docs/benchmarks.md#record-store).
        self.conn.execute("PRAGMA temp.journal_mode = MEMORY")
        self.conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS seen (job_id INTEGER NOT NULL, source TEXT NOT NULL,"
            " local_id TEXT NOT NULL, PRIMARY KEY (job_id, source, local_id)) WITHOUT ROWID"
        )
        self.sets = SetIndex(self.conn)

    def close(self) -> None:
        self.conn.close()

    # -- transactions -----------------------------------------------------------------------
    @property
    def serial(self) -> threading.RLock:
        """Held by the thread in a transaction (a writer's jobs share the connection)."""
        conn = self.conn
        return conn.serial if isinstance(conn, SerialConnection) else _NO_SHARING

    def begin(self) -> None:
        self.serial.acquire()  # released by commit or rollback
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.serial.release()
            raise

    def commit(self) -> None:
        """Commit; on an error the transaction stays open for the caller's :meth:`rollback`
        (which releases ``serial``)."""
        self.sets.flush()  # the set sizes this transaction changed
        self.conn.execute("COMMIT")
        self.serial.release()

    def rollback(self) -> None:
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            self.sets.discard()
        finally:
            self.serial.release()

    # -- records ----------------------------------------------------------------------------
    def records_by_local_id(self, source: str, local_ids: Iterable[str]) -> dict[str, RecordRow]:
        query = f"SELECT {RECORD_COLUMNS} FROM records WHERE local_id IN ({{marks}}) AND source = ?"
        out: dict[str, RecordRow] = {}
        for row in rows_in_chunks(self.conn, local_ids, query, source):
            rec = RecordRow.from_row(row)
            out[rec.local_id] = rec
        return out

    def datestamps(
        self, source: str, local_ids: Iterable[str]
    ) -> dict[str, tuple[str | None, str]]:
        """local_id -> (source datestamp, status): the little the skip-by-date check needs."""
        return read_datestamps(self.conn, source, local_ids)

    def record(self, source: str, local_id: str) -> RecordRow | None:
        return self.records_by_local_id(source, [local_id]).get(local_id)

    def iter_records(
        self, source: str | None = None, status: str | None = None, limit: int | None = None
    ) -> Iterator[RecordRow]:
        clauses, args = [], []
        if source:
            clauses.append("source = ?")
            args.append(source)
        if status:
            clauses.append("status = ?")
            args.append(status)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        lim = f"LIMIT {int(limit)}" if limit else ""
        sql = f"SELECT {RECORD_COLUMNS} FROM records {where} ORDER BY source, local_id {lim}"
        for row in self.conn.execute(sql, args):
            yield RecordRow.from_row(row)

    def graph_bytes(self, record_id: int) -> tuple[bytes, bytes]:
        row = self.conn.execute(
            "SELECT ntriples, catalog_ntriples FROM records WHERE id = ?", (record_id,)
        ).fetchone()
        if row is None:
            return b"", b""
        return unpack_graph(row[0]), unpack_graph(row[1])

    def count_records(self, source: str, status: str) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM records WHERE source = ? AND status = ?", (source, status)
        ).fetchone()
        return int(row[0])

    def counts_by_status(self, source: str | None = None) -> dict[str, int]:
        if source:
            cur = self.conn.execute(
                "SELECT status, count(*) FROM records WHERE source = ? GROUP BY status", (source,)
            )
        else:
            cur = self.conn.execute("SELECT status, count(*) FROM records GROUP BY status")
        return {str(s): int(n) for s, n in cur}

    def unseen_active(self, source: str, job_id: int) -> list[str]:
        """Active records of a source that the given job did not see (withdrawal candidates):
        neither written by it (seen_job) nor marked seen (the temp table)."""
        cur = self.conn.execute(
            "SELECT local_id FROM records r WHERE source = ? AND status = 'active'"
            " AND (seen_job IS NULL OR seen_job != ?)"
            " AND NOT EXISTS (SELECT 1 FROM temp.seen s WHERE s.job_id = ? AND s.source = r.source"
            " AND s.local_id = r.local_id) ORDER BY local_id",
            (source, job_id, job_id),
        )
        return [str(r[0]) for r in cur]

    def forget_seen(self, job_id: int) -> None:
        self.conn.execute("DELETE FROM temp.seen WHERE job_id = ?", (job_id,))

    def mark_seen(self, source: str, local_ids: Iterable[str], job_id: int) -> None:
        self.conn.executemany(
            "INSERT OR IGNORE INTO temp.seen (job_id, source, local_id) VALUES (?, ?, ?)",
            [(job_id, source, lid) for lid in local_ids],
        )

    def upsert(self, writes: Sequence[RecordWrite], generation: int) -> list[int]:
        """Write new states marked pending with the batch's ``generation`` (from
        :meth:`next_generation`, never handed out twice); return the record ids. Call inside
        begin().

        A batch at a time: the ids of the records already held are read in one query and a
        new record gets the id SQLite would give it (the highest so far plus one: the
        transaction holds the write lock), so that the rows go in by ``executemany``; the
        marks go to the ``journal`` table, not to the rows, so that clearing them does not
        rewrite each row with its graph blobs."""
        held = self._record_ids(writes)
        next_id = self._max_record_id() + 1
        inserts: list[tuple[Any, ...]] = []
        updates: list[tuple[Any, ...]] = []
        ids: list[int] = []
        for w in writes:
            state = (
                w.record_iri,
                w.dataset_iri,
                w.status,
                w.content_hash,
                w.modified,
                w.source_datestamp,
                w.job_id,
                w.job_id,
                w.format,
                w.payload_sha,
                w.url,
                w.themes,
                w.packed_ntriples or pack_graph(w.ntriples) or None,
                w.packed_catalog or pack_graph(w.catalog_ntriples) or None,
                pack_findings(w.findings),
                int(w.flagged),
            )
            key = (w.source, w.local_id)
            rid = held.get(key)
            existed = rid is not None
            if rid is None:
                rid = held[key] = next_id
                next_id += 1
                inserts.append((rid, w.source, w.local_id, w.first_seen, *state))
            else:
                updates.append((*state, rid))
            ids.append(rid)
            self.sets.put(rid, w.source, w.status, w.themes, w.modified, new=not existed)
        self.conn.executemany(
            "INSERT INTO records (id, source, local_id, first_seen, record_iri, dataset_iri,"
            " status, content_hash, modified, source_datestamp, job_id, seen_job, format,"
            " payload_sha, url, themes, ntriples, catalog_ntriples, findings, flagged, pending)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,0)",
            inserts,
        )
        self.conn.executemany(
            "UPDATE records SET record_iri = ?, dataset_iri = ?, status = ?, content_hash = ?,"
            " modified = ?, source_datestamp = ?, job_id = ?, seen_job = ?, format = ?,"
            " payload_sha = ?, url = ?, themes = ?, ntriples = ?, catalog_ntriples = ?,"
            " findings = ?, flagged = ?, pending = 0 WHERE id = ?",
            updates,
        )
        self.conn.executemany(
            "INSERT INTO journal (record_id, generation) VALUES (?, ?)"
            " ON CONFLICT (record_id) DO UPDATE SET generation = excluded.generation",
            [(rid, generation) for rid in ids],
        )
        self.sets.flush_rows()
        return ids

    def _record_ids(self, writes: Sequence[RecordWrite]) -> dict[tuple[str, str], int]:
        """(source, local_id) -> id of the records of ``writes`` the database holds."""
        by_source: dict[str, list[str]] = {}
        for w in writes:
            by_source.setdefault(w.source, []).append(w.local_id)
        out: dict[tuple[str, str], int] = {}
        query = "SELECT local_id, id FROM records WHERE local_id IN ({marks}) AND source = ?"
        for source, local_ids in by_source.items():
            rows = rows_in_chunks(self.conn, local_ids, query, source)
            out.update(((source, str(lid)), int(rid)) for lid, rid in rows)
        return out

    def last_modified(self) -> str | None:
        """The latest ``modified`` of any record (the index ``records_modified`` answers)."""
        row = self.conn.execute("SELECT max(modified) FROM records").fetchone()
        return str(row[0]) if row and row[0] is not None else None

    def _max_record_id(self) -> int:
        row = self.conn.execute("SELECT max(id) FROM records").fetchone()
        return int(row[0] or 0)

    def pending_rows(self, after: int = 0, limit: int = 500) -> list[RecordRow]:
        """Rows whose write the graph store may not hold yet, in id order after ``after``,
        with ``pending`` the generation of the write (the ``journal`` table's mark)."""
        cols = ", ".join(f"r.{c.strip()}" for c in RECORD_COLUMNS.split(",")[:-1])
        cur = self.conn.execute(
            f"SELECT {cols}, j.generation FROM journal j JOIN records r ON r.id = j.record_id"
            " WHERE j.record_id > ? ORDER BY j.record_id LIMIT ?",
            (after, limit),
        )
        return [RecordRow.from_row(r) for r in cur]

    def clear_pending(self, generation: int, ids: Sequence[int]) -> None:
        clear_pending(self.conn, generation, ids)

    def clear_pending_rows(self, rows: Sequence[RecordRow]) -> None:
        """Clear the marks of rows as read (each only if no later write marked it since)."""
        marks = [(r.id, r.pending) for r in rows]
        self.conn.executemany("DELETE FROM journal WHERE record_id = ? AND generation = ?", marks)

    # -- payloads ---------------------------------------------------------------------------
    def put_payload(
        self, data: bytes, media_type: str, *, sha: str = "", packed: bytes = b""
    ) -> str:
        """Keep a payload (content-addressed); ``sha``/``packed`` may come precomputed."""
        sha = sha or hashlib.sha256(data).hexdigest()
        self.conn.execute(
            "INSERT OR IGNORE INTO payloads (sha256, media_type, size, data) VALUES (?,?,?,?)",
            (sha, media_type, len(data), packed or pack(data)),
        )
        return sha

    def payload(self, sha: str) -> tuple[str, bytes] | None:
        row = self.conn.execute(
            "SELECT media_type, data FROM payloads WHERE sha256 = ?", (sha,)
        ).fetchone()
        return (str(row[0]), unpack(row[1])) if row else None

    # -- meta -------------------------------------------------------------------------------
    def generation(self) -> int:
        """How many batches of graph changes were committed (see ``snapshots.py``)."""
        return read_generation(self.conn)

    def next_generation(self) -> int:
        """Count one more batch of graph changes; call inside the batch's transaction."""
        generation = self.generation() + 1
        self.set_meta(GENERATION, str(generation))
        return generation

    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )


def read_datestamps(
    conn: sqlite3.Connection, source: str, local_ids: Iterable[str]
) -> dict[str, tuple[str | None, str]]:
    """local_id -> (source datestamp, status), through any connection (the covering index
    ``records_stamps`` answers it without reading the rows)."""
    ids = list(dict.fromkeys(local_ids))
    out: dict[str, tuple[str | None, str]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        cur = conn.execute(
            "SELECT local_id, source_datestamp, status FROM records"
            f" WHERE source = ? AND local_id IN ({marks})",
            (source, *chunk),
        )
        for lid, stamp, status in cur:
            out[lid] = (stamp, status)
    return out


def read_generation(conn: sqlite3.Connection) -> int:
    """The generation of the committed state ``conn`` sees (0 before the first write)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (GENERATION,)).fetchone()
    return int(row[0]) if row else 0


def clear_pending(conn: sqlite3.Connection, generation: int, ids: Sequence[int]) -> None:
    """The graph store holds the write of ``generation`` to these records: clear their marks,
    except where a later write has marked a record again (its own applier, or recovery at
    the next open, clears it)."""
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        conn.execute(
            f"DELETE FROM journal WHERE record_id IN ({marks}) AND generation = ?",
            (*chunk, generation),
        )


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
