"""The HTTP side of the OAI-PMH harvester: sickle, adapted.

- :class:`OaiClient` is sickle whose requests go through :class:`aggregator.net.client.HttpSession`
  (timeouts, retries honouring ``Retry-After``, size cap, SSRF guard) and can be sent one page
  ahead from a :class:`Fetcher` thread;
- :class:`Page` is a response parsed once, by a hardened parser (:func:`page_parser`);
- :class:`Pages` is sickle's iterator reduced to pages, so the harvester drives the paging;
- :func:`serialise_record` gives the bytes kept for a record.
"""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, wait
from datetime import UTC, datetime

from lxml import etree
from sickle import Sickle, oaiexceptions
from sickle.iterator import BaseOAIIterator
from sickle.models import ResumptionToken
from sickle.response import OAIResponse

from aggregator.errors import HarvestError
from aggregator.net.client import HttpSession, Response

OAI_NS = "http://www.openarchives.org/OAI/2.0/"
OAI = "{" + OAI_NS + "}"

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


class Page(OAIResponse):  # type: ignore[misc]
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


class Pages(BaseOAIIterator):  # type: ignore[misc]
    """sickle's iterator reduced to pages: ``page`` is the current one, ``advance()`` fetches
    the next with the resumption token sickle extracted (and raises sickle's OAI errors)."""

    resumption_token: ResumptionToken | None

    @property
    def page(self) -> Page:
        page: Page = self.oai_response
        return page

    def advance(self) -> None:
        self._next_response()

    def _next_response(self) -> None:
        """sickle's, with the error looked up where OAI-PMH puts it (a child of the root)
        instead of in the whole page (every element of 100 records); the whole page is
        searched only when it holds no element of the verb, as sickle did."""
        params = self.params
        token = self.resumption_token
        if token:
            params = {"resumptionToken": token.token, "verb": self.verb}
        self.oai_response = self.sickle.harvest(**params)
        root = self.oai_response.xml
        error = root.find(OAI + "error")
        if error is None and root.find(OAI + self.verb) is None:
            error = root.find(".//" + OAI + "error")
        if error is not None:
            code = error.attrib.get("code", "UNKNOWN")
            exception = getattr(oaiexceptions, code[:1].upper() + code[1:], None)
            if not isinstance(exception, type) or not issubclass(exception, Exception):
                exception = oaiexceptions.OAIError
            raise exception(error.text or "")
        self.resumption_token = self._get_resumption_token()

    def _get_resumption_token(self) -> ResumptionToken | None:
        """sickle's, reading the token where OAI-PMH puts it (the last child of the verb
        element) before searching the whole page for it, as sickle always did."""
        root = self.oai_response.xml
        verb = root.find(OAI + self.verb)
        element = None
        if verb is not None and len(verb):
            element = verb[-1] if verb[-1].tag == OAI + "resumptionToken" else None
            if element is None:
                element = verb.find(OAI + "resumptionToken")
        if element is None:
            element = root.find(".//" + OAI + "resumptionToken")
            if element is None:
                return None
        return ResumptionToken(
            token=element.text,
            cursor=element.attrib.get("cursor"),
            complete_list_size=element.attrib.get("completeListSize"),
            expiration_date=element.attrib.get("expirationDate"),
        )

    def next_arguments(self) -> dict[str, str]:
        """The arguments ``advance()`` will send: sickle's ``_next_response`` sends the verb
        and the resumption token it extracted. Only used to start that request early; should
        sickle ever send something else, the early response is not used."""
        token = self.resumption_token
        return {"resumptionToken": token.token if token is not None else "", "verb": self.verb}


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


class OaiClient(Sickle):  # type: ignore[misc]
    """Sickle whose requests go through the source's HttpSession and come back as :class:`Page`.

    ``send_ahead`` starts a request in a :class:`Fetcher` thread before sickle asks for it
    (at most two are kept: the page about to be read and the one after it); when sickle then
    asks with exactly the arguments of the oldest, ``harvest`` takes that response (and
    raises its transport error, if any, then and there), otherwise it drops them and sends its
    own request. Pages are parsed and read only in the iterating thread, never in the
    fetcher's."""

    def __init__(self, endpoint: str, http: HttpSession, method: str) -> None:
        super().__init__(endpoint, http_method=method, iterator=Pages, max_retries=0)
        self.http = http
        self.last: Page | None = None
        self._ahead: list[tuple[dict[str, str], Future[Response]]] = []  # oldest first

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

    def harvest(self, **kwargs: str) -> Page:
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
