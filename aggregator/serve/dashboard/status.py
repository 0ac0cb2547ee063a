"""The state of every source in words, read from the state database (framework-neutral).

For each source: its configuration (or "no longer configured"), the last job with its error
text, a health sentence ("failing since ..."), the records by status, and the outcome counters
of its recent jobs (the trend, drawn as SVG bars by the template).
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup

from aggregator.config import SourceConfig

TREND_JOBS = 12  # jobs shown in a source's trend
TREND_KEYS = ("added", "updated", "unchanged", "withdrawn", "rejected")
_JOB_COLS = "id, source, started, ended, status, full, counters, listing, message"


def _parsed(stamp: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(stamp.strip())
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def when(stamp: str | None) -> str:
    """A stamp for people, in UTC to the minute: ``2026-11-26 08:05 UTC`` (a stamp without
    a zone is UTC, as every stamp we store is; a date alone stays a date; what is not an ISO
    8601 stamp stays as it is)."""
    if not stamp:
        return ""
    text = stamp.strip()
    if len(text) == 10:  # a date: no time to show, no zone to convert
        return text
    moment = _parsed(text)
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else text


def stamp_html(stamp: str | None) -> Markup:
    """:func:`when` in a ``<time>`` element carrying the full value (``datetime`` attribute,
    and ``title`` for a pointer's hover)."""
    if not stamp:
        return Markup("")
    shown = when(stamp)
    if _parsed(stamp.strip()) is None:
        return Markup("{}").format(shown)
    return Markup('<time datetime="{0}" title="{0}">{1}</time>').format(stamp.strip(), shown)


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    source: str
    started: str
    ended: str | None
    status: str
    full: bool
    counters: dict[str, int]
    listing: dict[str, Any]
    message: str

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Job:
        return cls(
            int(row[0]),
            str(row[1]),
            str(row[2]),
            row[3],
            str(row[4]),
            bool(row[5]),
            json.loads(row[6] or "{}"),
            json.loads(row[7] or "{}"),
            str(row[8] or ""),
        )

    @property
    def summary(self) -> str:
        """The counters in words, zeros left out."""
        parts = [f"{n} {k}" for k, n in self.counters.items() if n]
        return ", ".join(parts) if parts else "no records"

    @property
    def message_is_error(self) -> bool:
        """The message says what went wrong (a failed or incomplete job), rather than being a
        note on a job that succeeded ("incremental run: absent records are not withdrawn")."""
        return self.status in ("failed", "partial")

    @property
    def incremental(self) -> bool | None:
        """Whether the job listed only what changed since its checkpoint: the listing's own
        fact (the one source of truth, also the scheduler's), None while it is not known yet
        (a running job; a job that ended before its listing was recorded)."""
        value = self.listing.get("incremental")
        return value if isinstance(value, bool) else None

    @property
    def is_full(self) -> bool:
        """A full harvest: asked for, or listed in full (no checkpoint to start from)."""
        return self.full or self.incremental is False

    @property
    def kind(self) -> str:
        """What kind of harvest this was, in words."""
        if self.incremental:
            return "incremental harvest (only what changed since the last checkpoint)"
        if self.full:
            return "full re-harvest (asked for)"
        if self.incremental is False:
            return "full harvest (no checkpoint to start from, or the source lists everything)"
        return "harvest (whether incremental is known when its listing ends)"

    @property
    def listing_facts(self) -> list[tuple[str, Any]]:
        """The listing's facts worth showing, in order; ``incremental`` is shown as the kind."""
        return [
            (k, v)
            for k, v in self.listing.items()
            if k != "incremental" and v not in (None, "", [], {})
        ]


@dataclass(frozen=True, slots=True)
class TrendBar:
    job_id: int
    started: str
    values: tuple[tuple[str, int], ...]  # (outcome, count) in TREND_KEYS order

    @property
    def total(self) -> int:
        return sum(n for _, n in self.values)


@dataclass
class SourceStatus:
    name: str
    config: SourceConfig | None
    counts: dict[str, int] = field(default_factory=dict)
    jobs: list[Job] = field(default_factory=list)  # newest first
    open_rejections: int = 0
    flagged: int = 0  # active records stored with violations their source must fix

    @property
    def last_job(self) -> Job | None:
        return self.jobs[0] if self.jobs else None

    @property
    def paused(self) -> bool:
        return self.config is not None and not self.config.enabled

    @property
    def health(self) -> str:
        """One word for the badge: ok, failing, partial, running, paused, new, orphan."""
        if self.config is None:
            return "orphan"
        if self.paused:
            return "paused"
        last = self.last_job
        if last is None:
            return "new"
        if last.status == "succeeded":
            return "ok"
        return last.status if last.status in ("running", "partial") else "failing"

    @property
    def health_text(self) -> str:
        """What is wrong, and since when, in a sentence."""
        last = self.last_job
        if self.config is None:
            return "No longer configured; its records stay until it is purged."
        if last is None:
            return "Never harvested." + (" Paused." if self.paused else "")
        if last.status == "running":
            return f"Harvesting since {when(last.started)}."
        failed = []
        for job in self.jobs:
            if job.status in ("failed", "partial"):
                failed.append(job)
            else:
                break
        prefix = "Paused. " if self.paused else ""
        if not failed:
            return f"{prefix}Last harvest succeeded at {when(last.ended or last.started)}."
        since = when(failed[-1].started)
        runs = "run" if len(failed) == 1 else f"{len(failed)} runs in a row"
        more = "" if len(failed) < len(self.jobs) else " (no successful harvest on record)"
        return f"{prefix}Failing since {since}: last {runs} {failed[0].status}{more}."

    def trend(self) -> list[TrendBar]:
        """Outcome counters of the recent finished jobs, oldest first (left to right)."""
        bars = [
            TrendBar(j.id, j.started, tuple((k, int(j.counters.get(k, 0))) for k in TREND_KEYS))
            for j in self.jobs
            if j.status != "running"
        ]
        return list(reversed(bars))


def job(db: sqlite3.Connection, job_id: int) -> Job | None:
    row = db.execute(f"SELECT {_JOB_COLS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return Job.from_row(row) if row else None


def recent_jobs(
    db: sqlite3.Connection, *, source: str | None = None, status: str | None = None, limit: int = 50
) -> list[Job]:
    """Newest first."""
    where, args = [], []
    if source:
        where.append("source = ?")
        args.append(source)
    if status:
        where.append("status = ?")
        args.append(status)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = db.execute(
        f"SELECT {_JOB_COLS} FROM jobs {clause} ORDER BY id DESC LIMIT ?", (*args, limit)
    )
    return [Job.from_row(r) for r in rows]


def source_statuses(
    db: sqlite3.Connection, configured: dict[str, SourceConfig], jobs_each: int = TREND_JOBS
) -> list[SourceStatus]:
    """Every configured source, then every source known only from the store, by name."""
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    for source, status, n in db.execute(
        "SELECT source, status, count(*) FROM records GROUP BY source, status"
    ):
        counts[source][status] = n
    open_rej = dict(
        db.execute(
            "SELECT source, count(*) FROM rejections WHERE superseded_by IS NULL GROUP BY source"
        ).fetchall()
    )
    flagged = dict(
        db.execute(
            "SELECT source, count(*) FROM records WHERE flagged = 1 AND status = 'active'"
            " GROUP BY source"
        ).fetchall()
    )
    known = {r[0] for r in db.execute("SELECT DISTINCT source FROM jobs")} | set(counts)
    out = []
    for name in sorted(set(configured) | known):
        rows = db.execute(
            f"SELECT {_JOB_COLS} FROM jobs WHERE source = ? ORDER BY id DESC LIMIT ?",
            (name, jobs_each),
        )
        out.append(
            SourceStatus(
                name,
                configured.get(name),
                dict(counts.get(name, {})),
                [Job.from_row(r) for r in rows],
                int(open_rej.get(name, 0)),
                int(flagged.get(name, 0)),
            )
        )
    return out


def totals(db: sqlite3.Connection) -> dict[str, int]:
    return {
        str(k): int(v) for k, v in db.execute("SELECT status, count(*) FROM records GROUP BY 1")
    }
