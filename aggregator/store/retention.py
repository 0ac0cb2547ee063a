"""Retention: what the state database keeps of the past, and the pruning of the rest.

Kept, whatever their age: every record's current state and its last ``versions`` payloads
(``record_payloads``, migration 3), every open rejection with its payload and its job, the
latest job of each source, every job a record or a checkpoint names. Pruned: older payloads
of a record, and jobs that ended more than ``job_days`` ago, with their errors and their
closed rejections; in the scheduler's book, the runs of those days (but each source's last)
and the "harvest now" requests taken then. A payload goes when nothing refers to it any more
(a record's kept versions, a rejection). Payloads replaced before the store kept histories
(version 3) are referred to by nothing: the first prune frees them.

:func:`prune` first plans, reading only (the plan is temp tables of its own connection; a
dry run stops there), then deletes in batches of ``batch`` rows, each its own short
transaction, so the writer's jobs and the readers go on meanwhile, children before parents
(a job's errors and rejections, then the job; a version's history row, then payloads nobody
refers to, checked again in the deleting transaction). A crash between batches leaves a
consistent store; the next prune plans again and finishes. Jobs only ever refer to the job
that wrote them (a running one), so a job planned for pruning cannot gain references.

Space: a store made with migrations (``auto_vacuum = INCREMENTAL``) gives freed pages back to
the file system (``PRAGMA incremental_vacuum``, in steps); an older store keeps them in its
file, where later writes reuse them (``VACUUM`` offline would shrink it).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aggregator.config import RetentionSettings
from aggregator.core.errors import StoreVersionError
from aggregator.store.migrations import LATEST, schema_version

AUTO_VACUUM = {0: "none", 1: "full", 2: "incremental"}
_VACUUM_STEP = 2048  # pages given back per transaction (8 MB of 4 KB pages)


@dataclass(slots=True)
class PruneReport:
    """What a prune removed (or, in a dry run, would remove), and the file's pages."""

    dry_run: bool
    cutoff: str  # jobs that ended before this went
    versions: int
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows
    payload_bytes: int = 0  # stored (compressed) bytes of the payloads removed
    page_size: int = 4096
    pages_before: int = 0
    pages_after: int = 0
    free_before: int = 0  # pages on the free list
    free_after: int = 0
    auto_vacuum: str = "none"
    batches: int = 0
    stopped: bool = False  # asked to stop before the end: the next prune goes on

    @property
    def freed_bytes(self) -> int:
        """Bytes of pages the prune emptied: given back, or free in the file for reuse."""
        freed = (self.pages_before - self.pages_after) + (self.free_after - self.free_before)
        return max(0, freed) * self.page_size

    @property
    def returned_bytes(self) -> int:
        """Bytes by which the file shrank (incremental auto-vacuum)."""
        return max(0, self.pages_before - self.pages_after) * self.page_size

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "cutoff": self.cutoff,
            "versions": self.versions,
            "rows": dict(self.rows),
            "payload_bytes": self.payload_bytes,
            "freed_bytes": self.freed_bytes,
            "returned_bytes": self.returned_bytes,
            "page_size": self.page_size,
            "pages": [self.pages_before, self.pages_after],
            "free_pages": [self.free_before, self.free_after],
            "auto_vacuum": self.auto_vacuum,
            "batches": self.batches,
            "stopped": self.stopped,
        }

    def lines(self) -> list[str]:
        verb = "would remove" if self.dry_run else "removed"
        out = [
            f"retention: the last {self.versions} version(s) of each record; jobs that ended"
            f" before {self.cutoff} go"
        ]
        for table, n in self.rows.items():
            out.append(f"  {table}: {verb} {n} row(s)")
        out.append(f"  payloads: {_size(self.payload_bytes)} stored")
        if self.stopped:
            out.append("  (stopped before the end: the next prune goes on)")
        if self.dry_run:
            out.append("  (dry run: nothing was removed)")
        elif self.auto_vacuum == "incremental":
            out.append(
                f"  space: {_size(self.freed_bytes)} freed, {_size(self.returned_bytes)} given"
                " back to the file system"
            )
        else:
            out.append(
                f"  space: {_size(self.freed_bytes)} freed inside state.sqlite3, reused by later"
                " writes (the file keeps its size: its auto_vacuum is off; VACUUM it offline to"
                " shrink it)"
            )
        return out


