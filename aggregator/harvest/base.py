"""The Harvester contract and the Listing a harvester reports its listing on.

A harvester walks one source and yields :class:`RawRecord` objects lazily. It reports on the
:class:`Listing` what it knows about the completeness of the walk; the pipeline withdraws
records missing from a source only when ``listing.complete`` is true *and* the listing was a
full one (not incremental). A harvester must call ``mark_complete()`` only after it has seen the
whole listing (all pages, every count adding up), and ``mark_truncated(reason)`` whenever it
stops early for any reason other than an exception.

Transport failures are raised (``TransportError``/``HarvestError``): the pipeline keeps what
was stored so far, marks the job failed or partial, and withdraws nothing.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from aggregator.config import SourceConfig
from aggregator.core.input_limits import DEFAULT_LIMITS, InputLimits
from aggregator.core.models import RawRecord
from aggregator.net.client import HttpClient, HttpSession


@dataclass(frozen=True, slots=True)
class HarvestRequest:
    """What the pipeline asks of one run."""

    full: bool  # True: ignore the checkpoint, list everything
    checkpoint: str | None  # opaque per-source value from the last successful run
    cancel: threading.Event = field(default_factory=threading.Event)
    #: Given (local id, source datestamp) of listed records, the ids the store already holds
    #: at that datestamp or a newer one; None when every record must be delivered whole (a
    #: forced run). A harvester may skip the per-record work for those (serialising, fetching
    #: the payload) and yield them with ``payload_omitted=True``: it must still yield them,
    #: since they count as listed. Call it once per page, from the listing thread.
    up_to_date: Callable[[Sequence[tuple[str, datetime | None]]], frozenset[str]] | None = None
    #: Given local ids, the version tag (``RawRecord.version``) the store holds for each of
    #: them it holds (not withdrawn); None on a forced run. A harvester whose source gives
    #: version tags (META-SHARE's checksums) fetches only records whose tag differs, and
    #: yields the others with ``payload_omitted=True`` and the same tag.
    held_versions: Callable[[Sequence[str]], Mapping[str, str]] | None = None
    #: Given local ids, the version tag with which the source last *deleted* each of them
    #: that the store does not hold (withdrawn, or never taken); None on a forced run. A
    #: record listed again with that same tag is deleted still: the harvester yields it as a
    #: deleted record with ``payload_omitted=True`` instead of fetching it again.
    deleted_versions: Callable[[Sequence[str]], Mapping[str, str]] | None = None
    #: Given local ids, the other source holding an active record under each (local id ->
    #: source name): for protocols whose ids are global (META-SHARE storage ids).
    held_elsewhere: Callable[[Sequence[str]], Mapping[str, str]] | None = None
    #: The input limits (``[input]``): a harvester that must parse a record to list it (its
    #: identifier is inside) passes one over ``max_record_bytes`` on unparsed instead, for
    #: the pipeline to refuse it alone.
    limits: InputLimits = DEFAULT_LIMITS


class Listing:
    """What a harvester tells the pipeline about the listing it walked."""

    def __init__(self, incremental: bool) -> None:
        self.incremental = incremental
        self.complete = False
        self.truncated_reason: str | None = None
        self.pages = 0
        self.expected_total: int | None = None  # what the source said it holds, if it did
        self.seen = 0  # records yielded (deleted headers included)
        self.next_checkpoint: str | None = None  # saved only if the run succeeds
        self.notes: list[str] = []  # protocol facts worth showing on the job
        #: (records yielded before it, checkpoint): see :meth:`checkpoint_at`
        self.progress: deque[tuple[int, str]] = deque()

    def mark_complete(self) -> None:
        if self.truncated_reason is None:
            self.complete = True

    def mark_truncated(self, reason: str) -> None:
        self.complete = False
        self.truncated_reason = reason

    def note(self, message: str) -> None:
        self.notes.append(message)

    def checkpoint_at(self, checkpoint: str) -> None:
        """Everything yielded so far (``seen`` records) is covered by ``checkpoint``: the
        pipeline saves it as soon as those records are stored (their batch committed), even
        if the run fails later, so the next run resumes from there. For a harvester that
        walks a source in steps (the MDR's time windows); call it from the listing thread
        after yielding a step's records and counting them in ``seen``."""
        self.progress.append((self.seen, checkpoint))

    @property
    def allows_withdrawal(self) -> bool:
        """A complete, full listing is the only evidence that a record has gone."""
        return self.complete and not self.incremental


class Harvester:
    """Base class: subclasses set ``name`` and implement ``list_records``."""

    name: ClassVar[str]
    #: format keys this harvester can deliver; the first is the default
    formats: ClassVar[tuple[str, ...]] = ("dcat",)
    #: whether the protocol carries any metadata format (OAI-PMH does: a source may name any
    #: mapper); otherwise a source's ``format`` must be one of ``formats``
    any_format: ClassVar[bool] = False
    #: the dataclass of the source's ``options`` table (see
    #: :mod:`aggregator.config.plugin_options`): checked at configuration load by the default
    #: :meth:`check_config`
    Options: ClassVar[type[Any] | None] = None
    #: HTTP statuses this protocol's requests are retried on (``None``: the client's rule, 429
    #: and 5xx). A protocol whose error answers are final narrows it: SOAP answers a fault
    #: with 500, and calling again would get the same fault.
    retry_statuses: ClassVar[frozenset[int] | None] = None
    #: whether the source's session resends a failed request itself. False for a protocol
    #: whose requests are signed for one use (a nonce and a timestamp, as WS-Security's
    #: UsernameToken): resent as they are, a strict service refuses them as replays, so the
    #: session sends each request once and the harvester retries whole calls, signed
    #: afresh, with the session's :attr:`~aggregator.net.client.HttpSession.retry` rule.
    transport_retries: ClassVar[bool] = True

    def __init__(self, source: SourceConfig, http: HttpSession) -> None:
        self.source = source
        self.http = http

    @classmethod
    def open_session(cls, http: HttpClient, source: SourceConfig) -> HttpSession:
        """A new session for ``source``, retried as this protocol allows (the caller closes
        it)."""
        return http.session(
            source, retry_statuses=cls.retry_statuses, transport_retries=cls.transport_retries
        )

    @classmethod
    def options_of(cls, source: SourceConfig) -> Any:
        """The source's options as an instance of ``Options`` (ConfigError if they are not)."""
        from aggregator.config.plugin_options import read_options

        if cls.Options is None:
            raise TypeError(f"{cls.__name__} declares no Options")
        return read_options(cls.Options, source.options, f"sources.{source.name}.options")

    @classmethod
    def check_config(cls, source: SourceConfig) -> None:
        """Raise ConfigError for invalid per-source options (called at config load).

        The default checks the options against ``Options``; a harvester with further rules
        (on its URL, say) extends it."""
        if cls.Options is not None:
            cls.options_of(source)

    def probe(self) -> list[str]:
        """What the source says about itself, read without harvesting (``aggregator source
        probe``), one line each; raise an AggregatorError when the source cannot be used as
        configured. Default: nothing to read before harvesting."""
        return []

    def probe_checkpoint(self, current: str | None) -> str | None:
        """After a successful :meth:`probe`: the checkpoint to store so that the next harvest
        starts from what the probe read (``current`` is the stored one), or None to leave
        the checkpoint alone. Default: None."""
        return None

    def list_records(self, request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        raise NotImplementedError
