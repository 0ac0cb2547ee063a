"""OAI-PMH 2.0 harvester: ``ListRecords`` over resumption tokens.

The protocol client is ours (:mod:`aggregator.harvest.oaipmh._client`): request arguments,
resumption tokens, OAI errors (:class:`OaiError`), the ``Identify`` answer; and so is
everything under it:

- transport goes through :class:`aggregator.net.client.HttpSession` (timeouts, retries honouring
  ``Retry-After``, size cap, SSRF guard);
- each page is parsed once by a hardened lxml parser (no entity expansion, no DTD loading, no
  network, no recovery from broken XML, which would silently drop half a broken page);
- paging is driven page by page here, so the walk can count pages and records, stop on
  cancellation, detect a resumption-token loop and decide whether the listing was complete;
- the request for the next page is sent (from a helper thread) as soon as the current page's
  resumption token is known for sure (from the end of its raw bytes, else once it is parsed),
  so the provider builds the next page and it travels while the current one is parsed and
  read: one page ahead, never more; record headers are read directly from each page.

See docs/protocols/oai-pmh.md for what counts as a complete listing.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple
from urllib.parse import quote_plus, urlencode, urlsplit

from lxml import etree

from aggregator.config import SourceConfig
from aggregator.core.errors import ConfigError, HarvestError
from aggregator.core.models import RawRecord
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.harvest.oaipmh._client import (
    OAI,
    Cancelled,
    Fetcher,
    OaiClient,
    OaiError,
    Page,
    Pages,
    ResumptionToken,
    identify,
    parse_datestamp,
    serialise_record,
)
from aggregator.net.client import HttpSession

log = logging.getLogger("aggregator.harvest.oaipmh")  # the name operators filter on

_LIST_RECORDS = OAI + "ListRecords"
_RECORD = OAI + "record"
_HEADER = OAI + "header"
_IDENTIFIER = OAI + "identifier"
_DATESTAMP = OAI + "datestamp"
_METADATA = OAI + "metadata"
_RDF = "{http://www.w3.org/1999/02/22-rdf-syntax-ns#}RDF"
RDF_PREFIXES = frozenset({"dcat_ap", "dcat", "dcat-ap", "rdf", "dcat_ap_de", "dcatap"})
DAY = "YYYY-MM-DD"
SECONDS = "YYYY-MM-DDThh:mm:ssZ"
MAX_EMPTY_PAGES = 50  # some providers send a few empty pages; fifty in a row is a loop
# OAI-PMH 2.0 section 3.4: metadataPrefix and setSpec are restricted to unreserved URI chars
_PREFIX = re.compile(r"^[A-Za-z0-9\-_.!~*'()]+$")
_SET = re.compile(r"^[A-Za-z0-9\-_.!~*'()]+(:[A-Za-z0-9\-_.!~*'()]+)*$")
# a page that ends with its resumption token: read before the page is parsed (see _peek_ahead)
_TOKEN_AT_END = re.compile(
    rb"<resumptionToken((?:\s[^<>]*)?)>([^<&]*)</resumptionToken>\s*</ListRecords>\s*"
    rb"</OAI-PMH>\s*\Z"
)
_COMPLETE_LIST_SIZE = re.compile(rb"\scompleteListSize\s*=\s*([\"'])([0-9]+)\1")
# quote_plus(text, safe="") for ASCII text, as one str.translate: what urlencode does to a value
_ALWAYS_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")
_QUOTE_PLUS = {
    code: "+" if code == 0x20 else f"%{code:02X}"
    for code in range(128)
    if chr(code) not in _ALWAYS_SAFE
}


def _note_once(listing: Listing, key: str, message: str) -> None:
    """Note a fact once per listing (``key`` is a part of the message that identifies it)."""
    if not any(key in note for note in listing.notes):
        listing.note(message)


def _list_records(page: Page, listing: Listing) -> etree._Element:
    """The ListRecords element of a page (noting a DOCTYPE, which is never expanded)."""
    if page.has_doctype:
        _note_once(listing, "DOCTYPE", f"page {listing.pages} declares a DOCTYPE; not expanded")
    body = page.xml.find(_LIST_RECORDS)
    if body is None:
        raise HarvestError(
            f"{page.http_response.url}: page {listing.pages} has no ListRecords element",
            code="malformedResponse",
        )
    return body


def _list_size(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


class _Head(NamedTuple):
    """What a record's header says, read once per record."""

    element: etree._Element  # the whole <record>
    identifier: str
    datestamp: datetime | None
    deleted: bool


