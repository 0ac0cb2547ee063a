"""Job records: one row per harvest run, with counters, listing facts and every record error.

Counters and errors are written in the same SQLite transaction as the records they count, so
a job's figures always agree with the store, even after a crash.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aggregator.core.errors import NotFoundError
from aggregator.core.models import JobStatus, Outcome, RecordError
from aggregator.store.state import StateDB, dumps

COUNTERS = tuple(o.value for o in Outcome)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class JobRow:
    id: int
    source: str
    started: str
    ended: str | None
    heartbeat: str
    status: str
    full: bool
    counters: dict[str, int]
    listing: dict[str, Any]
    message: str


@dataclass(slots=True)
class JobLog:
    """The running job's counters and the errors not yet flushed to SQLite."""

    id: int
    source: str
    counters: Counter[str] = field(default_factory=Counter)
    errors: list[RecordError] = field(default_factory=list)
    _seq: int = 0

    def count(self, outcome: Outcome, n: int = 1) -> None:
        self.counters[outcome.value] += n

    def error(self, err: RecordError) -> None:
        self.errors.append(err)

    def flush(self, db: StateDB) -> None:
        """Write pending errors and the counters. Call inside the batch's transaction."""
        rows = []
        for err in self.errors:
            self._seq += 1
            rows.append(
                (
                    self.id,
                    self._seq,
                    err.local_id,
                    err.where,  # a chain step's label (e.g. "gemini"), else the stage
                    err.severity.value,
                    err.rule,
                    err.message,
                    err.location,
                )
            )
        if rows:
            db.conn.executemany("INSERT INTO job_errors VALUES (?,?,?,?,?,?,?,?)", rows)
        self.errors.clear()
        db.conn.execute(
            "UPDATE jobs SET counters = ?, heartbeat = ? WHERE id = ?",
            (dumps({k: self.counters.get(k, 0) for k in COUNTERS}), now_iso(), self.id),
        )


class Jobs:
    def __init__(self, db: StateDB) -> None:
        self.db = db

    def fail_stale(self) -> list[int]:
        """Jobs left 'running' by a process that died. Only the writer calls this, and one
        process writes the store at a time (the writer lock guarantees it; readers such as
        ``serve`` run no jobs), so any running job when the writer opens is stale."""
        cur = self.db.conn.execute("SELECT id FROM jobs WHERE status = 'running'")
        ids = [int(r[0]) for r in cur]
        for job_id in ids:
            self.db.conn.execute(
                "UPDATE jobs SET status = 'failed', ended = ?, message = ? WHERE id = ?",
                (now_iso(), "the process running this job died (detected at next start)", job_id),
            )
        return ids

    def start(self, source: str, full: bool) -> JobLog:
        ts = now_iso()
        # the INSERT ... RETURNING statement stays open until its row is read and the cursor
        # let go: both under the connection's lock, or another job's COMMIT meets it in
        # progress ("cannot commit transaction - SQL statements in progress")
        with self.db.serial:
            row = self.db.conn.execute(
                "INSERT INTO jobs (source, started, heartbeat, status, full, listing, message)"
                " VALUES (?,?,?,?,?,?,?) RETURNING id",
                (
                    source,
                    ts,
                    ts,
                    JobStatus.RUNNING.value,
                    int(full),
                    dumps({"pid": os.getpid()}),
                    "",
                ),
            ).fetchall()
        return JobLog(id=int(row[0][0]), source=source)

    def heartbeat(self, job_id: int) -> None:
        self.db.conn.execute("UPDATE jobs SET heartbeat = ? WHERE id = ?", (now_iso(), job_id))

    def finish(
        self, log: JobLog, status: JobStatus, listing: dict[str, Any], message: str
    ) -> JobRow:
        self.db.begin()
        try:
            log.flush(self.db)
            self.db.conn.execute(
                "UPDATE jobs SET status = ?, ended = ?, listing = ?, message = ? WHERE id = ?",
                (status.value, now_iso(), dumps(listing), message, log.id),
            )
            self.db.forget_seen(log.id)
            self.db.commit()
        except BaseException:
            self.db.rollback()
            raise
        return self.get(log.id)

    def _row(self, row: Any) -> JobRow:
        return JobRow(
            id=int(row[0]),
            source=str(row[1]),
            started=str(row[2]),
            ended=row[3],
            heartbeat=str(row[4]),
            status=str(row[5]),
            full=bool(row[6]),
            counters=json.loads(row[7]),
            listing=json.loads(row[8]),
            message=str(row[9]),
        )

    _COLS = "id, source, started, ended, heartbeat, status, full, counters, listing, message"

    def get(self, job_id: int) -> JobRow:
        row = self.db.conn.execute(
            f"SELECT {self._COLS} FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no job {job_id}")
        return self._row(row)

    def recent(self, source: str | None = None, limit: int = 50) -> list[JobRow]:
        if source:
            cur = self.db.conn.execute(
                f"SELECT {self._COLS} FROM jobs WHERE source = ? ORDER BY id DESC LIMIT ?",
                (source, limit),
            )
        else:
            cur = self.db.conn.execute(
                f"SELECT {self._COLS} FROM jobs ORDER BY id DESC LIMIT ?", (limit,)
            )
        return [self._row(r) for r in cur]

    def errors(self, job_id: int) -> list[dict[str, str | None]]:
        cur = self.db.conn.execute(
            "SELECT local_id, stage, severity, rule, message, location FROM job_errors"
            " WHERE job_id = ? ORDER BY seq",
            (job_id,),
        )
        keys = ("local_id", "stage", "severity", "rule", "message", "location")
        return [dict(zip(keys, r, strict=True)) for r in cur]

    # -- checkpoints ------------------------------------------------------------------------
    def checkpoint(self, source: str) -> str | None:
        row = self.db.conn.execute(
            "SELECT value FROM checkpoints WHERE source = ?", (source,)
        ).fetchone()
        return str(row[0]) if row else None

    def set_checkpoint(self, source: str, value: str, job_id: int) -> None:
        self.db.conn.execute(
            "INSERT INTO checkpoints (source, value, job_id, updated) VALUES (?,?,?,?)"
            " ON CONFLICT (source) DO UPDATE SET value = excluded.value,"
            " job_id = excluded.job_id, updated = excluded.updated",
            (source, value, job_id, now_iso()),
        )


class Heartbeat:
    """Beat a running job's heartbeat every ``interval`` seconds from a thread of its own
    (with its own SQLite connection), so a job waiting minutes on a slow source still shows
    it is alive."""

    def __init__(self, db_path: str, job_id: int, interval: float = 15.0) -> None:
        self.db_path = db_path
        self.job_id = job_id
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-heartbeat", daemon=True)

    def _run(self) -> None:
        conn = sqlite3.connect(self.db_path, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 10000")
        try:
            while not self._stop.wait(self.interval):
                try:
                    conn.execute(
                        "UPDATE jobs SET heartbeat = ? WHERE id = ?", (now_iso(), self.job_id)
                    )
                except sqlite3.Error:  # a busy database must not end the job
                    continue
        finally:
            conn.close()

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
