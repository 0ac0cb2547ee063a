"""``/sparql``: a read-only SPARQL 1.1 Protocol endpoint over the union of the record graphs.

Public surface::

    routes(ctx) -> SparqlRoutes          # a list of Starlette routes; .endpoint is below
    SparqlEndpoint(ctx, queue_wait=..., supervision=...)
        .start()    open the current snapshot
        .refresh()  bring the snapshot up to the store; only in the process writing the store
        .close()    close the snapshot
        .lifespan   an async context manager for ``Starlette(lifespan=...)``

Queries read a snapshot of the graph store (:mod:`aggregator.store.snapshots`) from the
store's shelf, where whichever process writes the store (``aggregator harvest``, ...)
publishes one after each committed batch; the endpoint switches to the newest at its next
query, or within a second when idle. Each answer names its generation in the
``Aggregator-Generation`` header (the OAI-PMH provider names the generation of the SQLite
state it read the same way). Queries run in the serving process
(:mod:`aggregator.serve.sparql_runner`: inline or in a thread, with a deadline that ends the
process when the engine will not stop); ``SERVICE`` is refused
(:mod:`aggregator.serve.sparql_guard`); results are serialised in full before the response
starts (:mod:`aggregator.serve.sparql_exec`), so a response is either complete or an error.
See docs/serve/sparql.md for formats, limits and status codes.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote_to_bytes

from pyoxigraph import BlankNode, NamedNode, Triple, serialize
from starlette.routing import BaseRoute, Route

from aggregator.core.errors import StoreError
from aggregator.serve.context import ServeContext
from aggregator.serve.sparql_formats import (
    GRAPH_ALIASES,
    GRAPH_FORMATS,
    GRAPH_OFFERS,
    RESULT_ALIASES,
    RESULT_OFFERS,
    negotiate,
)
from aggregator.serve.sparql_guard import escaped_service, mentions_service, service_tokens
from aggregator.serve.sparql_runner import QueryDeadline, QueryRunner, RunnerBusy, Supervision
from aggregator.store.graphs import OxigraphGraphs
from aggregator.store.records import RecordStore, snapshot_shelf
from aggregator.store.snapshots import SnapshotReader

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_BODY = 1 << 20  # bytes of a POST body (form or query)
MAX_QUERY = 256 * 1024  # characters of a query
_HEADERS_READ = frozenset((b"accept", b"content-type", b"access-control-request-headers"))

SD = "http://www.w3.org/ns/sparql-service-description#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
CORS = [
    (b"access-control-allow-origin", b"*"),
    (
        b"access-control-expose-headers",
        b"Retry-After, Content-Type, Content-Length, Aggregator-Generation",
    ),
]


class SparqlError(Exception):
    """A request we answer with an error status; ``message`` is shown to the client."""

    def __init__(self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


class SparqlRoutes(list[BaseRoute]):
    """The routes of the endpoint; ``endpoint`` has ``start``, ``refresh`` and ``close``."""

    endpoint: SparqlEndpoint


def routes(ctx: ServeContext) -> SparqlRoutes:
    """``/sparql`` for ``ctx``; start and stop ``result.endpoint`` with the app."""
    return SparqlEndpoint(ctx).routes()


def service_description(endpoint_url: str) -> dict[str, bytes]:
    """The SPARQL 1.1 service description, serialised once per graph media type."""
    service = BlankNode()
    dataset = BlankNode()
    graph = BlankNode()

    def sd(local: str) -> NamedNode:
        return NamedNode(SD + local)

    rdf_type = NamedNode(RDF_TYPE)
    triples = [
        Triple(service, rdf_type, sd("Service")),
        Triple(service, sd("endpoint"), NamedNode(endpoint_url)),
        Triple(service, sd("supportedLanguage"), sd("SPARQL11Query")),
        Triple(service, sd("feature"), sd("UnionDefaultGraph")),
        Triple(
            service,
            sd("defaultEntailmentRegime"),
            NamedNode("http://www.w3.org/ns/entailment/Simple"),
        ),
        Triple(service, sd("defaultDataset"), dataset),
        Triple(dataset, rdf_type, sd("Dataset")),
        Triple(dataset, sd("defaultGraph"), graph),
        Triple(graph, rdf_type, sd("Graph")),
    ]
    for offer in [*RESULT_OFFERS.values(), *GRAPH_OFFERS.values()]:
        triples.append(Triple(service, sd("resultFormat"), NamedNode(offer.w3c_format)))
    prefixes = {"sd": SD, "formats": "http://www.w3.org/ns/formats/"}
    return {
        media: serialize(triples, format=fmt, prefixes=prefixes) or b""
        for media, fmt in GRAPH_FORMATS.items()
    }


class SparqlEndpoint:
    """The ``/sparql`` ASGI endpoint. Settings come from ``ctx.settings.serve``:
    ``sparql_timeout`` (seconds, per query; kept by ending the process that runs an engine
    past it), ``sparql_max_rows`` (rows or triples; over it a 400, never a truncated 200) and
    ``sparql_concurrency`` (queries at once in each serving process).

    It reads the snapshots of the store's shelf (``ctx.snapshot_root``, by default the
    store's). In the process that writes the store (``ctx.store`` a ``RecordStore``, on the
    embedded Oxigraph store), :meth:`refresh` brings it up to the writes just made."""

    def __init__(
        self,
        ctx: ServeContext,
        *,
        queue_wait: float = 2.0,
        supervision: Supervision | None = None,
    ) -> None:
        serve = ctx.settings.serve
        self.timeout = serve.sparql_timeout
        self.max_rows = serve.sparql_max_rows
        self.endpoint_url = ctx.base_url + "sparql"
        #: relative IRIs in a query (no BASE) resolve against the store's base IRI, so that
        #: ``<dataset/...>``, ``<record/...>`` name the catalogue's own resources
        self.base_iri = ctx.settings.base_iri
        self.writer: RecordStore | None = None
        store = ctx.store
        if isinstance(store, RecordStore):
            if not isinstance(store.graphs, OxigraphGraphs):
                raise StoreError("the SPARQL endpoint needs the embedded Oxigraph graph store")
            self.writer = store
        self.shelf = snapshot_shelf(store.path)
        self.reader = SnapshotReader(ctx.snapshot_root or self.shelf.root)
        self.runner = QueryRunner(
            self.reader,
            timeout=self.timeout,
            concurrency=serve.sparql_concurrency,
            queue_wait=min(queue_wait, self.timeout),
            supervision=supervision,
        )
        self.descriptions = service_description(self.endpoint_url)

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self.writer is not None:
            self.writer.sync()  # publishes the current state if no snapshot shows it yet
        self.reader.check()
        self.runner.start()

    def refresh(self) -> str:
        """Wait until the snapshot holds every write of this process (the writer's); returns
        the snapshot's folder."""
        if self.writer is None:
            raise StoreError("only the process writing the store can refresh its snapshot")
        self.writer.sync()
        self.reader.check()
        self.shelf.collect()
        return str(self.shelf.root / str(self.reader.name))

    @property
    def snapshot(self) -> str | None:
        """The name of the snapshot queries read now."""
        return self.reader.name

    def close(self) -> None:
        self.reader.close()

    @asynccontextmanager
    async def lifespan(self, app: object) -> AsyncIterator[None]:
        self.start()
        # snapshots come from whichever process writes: switch even when idle
        follow = asyncio.get_running_loop().create_task(self._follow_snapshots())
        try:
            yield
        finally:
            follow.cancel()
            self.close()

    async def _follow_snapshots(self, period: float = 1.0) -> None:
        """Check for a newer snapshot now and then, so that an idle process lets go of the
        old one (a snapshot is deleted once no process has it open)."""
        while True:
            await asyncio.sleep(period)
            try:
                self.reader.check()
            except OSError as err:
                log.error("cannot open the new SPARQL snapshot: %s", err)

    def routes(self) -> SparqlRoutes:
        out = SparqlRoutes([Route("/sparql", self, name="sparql")])
        out.endpoint = self
        return out

    # -- ASGI ---------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope["headers"]
            if k in _HEADERS_READ
        }
        method = scope["method"]
        if method == "OPTIONS":
            await self._preflight(send, headers)
            return
        try:
            if method not in ("GET", "POST"):
                raise SparqlError(405, "use GET or POST", (("allow", "GET, POST, OPTIONS"),))
            status, body, ctype, extra = await self._handle(scope, receive, headers)
        except SparqlError as err:
            status, ctype, extra = err.status, "text/plain; charset=utf-8", err.headers
            body = (err.message + "\n").encode()
        await _send(send, status, body, ctype, extra)

    async def _preflight(self, send: Send, headers: dict[str, str]) -> None:
        allow_headers = headers.get("access-control-request-headers") or "Accept, Content-Type"
        await _send(
            send,
            204,
            b"",
            None,
            (
                ("access-control-allow-methods", "GET, POST, OPTIONS"),
                ("access-control-allow-headers", allow_headers),
                ("access-control-max-age", "86400"),
                ("allow", "GET, POST, OPTIONS"),
            ),
        )

    async def _handle(
        self, scope: Scope, receive: Receive, headers: dict[str, str]
    ) -> tuple[int, bytes, str, tuple[tuple[str, str], ...]]:
        params = _params(scope["query_string"])
        query: str | None = None
        if scope["method"] == "POST":
            ctype = headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype == "application/sparql-update":
                raise SparqlError(403, "this endpoint is read-only: updates are not accepted")
            if ctype not in ("application/sparql-query", "application/x-www-form-urlencoded"):
                raise SparqlError(
                    415,
                    "POST a query as application/sparql-query or application/x-www-form-urlencoded",
                )
            body = await _read_body(receive)
            if ctype == "application/sparql-query":
                query = _utf8(body)
            else:
                params += _params(body)
        names = {k for k, _ in params}
        if "update" in names:
            raise SparqlError(403, "this endpoint is read-only: updates are not accepted")
        queries = [v for k, v in params if k == "query"]
        if query is not None:
            queries.append(query)
        accept = headers.get("accept")
        if not queries:
            if scope["method"] == "POST":
                raise SparqlError(400, "no query: send a 'query' parameter or body")
            media = negotiate(accept, GRAPH_ALIASES)
            if media is None:
                raise _not_acceptable(GRAPH_OFFERS)
            offer = GRAPH_OFFERS[media]
            return 200, self.descriptions[media], offer.content_type, (("vary", "Accept"),)
        if len(queries) > 1:
            raise SparqlError(400, "exactly one query, please")
        return await self._query(queries[0], params, accept, scope.get("client"))

    async def run_for_page(
        self, query: str, client: tuple[str, int] | None
    ) -> tuple[int, bytes, str]:
        """Run a query for the HTML query page (:mod:`aggregator.serve.dashboard.sparql_page`):
        results as SPARQL JSON, graphs as N-Triples; an error as (status, message, "")."""
        accept = "application/sparql-results+json, application/n-triples;q=0.9"
        try:
            status, body, ctype, _ = await self._query(query, [], accept, client)
        except SparqlError as err:
            return err.status, err.message.encode(), ""
        return status, body, ctype

    async def _query(
        self,
        query: str,
        params: list[tuple[str, str]],
        accept: str | None,
        client: tuple[str, int] | None,
    ) -> tuple[int, bytes, str, tuple[tuple[str, str], ...]]:
        if len(query) > MAX_QUERY:
            raise SparqlError(413, f"the query is longer than {MAX_QUERY} characters")
        check_service = mentions_service(query) or "\\u" in query or "\\U" in query
        if check_service and (service_tokens(query) or escaped_service(query)):
            raise SparqlError(400, "SERVICE (federated query) is not allowed on this endpoint")
        default = [v for k, v in params if k == "default-graph-uri"]
        named = [v for k, v in params if k == "named-graph-uri"]
        for iri in (*default, *named):
            try:
                NamedNode(iri)
            except ValueError as err:
                raise SparqlError(400, f"not an absolute IRI: {iri!r} ({err})") from None
        results_media, graph_media = _negotiated(accept)
        if results_media is None and graph_media is None:
            raise _not_acceptable({**RESULT_OFFERS, **GRAPH_OFFERS})
        request: dict[str, Any] = {
            "query": query,
            "results": results_media,
            "graph": graph_media,
            "default_graph": default if default or named else None,
            "named_graphs": named if default or named else None,
            "max_rows": self.max_rows,
            "check_service": check_service,
            "base_iri": self.base_iri,
        }
        try:
            header, body = await self.runner.run(request, client)
        except RunnerBusy:
            raise SparqlError(
                503, "too many queries at once: retry shortly", (("retry-after", "1"),)
            ) from None
        except QueryDeadline:
            retry = str(max(1, math.ceil(self.timeout)))
            raise SparqlError(
                503,
                f"the query ran past the {self.timeout:g} s limit of this endpoint",
                (("retry-after", retry),),
            ) from None
        except (OSError, ValueError, TypeError) as err:
            log.error("SPARQL query failed: %s", err)
            raise SparqlError(500, "the query failed unexpectedly") from None
        status = int(header["status"])
        if status != 200:
            if status == 406:
                raise _not_acceptable({**RESULT_OFFERS, **GRAPH_OFFERS}, header["message"])
            raise SparqlError(status, str(header["message"]))
        media = str(header["media_type"])
        offer = RESULT_OFFERS.get(media) or GRAPH_OFFERS[media]
        extra = (("vary", "Accept"), ("aggregator-generation", str(header["generation"])))
        return 200, body, offer.content_type, extra


