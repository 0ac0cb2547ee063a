"""The Notifier: a subscriber of the event bus that runs rules and tracks conditions."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from aggregator.config.notify import Condition, NotifySettings
from aggregator.core.events import EventBus, HarvestEvent
from aggregator.core.notices import Notice, describe, event_kinds, kind_of
from aggregator.jobs.notify.actions import FileLog, Syslog, console, email
from aggregator.jobs.notify.conditions import ConditionTracker, Transition
from aggregator.jobs.notify.mailer import Mailer

log = logging.getLogger("aggregator.notify")  # the name operators filter on

Clock = Callable[[], datetime]
#: derives further events from one (a protocol's own events from the harvest's)
Translator = Callable[[HarvestEvent], Sequence[HarvestEvent]]


def utc_now() -> datetime:
    return datetime.now(UTC)


class Notifier:
    """Runs the configured actions for each event it hears, raises escalations and
    recoveries of conditions, and re-emits them (and translated events) on its bus."""

    def __init__(
        self,
        settings: NotifySettings,
        *,
        clock: Clock = utc_now,
        mailer: Mailer | None = None,
        conditions: Sequence[Condition] = (),
        translators: Sequence[Translator] = (),
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.mailer = mailer or (Mailer(settings.smtp) if settings.smtp else None)
        self.tracker = ConditionTracker(
            [*settings.conditions, *conditions], clock, settings.state_file
        )
        self.translators = list(translators)
        self._file = FileLog(settings.log_file) if settings.log_file else None
        self._syslog: Syslog | None = None
        self._bus: EventBus | None = None
        self._lock = threading.RLock()
        self._unsubscribe: Callable[[], None] = lambda: None

    def attach(self, bus: EventBus) -> Callable[[], None]:
        """Subscribe to every event of ``bus``; escalations and recoveries are emitted on it.
        Returns the unsubscribe function."""
        self._bus = bus
        self._unsubscribe = bus.subscribe(self.handle)
        return self._unsubscribe

    def detach(self) -> None:
        """Stop hearing the bus this notifier was attached to."""
        self._unsubscribe()
        self._bus = None

    def handle(self, event: HarvestEvent) -> None:
        with self._lock:
            kinds = event_kinds(event)
            transitions = self.tracker.observe(kinds, event.source, describe(event))
            quiet = any(t.what == "repeated" and t.condition.quiet_repeats for t in transitions)
            if not quiet:
                self.run_actions(event, kinds)
            derived: list[HarvestEvent] = []
            for translate in self.translators:
                derived.extend(translate(event))
            derived.extend(self._notices(transitions))
        for notice in derived:
            self.emit(notice)

    def tick(self) -> list[HarvestEvent]:
        """Escalate the conditions that have lasted their duration (a monitor or scheduler
        calls this periodically); returns the escalation notices emitted."""
        with self._lock:
            notices = self._notices(self.tracker.tick())
        for notice in notices:
            self.emit(notice)
        return notices

    def emit(self, event: HarvestEvent) -> None:
        """On the attached bus (so every subscriber hears it), or to this notifier alone."""
        if self._bus is not None:
            self._bus.emit(event)
        else:
            self.handle(event)

    def run_actions(self, event: HarvestEvent, kinds: Sequence[str]) -> None:
        for rule in self.settings.rules:
            if not rule.matches(kinds, event.source):
                continue
            for action in rule.actions:
                try:
                    self._run(action, event, rule.to)
                except Exception as err:
                    message = getattr(err, "message", None) or f"{type(err).__name__}: {err}"
                    log.warning(
                        "notification %s of %s (%s) failed: %s",
                        action,
                        kind_of(event),
                        event.source,
                        message,
                    )

    def _run(self, action: str, event: HarvestEvent, to: Sequence[str]) -> None:
        match action:
            case "log_file":
                if self._file is not None:
                    self._file(event)
            case "console":
                console(event)
            case "syslog":
                if self._syslog is None:
                    self._syslog = Syslog(self.settings.syslog)
                self._syslog(event)
            case "email":
                if self.mailer is not None:
                    email(self.mailer, self.settings, event, to)

    def _notices(self, transitions: Sequence[Transition]) -> list[HarvestEvent]:
        now = self.clock()
        out: list[HarvestEvent] = []
        for t in transitions:
            lasted = _minutes(now - t.since)
            since = t.since.astimezone(UTC).isoformat().replace("+00:00", "Z")
            details = {"condition": t.condition.name, "since": since, "cause": t.reason}
            if t.what == "escalated":
                out.append(
                    Notice(
                        source=t.source,
                        at=now,
                        kind=t.condition.escalation,
                        level="escalation",
                        message=f"{t.condition.name} has lasted {lasted} (since {since})",
                        details=details,
                    )
                )
            elif t.what == "cleared" and t.condition.recovery:
                out.append(
                    Notice(
                        source=t.source,
                        at=now,
                        kind=t.condition.recovery,
                        level="recovery",
                        message=f"{t.condition.name} cleared after {lasted}",
                        details=details,
                    )
                )
        return out

    def close(self) -> None:
        if self._syslog is not None:
            self._syslog.close()


def _minutes(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"
