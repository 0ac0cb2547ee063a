"""OAI-PMH 2.0 harvester: ``ListRecords`` over resumption tokens, via sickle.

sickle does the protocol: request parameters, resumption tokens, mapping OAI error codes to
exceptions, the ``Identify`` and ``Header`` models. Everything under it is ours:

- transport goes through :class:`aggregator.http.HttpClient` (timeouts, retries honouring
  ``Retry-After``, size cap, SSRF guard) by overriding ``Sickle.harvest``;
- each page is parsed once by a hardened lxml parser (no entity expansion, no DTD loading, no
  network, no recovery from broken XML; sickle's own parser has ``recover=True`` and would
  silently drop half a broken page);
- paging is driven page by page here, so the walk can count pages and records, stop on
  cancellation, detect a resumption-token loop and decide whether the listing was complete.

See docs/protocols/oai-pmh.md for what counts as a complete listing.
"""

from __future__ import annotations

import copy
import logging
import re
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from urllib.parse import urlencode, urlsplit

from lxml import etree
from sickle import Sickle, oaiexceptions
from sickle.iterator import BaseOAIIterator
from sickle.models import Header, Identify
from sickle.response import OAIResponse

from aggregator.config import SourceConfig
from aggregator.errors import ConfigError, HarvestError, TransportError
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.http import HttpClient, Response
from aggregator.models import RawRecord

log = logging.getLogger(__name__)

OAI_NS = "http://www.openarchives.org/OAI/2.0/"
_OAI = "{" + OAI_NS + "}"
_RDF = "{http://www.w3.org/1999/02/22-rdf-syntax-ns#}RDF"
RDF_PREFIXES = frozenset({"dcat_ap", "dcat", "dcat-ap", "rdf", "dcat_ap_de", "dcatap"})
OPTIONS = frozenset({"metadata_prefix", "set", "method"})
DAY = "YYYY-MM-DD"
SECONDS = "YYYY-MM-DDThh:mm:ssZ"
MAX_EMPTY_PAGES = 50  # some providers send a few empty pages; fifty in a row is a loop
# OAI-PMH 2.0 section 3.4: metadataPrefix and setSpec are restricted to unreserved URI chars
_PREFIX = re.compile(r"^[A-Za-z0-9\-_.!~*'()]+$")
_SET = re.compile(r"^[A-Za-z0-9\-_.!~*'()]+(:[A-Za-z0-9\-_.!~*'()]+)*$")
_SICKLE_ERRORS = (
    oaiexceptions.BadArgument,
    oaiexceptions.BadVerb,
    oaiexceptions.BadResumptionToken,
    oaiexceptions.CannotDisseminateFormat,
    oaiexceptions.IdDoesNotExist,
    oaiexceptions.NoSetHierarchy,
    oaiexceptions.NoMetadataFormat,
    oaiexceptions.NoRecordsMatch,
    oaiexceptions.OAIError,
)
_local = threading.local()


def page_parser() -> etree.XMLParser:
    """Per-thread parser for whole OAI-PMH pages: nothing expanded, loaded or recovered.

    Unlike :func:`aggregator.xml.parse_xml` it does not refuse a page that carries a DOCTYPE:
    entities stay unexpanded references, so one hostile record reaches the mapper as bytes
    (and fails there, alone) instead of stopping the whole listing.
    """
    parser: etree.XMLParser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = etree.XMLParser(
            resolve_entities=False,
            no_network=True,
            load_dtd=False,
            dtd_validation=False,
            huge_tree=False,
            recover=False,
            remove_blank_text=False,
        )  # no collect_ids=False: with it libxml2 opens a DOCTYPE's external DTD file
        _local.parser = parser
    return parser


def parse_datestamp(value: str | None) -> datetime | None:
    """An OAI datestamp (day or seconds granularity, fractions tolerated) as aware UTC."""
    if not value:
        return None
    text = value.strip()
    try:
        if len(text) == 10:
            return datetime.fromisoformat(text).replace(tzinfo=UTC)
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _note_once(listing: Listing, key: str, message: str) -> None:
    """Note a fact once per listing (``key`` is a part of the message that identifies it)."""
    if not any(key in note for note in listing.notes):
        listing.note(message)


def serialise_record(element: etree._Element) -> bytes:
    """The bytes kept for a record: the ``<metadata>`` child, serialised on its own.

    The child is the record document itself (``rdf:RDF`` for ``dcat_ap``); the ``metadata``
    wrapper and the envelope are protocol. A copy is serialised so that the namespaces the
    record declares stay as received while those it uses from the envelope are declared on
    it, and none it does not use are dragged in: the bytes parse on their own, are what the
    provider embedded (for a self-contained record, byte for byte apart from quoting and
    character references lxml normalises), and are the same whenever the record is the same,
    so the store can tell unchanged records by their hash.
    """
    return etree.tostring(
        copy.deepcopy(element), encoding="UTF-8", xml_declaration=False, with_tail=False
    )


