"""The OAI-PMH 2.0 data provider at ``/oai`` (docs/serve/oai-pmh.md).

:class:`OaiProvider` is the framework-neutral core: :meth:`OaiProvider.respond` takes the
request's arguments (as from ``urllib.parse.parse_qs``), does every check and every SQLite
read at once, and returns an iterator of byte chunks that writes the records one at a time
(parsing and serialising each record's graph only when the chunk is asked for). :func:`routes`
puts it behind a thin Starlette route: GET and POST, every answer HTTP 200 ``text/xml``,
streamed.

- Identifiers: ``oai:<host of the public base URL>:<source>:<local_id>``, the local id
  percent-encoded where the oai-identifier syntax requires it; (source, local_id) is the
  store's own key for a record, so the identifier is the same at every re-harvest.
- Datestamps: ``records.modified`` (last content change or withdrawal) cut to seconds;
  granularity ``YYYY-MM-DDThh:mm:ssZ``, day granularity accepted in from/until.
- Deleted records: persistent. A withdrawn record stays listed as a deleted header.
- Sets: ``source:NAME`` and ``theme:CODE`` (EU data themes), under parents ``source`` and
  ``theme``; read from the ``record_sets`` index (:mod:`aggregator.store.record_sets`).
- Paging: keyset paging on (modified, id) with signed, self-contained resumption tokens
  (:mod:`aggregator.serve.oai_tokens`).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from itertools import chain
from urllib.parse import quote, unquote, urlsplit

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from aggregator.core.vocab import EU_THEME_LABELS
from aggregator.serve import oai_store as db
from aggregator.serve import oai_xml as xml
from aggregator.serve.context import ServeContext
from aggregator.serve.metrics import counters as counted
from aggregator.serve.oai_args import OaiError, bounds, check_args, parse_args, stamp
from aggregator.serve.oai_formats import (
    FORMATS,
    ISO19139,
    OAI_DC,
    RDF_PREFIXES,
    RdfXmlWriter,
    embeddable_xml,
    formats_of,
    oai_dc,
)
from aggregator.serve.oai_tokens import TokenError, TokenSigner, TokenState, load_key
from aggregator.store.record_sets import EU_THEME_CODES
from aggregator.store.state import read_generation

log = logging.getLogger(__name__)

GRANULARITY = "YYYY-MM-DDThh:mm:ssZ"
MAX_BODY = 64 * 1024
CHUNK = 32 * 1024  # bytes per write of a streamed response
_LIST_VERBS = ("ListIdentifiers", "ListRecords")
_DOMAIN = re.compile(r"^[a-zA-Z][a-zA-Z0-9\-]*(\.[a-zA-Z][a-zA-Z0-9\-]*)+$")
_LOCAL_SAFE = "-_.!~*'();/?:@&=+$,"  # oai-identifier: these stay, everything else is %-encoded
assert set(EU_THEME_LABELS) == EU_THEME_CODES


class OaiProvider:
    """Answers OAI-PMH requests from a store (see the module docstring)."""

    def __init__(
        self, ctx: ServeContext, signer: TokenSigner, clock: Callable[[], float] = time.time
    ) -> None:
        self.ctx = ctx
        self.settings = ctx.settings.serve
        self.signer = signer
        self.clock = clock
        self.base_url = ctx.base_url + "oai"
        self.host = (urlsplit(ctx.base_url).hostname or "localhost").lower()
        self.page_size = max(1, self.settings.oai_page_size)
        self.writer = RdfXmlWriter()
        self._read = threading.local()  # the generation the last respond() of a thread read

    def generation(self) -> int | None:
        """The generation of the SQLite state the last :meth:`respond` of this thread read
        its records from (None when it read none); the ``Aggregator-Generation`` header."""
        return getattr(self._read, "generation", None)

    # -- identifiers ------------------------------------------------------------------------
    def identifier(self, source: str, local_id: str) -> str:
        return f"oai:{self.host}:{source}:{quote(local_id, safe=_LOCAL_SAFE)}"

    def parse_identifier(self, identifier: str) -> tuple[str, str] | None:
        head = f"oai:{self.host}:"
        if not identifier.startswith(head):
            return None
        source, sep, encoded = identifier[len(head) :].partition(":")
        if not sep or not source or not encoded:
            return None
        local_id = unquote(encoded, errors="strict") if "%" in encoded else encoded
        if quote(local_id, safe=_LOCAL_SAFE) != encoded:
            return None  # not the form we issue: no record has it
        return source, local_id

    # -- the request ------------------------------------------------------------------------
    def respond(self, args: Mapping[str, Sequence[str]]) -> Iterator[bytes]:
        """Check and answer one request: every SQLite read happens here, the records are
        written while the returned iterator is consumed."""
        now = self.clock()
        self._read.generation = None
        date = stamp(datetime.fromtimestamp(now, UTC))
        echo: list[tuple[str, str]] | None = None
        try:
            verb, flat = check_args(args)
            echo = [("verb", verb), *((k, v) for k, v in flat.items() if k != "verb")]
            body = self._dispatch(verb, flat, now)
        except OaiError as err:
            return self.error(err, echo, now)
        return chain((xml.head(date, self.base_url, echo),), body, (xml.TAIL,))

    def error(
        self, err: OaiError, echo: list[tuple[str, str]] | None = None, now: float | None = None
    ) -> Iterator[bytes]:
        """An error response; the request is echoed only when it was valid."""
        date = stamp(datetime.fromtimestamp(self.clock() if now is None else now, UTC))
        if err.code in ("badVerb", "badArgument"):
            echo = None
        return iter(
            (xml.head(date, self.base_url, echo), xml.error(err.code, err.message), xml.TAIL)
        )

    def _dispatch(self, verb: str, flat: dict[str, str], now: float) -> Iterator[bytes]:
        if verb == "Identify":
            return iter((self._identify(),))
        if verb == "ListMetadataFormats":
            return iter((self._list_formats(flat.get("identifier")),))
        if verb == "ListSets":
            if "resumptionToken" in flat:
                raise OaiError("badResumptionToken", "ListSets is never paged: no token is valid")
            return iter((self._list_sets(),))
        if verb == "GetRecord":
            return self._get_record(flat["identifier"], flat["metadataPrefix"])
        return self._list(verb, flat, now)

    # -- Identify, ListMetadataFormats, ListSets --------------------------------------------
    def _identify(self) -> bytes:
        conn = self.ctx.read_db()
        first = db.earliest(conn)
        earliest = first[:19] + "Z" if first else stamp(datetime.fromtimestamp(self.clock(), UTC))
        s = self.settings
        parts = [
            "<Identify>\n",
            f"<repositoryName>{xml.esc(s.oai_repository_name)}</repositoryName>\n",
            f"<baseURL>{xml.esc(self.base_url)}</baseURL>\n",
            "<protocolVersion>2.0</protocolVersion>\n",
            f"<adminEmail>{xml.esc(s.oai_admin_email)}</adminEmail>\n",
            f"<earliestDatestamp>{earliest}</earliestDatestamp>\n",
            "<deletedRecord>persistent</deletedRecord>\n",
            f"<granularity>{GRANULARITY}</granularity>\n",
        ]
        if _DOMAIN.match(self.host):
            key = db.first_identifier_key(conn)
            sample = self.identifier(*key) if key else f"oai:{self.host}:source:record-1"
            ns = "http://www.openarchives.org/OAI/2.0/oai-identifier"
            parts.append(
                f'<description><oai-identifier xmlns="{ns}" xsi:schemaLocation="{ns} '
                f'http://www.openarchives.org/OAI/2.0/oai-identifier.xsd">'
                f"<scheme>oai</scheme><repositoryIdentifier>{xml.esc(self.host)}"
                "</repositoryIdentifier><delimiter>:</delimiter>"
                f"<sampleIdentifier>{xml.esc(sample)}</sampleIdentifier>"
                "</oai-identifier></description>\n"
            )
        parts.append("</Identify>\n")
        return "".join(parts).encode()

    def _lookup(self, identifier: str, *, with_graph: bool) -> db.Item:
        key = self.parse_identifier(identifier)
        item = None
        if key is not None:
            conn = self.ctx.read_db()
            with db.snapshot(conn, self.ctx.store.path):
                item = db.record(conn, *key, with_graph=with_graph)
                self._read.generation = read_generation(conn)
        if item is None:
            raise OaiError("idDoesNotExist", f"no record has the identifier {identifier!r}")
        return item

    def _list_formats(self, identifier: str | None) -> bytes:
        formats = list(FORMATS.values())
        if identifier is not None:
            item = self._lookup(identifier, with_graph=False)
            if item.status not in db.PUBLISHED:
                raise OaiError("noMetadataFormats", "this record is not published (rejected)")
            formats = formats_of(item.format)
        parts = [
            f"<metadataFormat><metadataPrefix>{f.prefix}</metadataPrefix>"
            f"<schema>{xml.esc(f.schema)}</schema>"
            f"<metadataNamespace>{xml.esc(f.namespace)}</metadataNamespace></metadataFormat>\n"
            for f in formats
        ]
        return ("<ListMetadataFormats>\n" + "".join(parts) + "</ListMetadataFormats>\n").encode()

    def set_name(self, spec: str) -> str:
        if spec == "source":
            return "Records by harvest source"
        if spec == "theme":
            return "Records by EU data theme"
        kind, _, name = spec.partition(":")
        if kind == "theme":
            return f"EU data theme: {EU_THEME_LABELS.get(name, name)}"
        source = self.ctx.settings.sources.get(name)
        if source is not None and source.publisher:
            return f"Source {name} ({source.publisher})"
        return f"Source {name}"

    def _list_sets(self) -> bytes:
        specs = db.set_specs(self.ctx.read_db())
        if not specs:
            raise OaiError("noSetHierarchy", "the repository holds no records, so no sets")
        parts = [
            f"<set><setSpec>{xml.esc(s)}</setSpec><setName>{xml.esc(self.set_name(s))}"
            "</setName></set>\n"
            for s in specs
        ]
        return ("<ListSets>\n" + "".join(parts) + "</ListSets>\n").encode()

    # -- records ----------------------------------------------------------------------------
    def _format(self, prefix: str) -> str:
        if prefix not in FORMATS:
            raise OaiError(
                "cannotDisseminateFormat",
                f"metadataPrefix {prefix!r} is not one of {', '.join(FORMATS)}",
            )
        return prefix

    def _get_record(self, identifier: str, prefix: str) -> Iterator[bytes]:
        self._format(prefix)
        item = self._lookup(identifier, with_graph=prefix != ISO19139.prefix)
        if item.status not in db.PUBLISHED:
            raise OaiError("cannotDisseminateFormat", "this record is not published (rejected)")
        if prefix == ISO19139.prefix:
            if item.format != ISO19139.prefix:
                raise OaiError("cannotDisseminateFormat", "this record was not ISO 19139")
            if not item.deleted and item.payload_sha:
                item.payload = db.payload(self.ctx.read_db(), item.payload_sha)
        rendered = self._record_xml(item, prefix, True)
        if rendered is None:
            raise OaiError("cannotDisseminateFormat", f"this record cannot be written as {prefix}")
        return iter((b"<GetRecord>\n", rendered, b"</GetRecord>\n"))

    def _metadata(self, item: db.Item, prefix: str) -> bytes | None:
        try:
            if prefix in RDF_PREFIXES:
                return self.writer.write(item.ntriples, item.dataset_iri) if item.ntriples else None
            if prefix == OAI_DC.prefix:
                return oai_dc(item.ntriples, item.dataset_iri) if item.ntriples else None
            return embeddable_xml(item.payload) if item.payload else None
        except (SyntaxError, ValueError) as err:  # a stored graph pyoxigraph cannot read
            log.error("record %s/%s: %s", item.source, item.local_id, err)
            return None

    def _record_xml(self, item: db.Item, prefix: str, full: bool) -> bytes | None:
        head = xml.header(
            self.identifier(item.source, item.local_id), item.datestamp, item.specs, item.deleted
        )
        if not full:
            return head + b"\n"
        if item.deleted:
            return xml.record(head, None)
        metadata = self._metadata(item, prefix)
        if metadata is None:
            return None
        return xml.record(head, metadata)

    def _list(self, verb: str, flat: dict[str, str], now: float) -> Iterator[bytes]:
        state: TokenState | None = None
        if "resumptionToken" in flat:
            try:
                state = self.signer.decode(flat["resumptionToken"], now)
            except TokenError as err:
                raise OaiError(
                    "badResumptionToken", f"the resumptionToken is invalid or expired ({err})"
                ) from None
            if state.verb != verb:
                raise OaiError("badResumptionToken", f"the resumptionToken is not for {verb}")
            prefix, set_spec, from_, until = state.prefix, state.set_spec, state.from_, state.until
        else:
            prefix, set_spec = flat["metadataPrefix"], flat.get("set")
            from_, until = flat.get("from"), flat.get("until")
        self._format(prefix)
        lo, hi = bounds(from_, until)
        conn = self.ctx.read_db()
        if set_spec is not None and not db.has_sets(conn):
            raise OaiError("noSetHierarchy", "the repository holds no records, so no sets")
        sel = db.Selection(set_spec or "source", prefix == ISO19139.prefix, lo, hi)
        full = verb == "ListRecords"
        after = (state.after_modified, state.after_id) if state else None
        with db.snapshot(conn, self.ctx.store.path):
            self._read.generation = read_generation(conn)
            total = state.total if state else db.count(conn, sel)
            items = (
                db.page(conn, sel, after, self.page_size + 1, with_graph=full and not sel.iso_only)
                if total
                else []
            )
            more = len(items) > self.page_size
            del items[self.page_size :]
            if full and sel.iso_only:
                for item in items:
                    if not item.deleted and item.payload_sha:
                        item.payload = db.payload(conn, item.payload_sha)
        if not items:
            raise OaiError("noRecordsMatch", "no records match the request")
        cursor = state.cursor if state else 0
        token = b""
        if more:
            expires = math.ceil((now + self.settings.oai_token_ttl) / 60) * 60
            last = items[-1]
            next_state = TokenState(
                verb,
                prefix,
                set_spec,
                from_,
                until,
                last.modified,
                last.id,
                cursor + len(items),
                total,
                expires,
            )
            token = xml.resumption_token(
                self.signer.encode(next_state),
                total,
                cursor,
                stamp(datetime.fromtimestamp(expires, UTC)),
            )
        elif state is not None:
            token = xml.resumption_token("", total, cursor, None)
        return self._write_list(verb, prefix, items, full, token)

    def _write_list(
        self, verb: str, prefix: str, items: list[db.Item], full: bool, token: bytes
    ) -> Iterator[bytes]:
        yield f"<{verb}>\n".encode()
        items.reverse()
        while items:
            item = items.pop()  # the page's rows are let go one by one as they are written
            rendered = self._record_xml(item, prefix, full)
            if rendered is None:
                log.warning(
                    "record %s/%s left out of a %s page", item.source, item.local_id, prefix
                )
                continue
            yield rendered
        yield token
        yield f"</{verb}>\n".encode()


async def _chunks(body: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Write the response on the event loop as it is made, in writes of about ``CHUNK``
    bytes, letting other requests in between (the work is CPU-bound: a thread hop per
    record would cost more than it gives)."""
    buffer: list[bytes] = []
    size = 0
    for part in body:
        buffer.append(part)
        size += len(part)
        if size >= CHUNK:
            yield b"".join(buffer)
            buffer.clear()
            size = 0
            await anyio.sleep(0)
    if buffer:
        yield b"".join(buffer)


