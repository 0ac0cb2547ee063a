"""An OAI-PMH 2.0 data provider as a WSGI app: fixture server for tests, demo and benchmark.

Run it with :class:`aggregator.demo.peers.server.PeerServer`::

    items = MemoryItems([OaiItem("oai:x:1", datetime(2024, 1, 1, tzinfo=UTC), metadata=rdf)])
    peer = OaiPmhPeer(items, page_size=50)
    with PeerServer(peer) as server:
        ...  # harvest server.url; tests may change ``items`` and ``peer.faults`` meanwhile

Records come from an :class:`ItemSource` (in :mod:`aggregator.demo.peers.oaipmh_items`):
:class:`MemoryItems` (mutable, thread-safe) or :class:`SequenceItems` (built lazily from an
index, so 100,000 records cost no memory up front; :func:`generated_items` makes one from a
metadata generator such as ``aggregator.demo.peers.sample_data.generate_dataset``). Responses are
built as strings; each record's metadata bytes are embedded verbatim. Paging is keyset-based:
the resumption token carries the position after the last record sent, so items changed
between pages do not shift the pages. ``faults`` switches on the failure modes the harvester
must survive.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal
from urllib.parse import parse_qs
from wsgiref.util import request_uri

from aggregator.demo.peers.oaipmh_items import ItemSource, MemoryItems, OaiItem, Query
from aggregator.demo.peers.server import respond
from aggregator.serve.oai_args import OaiError, verb_arguments

OAI_NS = "http://www.openarchives.org/OAI/2.0/"
Granularity = Literal["YYYY-MM-DD", "YYYY-MM-DDThh:mm:ssZ"]
DAY: Final = "YYYY-MM-DD"
SECONDS: Final = "YYYY-MM-DDThh:mm:ssZ"
LIST_VERBS = ("ListIdentifiers", "ListRecords")
_STAMP = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2}):(\d{2})Z)?$")
_BAD_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_XML_DECL = re.compile(rb"^\s*<\?xml[^>]*\?>\s*")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _esc(text: str) -> str:
    """Escape text or an attribute value (double-quoted); drop characters XML 1.0 forbids."""
    if _BAD_CHARS.search(text):
        text = _BAD_CHARS.sub("", text)
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def _stamp(when: datetime, granularity: str) -> str:
    return when.strftime("%Y-%m-%d" if granularity == DAY else "%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class MetadataFormat:
    prefix: str
    schema: str
    namespace: str


DCAT_AP = MetadataFormat(
    "dcat_ap",
    "https://www.w3.org/TR/rdf-syntax-grammar/",  # RDF/XML has no XSD; its grammar stands in
    "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
)


@dataclass(slots=True)
class Faults:
    """Failure modes, set by tests between requests. Pages count from 1 within a listing."""

    unavailable: int = 0  # answer the next N requests with 503 + Retry-After
    retry_after: int = 1
    error_on_page: int | None = None  # answer this page with an OAI error ...
    error_code: str = "badResumptionToken"  # ... of this code
    cap: int | None = None  # stop issuing tokens after this many records (a server cap)
    malformed_page: int | None = None  # send this page cut short (not well-formed)
    repeat_token_on_page: int | None = None  # on this page, send back the token received
    hostile_identifier: str | None = None  # replace this record's metadata ...
    hostile_kind: Literal["entity", "escaped", "malformed"] = "entity"  # ... like this
    hostile_entity_url: str = "file:///etc/passwd"
    delay: float = 0.0  # seconds before every response


def _parse_stamp(value: str, *, end: bool, granularity: str) -> tuple[datetime, bool]:
    """A from/until value as (datetime, is_day_granularity); inclusive bounds."""
    m = _STAMP.match(value)
    if m is None:
        raise OaiError("badArgument", f"illegal datestamp {value!r}")
    day = m.group(4) is None
    if not day and granularity == DAY:
        raise OaiError("badArgument", f"this repository supports only {DAY} granularity")
    try:
        if day:
            when = datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=UTC)
            return (when + timedelta(days=1, seconds=-1) if end else when), True
        y, mo, d, h, mi, sec = (int(m[i]) for i in range(1, 7))
        return datetime(y, mo, d, h, mi, sec, tzinfo=UTC), False
    except ValueError as err:
        raise OaiError("badArgument", f"illegal datestamp {value!r}") from err


def _encode_token(state: dict[str, Any]) -> str:
    raw = json.dumps(state, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(token: str) -> dict[str, Any]:
    try:
        state = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if not isinstance(state, dict) or not {"v", "p", "a", "n", "t", "c"} <= state.keys():
            raise ValueError("incomplete token")
        return state
    except (ValueError, TypeError) as err:
        raise OaiError("badResumptionToken", "the resumptionToken is invalid or expired") from err


class OaiPmhPeer:
    """The WSGI app. ``handle(args, base_url)`` is the framework-neutral core."""

    def __init__(
        self,
        items: ItemSource | None = None,
        *,
        page_size: int = 100,
        formats: Sequence[MetadataFormat] = (DCAT_AP,),
        granularity: Granularity = SECONDS,
        repository_name: str = "Fixture OAI-PMH repository",
        admin_email: str = "admin@example.org",
        deleted_record: str = "persistent",
        set_names: Mapping[str, str] | None = None,
        base_url: str | None = None,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.items: ItemSource = items if items is not None else MemoryItems()
        self.page_size = page_size
        self.formats = {f.prefix: f for f in formats}
        self.granularity = granularity
        self.repository_name = repository_name
        self.admin_email = admin_email
        self.deleted_record = deleted_record
        self.set_names = dict(set_names or {})
        self.base_url = base_url
        self.clock = clock
        self.faults = Faults()
        #: (HTTP method, first value of each argument) of the latest requests, oldest first
        self.requests: deque[tuple[str, dict[str, str]]] = deque(maxlen=10_000)
        self._lock = threading.Lock()

    # -- WSGI -------------------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        faults = self.faults
        if faults.delay:
            time.sleep(faults.delay)
        method = environ.get("REQUEST_METHOD", "GET")
        if method == "GET":
            query = environ.get("QUERY_STRING", "")
        elif method == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            query = environ["wsgi.input"].read(length).decode("utf-8", errors="replace")
        else:
            return respond(start_response, 405, b"GET or POST\n", headers=[("Allow", "GET, POST")])
        args = parse_qs(query, keep_blank_values=True)
        self.requests.append((method, {k: v[0] for k, v in args.items()}))
        with self._lock:
            busy = faults.unavailable > 0
            if busy:
                faults.unavailable -= 1
        if busy:
            headers = [("Retry-After", str(faults.retry_after))]
            return respond(start_response, 503, b"busy, retry later\n", headers=headers)
        base = self.base_url or request_uri(environ, include_query=False)
        body = self.handle(args, base)
        return respond(start_response, 200, body, "text/xml; charset=utf-8")

    # -- protocol ---------------------------------------------------------------------------
    def handle(self, args: Mapping[str, list[str]], base_url: str) -> bytes:
        """Answer one request; ``args`` as from ``urllib.parse.parse_qs``."""
        echo: Mapping[str, str] | None = None
        try:
            _, flat = verb_arguments(args)
            echo = flat
            verb = flat["verb"]
            if verb == "Identify":
                return self._envelope(base_url, flat, self._identify(base_url))
            if verb == "ListMetadataFormats":
                return self._envelope(base_url, flat, self._list_formats(flat))
            if verb == "ListSets":
                return self._envelope(base_url, flat, self._list_sets(flat))
            if verb == "GetRecord":
                item = self.items.get(flat["identifier"])
                self._format(flat["metadataPrefix"])
                if item is None:
                    raise OaiError("idDoesNotExist", f"no item {flat['identifier']!r}")
                doctype, record = self._record(item, True)
                body = b"<GetRecord>" + record + b"</GetRecord>"
                return self._envelope(base_url, flat, body, doctype)
            return self._list(base_url, flat)
        except OaiError as err:
            if err.code in ("badVerb", "badArgument"):
                echo = None
            error = f'<error code="{err.code}">{_esc(err.message)}</error>'.encode()
            return self._envelope(base_url, echo, error)

    def _format(self, prefix: str) -> MetadataFormat:
        try:
            return self.formats[prefix]
        except KeyError:
            raise OaiError("cannotDisseminateFormat", f"format {prefix!r} not supported") from None

    def _identify(self, base_url: str) -> bytes:
        earliest = self.items.earliest() or datetime(2000, 1, 1, tzinfo=UTC)
        return (
            f"<Identify><repositoryName>{_esc(self.repository_name)}</repositoryName>"
            f"<baseURL>{_esc(base_url)}</baseURL><protocolVersion>2.0</protocolVersion>"
            f"<adminEmail>{_esc(self.admin_email)}</adminEmail>"
            f"<earliestDatestamp>{_stamp(earliest, self.granularity)}</earliestDatestamp>"
            f"<deletedRecord>{self.deleted_record}</deletedRecord>"
            f"<granularity>{self.granularity}</granularity></Identify>"
        ).encode()

    def _list_formats(self, args: Mapping[str, str]) -> bytes:
        if "identifier" in args and self.items.get(args["identifier"]) is None:
            raise OaiError("idDoesNotExist", f"no item {args['identifier']!r}")
        parts = [
            f"<metadataFormat><metadataPrefix>{_esc(f.prefix)}</metadataPrefix>"
            f"<schema>{_esc(f.schema)}</schema>"
            f"<metadataNamespace>{_esc(f.namespace)}</metadataNamespace></metadataFormat>"
            for f in self.formats.values()
        ]
        return ("<ListMetadataFormats>" + "".join(parts) + "</ListMetadataFormats>").encode()

    def _list_sets(self, args: Mapping[str, str]) -> bytes:
        if "resumptionToken" in args:
            raise OaiError("badResumptionToken", "ListSets is never paged here")
        specs = sorted(set(self.set_names) | set(self.items.set_specs()))
        if not specs:
            raise OaiError("noSetHierarchy", "this repository does not support sets")
        parts = [
            f"<set><setSpec>{_esc(s)}</setSpec><setName>{_esc(self.set_names.get(s, s))}"
            "</setName></set>"
            for s in specs
        ]
        return ("<ListSets>" + "".join(parts) + "</ListSets>").encode()

    def _list(self, base_url: str, args: Mapping[str, str]) -> bytes:
        verb = args["verb"]
        received = args.get("resumptionToken")
        if received is not None:
            state = _decode_token(received)
            if state["v"] != verb:
                raise OaiError("badResumptionToken", "the token belongs to another verb")
        else:
            state = {"v": verb, "p": args["metadataPrefix"], "f": args.get("from")}
            state |= {"u": args.get("until"), "s": args.get("set"), "a": None, "n": 0, "c": 0}
        self._format(state["p"])
        query = self._query(state)
        if received is None:
            state["t"] = self.items.count(query)
            if state["t"] == 0:
                raise OaiError("noRecordsMatch", "no records match the request")
        page = state["n"] + 1
        faults = self.faults
        if faults.error_on_page == page:
            raise OaiError(faults.error_code, f"injected error on page {page}")
        items: list[OaiItem] = []
        position: str | None = state["a"]
        more = False
        for pos, item in self.items.scan(position, query.start):
            if query.end is not None and item.datestamp > query.end:
                break
            if not query.matches(item):
                continue
            if len(items) == self.page_size:
                more = True
                break
            items.append(item)
            position = pos
        cursor = state["c"]
        delivered = cursor + len(items)
        capped = faults.cap is not None and delivered >= faults.cap
        if capped:
            more = False
        token = ""
        if more:
            token = _encode_token(state | {"a": position, "n": page, "c": delivered})
            if faults.repeat_token_on_page == page and received is not None:
                token = received
        doctype = b""
        parts: list[bytes] = [f"<{verb}>".encode()]
        full = verb == "ListRecords"
        for item in items:
            item_doctype, record = self._record(item, full)
            doctype = doctype or item_doctype
            parts.append(record)
        if more or received is not None or capped:
            parts.append(
                f'<resumptionToken completeListSize="{state["t"]}" cursor="{cursor}">'
                f"{token}</resumptionToken>".encode()
            )
        parts.append(f"</{verb}>".encode())
        body = self._envelope(base_url, args, b"".join(parts), doctype)
        if faults.malformed_page == page:
            body = body[: len(body) * 3 // 5]
        return body

    def _query(self, state: Mapping[str, Any]) -> Query:
        start = end = None
        day_from = day_until = None
        if state.get("f"):
            start, day_from = _parse_stamp(state["f"], end=False, granularity=self.granularity)
        if state.get("u"):
            end, day_until = _parse_stamp(state["u"], end=True, granularity=self.granularity)
        if day_from is not None and day_until is not None and day_from != day_until:
            raise OaiError("badArgument", "from and until have different granularities")
        if start is not None and end is not None and start > end:
            raise OaiError("badArgument", "from is later than until")
        set_spec = state.get("s")
        if set_spec is not None and not (self.set_names or self.items.set_specs()):
            raise OaiError("noSetHierarchy", "this repository does not support sets")
        return Query(start, end, set_spec)

    def _record(self, item: OaiItem, with_metadata: bool) -> tuple[bytes, bytes]:
        """(DOCTYPE to put in the prolog or b"", the <record> or <header> element)."""
        status = ' status="deleted"' if item.deleted else ""
        specs = "".join(f"<setSpec>{_esc(s)}</setSpec>" for s in item.sets)
        header = (
            f"<header{status}><identifier>{_esc(item.identifier)}</identifier>"
            f"<datestamp>{_stamp(item.datestamp, self.granularity)}</datestamp>{specs}</header>"
        ).encode()
        if not with_metadata:
            return b"", header
        if item.deleted:
            return b"", b"<record>" + header + b"</record>"
        doctype, metadata = b"", item.metadata or b""
        if item.identifier == self.faults.hostile_identifier:
            doctype, metadata = self._hostile(item)
        elif metadata.lstrip()[:5] == b"<?xml":
            metadata = _XML_DECL.sub(b"", metadata, count=1)
        return doctype, b"<record>" + header + b"<metadata>" + metadata + b"</metadata></record>"

    def _hostile(self, item: OaiItem) -> tuple[bytes, bytes]:
        rdf = 'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"'
        dct = 'xmlns:dct="http://purl.org/dc/terms/"'
        about = f'rdf:about="https://data.example.org/dataset/{_esc(item.identifier)}"'
        kind, url = self.faults.hostile_kind, _esc(self.faults.hostile_entity_url)
        if kind == "malformed":
            return b"", f"<rdf:RDF {rdf}><rdf:Description {about}></rdf:RDF>".encode()
        body = f"<rdf:RDF {rdf} {dct}><rdf:Description {about}><dct:title>&xxe;</dct:title>"
        body += "</rdf:Description></rdf:RDF>"
        if kind == "escaped":
            doc = f'<?xml version="1.0"?><!DOCTYPE rdf:RDF [<!ENTITY xxe SYSTEM "{url}">]>{body}'
            return b"", _esc(doc).encode()
        return f'<!DOCTYPE OAI-PMH [<!ENTITY xxe SYSTEM "{url}">]>\n'.encode(), body.encode()

    def _envelope(
        self, base_url: str, args: Mapping[str, str] | None, body: bytes, doctype: bytes = b""
    ) -> bytes:
        attrs = "".join(f' {k}="{_esc(v)}"' for k, v in (args or {}).items())
        head = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n{doctype.decode()}'
            f'<OAI-PMH xmlns="{OAI_NS}" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
            f'xsi:schemaLocation="{OAI_NS} http://www.openarchives.org/OAI/2.0/OAI-PMH.xsd">'
            f"<responseDate>{_stamp(self.clock().astimezone(UTC), SECONDS)}</responseDate>"
            f"<request{attrs}>{_esc(base_url)}</request>"
        )
        return head.encode() + body + b"</OAI-PMH>\n"