class _Page(OAIResponse):  # type: ignore[misc]
    """One response, parsed once (sickle's ``OAIResponse.xml`` re-parses on every access)."""

    def __init__(self, http_response: Response, params: Mapping[str, str]) -> None:
        super().__init__(http_response, params)
        self._xml: etree._Element | None = None

    @property
    def xml(self) -> etree._Element:
        if self._xml is None:
            resp: Response = self.http_response
            try:
                root = etree.fromstring(resp.content, parser=page_parser())
            except etree.XMLSyntaxError as err:
                raise HarvestError(
                    f"malformed OAI-PMH response from {resp.url} (line {err.lineno}): {err.msg}",
                    code="malformedResponse",
                ) from err
            if root.tag != _OAI + "OAI-PMH":
                raise HarvestError(
                    f"{resp.url} did not answer with an OAI-PMH 2.0 document (root {root.tag})",
                    code="notOaiPmh",
                )
            self._xml = root
        return self._xml

    @property
    def has_doctype(self) -> bool:
        docinfo = self.xml.getroottree().docinfo
        return docinfo.internalDTD is not None or docinfo.externalDTD is not None

    def text_of(self, name: str) -> str | None:
        element = self.xml.find(_OAI + name)
        return None if element is None or element.text is None else element.text.strip()


class _Pages(BaseOAIIterator):  # type: ignore[misc]
    """sickle's iterator reduced to pages: ``page`` is the current one, ``advance()`` fetches
    the next with the resumption token sickle extracted (and raises sickle's OAI errors)."""

    @property
    def page(self) -> _Page:
        page: _Page = self.oai_response
        return page

    def advance(self) -> None:
        self._next_response()


class _Sickle(Sickle):  # type: ignore[misc]
    """Sickle whose requests go through our HttpClient and come back as :class:`_Page`."""

    def __init__(self, endpoint: str, http: HttpClient, method: str) -> None:
        super().__init__(endpoint, http_method=method, iterator=_Pages, max_retries=0)
        self.http = http
        self.last: _Page | None = None

    def harvest(self, **kwargs: str) -> _Page:
        params = {k: str(v) for k, v in kwargs.items()}
        if self.http_method == "POST":
            resp = self.http.post(self.endpoint, data=params, raise_for_status=False)
        else:
            resp = self.http.get(self.endpoint, params=params, raise_for_status=False)
        page = _Page(resp, params)
        self.last = page
        if resp.status >= 400:
            # a few servers send OAI errors with a 4xx status; anything else is transport
            try:
                if page.xml.find(_OAI + "error") is not None:
                    return page
            except HarvestError:
                pass
            excerpt = resp.content[:300].decode("utf-8", errors="replace")
            raise TransportError(
                f"{resp.url} returned HTTP {resp.status}: {excerpt}",
                url=resp.url,
                status=resp.status,
            )
        return page