def _query(request: Request) -> bytes:
    raw = request.scope.get("query_string", b"")
    return raw if isinstance(raw, bytes) else b""


_VERB_NAMES = frozenset(
    ("Identify", "ListMetadataFormats", "ListSets", "ListIdentifiers", "ListRecords", "GetRecord")
)
_ERROR_CODE = re.compile(rb'<error code="([A-Za-z]+)"')


def _counting(body: Iterator[bytes], verb: str) -> Iterator[bytes]:
    """Count the answer by verb and outcome: ``ok``, or the OAI error code. Either the
    ``<error code=...>`` or the verb's element follows the envelope's head, in the first
    chunks; only those are looked at."""
    head = b""
    outcome: str | None = None
    for chunk in body:
        if outcome is None and len(head) < 16384:
            head += chunk[:16384]
            m = _ERROR_CODE.search(head)
            if m is not None:
                outcome = m.group(1).decode()
            elif f"<{verb}".encode() in head:
                outcome = "ok"
            if outcome is not None:
                counted().oai.labels(verb, outcome).inc()
        yield chunk
    if outcome is None:
        counted().oai.labels(verb, "ok").inc()


async def _read_body(request: Request) -> bytes:
    data = bytearray()
    async for part in request.stream():
        data += part
        if len(data) > MAX_BODY:
            raise OaiError("badArgument", f"request body larger than {MAX_BODY} bytes")
    return bytes(data)


