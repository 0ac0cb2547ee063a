"""The MDC events of an MDR source, on the general notification mechanism.

The specification's events (section 4.1.1, EventHandler) are :class:`~aggregator.jobs.notify.Notice`
kinds, each run through the ``[notify]`` rules like any event:

=========================  =====================================================================
MDR_SERVICE_DOWN           getStatus failed or reported the service down; a harvest could not
                           reach the service (monitor, harvest)
CMS_DOWN / DB_DOWN         getStatus reported the CMS / the database down (monitor)
MDR_STATUS_OK              getStatus found everything up; a harvest succeeded (no spec name: it
                           clears the down condition)
MD_VALIDATION_ERR          the service flagged a page's metadata invalid (mdValidationErrVO)
RECV_INVALID_MD            a received page failed our validation; notifyWebSiteAdmin is called
MD_REPL_FAILED             a replication job failed
MD_REPL_SUCCESS            a replication job succeeded
MDR_SRV_RECOVERED          the down condition cleared (the service is up again)
MD_REPL_RECOVERED          the replication condition cleared (a success after failures)
DOWN_TIME_ESCLTN           down longer than EscalationDurationStatus (escalation_status_minutes)
MD_REPL_FAILURE_ESCLTN     failing longer than EscalationDurationMD (escalation_md_minutes)
=========================  =====================================================================

The harvester declares two conditions per source (:func:`conditions`): repeated raising
events of an open condition run no actions, so a service found down at every check mails
when it goes down, when the escalation is due, and when it recovers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from aggregator.config import Settings, SourceConfig
from aggregator.config.notify import Condition
from aggregator.core.errors import AggregatorError
from aggregator.core.events import (
    HarvestEvent,
    JobFailed,
    JobFinished,
    RecordRejected,
    SourceUnreachable,
)
from aggregator.core.notices import Notice

if TYPE_CHECKING:
    from aggregator.harvest.mdr.client import MdrClient
    from aggregator.net.client import HttpClient, HttpSession

#: opens the source's session and a client of its service on it (given by the harvester,
#: which this module does not import: the harvester imports it, for its notify hooks)
Connect = Callable[["HttpClient"], tuple["HttpSession", "MdrClient"]]

log = logging.getLogger("aggregator.harvest.mdr")

MDR_SERVICE_DOWN = "MDR_SERVICE_DOWN"
CMS_DOWN = "CMS_DOWN"
DB_DOWN = "DB_DOWN"
MDR_STATUS_OK = "MDR_STATUS_OK"
MD_VALIDATION_ERR = "MD_VALIDATION_ERR"
RECV_INVALID_MD = "RECV_INVALID_MD"
MD_REPL_FAILED = "MD_REPL_FAILED"
MD_REPL_SUCCESS = "MD_REPL_SUCCESS"
MDR_SRV_RECOVERED = "MDR_SRV_RECOVERED"
MD_REPL_RECOVERED = "MD_REPL_RECOVERED"
DOWN_TIME_ESCLTN = "DOWN_TIME_ESCLTN"
MD_REPL_FAILURE_ESCLTN = "MD_REPL_FAILURE_ESCLTN"
#: the rule of a finding for a page the service itself flagged (mdValidationErrVO)
SERVICE_FLAGGED = "serviceValidationError"


class Escalations(Protocol):
    """The options the conditions read (the MDR harvester's ``MdrOptions``)."""

    @property
    def escalation_status_minutes(self) -> int: ...

    @property
    def escalation_md_minutes(self) -> int: ...


def conditions(source: SourceConfig, opts: Escalations) -> list[Condition]:
    return [
        Condition(
            name="mdr-status",
            raise_on=(MDR_SERVICE_DOWN, CMS_DOWN, DB_DOWN),
            clear_on=(MDR_STATUS_OK,),
            escalate_after=timedelta(minutes=opts.escalation_status_minutes),
            escalation=DOWN_TIME_ESCLTN,
            recovery=MDR_SRV_RECOVERED,
            quiet_repeats=True,
            sources=(source.name,),
        ),
        Condition(
            name="mdr-replication",
            raise_on=(MD_REPL_FAILED,),
            clear_on=(MD_REPL_SUCCESS,),
            escalate_after=timedelta(minutes=opts.escalation_md_minutes),
            escalation=MD_REPL_FAILURE_ESCLTN,
            recovery=MD_REPL_RECOVERED,
            quiet_repeats=True,
            sources=(source.name,),
        ),
    ]


class Translator:
    """Derives the MDC events of one MDR source from its harvest events, and calls the
    service's notifyWebSiteAdmin for each page received invalid."""

    def __init__(self, settings: Settings, source: SourceConfig, connect: Connect) -> None:
        self.settings = settings
        self.source = source
        self._connect = connect
        self._http: HttpClient | None = None
        self._session: HttpSession | None = None
        self._client: MdrClient | None = None

    def __call__(self, event: HarvestEvent) -> Sequence[HarvestEvent]:
        if event.source != self.source.name or isinstance(event, Notice):
            return []
        base: dict[str, Any] = {"source": event.source, "job_id": event.job_id, "at": event.at}
        match event:
            case RecordRejected():
                service = event.rule == SERVICE_FLAGGED
                kind = MD_VALIDATION_ERR if service else RECV_INVALID_MD
                attribute = event.location or event.rule
                notice = Notice(
                    **base,
                    kind=kind,
                    level="warning",
                    message=f"{event.local_id}: {event.message}",
                    details={"page": event.local_id, "attribute": attribute, "rule": event.rule},
                )
                if not service:
                    self._notify_admin(event.local_id, attribute, event.message)
                return [notice]
            case SourceUnreachable():
                return [Notice(**base, kind=MDR_SERVICE_DOWN, message=event.message)]
            case JobFailed():
                return [Notice(**base, kind=MD_REPL_FAILED, message=event.message)]
            case JobFinished():
                self.close()
                if event.status == "failed":
                    return []
                said = f"replication {event.status}"
                return [
                    Notice(**base, kind=MD_REPL_SUCCESS, level="info", message=said),
                    Notice(**base, kind=MDR_STATUS_OK, level="info", message=said),
                ]
        return []

    def _notify_admin(self, page: str, attribute: str, reason: str) -> None:
        """notifyWebSiteAdmin(RECV_INVALID_MD): the website's administrator hears of the page."""
        try:
            client = self._mdr_client()
            acknowledged = client.notify_admin(
                RECV_INVALID_MD, attribute, page, f"{attribute}: {reason}"[:1024]
            )
            if not acknowledged:
                log.warning(
                    "%s: notifyWebSiteAdmin for %s not acknowledged", self.source.name, page
                )
        except AggregatorError as err:
            log.warning("%s: notifyWebSiteAdmin for %s failed: %s", self.source.name, page, err)

    def _mdr_client(self) -> MdrClient:
        if self._client is None:
            from aggregator.net.client import HttpClient

            self._http = HttpClient(self.settings.http)
            self._session, self._client = self._connect(self._http)
        return self._client

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
        self._session = self._client = None
