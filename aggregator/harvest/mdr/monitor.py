"""The MDC status monitor: getStatus of every MDR source, as MDC events on the bus.

:func:`check_status` asks each enabled ``mdr`` source once and emits, per source,
MDR_SERVICE_DOWN (unreachable, refused, or reporting the service down), CMS_DOWN, DB_DOWN,
or MDR_STATUS_OK (all up); the notifier's conditions turn a lasting outage into
DOWN_TIME_ESCLTN and its end into MDR_SRV_RECOVERED (:mod:`aggregator.harvest.mdr._events`).
The scheduler calls it on its own period; ``aggregator mdc-monitor`` runs :func:`run_monitor`
(once, or every ``status_period_minutes`` of the sources, the shortest).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from aggregator.config import Settings, SourceConfig
from aggregator.core.errors import AggregatorError
from aggregator.core.events import EventBus
from aggregator.core.notices import Level, Notice
from aggregator.harvest.mdr._events import CMS_DOWN, DB_DOWN, MDR_SERVICE_DOWN, MDR_STATUS_OK
from aggregator.net.client import HttpClient

log = logging.getLogger("aggregator.harvest.mdr")


def mdr_sources(settings: Settings) -> list[SourceConfig]:
    return [s for s in settings.sources.values() if s.type == "mdr" and s.enabled]


def check_source(
    source: SourceConfig, http: HttpClient, clock: Callable[[], datetime]
) -> list[Notice]:
    """The status events of one source (not emitted)."""
    from aggregator.harvest.mdr.harvester import MdrHarvester

    def notice(kind: str, message: str, level: Level = "error") -> Notice:
        return Notice(source=source.name, at=clock(), kind=kind, message=message, level=level)

    try:
        source.require_secrets()
        with MdrHarvester.open_session(http, source) as session:
            harvester = MdrHarvester(source, session)
            status = harvester.client(clock).status()
    except AggregatorError as err:
        return [notice(MDR_SERVICE_DOWN, err.message)]
    found = []
    if not status.service:
        found.append(notice(MDR_SERVICE_DOWN, "getStatus: the MDR service reports itself down"))
    if not status.cms:
        found.append(notice(CMS_DOWN, "getStatus: the content management system is down"))
    if not status.db:
        found.append(notice(DB_DOWN, "getStatus: the database is down"))
    return found or [notice(MDR_STATUS_OK, "getStatus: service, CMS and database up", "info")]


def check_status(
    settings: Settings,
    bus: EventBus,
    *,
    clock: Callable[[], datetime] | None = None,
    http: HttpClient | None = None,
) -> list[Notice]:
    """Check every MDR source once; emit and return the events."""
    now = clock or (lambda: datetime.now(UTC))
    client = http or HttpClient(settings.http)
    out: list[Notice] = []
    for source in mdr_sources(settings):
        for notice in check_source(source, client, now):
            log.info("%s: %s %s", source.name, notice.kind, notice.message)
            bus.emit(notice)
            out.append(notice)
    return out


def period_minutes(settings: Settings) -> int:
    from aggregator.harvest.mdr.harvester import MdrHarvester

    periods = [MdrHarvester.options_of(s).status_period_minutes for s in mdr_sources(settings)]
    return min(periods, default=15)


def run_monitor(
    settings: Settings,
    bus: EventBus,
    *,
    once: bool = False,
    every: float | None = None,
    stop: threading.Event | None = None,
    tick: Callable[[], object] = lambda: None,
) -> int:
    """Check, then (unless ``once``) wait ``every`` minutes (default: the sources' shortest
    ``status_period_minutes``) and check again until ``stop`` is set; returns the number of
    sources found down at the last check. ``tick``: the notifier's, run after each check."""
    stop = stop or threading.Event()
    minutes = every if every is not None else period_minutes(settings)
    while True:
        found = check_status(settings, bus)
        tick()
        down = {n.source for n in found if n.kind != MDR_STATUS_OK}
        if once or stop.wait(minutes * 60):
            return len(down)
