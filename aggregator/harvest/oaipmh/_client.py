"""The HTTP side of the OAI-PMH harvester: a small OAI-PMH 2.0 client of our own.

- :class:`OaiClient` sends requests through :class:`aggregator.net.client.HttpSession` (timeouts,
  retries honouring ``Retry-After``, size cap, SSRF guard), GET or POST, and can send one page
  ahead from a :class:`Fetcher` thread;
- :class:`Page` is a response parsed once, by a hardened parser (:func:`page_parser`);
- :class:`Pages` walks a list verb page by page over resumption tokens, so the harvester
  drives the paging; an OAI-PMH ``error`` in a page raises :class:`OaiError`;
- :func:`identify` reads the ``Identify`` answer; :func:`serialise_record` gives the bytes kept
  for a record.

The protocol part is small (request arguments, the resumption token, the error element) and
the harvester needs its own transport, parser and paging around it, so it is written here
rather than adapted from a client library: sickle, which this replaced, offered no transport
hook, and its iterator searched the whole page for errors and tokens (every element of 100
records). The tests still use sickle as an independent client of our OAI-PMH server.
"""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, wait
from dataclasses import dataclass
from datetime import UTC, datetime

from lxml import etree

from aggregator.core.errors import HarvestError
from aggregator.net.client import HttpSession, Response

OAI_NS = "http://www.openarchives.org/OAI/2.0/"
OAI = "{" + OAI_NS + "}"

_local = threading.local()


def page_parser() -> etree.XMLParser:
    """Per-thread parser for whole OAI-PMH pages: nothing expanded, loaded or recovered.

    Unlike :func:`aggregator.core.xml.parse_xml` it does not refuse a page that carries a DOCTYPE:
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


class OaiError(Exception):
    """An OAI-PMH ``error`` element a provider answered with: its ``code`` (as sent, for
    example ``noRecordsMatch``; ``OAIError`` when it has none) and its text."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def no_records_match(self) -> bool:
        """``noRecordsMatch``: the list is empty (an answer, not a failure, for a first page)."""
        return self.code[:1].upper() + self.code[1:] == "NoRecordsMatch"


@dataclass(frozen=True, slots=True)
class ResumptionToken:
    """A ``resumptionToken`` element: its text and attributes, as sent (None when absent)."""

    token: str | None
    cursor: str | None = None
    complete_list_size: str | None = None
    expiration_date: str | None = None


class Page:
    """One response, parsed once, on first use (``xml``)."""

    def __init__(self, http_response: Response, params: Mapping[str, str]) -> None:
        self.http_response = http_response
        self.params = params
        self._xml: etree._Element | None = None

    @property
    def xml(self) -> etree._Element:
        if self._xml is None:
            resp = self.http_response
            try:
                root = etree.fromstring(resp.content, parser=page_parser())
            except etree.XMLSyntaxError as err:
                raise HarvestError(
                    f"malformed OAI-PMH response from {resp.url} (line {err.lineno}): {err.msg}",
                    code="malformedResponse",
                ) from err
            if root.tag != OAI + "OAI-PMH":
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
        element = self.xml.find(OAI + name)
        return None if element is None or element.text is None else element.text.strip()

    def error(self, verb: str) -> OaiError | None:
        """The page's OAI-PMH error, if it has one: looked up where OAI-PMH puts it (a child
        of the root); the whole page is searched only when it holds no element of the verb
        (a provider that nests it elsewhere), never the records of a page that does."""
        root = self.xml
        element = root.find(OAI + "error")
        if element is None and root.find(OAI + verb) is None:
            element = root.find(".//" + OAI + "error")
        if element is None:
            return None
        return OaiError(element.get("code", "OAIError"), element.text or "")

    def resumption_token(self, verb: str) -> ResumptionToken | None:
        """The page's resumption token: where OAI-PMH puts it (the last child of the verb
        element), else anywhere in the verb element, else the first in the whole page."""
        root = self.xml
        body = root.find(OAI + verb)
        element = None
        if body is not None and len(body):
            element = body[-1] if body[-1].tag == OAI + "resumptionToken" else None
            if element is None:
                element = body.find(OAI + "resumptionToken")
        if element is None:
            element = root.find(".//" + OAI + "resumptionToken")
            if element is None:
                return None
        return ResumptionToken(
            token=element.text,
            cursor=element.get("cursor"),
            complete_list_size=element.get("completeListSize"),
            expiration_date=element.get("expirationDate"),
        )


