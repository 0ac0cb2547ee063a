"""What the notifier hears: harvest events, and :class:`Notice`, a named event not tied to a job.

Every event has *kinds*, the names rules match: its class name (``JobFailed``), for a
:class:`Notice` its ``kind`` (``MDR_SERVICE_DOWN``), and for a finished job also
``JobFinished:<status>`` (``JobFinished:failed``), so a rule can ask for failed jobs only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Literal

from aggregator.core.events import HarvestEvent, JobFinished

Level = Literal["info", "warning", "error", "escalation", "recovery"]

#: the level of each harvest event kind (a Notice carries its own)
HARVEST_LEVELS: Mapping[str, Level] = {
    "JobStarted": "info",
    "RecordRejected": "warning",
    "SourceUnreachable": "error",
    "JobFailed": "error",
    "JobRecovered": "recovery",
    "JobFinished": "info",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice(HarvestEvent):
    """A named event of a monitor or a protocol, e.g. ``MDR_SERVICE_DOWN`` for a source.

    ``job_id`` is 0 when no job is involved (a status check); ``details`` are shown in the
    message body as ``key: value`` lines."""

    kind: str
    message: str
    level: Level = "error"
    job_id: int = 0
    details: Mapping[str, str] = field(default_factory=dict)


def event_kinds(event: HarvestEvent) -> tuple[str, ...]:
    """The names rules and conditions match for this event, most specific last."""
    if isinstance(event, Notice):
        return (event.kind,)
    name = type(event).__name__
    if isinstance(event, JobFinished):
        return (name, f"{name}:{event.status}")
    return (name,)


def kind_of(event: HarvestEvent) -> str:
    """The event's main kind: ``MDR_SERVICE_DOWN``, ``JobFailed``."""
    return event_kinds(event)[0]


def level_of(event: HarvestEvent) -> Level:
    if isinstance(event, Notice):
        return event.level
    if isinstance(event, JobFinished) and event.status == "failed":
        return "error"
    return HARVEST_LEVELS.get(type(event).__name__, "info")


def describe(event: HarvestEvent) -> str:
    """One line: ``KIND source=... job=N: message``."""
    text = getattr(event, "message", "") or ""
    if not text and isinstance(event, JobFinished):
        text = event.status
    job = f" job={event.job_id}" if event.job_id else ""
    return f"{kind_of(event)} source={event.source}{job}: {text}".rstrip(": ")


def body_lines(event: HarvestEvent) -> list[str]:
    """The event's fields as ``name: value`` lines, for an e-mail body."""
    lines = [f"event: {kind_of(event)}", f"level: {level_of(event)}"]
    skip = {"details", "kind", "level"}
    for f in fields(event):
        if f.name in skip:
            continue
        value = getattr(event, f.name)
        if value is None or value == "":
            continue
        if hasattr(value, "isoformat"):
            value = value.isoformat().replace("+00:00", "Z")
        lines.append(f"{f.name}: {value}")
    if isinstance(event, Notice):
        lines.extend(f"{k}: {v}" for k, v in event.details.items())
    return lines
