"""When a source may be harvested: its frequency, the harvest window, blackout periods.

- A **frequency** is ``manual``, ``hourly``, ``daily``, ``weekly``, ``monthly`` or a
  five-field cron expression (parsed by croniter). The named ones count from the previous
  due time (so a source harvested at 23:10 tonight is due at 23:10 tomorrow, whatever the
  job's length) and keep to the harvest window; a cron expression names its own times and
  ignores the window.
- A **period** (the window, a blackout) is a daily time range, optionally on some weekdays
  only (``22:00-06:00``, ``Sat 00:00-06:00``, ``Mon-Fri 08:00-18:00``, ``Sun 00:00-24:00``;
  a range that ends before it starts runs past midnight, and its weekdays are those it
  starts on), or a fixed stretch of time (``2026-12-24/2026-12-27`` whole days, or
  ``2026-12-24T08:00/2026-12-24T12:00``).

Times are read in the configured time zone (``[schedule] timezone``, UTC by default).
"""

from __future__ import annotations

import calendar
import functools
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from aggregator.core.errors import ConfigError

NAMED = ("manual", "hourly", "daily", "weekly", "monthly")
_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_STEPS = {"hourly": timedelta(hours=1), "daily": timedelta(days=1), "weekly": timedelta(days=7)}


def _add_month(t: datetime) -> datetime:
    year, month = (t.year + 1, 1) if t.month == 12 else (t.year, t.month + 1)
    day = min(t.day, calendar.monthrange(year, month)[1])
    return t.replace(year=year, month=month, day=day)


@dataclass(frozen=True, slots=True)
class Frequency:
    text: str

    @property
    def manual(self) -> bool:
        return self.text == "manual"

    @property
    def windowed(self) -> bool:
        """Named frequencies keep to the harvest window; cron expressions name their times."""
        return self.text in NAMED

    def next_after(self, previous: datetime, tz: tzinfo = UTC) -> datetime | None:
        """The due time after ``previous`` (a due time); None for a manual source."""
        if self.manual:
            return None
        if self.text in _STEPS:
            return previous + _STEPS[self.text]
        if self.text == "monthly":
            return _add_month(previous)
        local = previous.astimezone(tz)
        nxt: datetime = croniter(self.text, local).get_next(datetime)
        return nxt.astimezone(UTC)

    def next_due(self, previous: datetime, now: datetime, tz: tzinfo = UTC) -> datetime | None:
        """The first due time after ``previous`` that is later than ``now`` (missed ones,
        while the scheduler was not running, are not caught up one by one)."""
        if not self.windowed and not self.manual:
            return self.next_after(max(previous, now), tz)
        nxt = self.next_after(previous, tz)
        while nxt is not None and nxt <= now:
            nxt = self.next_after(nxt, tz)
        return nxt


@functools.lru_cache(maxsize=1024)
def parse_frequency(text: str, where: str = "schedule") -> Frequency:
    """The frequency ``text`` names (cached: the scheduler asks every second)."""
    value = text.strip()
    if value in NAMED:
        return Frequency(value)
    if len(value.split()) == 5 and croniter.is_valid(value):
        return Frequency(value)
    raise ConfigError(
        f"[{where}]: {text!r} is not a frequency: use one of {', '.join(NAMED)} or a five-field"
        " cron expression such as '30 2 * * *'"
    )


@dataclass(frozen=True, slots=True)
class DailyRange:
    """From ``start`` to ``end`` every day whose weekday (0 = Monday) is in ``days``."""

    text: str
    days: frozenset[int]
    start: time
    end: time

    def _occurrences(self, local: datetime) -> list[tuple[datetime, datetime]]:
        out = []
        for offset in range(-1, 9):
            d = local.date() + timedelta(days=offset)
            if d.weekday() not in self.days:
                continue
            begin = datetime.combine(d, self.start, tzinfo=local.tzinfo)
            end_day = d if self.end > self.start else d + timedelta(days=1)
            out.append((begin, datetime.combine(end_day, self.end, tzinfo=local.tzinfo)))
        return out

    def end_if_inside(self, t: datetime, tz: tzinfo) -> datetime | None:
        local = t.astimezone(tz)
        for begin, end in self._occurrences(local):
            if begin <= local < end:
                return end.astimezone(UTC)
        return None

    def next_start(self, t: datetime, tz: tzinfo) -> datetime | None:
        local = t.astimezone(tz)
        starts = [begin for begin, _ in self._occurrences(local) if begin >= local]
        return min(starts).astimezone(UTC) if starts else None


