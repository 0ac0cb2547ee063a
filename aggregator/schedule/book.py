"""The scheduler's own SQLite file, ``<store>/schedule.sqlite3``.

It is apart from the state database because it is written by processes that do not write the
store: the CLI and the dashboard queue "harvest now" requests in it while ``serve`` runs, and
the scheduler keeps each source's timing and circuit-breaker state in it whether or not it
holds the store at that moment. WAL mode: the readers (``source list``, the dashboard) never
wait for the scheduler.

Tables:

- ``sources``: per source, the next due time, the pending retry, consecutive failed jobs,
  the circuit breaker (``closed``, ``open`` until ``breaker_until``, ``half-open`` while its
  probe runs), the last job and since when the source has been failing;
- ``runs``: every job the scheduler started, with why (scheduled, retry, probe, manual), the
  process that ran it and how it ended (``running`` rows of a dead process are failed and
  rescheduled at the next start); ``cancel_requested``: someone asked the scheduler to
  cancel it (``aggregator harvest`` interrupted while it follows a job it handed over);
- ``requests``: "harvest now" (optionally full, forced, allowing a mass withdrawal), taken
  by the scheduler in order; ``run_id`` names the run that took it (none: the scheduler
  ignored it, or its requester withdrew it before it started), so that whoever asked can
  follow the job to its end;
- ``maintenance``: when the scheduler last ran each upkeep task (``prune``: the retention
  policy, :mod:`aggregator.store.retention`) and what came of it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BOOK_FILE = "schedule.sqlite3"

SCHEMA = """
CREATE TABLE IF NOT EXISTS sources (
    source TEXT PRIMARY KEY,
    due TEXT,
    retry_at TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    breaker TEXT NOT NULL DEFAULT 'closed',
    breaker_until TEXT,
    last_full TEXT,
    last_status TEXT,
    last_job INTEGER,
    last_end TEXT,
    last_error TEXT,
    failing_since TEXT
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    reason TEXT NOT NULL,
    full INTEGER NOT NULL,
    started TEXT NOT NULL,
    ended TEXT,
    status TEXT NOT NULL,
    job_id INTEGER,
    pid INTEGER NOT NULL,
    message TEXT NOT NULL DEFAULT '',
    cancel_requested TEXT
);
CREATE INDEX IF NOT EXISTS runs_source ON runs (source, id);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    full INTEGER NOT NULL,
    requested TEXT NOT NULL,
    by TEXT NOT NULL DEFAULT '',
    taken TEXT,
    force INTEGER NOT NULL DEFAULT 0,
    allow_mass_withdrawal INTEGER NOT NULL DEFAULT 0,
    run_id INTEGER
);
CREATE TABLE IF NOT EXISTS maintenance (
    task TEXT PRIMARY KEY,
    last_run TEXT NOT NULL,
    outcome TEXT NOT NULL
);
"""

# columns added since the first release of this file: (table, column, declaration)
ADDED_COLUMNS = (
    ("runs", "cancel_requested", "TEXT"),
    ("requests", "force", "INTEGER NOT NULL DEFAULT 0"),
    ("requests", "allow_mass_withdrawal", "INTEGER NOT NULL DEFAULT 0"),
    ("requests", "run_id", "INTEGER"),
)


def iso(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(UTC).isoformat(timespec="seconds")


def parse_iso(text: str | None) -> datetime | None:
    return None if not text else datetime.fromisoformat(text).astimezone(UTC)


@dataclass(slots=True)
class SourceState:
    source: str
    due: datetime | None = None
    retry_at: datetime | None = None
    attempt: int = 0
    failures: int = 0
    breaker: str = "closed"
    breaker_until: datetime | None = None
    last_full: datetime | None = None
    last_status: str | None = None
    last_job: int | None = None
    last_end: datetime | None = None
    last_error: str | None = None
    failing_since: datetime | None = None


_TIMES = {"due", "retry_at", "breaker_until", "last_full", "last_end", "failing_since"}
_COLUMNS = [f.name for f in fields(SourceState)]


@dataclass(frozen=True, slots=True)
class Request:
    id: int
    source: str
    full: bool
    requested: datetime
    by: str
    force: bool = False
    allow_mass_withdrawal: bool = False


@dataclass(frozen=True, slots=True)
class Run:
    id: int
    source: str
    reason: str
    full: bool
    started: datetime
    ended: datetime | None
    status: str
    job_id: int | None
    pid: int
    message: str


class Book:
    def __init__(self, store_path: Path) -> None:
        store_path.mkdir(parents=True, exist_ok=True)
        self.path = store_path / BOOK_FILE
        self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA busy_timeout = 10000")
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.executescript(SCHEMA)
        self._add_columns()

    def _add_columns(self) -> None:
        """A book written by an older version lacks the newer columns: add them."""
        for table, column, declaration in ADDED_COLUMNS:
            have = {row[1] for row in self.conn.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                try:
                    self.conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
                except sqlite3.OperationalError as err:  # another process added it meanwhile
                    if "duplicate column" not in str(err):
                        raise

    def close(self) -> None:
        self.conn.close()

    # -- per-source state -------------------------------------------------------------------
    def state(self, source: str) -> SourceState | None:
        row = self.conn.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM sources WHERE source = ?", (source,)
        ).fetchone()
        return None if row is None else _state(row)

    def states(self) -> dict[str, SourceState]:
        rows = self.conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM sources").fetchall()
        return {row[0]: _state(row) for row in rows}

    def save(self, *states: SourceState) -> None:
        """Write these states, in one transaction."""
        rows = [
            [iso(getattr(st, c)) if c in _TIMES else getattr(st, c) for c in _COLUMNS]
            for st in states
        ]
        marks = ", ".join("?" * len(_COLUMNS))
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany(
                f"INSERT OR REPLACE INTO sources ({', '.join(_COLUMNS)}) VALUES ({marks})", rows
            )
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    # -- upkeep tasks -------------------------------------------------------------------------
    def last_maintenance(self, task: str) -> tuple[datetime, str] | None:
        """When ``task`` last ran (its start) and what came of it."""
        row = self.conn.execute(
            "SELECT last_run, outcome FROM maintenance WHERE task = ?", (task,)
        ).fetchone()
        when = None if row is None else parse_iso(row[0])
        return None if when is None else (when, str(row[1]))

    def note_maintenance(self, task: str, when: datetime, outcome: str) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO maintenance (task, last_run, outcome) VALUES (?, ?, ?)",
            (task, iso(when), outcome),
        )

    # -- runs -------------------------------------------------------------------------------
    def start_run(
        self,
        source: str,
        reason: str,
        full: bool,
        now: datetime,
        requests: Sequence[int] = (),
    ) -> int:
        """Record a run starting now; it takes the pending ``requests`` (ids) in the same
        transaction, so that whoever follows a request sees it taken and by which run."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            cur = self.conn.execute(
                "INSERT INTO runs (source, reason, full, started, status, pid)"
                " VALUES (?, ?, ?, ?, 'running', ?) RETURNING id",
                (source, reason, int(full), iso(now), os.getpid()),
            )
            run_id = int(cur.fetchone()[0])
            self.conn.executemany(
                "UPDATE requests SET taken = ?, run_id = ? WHERE id = ? AND taken IS NULL",
                [(iso(now), run_id, rid) for rid in requests],
            )
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return run_id

    def run(self, run_id: int) -> Run | None:
        found = self._runs("WHERE id = ?", (run_id,))
        return found[0] if found else None

    def request_cancel(self, run_id: int, now: datetime) -> bool:
        """Ask the scheduler to cancel a running run (it does within a second); False when
        it is not running any more."""
        cur = self.conn.execute(
            "UPDATE runs SET cancel_requested = ? WHERE id = ? AND status = 'running'",
            (iso(now), run_id),
        )
        return cur.rowcount == 1

    def cancels_requested(self) -> list[int]:
        """The running runs someone asked to cancel."""
        rows = self.conn.execute(
            "SELECT id FROM runs WHERE status = 'running' AND cancel_requested IS NOT NULL"
        ).fetchall()
        return [int(r[0]) for r in rows]

    def end_run(
        self, run_id: int, status: str, job_id: int | None, message: str, now: datetime
    ) -> None:
        self.conn.execute(
            "UPDATE runs SET status = ?, job_id = ?, message = ?, ended = ? WHERE id = ?",
            (status, job_id, message, iso(now), run_id),
        )

    def running(self) -> list[Run]:
        return self._runs("WHERE status = 'running' ORDER BY id")

    def runs(self, source: str | None = None, limit: int = 20) -> list[Run]:
        if source is None:
            return self._runs("ORDER BY id DESC LIMIT ?", (limit,))
        return self._runs("WHERE source = ? ORDER BY id DESC LIMIT ?", (source, limit))

    def _runs(self, where: str, params: tuple[Any, ...] = ()) -> list[Run]:
        rows = self.conn.execute(
            "SELECT id, source, reason, full, started, ended, status, job_id, pid, message"
            f" FROM runs {where}",
            params,
        ).fetchall()
        return [
            Run(r[0], r[1], r[2], bool(r[3]), _req(parse_iso(r[4])), parse_iso(r[5]), *r[6:])
            for r in rows
        ]

    # -- requests ---------------------------------------------------------------------------
    def request(
        self,
        source: str,
        full: bool,
        by: str,
        now: datetime,
        *,
        force: bool = False,
        allow_mass_withdrawal: bool = False,
    ) -> int:
        cur = self.conn.execute(
            "INSERT INTO requests (source, full, requested, by, force, allow_mass_withdrawal)"
            " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
            (source, int(full), iso(now), by, int(force), int(allow_mass_withdrawal)),
        )
        return int(cur.fetchone()[0])

    def pending_requests(self) -> list[Request]:
        rows = self.conn.execute(
            "SELECT id, source, full, requested, by, force, allow_mass_withdrawal"
            " FROM requests WHERE taken IS NULL ORDER BY id"
        ).fetchall()
        return [
            Request(r[0], r[1], bool(r[2]), _req(parse_iso(r[3])), r[4], bool(r[5]), bool(r[6]))
            for r in rows
        ]

    def request_taken(self, request_id: int) -> tuple[bool, int | None]:
        """Whether the request was taken, and by which run (None: not by a run)."""
        row = self.conn.execute(
            "SELECT taken, run_id FROM requests WHERE id = ?", (request_id,)
        ).fetchone()
        if row is None:
            return True, None
        return row[0] is not None, row[1]

    def withdraw_request(self, request_id: int, now: datetime) -> bool:
        """Withdraw a request no run has taken yet; False when one has (cancel that run)."""
        cur = self.conn.execute(
            "UPDATE requests SET taken = ? WHERE id = ? AND taken IS NULL", (iso(now), request_id)
        )
        return cur.rowcount == 1

    def take_requests(self, source: str, now: datetime) -> list[Request]:
        """Take every pending request of ``source`` (several clicks make one job)."""
        pending = [r for r in self.pending_requests() if r.source == source]
        if pending:
            marks = ",".join("?" * len(pending))
            self.conn.execute(
                f"UPDATE requests SET taken = ? WHERE id IN ({marks})",
                (iso(now), *(r.id for r in pending)),
            )
        return pending


def _req(t: datetime | None) -> datetime:
    assert t is not None  # a NOT NULL column
    return t


def _state(row: tuple[Any, ...]) -> SourceState:
    values: dict[str, Any] = {
        c: parse_iso(v) if c in _TIMES else v for c, v in zip(_COLUMNS, row, strict=True)
    }
    return SourceState(**values)
