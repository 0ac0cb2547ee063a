"""OAI-PMH 2.0 harvester: ``ListRecords`` over resumption tokens, via sickle.

sickle does the protocol: request parameters, resumption tokens, mapping OAI error codes to
exceptions, the ``Identify`` model. Everything under it is ours:

- transport goes through :class:`aggregator.http.HttpClient` (timeouts, retries honouring
  ``Retry-After``, size cap, SSRF guard) by overriding ``Sickle.harvest``;
- each page is parsed once by a hardened lxml parser (no entity expansion, no DTD loading, no
  network, no recovery from broken XML; sickle's own parser has ``recover=True`` and would
  silently drop half a broken page);
- paging is driven page by page here, so the walk can count pages and records, stop on
  cancellation, detect a resumption-token loop and decide whether the listing was complete;
- the request for the next page is sent (from a helper thread) as soon as the current page's
  resumption token is known for sure (from the end of its raw bytes, else once it is parsed),
  so the provider builds the next page and it travels while the current one is parsed and
  read: one page ahead, never more; record headers are read directly rather than through
  sickle's ``Header`` model (a regular expression per record).

See docs/protocols/oai-pmh.md for what counts as a complete listing.
"""

from __future__ import annotations

import copy
import logging
import queue
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, wait
from datetime import UTC, datetime
from urllib.parse import quote_plus, urlencode, urlsplit

from lxml import etree
from sickle import Sickle, oaiexceptions
from sickle.iterator import BaseOAIIterator
from sickle.models import Identify, ResumptionToken
from sickle.response import OAIResponse

from aggregator.config import SourceConfig
from aggregator.errors import ConfigError, HarvestError, TransportError
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.http import HttpClient, Response
from aggregator.models import RawRecord

log = logging.getLogger(__name__)

OAI_NS = "http://www.openarchives.org/OAI/2.0/"
_OAI = "{" + OAI_NS + "}"
_LIST_RECORDS = _OAI + "ListRecords"
_RECORD = _OAI + "record"
_HEADER = _OAI + "header"
_IDENTIFIER = _OAI + "identifier"
_DATESTAMP = _OAI + "datestamp"
_METADATA = _OAI + "metadata"
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


