"""Harvest events: what happened to a job, told to whoever listens.

:func:`aggregator.jobs.pipeline.run_source` emits these on an :class:`EventBus`; notifications,
metrics and monitors subscribe to it instead of each reading the job tables. Events are
small frozen dataclasses, emitted from the thread that runs the job, in this order::

    JobStarted                     before the listing starts
    RecordRejected*                each record rejected (or catalogue page unreadable), as its
                                   batch is decided; lenient sources store instead of rejecting
    SourceUnreachable              the job failed on a transport error (connection refused,
                                   timeout, HTTP error status after retries)
    JobFailed                      the job failed (after SourceUnreachable, if that was why)
    JobRecovered                   the job succeeded and the source's previous job had failed
    JobFinished                    always last: the job's status, counters and message

The job is already finished in the state database when the closing events are emitted, so a
subscriber may read it there. A subscriber that raises is logged and skipped: it never breaks
a harvest nor keeps the other subscribers from hearing the event. An event a subscriber emits
while hearing one (the notifier's escalations, :mod:`aggregator.jobs.notify`) is delivered once
every subscriber has heard the first, so all subscribers hear the same order. ::

    bus = EventBus()
    unsubscribe = bus.subscribe(print, JobFailed, SourceUnreachable)   # no kinds: every event
    run_source(settings, store, "portal", events=bus)

:func:`default_bus` is the process-wide bus ``run_source`` uses when given none; the log
(:func:`log_event`, logger ``aggregator.events``) is subscribed to it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

log = logging.getLogger("aggregator.events")


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class HarvestEvent:
    source: str
    job_id: int
    at: datetime = field(default_factory=_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStarted(HarvestEvent):
    url: str
    full: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordRejected(HarvestEvent):
    local_id: str
    step: str  # the validation step's label, or the stage (parse, map)
    rule: str
    message: str
    location: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceUnreachable(HarvestEvent):
    url: str  # the URL that failed (the source's own when the error names none)
    message: str
    status: int | None = None  # the HTTP status, when the server answered


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFailed(HarvestEvent):
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecovered(HarvestEvent):
    failed_job_id: int  # the source's previous job, which had failed


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFinished(HarvestEvent):
    status: str  # succeeded, partial, failed
    counters: Mapping[str, int]
    message: str


Handler = Callable[[HarvestEvent], None]


class EventBus:
    """Subscribers by event kind; :meth:`emit` calls them in subscription order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[tuple[tuple[type[HarvestEvent], ...], Handler]] = []
        self._local = threading.local()  # events a subscriber emitted, per thread

    def subscribe(self, handler: Handler, *kinds: type[HarvestEvent]) -> Callable[[], None]:
        """Call ``handler`` for events of these kinds (all when none); returns the
        unsubscribe function."""
        entry = (kinds, handler)
        with self._lock:
            self._subscribers.append(entry)

        def unsubscribe() -> None:
            with self._lock:
                if entry in self._subscribers:
                    self._subscribers.remove(entry)

        return unsubscribe

    def emit(self, event: HarvestEvent) -> None:
        """Call the subscribers of ``event``. An event a subscriber emits while hearing one
        (a notifier's escalation) is queued and delivered after every subscriber has heard
        the first, so all of them hear events in the same order."""
        pending: list[HarvestEvent] | None = getattr(self._local, "pending", None)
        if pending is not None:
            pending.append(event)
            return
        self._local.pending = queue = [event]
        try:
            while queue:
                self._deliver(queue.pop(0))
        finally:
            self._local.pending = None

    def _deliver(self, event: HarvestEvent) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for kinds, handler in subscribers:
            if kinds and not isinstance(event, kinds):
                continue
            try:
                handler(event)
            except Exception:
                log.exception(
                    "event subscriber %r failed on %s (job %s, %s)",
                    handler,
                    type(event).__name__,
                    event.job_id,
                    event.source,
                )


def log_event(event: HarvestEvent) -> None:
    """The default subscriber: one log line per event (rejections at debug level), with the
    job, source, and for a rejection the record and stage, as fields of the log record (the
    JSON log format shows them: :mod:`aggregator.core.logjson`)."""
    extra: dict[str, object] = {"job": event.job_id, "source": event.source}
    if isinstance(event, RecordRejected):
        extra.update(record=event.local_id, stage=event.step)
    match event:
        case JobStarted():
            log.info("job %s (%s) started: %s", event.job_id, event.source, event.url, extra=extra)
        case RecordRejected():
            log.debug(
                "job %s (%s): %s rejected at %s: %s",
                event.job_id,
                event.source,
                event.local_id,
                event.step,
                event.message,
                extra=extra,
            )
        case SourceUnreachable():
            log.warning(
                "job %s (%s): source unreachable: %s",
                event.job_id,
                event.source,
                event.message,
                extra=extra,
            )
        case JobFailed():
            log.warning(
                "job %s (%s) failed: %s", event.job_id, event.source, event.message, extra=extra
            )
        case JobRecovered():
            log.info(
                "job %s (%s) succeeded after job %s had failed",
                event.job_id,
                event.source,
                event.failed_job_id,
                extra=extra,
            )
        case JobFinished():
            log.info(
                "job %s (%s) finished: %s", event.job_id, event.source, event.status, extra=extra
            )


_default: EventBus | None = None
_default_lock = threading.Lock()


def default_bus() -> EventBus:
    """The process-wide bus, with :func:`log_event` subscribed."""
    global _default
    with _default_lock:
        if _default is None:
            _default = EventBus()
            _default.subscribe(log_event)
        return _default