class OaiPmhHarvester(Harvester):
    """Harvest an OAI-PMH 2.0 repository with ``ListRecords``.

    Options: ``metadata_prefix`` (default ``dcat_ap``), ``set`` (a setSpec), ``method``
    (``GET`` or ``POST``, default ``GET``).
    """

    name = "oai-pmh"
    formats = ("dcat",)
    supports_incremental = True

    def __init__(self, source: SourceConfig, http: HttpClient) -> None:
        super().__init__(source, http)
        self.metadata_prefix: str = source.option("metadata_prefix", "dcat_ap")
        self.set_spec: str | None = source.option("set")
        self.client = _Sickle(source.url, http, str(source.option("method", "GET")).upper())
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
        unknown = set(source.options) - OPTIONS
        if unknown:
            raise ConfigError(
                f"[{where}.options]: unknown option(s) {', '.join(sorted(unknown))} "
                f"(known: {', '.join(sorted(OPTIONS))})"
            )
        prefix = source.option("metadata_prefix", "dcat_ap")
        if not isinstance(prefix, str) or not _PREFIX.match(prefix):
            raise ConfigError(f"[{where}.options]: metadata_prefix must be a metadataPrefix")
        set_spec = source.option("set")
        if set_spec is not None and (not isinstance(set_spec, str) or not _SET.match(set_spec)):
            raise ConfigError(f"[{where}.options]: set must be a setSpec such as 'a' or 'a:b'")
        method = source.option("method", "GET")
        if not isinstance(method, str) or method.upper() not in ("GET", "POST"):
            raise ConfigError(f"[{where}.options]: method must be GET or POST")

    # -- protocol helpers -------------------------------------------------------------------
    def granularity(self) -> str:
        """The repository's datestamp granularity, from one Identify request per harvester."""
        if self._granularity is None:
            page = self.client.harvest(verb="Identify")
            error = page.xml.find(_OAI + "error")
            if error is not None:
                code = error.get("code", "OAIError")
                raise HarvestError(
                    f"{self.source.url} answered Identify with {code}: {error.text or ''}",
                    code=code,
                )
            try:
                identify = Identify(page)
            except (AttributeError, IndexError, TypeError) as err:
                raise HarvestError(
                    f"{self.source.url}: Identify response lacks required elements",
                    code="badIdentify",
                ) from err
            self.deleted_record = str(getattr(identify, "deletedRecord", "") or "").strip()
            value = str(getattr(identify, "granularity", "") or "").strip()
            # every repository must accept day granularity; seconds only when it says so
            self._granularity = SECONDS if value == SECONDS else DAY
        return self._granularity

    def _in_granularity(self, stamp: str) -> str:
        return stamp[:10] if self.granularity() == DAY else stamp

    def _oai_error(self, err: Exception, verb: str) -> HarvestError:
        code = "OAIError"
        last = self.client.last
        if last is not None:
            element = last.xml.find(".//" + _OAI + "error")
            if element is not None:
                code = element.get("code", code)
        return HarvestError(f"{self.source.url} answered {verb} with {code}: {err}", code=code)

    def record_url(self, identifier: str) -> str:
        query = urlencode(
            {"verb": "GetRecord", "identifier": identifier, "metadataPrefix": self.metadata_prefix}
        )
        return f"{self.source.url}?{query}"

    def _record(self, element: etree._Element, listing: Listing) -> RawRecord | None:
        header_element = element.find(_OAI + "header")
        header = None if header_element is None else Header(header_element)
        if header is None or not header.identifier:
            listing.mark_truncated(f"a record on page {listing.pages} has no identifier")
            return None
        identifier = header.identifier.strip()
        payload, media_type = b"", "application/xml"
        if self.metadata_prefix.lower() in RDF_PREFIXES:
            media_type = "application/rdf+xml"
        if not header.deleted:
            metadata = element.find(_OAI + "metadata")
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
            datestamp=parse_datestamp(header.datestamp),
            deleted=header.deleted,
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
        try:
            pages: _Pages = self.client.ListRecords(**params)
        except oaiexceptions.NoRecordsMatch:
            listing.pages += 1
            self._checkpoint(listing)
            listing.expected_total = 0
            listing.mark_complete()
            return
        except _SICKLE_ERRORS as err:
            raise self._oai_error(err, "ListRecords") from err
        self._checkpoint(listing)
        tokens: set[str] = set()
        empty_pages = 0
        while True:
            page = pages.page
            listing.pages += 1
            if page.has_doctype:
                _note_once(
                    listing, "DOCTYPE", f"page {listing.pages} declares a DOCTYPE; not expanded"
                )
            body = page.xml.find(_OAI + "ListRecords")
            if body is None:
                raise HarvestError(
                    f"{page.http_response.url}: page {listing.pages} has no ListRecords element",
                    code="malformedResponse",
                )
            before = listing.seen
            for element in body.iterfind(_OAI + "record"):
                if request.cancel.is_set():
                    listing.mark_truncated("cancelled")
                    return
                record = self._record(element, listing)
                if record is not None:
                    listing.seen += 1
                    yield record
            token = pages.resumption_token
            if token is not None and token.complete_list_size:
                self._expect(listing, token.complete_list_size)
            if token is None or not (token.token or "").strip():
                break
            if token.token in tokens:
                listing.mark_truncated(
                    f"resumption token loop: {token.token!r} came back on page {listing.pages}"
                )
                return
            empty_pages = empty_pages + 1 if listing.seen == before else 0
            runaway = self._runaway(listing, empty_pages)
            if runaway:
                listing.mark_truncated(runaway)
                return
            tokens.add(token.token)
            if request.cancel.is_set():
                listing.mark_truncated("cancelled")
                return
            try:
                pages.advance()
            except oaiexceptions.NoRecordsMatch:
                listing.mark_truncated(f"noRecordsMatch on page {listing.pages + 1}")
                return
            except _SICKLE_ERRORS as err:
                raise self._oai_error(err, f"ListRecords (page {listing.pages + 1})") from err
        if listing.expected_total is not None and listing.seen != listing.expected_total:
            listing.mark_truncated(
                f"listing ended after {listing.seen} records but completeListSize "
                f"was {listing.expected_total}"
            )
            return
        listing.mark_complete()

    def _checkpoint(self, listing: Listing) -> None:
        """The first response's responseDate, in the repository's granularity."""
        last = self.client.last
        stamp = parse_datestamp(last.text_of("responseDate") if last is not None else None)
        if stamp is None:
            listing.note("first response has no usable responseDate: no checkpoint saved")
            return
        listing.next_checkpoint = self._in_granularity(stamp.strftime("%Y-%m-%dT%H:%M:%SZ"))

    @staticmethod
    def _runaway(listing: Listing, empty_pages: int) -> str | None:
        """A listing that never ends with fresh tokens: too many empty pages in a row, or far
        more records than the repository said it holds."""
        if empty_pages >= MAX_EMPTY_PAGES:
            return f"{empty_pages} empty pages in a row, each with a new resumption token"
        expected = listing.expected_total
        if expected is not None and listing.seen > 2 * expected + 1000:
            return f"{listing.seen} records seen, far beyond completeListSize {expected}"
        return None

    @staticmethod
    def _expect(listing: Listing, value: str) -> None:
        try:
            size = int(value)
        except ValueError:
            listing.note(f"ignored a non-numeric completeListSize {value!r}")
            return
        if listing.expected_total is not None and listing.expected_total != size:
            listing.note(f"completeListSize changed from {listing.expected_total} to {size}")
        listing.expected_total = size
