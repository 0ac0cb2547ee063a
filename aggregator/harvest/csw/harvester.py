"""OGC CSW 2.0.2 harvester (ISO 19139 / UK GEMINI records), in two modes.

- ``identifiers`` (the UK DMS collection interface): GetRecords with ``resultType=results``
  and ``ElementName=dc:identifier`` sizes the job and lists the catalogue's own ids (not
  necessarily fileIdentifiers); the records are then fetched with GetRecordById, a batch of
  comma-separated ids at a time, in the ISO output schema. Each page of ids is fetched
  before the next page is asked for, so memory stays flat in the size of the catalogue.
- ``full`` (data.europa.eu): GetRecords with ``typeNames=gmd:MD_Metadata``, the ISO output
  schema, ``ElementSetName=full``, the ``Type`` filter and, once a run has succeeded and the
  server lists ``Modified`` among its queryables, ``Modified >= `` the day of that run.

GetCapabilities is read at registration (``aggregator source add --probe`` or ``source
probe``), else on the first run, and again on every ``--full`` run; it is kept in the
source's checkpoint: operations and bindings, ``MaxRecordDefault``, the output schemas and
the ``Modified`` queryable. Both bindings: ``binding = "get"`` (KVP) or ``"post"`` (XML);
``"auto"`` takes POST when GetRecords advertises it.

Paging is defensive (see docs/protocols/csw.md): the loop is driven by the records actually
returned; it stops on a page with none, on ``nextRecord="0"``, on a ``nextRecord`` beyond
``numberOfRecordsMatched`` or going backwards; the rule that stopped it is noted on the job.
Unless every matched record was listed and the count never drifted, the listing is
truncated and withdraws nothing. An ``ows:ExceptionReport`` is an error, whatever its status.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar, Literal
from urllib.parse import quote_plus, urlencode, urlsplit

from lxml import etree

from aggregator.config import SourceConfig
from aggregator.core.errors import ConfigError, HarvestError
from aggregator.core.models import RawRecord
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.harvest.csw.client import (
    DEFAULT_TYPES,
    Capabilities,
    CswClient,
    SearchResults,
    dump_checkpoint,
    identifiers_of,
    is_iso_schema,
    load_checkpoint,
)
from aggregator.harvest.gemini import RECORD_TAGS, record_facts, serialise_embedded
from aggregator.net.client import HttpSession

MEDIA_TYPE = "application/xml"
_URL_SAFE = re.compile(r"[A-Za-z0-9_.~-]+")
DEFAULT_PAGE = 50  # data.europa.eu's default; MaxRecordDefault wins when the server gives one
MAX_PAGE = 500
VALID_TYPES = frozenset(DEFAULT_TYPES) | {"application", "nonGeographicDataset", "model"}


@dataclass(frozen=True, slots=True)
class CswOptions:
    mode: Literal["identifiers", "full"] = "identifiers"
    binding: Literal["auto", "get", "post"] = "auto"
    page_size: int = 0  # 0: the server's MaxRecordDefault (at most MAX_PAGE), else 50
    batch_size: int = 10  # ids per GetRecordById request (identifiers mode)
    types: tuple[str, ...] = DEFAULT_TYPES  # the Type filter (full mode); [] for none
    output_schema: str = ""  # "": the ISO schema URI the server advertises
    selective: bool = True  # full mode: filter on Modified since the last successful run
    max_pages: int = 100_000

    def __post_init__(self) -> None:
        if self.page_size < 0 or self.page_size > MAX_PAGE:
            raise ValueError(f"page_size must be between 1 and {MAX_PAGE} (0: the server's)")
        if not 1 <= self.batch_size <= 100:
            raise ValueError("batch_size must be between 1 and 100")
        unknown = sorted(set(self.types) - VALID_TYPES)
        if unknown:
            raise ValueError(f"unknown record type(s) in types: {', '.join(unknown)}")
        if self.output_schema and not is_iso_schema(self.output_schema):
            raise ValueError(
                "output_schema must be an ISO 19139 schema URI "
                "(http://www.isotc211.org/2005/gmd or http://www.isotc211.org/schemas/2005/gmd/)"
            )
        if self.max_pages < 1:
            raise ValueError("max_pages must be at least 1")


@dataclass(slots=True)
class _Walk:
    """The state of one paged GetRecords listing."""

    start: int = 1
    matched: int | None = None
    drifted: str | None = None
    listed: int = 0  # entries of the listing (ids or records) returned so far
    stopped_by: str = ""
    backwards: bool = False


class CswHarvester(Harvester):
    name = "csw"
    formats: ClassVar[tuple[str, ...]] = ("iso19139",)
    Options = CswOptions

    def __init__(self, source: SourceConfig, http: HttpSession) -> None:
        super().__init__(source, http)
        self.options: CswOptions = self.options_of(source)
        self.capabilities: Capabilities | None = None
        self.binding = "post" if self.options.binding == "auto" else self.options.binding
        self._url_schema = ""
        self._url_parts = ("", "")

    @classmethod
    def check_config(cls, source: SourceConfig) -> None:
        parts = urlsplit(source.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"[sources.{source.name}]: url must be an http(s) CSW endpoint")
        super().check_config(source)

    # -- capabilities -------------------------------------------------------------------------
    def read_capabilities(self) -> Capabilities:
        """GetCapabilities (GET: the binding every CSW must offer for it)."""
        return CswClient(self.http, self.source.url, "get").get_capabilities()

    def probe(self) -> list[str]:
        """GetCapabilities, checked to be a CSW 2.0.2 with GetRecords, and what a harvest would
        use from it (``aggregator source probe``; kept in the checkpoint by
        :meth:`probe_checkpoint`, so the first harvest does not read it again)."""
        caps = self.read_capabilities()
        if caps.version != "2.0.2":
            found = f"version {caps.version!r}" if caps.version else "no version"
            raise HarvestError(
                f"{self.source.url}: GetCapabilities answered a Capabilities document with"
                f" {found}; the csw harvester needs a CSW 2.0.2 service",
                code="badCapabilities",
            )
        if caps.operations and "GetRecords" not in caps.operations:
            raise HarvestError(
                f"{self.source.url}: the service does not offer GetRecords",
                code="badCapabilities",
            )
        self.capabilities = caps
        lines = [f"service: {caps.title or 'untitled'} (CSW {caps.version})"]
        for name, op in sorted(caps.operations.items()):
            bindings = "/".join(b for b, on in (("GET", op.get), ("POST", op.post)) if on)
            lines.append(f"operation {name}: {bindings or 'no binding'}")
        chosen = self.options.binding
        if chosen == "auto":
            chosen = "post" if caps.supports("GetRecords", "post") else "get"
        elif not caps.supports("GetRecords", chosen):
            lines.append(f"warning: GetRecords does not advertise the {chosen.upper()} binding")
        lines.append(f"GetRecords binding used: {chosen.upper()}")
        default = caps.max_record_default
        lines.append(f"MaxRecordDefault: {default if default else 'not given'}")
        lines.append(f"page size used: {self._page_size(caps)}")
        modified = caps.modified_queryable
        lines.append(
            f"Modified queryable: {modified}"
            if modified
            else "Modified queryable: none (every full-mode run lists everything)"
        )
        lines.append(f"Type queryable: {caps.type_queryable}")
        for schema in caps.output_schemas:
            lines.append(f"output schema: {schema}")
        schema = self.options.output_schema or caps.iso_schema()
        if caps.output_schemas and schema not in caps.output_schemas:
            lines.append(f"warning: the ISO output schema {schema} is not advertised")
        lines.append(f"output schema used: {schema}")
        return lines

    def probe_checkpoint(self, current: str | None) -> str | None:
        """The capabilities the probe read, kept with the stored ``since`` (if any)."""
        if self.capabilities is None:
            return None
        since, _ = load_checkpoint(current)
        return dump_checkpoint(since, self.capabilities)

    def _client(self, caps: Capabilities, listing: Listing) -> CswClient:
        binding = self.options.binding
        if binding == "auto":
            binding = "post" if caps.supports("GetRecords", "post") else "get"
        elif not caps.supports("GetRecords", binding):
            listing.note(f"GetRecords does not advertise the {binding.upper()} binding; trying it")
        self.binding = binding
        return CswClient(self.http, self.source.url, binding)

    def _page_size(self, caps: Capabilities) -> int:
        if self.options.page_size:
            return self.options.page_size
        return min(caps.max_record_default or DEFAULT_PAGE, MAX_PAGE)

    # -- the walk -----------------------------------------------------------------------------
    def list_records(self, request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        started = datetime.now(UTC).strftime("%Y-%m-%d")
        since, caps = (None, None) if request.full else load_checkpoint(request.checkpoint)
        if caps is None:
            caps = self.read_capabilities()
            listing.note(f"read GetCapabilities ({caps.title or 'untitled'})")
        self.capabilities = caps
        client = self._client(caps, listing)
        schema = self.options.output_schema or caps.iso_schema()
        if self.options.mode == "full":
            modified = caps.modified_queryable if self.options.selective else None
            if since and not modified:
                listing.note("the server has no Modified queryable: listing everything")
            use_since = since if modified else None
            listing.incremental = use_since is not None
            yield from self._full(client, request, listing, schema, modified, use_since)
            next_since = started if modified else None
        else:
            listing.incremental = False  # the identifiers are always listed whole
            yield from self._identifiers(client, request, listing, schema)
            next_since = None
        listing.next_checkpoint = dump_checkpoint(next_since, caps)

    def _full(
        self,
        client: CswClient,
        request: HarvestRequest,
        listing: Listing,
        schema: str,
        modified: str | None,
        since: str | None,
    ) -> Iterator[RawRecord]:
        size = self._page_size(self.capabilities or Capabilities())

        def fetch(start: int) -> SearchResults:
            return client.get_records(
                start,
                size,
                identifiers_only=False,
                output_schema=schema,
                types=self.options.types,
                type_queryable=(self.capabilities or Capabilities()).type_queryable,
                modified_queryable=modified,
                since=since,
            )

        for page in self._pages(fetch, request, listing):
            records = []
            for position, element in enumerate(page.records, start=1):
                if element.tag not in RECORD_TAGS:
                    raise HarvestError(
                        f"GetRecords returned <{etree.QName(element).localname}> instead of "
                        f"ISO 19139 records (outputSchema {schema} not honoured?)",
                        code="wrongOutputSchema",
                    )
                facts = record_facts(element)
                if not facts.file_identifier:
                    listing.mark_truncated(
                        f"record {position} of page {listing.pages} has no fileIdentifier"
                    )
                    continue
                records.append((element, facts.file_identifier, facts.date_stamp))
            known = self._up_to_date(request, [(i, d) for _, i, d in records])
            for element, identifier, stamp in records:
                if request.cancel.is_set():
                    listing.mark_truncated("cancelled")
                    return
                listing.seen += 1
                yield self._record(element, identifier, stamp, schema, identifier in known)

    def _identifiers(
        self, client: CswClient, request: HarvestRequest, listing: Listing, schema: str
    ) -> Iterator[RawRecord]:
        size = self._page_size(self.capabilities or Capabilities())

        def fetch(start: int) -> SearchResults:
            return client.get_records(start, size, identifiers_only=True)

        batch = self.options.batch_size
        for page in self._pages(fetch, request, listing):
            ids = identifiers_of(page.records)
            if None in ids:
                listing.mark_truncated(f"an entry of page {listing.pages} has no dc:identifier")
            wanted = [i for i in ids if i is not None]
            for first in range(0, len(wanted), batch):
                if request.cancel.is_set():
                    listing.mark_truncated("cancelled")
                    return
                chunk = wanted[first : first + batch]
                elements = client.get_record_by_id(chunk, schema)
                got = [e for e in elements if e.tag in RECORD_TAGS]
                if len(got) < len(chunk):
                    listing.mark_truncated(
                        f"GetRecordById returned {len(got)} of {len(chunk)} requested records"
                        f" (ids {', '.join(chunk[:5])}{' ...' if len(chunk) > 5 else ''})"
                    )
                found = []
                for element in got:
                    facts = record_facts(element)
                    if not facts.file_identifier:
                        listing.mark_truncated("a record from GetRecordById has no fileIdentifier")
                        continue
                    found.append((element, facts.file_identifier, facts.date_stamp))
                known = self._up_to_date(request, [(i, d) for _, i, d in found])  # once a batch
                for element, identifier, stamp in found:
                    listing.seen += 1
                    yield self._record(element, identifier, stamp, schema, identifier in known)

    def _pages(
        self,
        fetch: Callable[[int], SearchResults],
        request: HarvestRequest,
        listing: Listing,
    ) -> Iterator[SearchResults]:
        """GetRecords pages, driven by the records actually returned (see the module doc)."""
        walk = _Walk()
        ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="csw-page-ahead")
        following: Future[SearchResults] | None = None
        try:
            while True:
                if request.cancel.is_set():
                    listing.mark_truncated("cancelled")
                    return
                page = following.result() if following is not None else fetch(walk.start)
                following = None
                listing.pages += 1
                if walk.matched is None:
                    walk.matched = page.matched
                    listing.expected_total = page.matched
                elif page.matched != walk.matched and walk.drifted is None:
                    walk.drifted = (
                        f"numberOfRecordsMatched changed from {walk.matched} to {page.matched}"
                        f" on page {listing.pages}"
                    )
                    listing.note(walk.drifted)
                returned = len(page.records)
                if page.returned is not None and page.returned != returned:
                    listing.note(
                        f"page {listing.pages}: numberOfRecordsReturned={page.returned} but"
                        f" {returned} records in the page; paging on the records"
                    )
                # where the walk goes after this page is known before its records are read:
                # the next page is requested now and travels while this one is consumed
                walk.listed += returned
                rule = self._stop_rule(walk, page, returned, listing.pages)
                if rule is None:
                    walk.start += returned
                    following = ahead.submit(fetch, walk.start)
                yield page
                if rule is not None:
                    walk.stopped_by = rule
                    listing.note(f"paging stopped: {rule}")
                    break
        finally:
            if following is not None:
                following.cancel()
            ahead.shutdown(wait=True)
        self._judge(walk, listing)

    def _stop_rule(self, walk: _Walk, page: SearchResults, returned: int, pages: int) -> str | None:
        matched, nxt = walk.matched, page.next_record
        if returned == 0:
            return f"page {pages} (startPosition {walk.start}) returned no records"
        if nxt == 0:
            return f"nextRecord=0 on page {pages}"
        if matched is not None and walk.listed >= matched:
            return f"all {matched} matched records listed"
        if nxt is not None and matched is not None and nxt > matched:
            return f"nextRecord={nxt} beyond numberOfRecordsMatched={matched} on page {pages}"
        if nxt is not None and nxt <= walk.start:
            walk.backwards = True
            return f"nextRecord={nxt} going backwards (startPosition {walk.start}) on page {pages}"
        if pages >= self.options.max_pages:
            return f"max_pages ({self.options.max_pages}) reached"
        return None

    @staticmethod
    def _judge(walk: _Walk, listing: Listing) -> None:
        """Complete only if every matched record was listed, exactly, with a steady count."""
        if listing.truncated_reason:
            return
        if walk.backwards:
            listing.mark_truncated(walk.stopped_by)
        elif walk.drifted is not None:
            listing.mark_truncated(walk.drifted)
        elif walk.matched is None:
            listing.mark_truncated("the server gave no numberOfRecordsMatched")
        elif walk.listed != walk.matched:
            listing.mark_truncated(
                f"listing stopped short: {walk.listed} of {walk.matched} matched records"
                f" ({walk.stopped_by})"
            )
        else:
            listing.mark_complete()

    @staticmethod
    def _up_to_date(
        request: HarvestRequest, listed: Sequence[tuple[str, datetime | None]]
    ) -> frozenset[str]:
        if request.up_to_date is None or not listed:
            return frozenset()
        return request.up_to_date(listed)

    def record_url(self, identifier: str, schema: str) -> str:
        """The record on its own: GetRecordById by KVP (the query built once per schema)."""
        if self._url_schema != schema:
            head = urlencode({"service": "CSW", "version": "2.0.2", "request": "GetRecordById"})
            tail = urlencode({"outputSchema": schema, "ElementSetName": "full"})
            joiner = "&" if "?" in self.source.url else "?"
            self._url_parts = (f"{self.source.url}{joiner}{head}&id=", f"&{tail}")
            self._url_schema = schema
        head, tail = self._url_parts
        if _URL_SAFE.fullmatch(identifier):  # UUIDs, the common case: nothing to quote
            return head + identifier + tail
        return head + quote_plus(identifier, safe="") + tail

    def _record(
        self,
        element: etree._Element,
        identifier: str,
        stamp: datetime | None,
        schema: str,
        omitted: bool,
    ) -> RawRecord:
        return RawRecord(
            source=self.source.name,
            local_id=identifier,
            format=self.source.format,
            payload=b"" if omitted else serialise_embedded(element),
            media_type=MEDIA_TYPE,
            url=self.record_url(identifier, schema),
            datestamp=stamp,
            payload_omitted=omitted,
        )