def identify(page: Page) -> dict[str, str | None]:
    """What an ``Identify`` answer says: the text of the first element of each local name
    under ``Identify`` (``granularity``, ``deletedRecord``, ...). HarvestError without one."""
    body = page.xml.find(".//" + OAI + "Identify")
    if body is None:
        raise HarvestError(
            f"{page.http_response.url}: Identify response lacks required elements",
            code="badIdentify",
        )
    fields: dict[str, str | None] = {}
    for element in body.iterdescendants(tag=etree.Element):
        fields.setdefault(etree.QName(element).localname, element.text)
    return fields


class Pages:
    """A list verb walked page by page: ``page`` is the current one (the first is requested
    when the walk is made), ``advance()`` requests the next with the page's resumption token.
    Both raise :class:`OaiError` for a page that carries an OAI-PMH error."""

    def __init__(self, client: OaiClient, params: dict[str, str]) -> None:
        self.client = client
        self.params = params
        self.verb = params["verb"]
        self.resumption_token: ResumptionToken | None = None
        self.page = self._fetch(params)

    def advance(self) -> None:
        params = self.params if self.resumption_token is None else self.next_arguments()
        self.page = self._fetch(params)

    def _fetch(self, params: dict[str, str]) -> Page:
        page = self.client.request(**params)
        error = page.error(self.verb)
        if error is not None:
            raise error
        self.resumption_token = page.resumption_token(self.verb)
        return page

    def next_arguments(self) -> dict[str, str]:
        """The arguments ``advance()`` sends for the page after this one (when the walk goes
        on, that is when this page has a token): the verb and the resumption token."""
        token = self.resumption_token
        value = token.token if token is not None and token.token is not None else ""
        return {"resumptionToken": value, "verb": self.verb}


class Cancelled(Exception):
    """``request.cancel`` was set while the walk waited for a page."""


class Fetcher:
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


class OaiClient:
    """Requests to one OAI-PMH base URL through the source's HttpSession, answered as
    :class:`Page`; ``method`` is ``GET`` (arguments in the query) or ``POST`` (a form).

    ``send_ahead`` starts a request in a :class:`Fetcher` thread before the walk asks for it
    (at most two are kept: the page about to be read and the one after it); when the walk then
    asks with exactly the arguments of the oldest, ``request`` takes that response (and
    raises its transport error, if any, then and there), otherwise it drops them and sends its
    own request. Pages are parsed and read only in the iterating thread, never in the
    fetcher's."""

    def __init__(self, endpoint: str, http: HttpSession, method: str) -> None:
        self.endpoint = endpoint
        self.http = http
        self.http_method = method
        self.last: Page | None = None
        self._ahead: list[tuple[dict[str, str], Future[Response]]] = []  # oldest first

    def list_records(self, **kwargs: str) -> Pages:
        """``ListRecords`` with these arguments; its first page is requested now."""
        return Pages(self, {**kwargs, "verb": "ListRecords"})

    def _send(self, params: dict[str, str]) -> Response:
        if self.http_method == "POST":
            return self.http.post(self.endpoint, data=params, raise_for_status=False)
        return self.http.get(self.endpoint, params=params, raise_for_status=False)

    def send_ahead(self, fetcher: Fetcher, **kwargs: str) -> None:
        params = {k: str(v) for k, v in kwargs.items()}
        self._ahead.append((params, fetcher.submit(lambda: self._send(params))))
        del self._ahead[:-2]

    def sent_ahead(self, **kwargs: str) -> bool:
        """Whether the newest request sent ahead has exactly these arguments."""
        return bool(self._ahead) and self._ahead[-1][0] == kwargs

    def wait_ahead(self, cancel: threading.Event, poll: float = 0.1) -> Response | None:
        """Wait for the oldest request sent ahead; its response (None if it failed or if
        there is none), or raise :class:`Cancelled` if ``cancel`` was set meanwhile."""
        if not self._ahead:
            return None
        future = self._ahead[0][1]
        while not future.done():
            wait((future,), timeout=poll)
            if cancel.is_set():
                raise Cancelled
        return None if future.exception() is not None else future.result()

    def drop_ahead(self, keep: int = 0) -> None:
        """Forget the requests sent ahead but the oldest ``keep`` (their answers are dropped)."""
        del self._ahead[keep:]

    def request(self, **kwargs: str) -> Page:
        """One request with these arguments (the verb among them)."""
        params = {k: str(v) for k, v in kwargs.items()}
        if self._ahead and self._ahead[0][0] == params:
            resp = self._ahead.pop(0)[1].result()
        else:
            self._ahead.clear()
            resp = self._send(params)
        page = Page(resp, params)
        self.last = page
        if resp.status >= 400:
            # a few servers send OAI errors with a 4xx status; anything else is transport
            try:
                if page.xml.find(OAI + "error") is not None:
                    return page
            except HarvestError:
                pass
            raise resp.status_error(resp.url)
        return page