def _list_size(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


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

    def next_arguments(self) -> dict[str, str]:
        """The arguments ``advance()`` will send: sickle's ``_next_response`` sends the verb
        and the resumption token it extracted. Only used to start that request early; should
        sickle ever send something else, the early response is not used."""
        token = self.resumption_token
        return {"resumptionToken": token.token if token is not None else "", "verb": self.verb}


class _Cancelled(Exception):
    """``request.cancel`` was set while the walk waited for a page."""


class _Fetcher:
    """A daemon thread that sends one request at a time for the walk, so that the next page
    travels while the current one is parsed and consumed. It keeps one HTTP session (the
    client's sessions are per thread) for the whole listing."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[Response], Callable[[], Response]] | None]
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="oai-pmh-pages", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Response]) -> Future[Response]:
        future: Future[Response] = Future()
        self._jobs.put((future, fn))
        return future

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as err:  # handed over with the response, raised there
                future.set_exception(err)

    def close(self) -> None:
        """End the thread after the request it may be sending (whose response is dropped)."""
        self._jobs.put(None)


class _Sickle(Sickle):  # type: ignore[misc]
    """Sickle whose requests go through our HttpClient and come back as :class:`_Page`.

    ``send_ahead`` starts a request in a :class:`_Fetcher` thread before sickle asks for it
    (at most two are kept: the page about to be read and the one after it); when sickle then
    asks with exactly the arguments of the oldest, ``harvest`` takes that response (and
    raises its transport error, if any, then and there), otherwise it drops them and sends its
    own request. Pages are parsed and read only in the iterating thread, never in the
    fetcher's."""

    def __init__(self, endpoint: str, http: HttpClient, method: str) -> None:
        super().__init__(endpoint, http_method=method, iterator=_Pages, max_retries=0)
        self.http = http
        self.last: _Page | None = None
        self._ahead: list[tuple[dict[str, str], Future[Response]]] = []  # oldest first

    def _send(self, params: dict[str, str]) -> Response:
        if self.http_method == "POST":
            return self.http.post(self.endpoint, data=params, raise_for_status=False)
        return self.http.get(self.endpoint, params=params, raise_for_status=False)

    def send_ahead(self, fetcher: _Fetcher, **kwargs: str) -> None:
        params = {k: str(v) for k, v in kwargs.items()}
        self._ahead.append((params, fetcher.submit(lambda: self._send(params))))
        del self._ahead[:-2]

    def sent_ahead(self, **kwargs: str) -> bool:
        """Whether the newest request sent ahead has exactly these arguments."""
        return bool(self._ahead) and self._ahead[-1][0] == kwargs

    def wait_ahead(self, cancel: threading.Event, poll: float = 0.1) -> Response | None:
        """Wait for the oldest request sent ahead; its response (None if it failed or if
        there is none), or raise :class:`_Cancelled` if ``cancel`` was set meanwhile."""
        if not self._ahead:
            return None
        future = self._ahead[0][1]
        while not future.done():
            wait((future,), timeout=poll)
            if cancel.is_set():
                raise _Cancelled
        return None if future.exception() is not None else future.result()

    def drop_ahead(self, keep: int = 0) -> None:
        """Forget the requests sent ahead but the oldest ``keep`` (their answers are dropped)."""
        del self._ahead[keep:]

    def harvest(self, **kwargs: str) -> _Page:
        params = {k: str(v) for k, v in kwargs.items()}
        if self._ahead and self._ahead[0][0] == params:
            resp = self._ahead.pop(0)[1].result()
        else:
            self._ahead.clear()
            resp = self._send(params)
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
        """The record on its own: ``GetRecord`` (the same URL ``urlencode`` would build)."""
        quoted = (
            identifier.translate(_QUOTE_PLUS)
            if identifier.isascii()
            else quote_plus(identifier, safe="")
        )
        return self._url_head + quoted + self._url_tail

    @staticmethod
    def _headers(body: etree._Element) -> list[tuple[etree._Element, etree._Element, str] | None]:
        """(record, header, identifier) of each record on a page, in page order; None for a
        record without a header or with an empty identifier. The identifier is the text of
        the header's first ``identifier``, as sickle's ``Header`` reads it."""
        heads: list[tuple[etree._Element, etree._Element, str] | None] = []
        for element in body.iterfind(_RECORD):
            header = element.find(_HEADER)
            identifier = None if header is None else header.findtext(_IDENTIFIER)
            if header is None or not identifier:
                heads.append(None)
            else:
                heads.append((element, header, identifier))
        return heads

    def _record(
        self, element: etree._Element, header: etree._Element, identifier: str, listing: Listing
    ) -> RawRecord:
        identifier = identifier.strip()
        deleted = header.get("status") == "deleted"
        payload, media_type = b"", self._media_type
        if not deleted:
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
            datestamp=parse_datestamp(header.findtext(_DATESTAMP)),
            deleted=deleted,
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
        fetcher = _Fetcher()
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
        fetcher: _Fetcher,
    ) -> Iterator[RawRecord]:
        cancel = request.cancel
        tokens: set[str] = set()
        empty_pages = 0
        self.client.send_ahead(fetcher, verb="ListRecords", **params)
        try:
            self._peek_ahead(fetcher, cancel, listing, tokens, empty_pages)
            pages: _Pages = self.client.ListRecords(**params)
        except _Cancelled:
            listing.mark_truncated("cancelled")
            return
        except oaiexceptions.NoRecordsMatch:
            listing.pages += 1
            self._checkpoint(listing)
            listing.expected_total = 0
            listing.mark_complete()
            return
        except _SICKLE_ERRORS as err:
            raise self._oai_error(err, "ListRecords") from err
        self._checkpoint(listing)
        while True:
            page = pages.page
            listing.pages += 1
            if page.has_doctype:
                _note_once(
                    listing, "DOCTYPE", f"page {listing.pages} declares a DOCTYPE; not expanded"
                )
            body = page.xml.find(_LIST_RECORDS)
            if body is None:
                raise HarvestError(
                    f"{page.http_response.url}: page {listing.pages} has no ListRecords element",
                    code="malformedResponse",
                )
            # what comes after this page is known before its records are read: if the walk
            # goes on, the next page is on its way (or is requested now) while this one is read
            heads = self._headers(body)
            listed = sum(head is not None for head in heads)
            empty_pages = empty_pages + 1 if listed == 0 else 0
            token = pages.resumption_token
            stop = self._stop_after(token, listing, tokens, empty_pages, listed)
            if stop is None and not cancel.is_set():
                following = pages.next_arguments()
                if not self.client.sent_ahead(**following):
                    self.client.drop_ahead()
                    self.client.send_ahead(fetcher, **following)
            else:
                self.client.drop_ahead()
            for head in heads:
                if cancel.is_set():
                    listing.mark_truncated("cancelled")
                    return
                if head is None:
                    listing.mark_truncated(f"a record on page {listing.pages} has no identifier")
                    continue
                listing.seen += 1
                yield self._record(*head, listing)
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
                    raise _Cancelled
                self._peek_ahead(fetcher, cancel, listing, tokens, empty_pages)
                pages.advance()
            except _Cancelled:
                listing.mark_truncated("cancelled")
                return
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

    def _peek_ahead(
        self,
        fetcher: _Fetcher,
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
        then lead elsewhere after all (sickle reads the first token in document order), the
        early answer is dropped unread. Raises :class:`_Cancelled`."""
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
