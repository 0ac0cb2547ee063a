"""The scheduler's state for the CLI and the dashboard (a small read API, plus the requests).

- :func:`schedule_status` -> one :class:`SourceSchedule` per configured source: frequency,
  next run, whether a job runs now, the circuit breaker (``closed``, ``open`` until when,
  ``half-open`` while its probe runs), consecutive failures and since when, the last job,
  the pending retry and "harvest now" requests;
- :func:`request_harvest` queues "harvest now" (``full=True``: a full re-harvest); the
  scheduler (``serve`` or ``aggregator scheduler``) takes it within a second;
- :func:`describe` puts one source's state in words;
- :func:`note_outside_job` counts a job run outside the scheduler (the demo's first harvest)
  as the source's last run, so that its next run is its next due time, not at once;
- :func:`~aggregator.schedule.liveness.scheduler_running` says whether a scheduler would take
  a request now.

None of these take the writer lock or need the scheduler to run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from aggregator.config import Settings
from aggregator.config.timing import parse_frequency, parse_timezone
from aggregator.core.errors import ConfigError
from aggregator.schedule.book import BOOK_FILE, Book, Run, SourceState, iso
from aggregator.schedule.liveness import scheduler_running
from aggregator.schedule.scheduler import needs_full, timing_of

__all__ = [
    "SourceSchedule",
    "describe",
    "note_outside_job",
    "request_harvest",
    "schedule_status",
    "scheduler_running",
]


@dataclass(frozen=True, slots=True)
class SourceSchedule:
    source: str
    frequency: str
    enabled: bool
    next_run: datetime | None  # None: manual, paused, or no allowed moment within a year
    next_full: bool  # the next job will be a full re-harvest
    running: bool
    running_since: datetime | None
    breaker: str  # closed | open | half-open
    breaker_until: datetime | None
    failures: int  # consecutive failed jobs
    failing_since: datetime | None
    retry_at: datetime | None
    last_status: str | None
    last_job: int | None
    last_end: datetime | None
    last_error: str | None
    requested: int  # "harvest now" requests waiting

    def as_dict(self) -> dict[str, Any]:
        return {k: iso(v) if isinstance(v, datetime) else v for k, v in asdict(self).items()}


def schedule_status(settings: Settings, now: datetime | None = None) -> list[SourceSchedule]:
    now = now or datetime.now(UTC)
    states: dict[str, SourceState] = {}
    running: dict[str, Run] = {}
    requested: dict[str, int] = {}
    if (settings.store_path / BOOK_FILE).exists():  # a read makes no file
        book = Book(settings.store_path)
        try:
            states = book.states()
            running = {r.source: r for r in book.running()}
            for req in book.pending_requests():
                requested[req.source] = requested.get(req.source, 0) + 1
        finally:
            book.close()
    out = []
    for name, src in settings.sources.items():
        state = states.get(name) or SourceState(name, due=now)
        freq = parse_frequency(src.schedule)
        timing = timing_of(settings, src)
        nxt: datetime | None
        if requested.get(name):
            nxt = now
        elif not src.enabled or (freq.manual and state.retry_at is None):
            nxt = None
        elif state.breaker == "open":
            nxt = timing.next_allowed(max(now, state.breaker_until or now), windowed=freq.windowed)
        else:
            wanted = [t for t in (state.due, state.retry_at) if t is not None]
            first = max(now, min(wanted)) if wanted else None
            nxt = timing.next_allowed(first, windowed=freq.windowed) if first else None
        run = running.get(name)
        out.append(
            SourceSchedule(
                source=name,
                frequency=src.schedule,
                enabled=src.enabled,
                next_run=nxt,
                next_full=needs_full(settings, src, state, nxt or now),
                running=run is not None,
                running_since=run.started if run else None,
                breaker=state.breaker,
                breaker_until=state.breaker_until,
                failures=state.failures,
                failing_since=state.failing_since,
                retry_at=state.retry_at,
                last_status=state.last_status,
                last_job=state.last_job,
                last_end=state.last_end,
                last_error=state.last_error,
                requested=requested.get(name, 0),
            )
        )
    return out


def request_harvest(settings: Settings, source: str, *, full: bool = False, by: str = "cli") -> int:
    """Queue "harvest now" for ``source``; return the request's id."""
    if source not in settings.sources:
        raise ConfigError(f"no source named {source!r}")
    book = Book(settings.store_path)
    try:
        return book.request(source, full, by, datetime.now(UTC))
    finally:
        book.close()


def note_outside_job(
    settings: Settings, source: str, status: str, job_id: int, full_listing: bool, ended: datetime
) -> None:
    """Count a job run outside the scheduler as ``source``'s last run: the next run is due
    one period after it (a source the scheduler has not seen is otherwise due at once), and
    a complete full listing is the last full one."""
    src = settings.source(source)
    book = Book(settings.store_path)
    try:
        state = book.state(source) or SourceState(source)
        tz = parse_timezone(settings.schedule.timezone)
        state.due = parse_frequency(src.schedule).next_after(ended, tz)
        state.last_status, state.last_job, state.last_end = status, job_id, ended
        if status in ("succeeded", "partial"):
            if full_listing:
                state.last_full = ended
            state.failures, state.failing_since, state.last_error = 0, None, None
        book.save(state)
    finally:
        book.close()


def _when(t: datetime | None) -> str:
    return "-" if t is None else t.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def describe(s: SourceSchedule) -> str:
    """One line in words: schedule, health, breaker, next run."""
    parts = [f"{s.frequency}{'' if s.enabled else ' (paused)'}"]
    if s.running:
        parts.append(f"running since {_when(s.running_since)}")
    if s.breaker == "open":
        parts.append(
            f"circuit breaker OPEN after {s.failures} failed job(s), failing since"
            f" {_when(s.failing_since)}; probed again at {_when(s.breaker_until)}"
        )
    elif s.breaker == "half-open":
        parts.append("circuit breaker half-open (a probe job runs)")
    elif s.failures:
        parts.append(f"{s.failures} failed job(s) in a row since {_when(s.failing_since)}")
    if s.last_status:
        parts.append(f"last job {s.last_job or '-'} {s.last_status} at {_when(s.last_end)}")
    if s.requested:
        parts.append("harvest requested")
    full = " (full)" if s.next_full and s.next_run else ""
    parts.append(f"next run {_when(s.next_run)}{full}" if s.next_run else "no run scheduled")
    return "; ".join(parts)