@dataclass(frozen=True, slots=True)
class OaiPmhOptions:
    metadata_prefix: str = "dcat_ap"
    set: str | None = None  # a setSpec
    method: str = "GET"  # GET or POST (any case)

    def __post_init__(self) -> None:
        if not _PREFIX.match(self.metadata_prefix):
            raise ValueError("metadata_prefix must be a metadataPrefix")
        if self.set is not None and not _SET.match(self.set):
            raise ValueError("set must be a setSpec such as 'a' or 'a:b'")
        if self.method.upper() not in ("GET", "POST"):
            raise ValueError("method must be GET or POST")


class OaiPmhHarvester(Harvester):
    """Harvest an OAI-PMH 2.0 repository with ``ListRecords``.

    Options: ``metadata_prefix`` (default ``dcat_ap``), ``set`` (a setSpec), ``method``
    (``GET`` or ``POST``, default ``GET``).
    """

    name = "oai-pmh"
    formats = ("dcat",)
    any_format = True  # a metadataPrefix can name any format a mapper reads
    Options = OaiPmhOptions

    def __init__(self, source: SourceConfig, http: HttpSession) -> None:
        super().__init__(source, http)
        options: OaiPmhOptions = self.options_of(source)
        self.metadata_prefix = options.metadata_prefix
        self.set_spec = options.set
        self.client = OaiClient(source.url, http, options.method.upper())
        self._url_head = f"{source.url}?{urlencode({'verb': 'GetRecord'})}&identifier="
        self._url_tail = "&" + urlencode({"metadataPrefix": self.metadata_prefix})
        rdf_prefix = self.metadata_prefix.lower() in RDF_PREFIXES
        self._media_type = "application/rdf+xml" if rdf_prefix else "application/xml"
        self._granularity: str | None = None
        self.deleted_record = ""  # Identify's deletedRecord: no, transient or persistent

    @classmethod
    def check_config(cls, source: SourceConfig) -> None:
        where = f"sources.{source.name}"
        parts = urlsplit(source.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"[{where}]: url must be an http(s) OAI-PMH base URL")
        if parts.query or parts.fragment:
            raise ConfigError(f"[{where}]: an OAI-PMH base URL has no query or fragment")
        super().check_config(source)

    # -- protocol helpers -------------------------------------------------------------------
    def granularity(self) -> str:
        """The repository's datestamp granularity, from one Identify request per harvester."""
        if self._granularity is None:
            page = self.client.request(verb="Identify")
            error = page.xml.find(OAI + "error")
            if error is not None:
                code = error.get("code", "OAIError")
                raise HarvestError(
                    f"{self.source.url} answered Identify with {code}: {error.text or ''}",
                    code=code,
                )
            said = identify(page)
            self.deleted_record = (said.get("deletedRecord") or "").strip()
            value = (said.get("granularity") or "").strip()
            # every repository must accept day granularity; seconds only when it says so
            self._granularity = SECONDS if value == SECONDS else DAY
        return self._granularity

    def _in_granularity(self, stamp: str) -> str:
        return stamp[:10] if self.granularity() == DAY else stamp

    def _oai_error(self, err: OaiError, verb: str) -> HarvestError:
        return HarvestError(
            f"{self.source.url} answered {verb} with {err.code}: {err}", code=err.code
        )

    def record_url(self, identifier: str) -> str:
        """The record on its own: ``GetRecord`` (the same URL ``urlencode`` would build)."""
        quoted = (
            identifier.translate(_QUOTE_PLUS)
            if identifier.isascii()
            else quote_plus(identifier, safe="")
        )
        return self._url_head + quoted + self._url_tail

    @staticmethod
    def _headers(body: etree._Element) -> list[_Head | None]:
        """The header of each record on a page, in page order; None for a record without a
        header or with an empty identifier. The identifier is the text of the header's first
        ``identifier``, stripped."""
        heads: list[_Head | None] = []
        for element in body.iterfind(_RECORD):
            header = element.find(_HEADER)
            identifier = None if header is None else header.findtext(_IDENTIFIER)
            if header is None or not identifier:
                heads.append(None)
            else:
                heads.append(
                    _Head(
                        element,
                        identifier.strip(),
                        parse_datestamp(header.findtext(_DATESTAMP)),
                        header.get("status") == "deleted",
                    )
                )
        return heads

    @staticmethod
    def _up_to_date(request: HarvestRequest, heads: list[_Head | None]) -> frozenset[str]:
        """The records of a page the store already holds at their datestamp (one question
        per page); their metadata is not serialised."""
        if request.up_to_date is None:
            return frozenset()
        listed = [(h.identifier, h.datestamp) for h in heads if h is not None and not h.deleted]
        return request.up_to_date(listed)

    def _record(self, head: _Head, listing: Listing, up_to_date: frozenset[str]) -> RawRecord:
        element, identifier, datestamp, deleted = head
        payload, media_type = b"", self._media_type
        omitted = not deleted and identifier in up_to_date  # the store has it: not serialised
        if not deleted and not omitted:
            metadata = element.find(_METADATA)
            child = (
                None if metadata is None else next(metadata.iterchildren(tag=etree.Element), None)
            )
            if child is not None:
                payload = serialise_record(child)
                if child.tag == _RDF:
                    media_type = "application/rdf+xml"
            elif metadata is not None and (text := (metadata.text or "").strip()):
                # escaped XML as text: passed on as received, for the mapper to judge
                payload = text.encode("utf-8")
                _note_once(listing, "escaped text", f"{identifier}: metadata sent as escaped text")
        return RawRecord(
            source=self.source.name,
            local_id=identifier,
            format=self.source.format,
            payload=payload,
            media_type=media_type,
            url=self.record_url(identifier),
            datestamp=datestamp,
            deleted=deleted,
            payload_omitted=omitted,
        )

    # -- the walk ---------------------------------------------------------------------------
    def list_records(self, request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        params: dict[str, str] = {"metadataPrefix": self.metadata_prefix}
        if self.set_spec:
            params["set"] = self.set_spec
        self.granularity()  # Identify first: the checkpoint is kept in its granularity
        if self.deleted_record == "no":
            listing.note("the repository keeps no deleted records: incremental runs miss deletions")
        if request.checkpoint and not request.full:
            params["from"] = self._in_granularity(request.checkpoint)
        fetcher = Fetcher()
        try:
            yield from self._walk(request, listing, params, fetcher)
        finally:
            self.client.drop_ahead()
            fetcher.close()

    def _walk(
        self,
        request: HarvestRequest,
        listing: Listing,
        params: dict[str, str],
        fetcher: Fetcher,
    ) -> Iterator[RawRecord]:
        cancel = request.cancel
        tokens: set[str] = set()
        empty_pages = 0
        self.client.send_ahead(fetcher, verb="ListRecords", **params)
        try:
            self._peek_ahead(fetcher, cancel, listing, tokens, empty_pages)
            pages: Pages = self.client.list_records(**params)
        except Cancelled:
            listing.mark_truncated("cancelled")
            return
        except OaiError as err:
            if not err.no_records_match:
                raise self._oai_error(err, "ListRecords") from err
            listing.pages += 1
            self._checkpoint(listing)
            listing.expected_total = 0
            listing.mark_complete()
            return
        self._checkpoint(listing)
        while True:
            listing.pages += 1
            body = _list_records(pages.page, listing)
            # what comes after this page is known before its records are read: if the walk
            # goes on, the next page is on its way (or is requested now) while this one is read
            heads = self._headers(body)
            listed = sum(head is not None for head in heads)
            empty_pages = empty_pages + 1 if listed == 0 else 0
            token = pages.resumption_token
            stop = self._stop_after(token, listing, tokens, empty_pages, listed)
            self._send_next(pages, fetcher, goes_on=stop is None and not cancel.is_set())
            known = self._up_to_date(request, heads)
            for head in heads:
                if cancel.is_set():
                    listing.mark_truncated("cancelled")
                    return
                if head is None:
                    listing.mark_truncated(f"a record on page {listing.pages} has no identifier")
                    continue
                listing.seen += 1
                yield self._record(head, listing, known)
            del heads
            if token is not None and token.complete_list_size:
                self._expect(listing, token.complete_list_size)
            if stop == "":
                break
            if stop is not None:
                listing.mark_truncated(stop)
                return
            if token is not None and token.token is not None:
                tokens.add(token.token)  # a non-empty token, or stop would not be None
            try:
                if cancel.is_set():
                    raise Cancelled
                self._peek_ahead(fetcher, cancel, listing, tokens, empty_pages)
                pages.advance()
            except Cancelled:
                listing.mark_truncated("cancelled")
                return
            except OaiError as err:
                if not err.no_records_match:
                    raise self._oai_error(err, f"ListRecords (page {listing.pages + 1})") from err
                listing.mark_truncated(f"noRecordsMatch on page {listing.pages + 1}")
                return
        if listing.expected_total is not None and listing.seen != listing.expected_total:
            listing.mark_truncated(
                f"listing ended after {listing.seen} records but completeListSize "
                f"was {listing.expected_total}"
            )
            return
        listing.mark_complete()

    def _send_next(self, pages: Pages, fetcher: Fetcher, *, goes_on: bool) -> None:
        """Have the next page on its way while this one is read, if the walk goes on."""
        if not goes_on:
            self.client.drop_ahead()
            return
        following = pages.next_arguments()
        if not self.client.sent_ahead(**following):
            self.client.drop_ahead()
            self.client.send_ahead(fetcher, **following)

    def _peek_ahead(
        self,
        fetcher: Fetcher,
        cancel: threading.Event,
        listing: Listing,
        tokens: set[str],
        empty_pages: int,
    ) -> None:
        """Wait for the page about to be read; if its bytes show for sure that the walk goes
        on after it, request the page after it now, before this one is parsed.

        Sure means: the page ends with its resumption token (unprefixed, no entity or CDATA
        in it, right before ``</ListRecords></OAI-PMH>``), the token is not empty and has
        not come before, and neither runaway guard can trip on this page (fewer than
        ``MAX_EMPTY_PAGES`` empty pages even if it is empty; ``completeListSize`` cannot be
        exceeded even if every ``record`` in its bytes were a record). Should the parsed page
        then lead elsewhere after all (a token that is not the page's last element), the
        early answer is dropped unread. Raises :class:`Cancelled`."""
        response = self.client.wait_ahead(cancel)
        if response is None or response.status != 200 or cancel.is_set():
            return
        content = response.content
        found = _TOKEN_AT_END.search(content, max(0, len(content) - 65536))
        if found is None or empty_pages + 1 >= MAX_EMPTY_PAGES:
            return
        try:
            token = found.group(2).decode("utf-8")
        except UnicodeDecodeError:
            return
        if not token.strip() or token in tokens:
            return
        expected = listing.expected_total
        attributes = found.group(1)
        if b"completeListSize" in attributes:
            size = _COMPLETE_LIST_SIZE.search(attributes)
            if size is None or (expected := _list_size(size.group(2).decode())) is None:
                return
        if expected is not None:
            most = content.count(b"record")  # every record tag has it: <record or <p:record
            if listing.seen + most > 2 * expected + 1000:
                return
        self.client.send_ahead(fetcher, resumptionToken=token, verb="ListRecords")

    def _stop_after(
        self,
        token: ResumptionToken | None,
        listing: Listing,
        tokens: set[str],
        empty_pages: int,
        listed: int,
    ) -> str | None:
        """Whether the walk goes on after this page: None if it does, "" if the listing ends
        here, or why it stops early. Decided before the page is consumed (so that the next
        page can be fetched meanwhile) from what the page holds; the same decision as after
        it, since consuming a page to its end adds exactly ``listed`` records."""
        if token is None or not (token.token or "").strip():
            return ""
        if token.token in tokens:
            return f"resumption token loop: {token.token!r} came back on page {listing.pages}"
        expected = listing.expected_total
        if token.complete_list_size and (size := _list_size(token.complete_list_size)) is not None:
            expected = size
        return self._runaway(listing.seen + listed, expected, empty_pages)

    def _checkpoint(self, listing: Listing) -> None:
        """The first response's responseDate, in the repository's granularity."""
        last = self.client.last
        stamp = parse_datestamp(last.text_of("responseDate") if last is not None else None)
        if stamp is None:
            listing.note("first response has no usable responseDate: no checkpoint saved")
            return
        listing.next_checkpoint = self._in_granularity(stamp.strftime("%Y-%m-%dT%H:%M:%SZ"))

    @staticmethod
    def _runaway(seen: int, expected: int | None, empty_pages: int) -> str | None:
        """A listing that never ends with fresh tokens: too many empty pages in a row, or far
        more records than the repository said it holds."""
        if empty_pages >= MAX_EMPTY_PAGES:
            return f"{empty_pages} empty pages in a row, each with a new resumption token"
        if expected is not None and seen > 2 * expected + 1000:
            return f"{seen} records seen, far beyond completeListSize {expected}"
        return None

    @staticmethod
    def _expect(listing: Listing, value: str) -> None:
        size = _list_size(value)
        if size is None:
            listing.note(f"ignored a non-numeric completeListSize {value!r}")
            return
        if listing.expected_total is not None and listing.expected_total != size:
            listing.note(f"completeListSize changed from {listing.expected_total} to {size}")
        listing.expected_total = size
