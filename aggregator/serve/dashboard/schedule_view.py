"""The scheduler's facts for the dashboard, in words: next run (and whether it is a full
re-harvest), the circuit breaker, a running job, retries and waiting "harvest now" requests,
from :func:`aggregator.schedule.status.schedule_status` (reads the scheduler's book; takes no
lock and needs no scheduler running)."""

from __future__ import annotations

from datetime import UTC, datetime

from aggregator.config import Settings
from aggregator.schedule.status import SourceSchedule, schedule_status


def _when(t: datetime | None) -> str:
    return "" if t is None else t.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def schedules(settings: Settings) -> dict[str, SourceSchedule]:
    return {s.source: s for s in schedule_status(settings)}


def next_run(s: SourceSchedule) -> str:
    if s.running:
        return f"running since {_when(s.running_since)}"
    if s.next_run is None:
        return "not scheduled" + ("" if s.enabled else " (paused)")
    full = " (full re-harvest)" if s.next_full else ""
    waiting = "; harvest now requested" if s.requested else ""
    return f"{_when(s.next_run)}{full}{waiting}"


def breaker(s: SourceSchedule) -> str:
    if s.breaker == "open":
        return (
            f"open after {s.failures} failed job(s) in a row (failing since"
            f" {_when(s.failing_since)}): skipped until {_when(s.breaker_until)}"
        )
    if s.breaker == "half-open":
        return "half-open: a probe job runs"
    retry = f"; retry at {_when(s.retry_at)}" if s.retry_at else ""
    return ("closed" + (f", {s.failures} failed job(s) in a row" if s.failures else "")) + retry