def routes(ctx: ServeContext) -> list[BaseRoute]:
    """The ``/oai`` route. Call at start-up in the main thread: it reads the token key (from
    the environment, or from the store, where it is made once)."""
    key = ctx.oai_key
    if key is None:
        key = load_key(ctx.store, ctx.settings.serve.oai_token_key_env)
    provider = OaiProvider(ctx, TokenSigner(key))

    def answer(args: Mapping[str, Sequence[str]]) -> tuple[Iterator[bytes], dict[str, str]]:
        body = provider.respond(args)
        generation = provider.generation()  # same thread: what this respond() read
        return body, {} if generation is None else {"aggregator-generation": str(generation)}

    async def oai(request: Request) -> Response:
        try:
            raw = await _read_body(request) if request.method == "POST" else _query(request)
            args = parse_args(raw)
        except OaiError as err:
            counted().oai.labels("invalid", err.code).inc()
            return StreamingResponse(_chunks(provider.error(err)), media_type="text/xml")
        body, headers = await run_in_threadpool(answer, args)
        verbs = args.get("verb", [])
        verb = verbs[0] if len(verbs) == 1 and verbs[0] in _VERB_NAMES else "invalid"
        return StreamingResponse(
            _chunks(_counting(body, verb)), media_type="text/xml", headers=headers
        )

    return [Route("/oai", oai, methods=["GET", "POST"])]