_NEGOTIATED: dict[str | None, tuple[str | None, str | None]] = {}


def _negotiated(accept: str | None) -> tuple[str | None, str | None]:
    """(results media type, graph media type) for an Accept header; clients send few distinct
    headers, so the answers are kept (at most 512, then the memo starts again)."""
    found = _NEGOTIATED.get(accept)
    if found is None:
        if len(_NEGOTIATED) >= 512:
            _NEGOTIATED.clear()
        found = (negotiate(accept, RESULT_ALIASES), negotiate(accept, GRAPH_ALIASES))
        _NEGOTIATED[accept] = found
    return found


def _not_acceptable(offers: dict[str, Any] | Any, reason: str = "") -> SparqlError:
    listed = ", ".join(offers)
    return SparqlError(
        406, f"{reason + '; ' if reason else ''}available: {listed}", (("vary", "Accept"),)
    )


def _params(raw: bytes) -> list[tuple[str, str]]:
    """``parse_qsl`` (blank values kept, at most 1,000 fields), with percent-escapes decoded by
    the C escape decoder: a query string is mostly escapes, and this is the hot path."""
    parts = [p for p in raw.split(b"&") if p]
    if len(parts) > 1000:
        raise SparqlError(400, "malformed parameters: more than 1000 fields")
    out = []
    for part in parts:
        key, _, value = part.partition(b"=")
        out.append((_utf8(_unquote(key)), _utf8(_unquote(value))))
    return out


def _unquote(data: bytes) -> bytes:
    data = data.replace(b"+", b" ")
    if b"%" not in data:
        return data
    try:  # %XX -> \xXX, a literal backslash doubled: escape_decode undoes exactly these
        return bytes(codecs.escape_decode(data.replace(b"\\", b"\\\\").replace(b"%", b"\\x"))[0])
    except ValueError:  # a stray "%" (not followed by two hex digits): keep it, as parse_qsl
        return unquote_to_bytes(data)


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SparqlError(400, "the request is not valid UTF-8") from None


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise SparqlError(400, "the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise SparqlError(413, f"the request body is larger than {MAX_BODY} bytes")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _send(
    send: Send,
    status: int,
    body: bytes,
    content_type: str | None,
    extra: tuple[tuple[str, str], ...],
) -> None:
    headers = [*CORS, (b"content-length", str(len(body)).encode())]
    if content_type:
        headers.append((b"content-type", content_type.encode()))
    headers += [(k.encode(), v.encode()) for k, v in extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