@dataclass(frozen=True, slots=True)
class FixedRange:
    text: str
    start: datetime
    end: datetime

    def end_if_inside(self, t: datetime, tz: tzinfo) -> datetime | None:
        return self.end if self.start <= t < self.end else None

    def next_start(self, t: datetime, tz: tzinfo) -> datetime | None:
        return self.start if self.start >= t else None


Period = DailyRange | FixedRange

_DAILY = re.compile(
    r"^(?:(?P<days>[A-Za-z]{3}(?:\s*[-,]\s*[A-Za-z]{3})*)\s+)?"
    r"(?P<start>\d{1,2}:\d{2})\s*-\s*(?P<end>\d{1,2}:\d{2})$"
)


def _clock(text: str, where: str) -> time:
    hours, minutes = (int(p) for p in text.split(":"))
    if (hours, minutes) == (24, 0):
        return time(0, 0)
    if hours > 23 or minutes > 59:
        raise ConfigError(f"[{where}]: {text!r} is not a time of day")
    return time(hours, minutes)


def _weekdays(text: str, where: str) -> frozenset[int]:
    days: set[int] = set()
    for part in text.lower().replace(" ", "").split(","):
        ends = part.split("-")
        try:
            idx = [_DAYS.index(e) for e in ends]
        except ValueError:
            raise ConfigError(f"[{where}]: {part!r} is not a weekday (Mon .. Sun)") from None
        if len(idx) == 1:
            days.add(idx[0])
        else:
            first, last = idx[0], idx[-1]
            days.update((first + i) % 7 for i in range((last - first) % 7 + 1))
    return frozenset(days)


def _moment(text: str, tz: tzinfo, where: str) -> datetime:
    try:
        if "T" in text:
            parsed = datetime.fromisoformat(text)
        else:
            parsed = datetime.combine(date.fromisoformat(text), time(0, 0))
    except ValueError:
        raise ConfigError(f"[{where}]: {text!r} is not a date or date-time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=tz)
    return parsed.astimezone(UTC)


def parse_period(text: str, tz: tzinfo = UTC, where: str = "schedule") -> Period:
    value = text.strip()
    if "/" in value:
        first, _, last = value.partition("/")
        start = _moment(first.strip(), tz, where)
        end = _moment(last.strip(), tz, where)
        if "T" not in last:
            end += timedelta(days=1)  # a date names its whole day
        if end <= start:
            raise ConfigError(f"[{where}]: {text!r} ends before it starts")
        return FixedRange(value, start, end)
    m = _DAILY.match(value)
    if m is None:
        raise ConfigError(
            f"[{where}]: {text!r} is not a period: use 'HH:MM-HH:MM', optionally after"
            " weekdays ('Sat 00:00-06:00', 'Mon-Fri 08:00-18:00'), or 'DATE/DATE'"
        )
    days = _weekdays(m["days"], where) if m["days"] else frozenset(range(7))
    return DailyRange(value, days, _clock(m["start"], where), _clock(m["end"], where))


def parse_timezone(name: str, where: str = "schedule") -> tzinfo:
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"[{where}]: unknown time zone {name!r}") from None


@dataclass(frozen=True, slots=True)
class Timing:
    """The harvest window (None: any time) and the blackout periods of one source."""

    window: DailyRange | None
    blackouts: tuple[Period, ...]
    tz: tzinfo = UTC

    def next_allowed(self, t: datetime, *, windowed: bool = True) -> datetime | None:
        """The first moment from ``t`` inside the window (when ``windowed``) and outside
        every blackout; None when there is none in the next year."""
        limit = t + timedelta(days=366)
        while t < limit:
            window = self.window if windowed else None
            if window is not None and window.end_if_inside(t, self.tz) is None:
                start = window.next_start(t, self.tz)
                if start is None:
                    return None
                t = start
                continue
            for blackout in self.blackouts:
                end = blackout.end_if_inside(t, self.tz)
                if end is not None:
                    t = end
                    break
            else:
                return t
        return None

    def allowed(self, t: datetime, *, windowed: bool = True) -> bool:
        return self.next_allowed(t, windowed=windowed) == t