def _size(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KB", "MB"):
        if size < 1024:
            return f"{n} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def job_stamp(t: datetime) -> str:
    """A time as the jobs table writes it (``store.journal.now_iso``)."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def prune(
    state_path: Path,
    policy: RetentionSettings,
    now: datetime,
    *,
    dry_run: bool = False,
    book_path: Path | None = None,
    stop: threading.Event | None = None,
) -> PruneReport:
    """Prune the state database at ``state_path`` (and the scheduler's book, if given) as of
    ``now``. Call as the store's writer (:class:`~aggregator.store.records.RecordStore` open,
    so its schema is current), except for a dry run, which only reads."""
    cutoff = now - timedelta(days=policy.job_days)
    report = PruneReport(dry_run, job_stamp(cutoff), policy.versions)
    target = f"file:{state_path}?mode=ro" if dry_run else str(state_path)
    conn = sqlite3.connect(target, uri=dry_run, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 60000")
        version = schema_version(conn)
        if version != LATEST:
            raise StoreVersionError(
                f"{state_path} has schema version {version}, not {LATEST}: open it as the"
                " writer first (`aggregator store upgrade`)"
            )
        report.page_size = _pragma(conn, "page_size")
        report.auto_vacuum = AUTO_VACUUM.get(_pragma(conn, "auto_vacuum"), "none")
        report.pages_before, report.free_before = _pages(conn)
        _plan(conn, policy, report.cutoff)
        report.rows = _planned(conn)
        report.payload_bytes = _planned_bytes(conn)
        if not dry_run:
            _execute(conn, policy.batch, report, stop)
        report.pages_after, report.free_after = _pages(conn)
    finally:
        conn.close()
    if book_path is not None and book_path.exists() and not report.stopped:
        # the book's own form of a time: UTC, to the second (aggregator.schedule.book.iso)
        stamp = cutoff.astimezone(UTC).isoformat(timespec="seconds")
        book = prune_book(book_path, stamp, policy.batch, dry_run)
        report.rows.update(book)
    return report


def _pragma(conn: sqlite3.Connection, name: str) -> int:
    return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


def _pages(conn: sqlite3.Connection) -> tuple[int, int]:
    return _pragma(conn, "page_count"), _pragma(conn, "freelist_count")


# -- the plan: temp tables of this connection, filled by reading ----------------------------
_PLAN = (
    "CREATE TEMP TABLE prune_jobs (id INTEGER PRIMARY KEY)",
    "CREATE TEMP TABLE prune_rejections (id INTEGER PRIMARY KEY)",
    "CREATE TEMP TABLE prune_versions (record_id INTEGER NOT NULL, seq INTEGER NOT NULL,"
    " PRIMARY KEY (record_id, seq)) WITHOUT ROWID",
    "CREATE TEMP TABLE prune_payloads (sha TEXT PRIMARY KEY) WITHOUT ROWID",
    # finished jobs that ended before the cutoff, that nothing still refers to
    "INSERT INTO temp.prune_jobs SELECT id FROM jobs WHERE status != 'running'"
    " AND coalesce(ended, heartbeat) < :cutoff"
    " AND id NOT IN (SELECT max(id) FROM jobs GROUP BY source)"
    " AND id NOT IN (SELECT job_id FROM checkpoints)"
    " AND id NOT IN (SELECT job_id FROM rejections WHERE superseded_by IS NULL)"
    " AND id NOT IN (SELECT job_id FROM records WHERE job_id IS NOT NULL)",
    "INSERT INTO temp.prune_rejections SELECT id FROM rejections"
    " WHERE superseded_by IS NOT NULL AND job_id IN (SELECT id FROM temp.prune_jobs)",
    # each record's history rows but its newest N
    "INSERT INTO temp.prune_versions SELECT record_id, seq FROM (SELECT record_id, seq,"
    " row_number() OVER (PARTITION BY record_id ORDER BY seq DESC) AS k FROM record_payloads)"
    " WHERE k > :versions",
    # payloads that no kept history row and no kept rejection refers to (a record's current
    # payload is its newest history row, always kept)
    "INSERT INTO temp.prune_payloads SELECT p.sha256 FROM payloads p"
    " WHERE NOT EXISTS (SELECT 1 FROM record_payloads h WHERE h.payload_sha = p.sha256"
    " AND NOT EXISTS (SELECT 1 FROM temp.prune_versions v"
    " WHERE v.record_id = h.record_id AND v.seq = h.seq))"
    " AND NOT EXISTS (SELECT 1 FROM rejections r WHERE r.payload_sha = p.sha256"
    " AND r.id NOT IN (SELECT id FROM temp.prune_rejections))",
)


def _plan(conn: sqlite3.Connection, policy: RetentionSettings, cutoff: str) -> None:
    args = {"cutoff": cutoff, "versions": policy.versions}
    for statement in _PLAN:
        conn.execute(statement, {k: v for k, v in args.items() if f":{k}" in statement})


def _planned(conn: sqlite3.Connection) -> dict[str, int]:
    def one(sql: str) -> int:
        return int(conn.execute(sql).fetchone()[0])

    return {
        "record_payloads": one("SELECT count(*) FROM temp.prune_versions"),
        "payloads": one("SELECT count(*) FROM temp.prune_payloads"),
        "jobs": one("SELECT count(*) FROM temp.prune_jobs"),
        "job_errors": one(
            "SELECT count(*) FROM job_errors WHERE job_id IN (SELECT id FROM temp.prune_jobs)"
        ),
        "rejections": one("SELECT count(*) FROM temp.prune_rejections"),
    }


def _planned_bytes(conn: sqlite3.Connection) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(length(data)), 0) FROM payloads"
        " WHERE sha256 IN (SELECT sha FROM temp.prune_payloads)"
    ).fetchone()
    return int(row[0])


# -- the deletes: bounded batches, each its own transaction ----------------------------------
def _execute(
    conn: sqlite3.Connection, batch: int, report: PruneReport, stop: threading.Event | None
) -> None:
    done = dict.fromkeys(report.rows, 0)
    try:
        _delete(conn, batch, report, stop, done)
    except _Stopped:
        report.stopped = True
    report.rows = done


def _delete(
    conn: sqlite3.Connection,
    batch: int,
    report: PruneReport,
    stop: threading.Event | None,
    done: dict[str, int],
) -> None:
    report.payload_bytes = 0
    for chunk in _chunks(conn, "prune_versions", "record_id, seq", batch):
        with _transaction(conn, report, stop):
            conn.executemany("DELETE FROM record_payloads WHERE record_id = ? AND seq = ?", chunk)
        done["record_payloads"] += len(chunk)
    for chunk in _chunks(conn, "prune_jobs", "id", batch):
        ids = [int(r[0]) for r in chunk]
        marks = ",".join("?" * len(ids))
        done["job_errors"] += _drain(
            conn,
            report,
            stop,
            "DELETE FROM job_errors WHERE rowid IN (SELECT rowid FROM job_errors"
            f" WHERE job_id IN ({marks}) LIMIT {batch})",
            ids,
        )
        done["rejections"] += _drain(
            conn,
            report,
            stop,
            "DELETE FROM rejections WHERE id IN (SELECT id FROM rejections"
            f" WHERE job_id IN ({marks}) AND superseded_by IS NOT NULL LIMIT {batch})",
            ids,
        )
        with _transaction(conn, report, stop):  # checked again: still nothing refers to them
            cur = conn.execute(
                f"DELETE FROM jobs WHERE id IN ({marks})"
                " AND id NOT IN (SELECT max(id) FROM jobs GROUP BY source)"
                " AND id NOT IN (SELECT job_id FROM checkpoints)"
                " AND id NOT IN (SELECT job_id FROM rejections WHERE superseded_by IS NULL)",
                ids,
            )
            done["jobs"] += max(cur.rowcount, 0)
    for chunk in _chunks(conn, "prune_payloads", "sha", batch):
        shas = [str(r[0]) for r in chunk]
        with _transaction(conn, report, stop):  # checked again: a job may have taken one since
            cur = conn.execute(
                f"DELETE FROM payloads WHERE sha256 IN ({','.join('?' * len(shas))})"
                " AND NOT EXISTS (SELECT 1 FROM record_payloads h"
                " WHERE h.payload_sha = payloads.sha256)"
                " AND NOT EXISTS (SELECT 1 FROM rejections r WHERE r.payload_sha = payloads.sha256)"
                " RETURNING length(data)",
                shas,
            )
            gone = cur.fetchall()
        done["payloads"] += len(gone)
        report.payload_bytes += sum(int(r[0]) for r in gone)
    if report.auto_vacuum == "incremental":
        while free := _pragma(conn, "freelist_count"):
            with _transaction(conn, report, stop):
                give_back(conn, min(free, _VACUUM_STEP))


def give_back(conn: sqlite3.Connection, pages: int) -> int:
    """Give ``pages`` free pages back to the file system, inside the caller's transaction;
    returns how many went. ``PRAGMA incremental_vacuum(N)`` frees one page per step of the
    statement, and Python's ``execute`` steps a statement that returns no row once, whatever
    N (``executescript`` would step it to the end, but commits the transaction first)."""
    before = _pragma(conn, "freelist_count")
    for _ in range(pages):
        conn.execute("PRAGMA incremental_vacuum(1)")
    return before - _pragma(conn, "freelist_count")


class _Stopped(Exception):
    """The prune was asked to stop (the scheduler's shutdown): between two batches."""


class _transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (rolled back on an error): one batch."""

    def __init__(
        self, conn: sqlite3.Connection, report: PruneReport, stop: threading.Event | None
    ) -> None:
        self.conn = conn
        self.report = report
        self.stop = stop

    def __enter__(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise _Stopped
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *_: object) -> None:
        if kind is None:
            self.conn.execute("COMMIT")
            self.report.batches += 1
        elif self.conn.in_transaction:
            self.conn.execute("ROLLBACK")


def _drain(
    conn: sqlite3.Connection,
    report: PruneReport,
    stop: threading.Event | None,
    sql: str,
    args: Sequence[Any],
) -> int:
    """Run a bounded ``DELETE`` in transactions of its own until it deletes nothing."""
    total = 0
    while True:
        with _transaction(conn, report, stop):
            n = max(conn.execute(sql, args).rowcount, 0)
        total += n
        if n == 0:
            return total


def _chunks(conn: sqlite3.Connection, table: str, keys: str, size: int) -> Iterator[list[Any]]:
    """The keys of a plan table, ``size`` at a time, in key order (keyset paging: memory
    stays flat however large the plan; no statement stays open across the batches)."""
    last: tuple[Any, ...] | None = None
    marks = ",".join("?" * len(keys.split(",")))
    while True:
        where = f"WHERE ({keys}) > ({marks})" if last is not None else ""
        rows = conn.execute(
            f"SELECT {keys} FROM temp.{table} {where} ORDER BY {keys} LIMIT {int(size)}",
            last or (),
        ).fetchall()
        if not rows:
            return
        yield rows
        last = tuple(rows[-1])


def prune_book(book_path: Path, cutoff: str, batch: int, dry_run: bool) -> dict[str, int]:
    """The scheduler's book: runs that ended before ``cutoff`` (each source's last run
    stays) and requests taken before it."""
    runs_sql = (
        "SELECT id FROM runs WHERE status != 'running' AND ended < ?"
        " AND id NOT IN (SELECT max(id) FROM runs GROUP BY source)"
    )
    requests_sql = "SELECT id FROM requests WHERE taken IS NOT NULL AND taken < ?"
    target = f"file:{book_path}?mode=ro" if dry_run else str(book_path)
    conn = sqlite3.connect(target, uri=dry_run, isolation_level=None)
    out: dict[str, int] = {}
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        for table, sql in (("runs", runs_sql), ("requests", requests_sql)):
            ids = [int(r[0]) for r in conn.execute(sql, (cutoff,))]
            if not dry_run:
                for start in range(0, len(ids), batch):
                    chunk = ids[start : start + batch]
                    conn.execute(  # one statement: its own transaction
                        f"DELETE FROM {table} WHERE id IN ({','.join('?' * len(chunk))})", chunk
                    )
            out[f"schedule {table}"] = len(ids)
    finally:
        conn.close()
    return out
