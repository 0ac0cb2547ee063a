"""The ``mdr`` harvester: replication from a Metadata Replication Service (India Portal MDR
specification 2.2), as the specification's Metadata Consolidator does.

Per source, the checkpoint is the replication time: the time up to which the service's
publishing events have been received and stored. A run fetches the window from there to now
less ``end_margin_seconds`` in chunks of ``chunk_minutes`` (ChunkTimeDuration): the margin is
for a service whose clock runs behind ours, which would otherwise stamp a change made after
our request with a time before the end of the window we asked for, and for a service that
stamps a change before it commits it; neither change would be in any window. For each
chunk it asks getMetadataSize, and then either one getAllMetadata or the per-event calls
(getNewMetadata, getUpdatedMetadata, getExitedWebPages, each only when it has pages),
whichever the expected round trip allows (MaxRoundTripTime, ``max_round_trip_minutes``; the
transfer rate is ``rate`` bytes/s, or measured on this run's answers when ``rate = 0``,
1 MB/s before the first). New and updated pages are yielded as records (format ``mdr``:
the page's WebPageMetadataVO element as received), exited pages as deletions. After each
chunk it marks the chunk's end with :meth:`Listing.checkpoint_at`: the pipeline saves it
once the chunk's records are stored, so a service that goes down in the middle of a window
costs only the chunk that failed, which the next run fetches again from the same point.
Nothing is skipped.

The service must report itself, its CMS and its database up (getStatus) before a run starts.
Requests carry a WS-Security UsernameToken with a PasswordDigest
(:mod:`aggregator.harvest.mdr.client`); the password is the source's secret ``password``.

Options (``[sources.NAME.options]``)::

    username = "apmdrsrv"          # the service's user id (the password: secrets.password)
    since = "2000-01-01T00:00:00Z" # where the first replication starts
    chunk_minutes = 1440           # ChunkTimeDuration
    max_round_trip_minutes = 5     # MaxRoundTripTime
    rate = 0                       # bytes/s the link carries; 0: measured on this run
    end_margin_seconds = 300       # the last window ends this long before our now
    escalation_md_minutes = 60     # EscalationDurationMD: MD_REPL_FAILURE_ESCLTN after it
    escalation_status_minutes = 60 # EscalationDurationStatus: DOWN_TIME_ESCLTN after it
    status_period_minutes = 15     # how often `aggregator mdc-monitor` checks getStatus
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from lxml import etree

from aggregator.config import SourceConfig
from aggregator.core.errors import ConfigError, HarvestError
from aggregator.core.models import RawRecord
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.harvest.mdr.client import TNS, MdrClient, MdrServiceError

if TYPE_CHECKING:
    from aggregator.config import Settings
    from aggregator.config.notify import Condition
    from aggregator.core.events import HarvestEvent
    from aggregator.net.client import HttpClient, HttpSession

MINUTES = (1, 65535)  # the specification's range: 1 to 64K
ASSUMED_RATE = 1_000_000.0  # bytes/s, until this run's answers have been timed
MAX_MARGIN = 86_400  # seconds: a margin of more than a day is a mistake


def parse_time(text: str) -> datetime:
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class MdrOptions:
    username: str
    since: str = "2000-01-01T00:00:00Z"
    chunk_minutes: int = 1440
    max_round_trip_minutes: float = 5.0
    rate: int = 0
    end_margin_seconds: int = 300
    escalation_md_minutes: int = 60
    escalation_status_minutes: int = 60
    status_period_minutes: int = 15

    def __post_init__(self) -> None:
        if not self.username:
            raise ValueError("username must not be empty")
        try:
            parse_time(self.since)
        except ValueError:
            raise ValueError(f"since {self.since!r} is not an ISO date-time") from None
        for name in (
            "chunk_minutes",
            "escalation_md_minutes",
            "escalation_status_minutes",
            "status_period_minutes",
        ):
            value = getattr(self, name)
            if not MINUTES[0] <= value <= MINUTES[1]:
                raise ValueError(f"{name} must be 1 to 65535 minutes")
        if not MINUTES[0] <= self.max_round_trip_minutes <= MINUTES[1]:
            raise ValueError("max_round_trip_minutes must be 1 to 65535 minutes")
        if self.rate < 0:
            raise ValueError("rate must be 0 (measured) or a number of bytes/s")
        if not 0 <= self.end_margin_seconds <= MAX_MARGIN:
            raise ValueError(f"end_margin_seconds must be 0 to {MAX_MARGIN} seconds")


class MdrHarvester(Harvester):
    name: ClassVar[str] = "mdr"
    formats: ClassVar[tuple[str, ...]] = ("mdr",)
    Options: ClassVar[type[Any] | None] = MdrOptions
    #: a SOAP fault comes with 500: final (the service answered; calling again would fail
    #: the same way)
    retry_statuses: ClassVar[frozenset[int] | None] = frozenset({429, 502, 503, 504})
    #: every request is signed for one use (a nonce and Created): the client retries whole
    #: calls, signed afresh (:mod:`aggregator.harvest.mdr.client`), never the session
    transport_retries: ClassVar[bool] = False
    #: the time "now" of a run (the window's end and the UsernameToken's Created)
    clock: ClassVar[Callable[[], datetime]] = staticmethod(utc_now)

    @classmethod
    def check_config(cls, source: SourceConfig) -> None:
        super().check_config(source)
        if "password" not in source.secrets:
            raise ConfigError(
                f'[sources.{source.name}]: an mdr source needs secrets = {{ password = "ENV" }}'
                " (the MDR service's password, from an environment variable)"
            )

    def client(self, clock: Callable[[], datetime] | None = None) -> MdrClient:
        """A client of the source's service, signing with ``clock``'s time (default: the
        harvester's clock)."""
        opts: MdrOptions = self.options_of(self.source)
        return MdrClient(
            self.source.url,
            self.http,
            opts.username,
            self.source.secrets["password"],
            clock=clock or type(self).clock,
        )

    def list_records(self, request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        opts: MdrOptions = self.options_of(self.source)
        listing.incremental = True  # pages leave through exit events, never by absence
        since = request.checkpoint if request.checkpoint and not request.full else opts.since
        start = parse_time(since)
        # not up to now: a change the service stamps later by a clock behind ours, or stamps
        # before it commits, must still fall in a window not yet asked for (the next run's
        # first window starts where this run's last one ends: no gap)
        until = type(self).clock() - timedelta(seconds=opts.end_margin_seconds)
        client = self.client()
        status = client.status()
        if not status.healthy:
            down = [
                name
                for name, up in (
                    ("service", status.service),
                    ("CMS", status.cms),
                    ("DB", status.db),
                )
                if not up
            ]
            raise MdrServiceError("getStatus", "DOWN", f"{', '.join(down)} down")
        chunk = timedelta(minutes=opts.chunk_minutes)
        by_all = by_event = 0
        t = start
        while t < until:
            if request.cancel.is_set():
                listing.mark_truncated("cancelled")
                return
            end = min(t + chunk, until)
            size = client.size(t, end)
            if size.total:
                if self._all_at_once(size.total_bytes, client, opts):
                    by_all += 1
                    pages = client.all(t, end)
                    new, updated, exited = pages.new, pages.updated, pages.exited
                else:
                    by_event += 1
                    new = client.new(t, end).new if size.new else []
                    updated = client.updated(t, end).updated if size.modified else []
                    exited = client.exited(t, end).exited if size.exited else []
                for element in (*new, *updated):
                    listing.seen += 1
                    yield self._record(element)
                for url in exited:
                    listing.seen += 1
                    yield RawRecord(
                        source=self.source.name,
                        local_id=url,
                        format="mdr",
                        payload=b"",
                        media_type="application/xml",
                        url=url,
                        datestamp=end,
                        deleted=True,
                    )
            listing.pages += 1
            listing.checkpoint_at(iso(end))
            t = end
        listing.next_checkpoint = iso(max(t, start))
        listing.note(
            f"replicated {iso(start)} to {iso(max(t, start))} in {listing.pages} window(s):"
            f" {by_all} by getAllMetadata, {by_event} per event"
        )
        listing.mark_complete()

    @staticmethod
    def _all_at_once(total_bytes: int, client: MdrClient, opts: MdrOptions) -> bool:
        """Whether one getAllMetadata answer is expected within MaxRoundTripTime."""
        if opts.rate:
            rate = float(opts.rate)
        elif client.seconds > 0.05:
            rate = client.received / client.seconds
        else:
            rate = ASSUMED_RATE
        return total_bytes / max(rate, 1.0) <= opts.max_round_trip_minutes * 60

    def _record(self, element: etree._Element) -> RawRecord:
        identifier = (element.findtext(f"{{{TNS}}}identifier") or "").strip()
        if not identifier:
            raise HarvestError("MDR: a page without its identifier (URL)", code="mdrAnswer")
        return RawRecord(
            source=self.source.name,
            local_id=identifier,
            format="mdr",
            payload=etree.tostring(element, encoding="utf-8"),
            media_type="application/xml",
            url=identifier,
            datestamp=_datestamp(element),
        )

    # -- notifications (aggregator.jobs.notify) -----------------------------------------------
    @classmethod
    def notify_conditions(cls, source: SourceConfig) -> Sequence[Condition]:
        from aggregator.harvest.mdr._events import conditions

        return conditions(source, cls.options_of(source))

    @classmethod
    def notify_translator(
        cls, settings: Settings, source: SourceConfig
    ) -> Callable[[HarvestEvent], Sequence[HarvestEvent]]:
        from aggregator.harvest.mdr._events import Translator

        def connect(http: HttpClient) -> tuple[HttpSession, MdrClient]:
            session = cls.open_session(http, source)
            return session, cls(source, session).client()

        return Translator(settings, source, connect)


def _datestamp(element: etree._Element) -> datetime | None:
    for name in ("dateModified", "datePublished"):
        text = element.findtext(f"{{{TNS}}}metadata/{{{TNS}}}{name}")
        if text:
            try:
                return parse_time(text)
            except ValueError:
                return None
    return None
