"""``aggregator serve``: a first, read-only publication of the aggregate.

- ``/`` a small HTML overview (sources, record counts, recent jobs);
- ``/sparql`` SPARQL 1.1 query by GET and POST (form or ``application/sparql-query``) over the
  union of the record graphs; SELECT/ASK as SPARQL JSON, XML, CSV or TSV, CONSTRUCT/DESCRIBE
  as Turtle, N-Triples or RDF/XML. Updates cannot run (only the query parser is used) and
  ``SERVICE`` is refused: a federated call would make our server fetch other hosts;
- ``/records/{source}/{local_id}`` the stored dataset graph (N-Triples or Turtle) and
  ``/payload/{sha256}`` an original payload byte for byte.

The full republishing layer (OAI-PMH provider, catalogue paging, deadlines) builds on this.
"""

from __future__ import annotations

import html
import re
import threading

import uvicorn
from pyoxigraph import (
    QueryResultsFormat,
    QueryTriples,
    RdfFormat,
    parse,
    serialize,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from aggregator.config import Settings
from aggregator.store.records import RecordStore

RESULT_TYPES = {
    "application/sparql-results+json": QueryResultsFormat.JSON,
    "application/json": QueryResultsFormat.JSON,
    "application/sparql-results+xml": QueryResultsFormat.XML,
    "application/xml": QueryResultsFormat.XML,
    "text/csv": QueryResultsFormat.CSV,
    "text/tab-separated-values": QueryResultsFormat.TSV,
}
GRAPH_TYPES = {
    "text/turtle": RdfFormat.TURTLE,
    "application/n-triples": RdfFormat.N_TRIPLES,
    "application/rdf+xml": RdfFormat.RDF_XML,
}
_STRIP = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|<[^<>\s]*>|#[^\n]*'
)
_SERVICE = re.compile(r"\bSERVICE\b", re.IGNORECASE)


def uses_service(query: str) -> bool:
    """True when the query has a SERVICE clause (strings, IRIs and comments ignored)."""
    return bool(_SERVICE.search(_STRIP.sub(" ", query)))


def negotiate(accept: str, offered: dict[str, object], default: str) -> str | None:
    ranges = []
    for i, part in enumerate(accept.split(",")):
        fields = part.strip().split(";")
        mt = fields[0].strip().lower()
        q = 1.0
        for p in fields[1:]:
            k, _, v = p.strip().partition("=")
            if k == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        if mt:
            ranges.append((q, -i, mt))
    if not ranges:
        return default
    for q, _, mt in sorted(ranges, reverse=True):
        if q <= 0:
            continue
        if mt in offered:
            return mt
        if mt in ("*/*", "application/*", "text/*"):
            return default
    return None


def create_app(store: RecordStore, settings: Settings) -> Starlette:
    lock = threading.Lock()  # the SQLite connection is shared by the worker threads

    def home(request: Request) -> HTMLResponse:
        with lock:
            counts = store.db.counts_by_status()
            recent = store.jobs.recent(limit=10)
        rows = "".join(
            f"<tr><td>{html.escape(j.source)}</td><td>{j.id}</td><td>{html.escape(j.status)}</td>"
            f"<td>{html.escape(' '.join(f'{k}={v}' for k, v in j.counters.items() if v))}</td></tr>"
            for j in recent
        )
        body = (
            "<!doctype html><meta charset=utf-8><title>ld-aggregator</title>"
            "<h1>ld-aggregator</h1>"
            f"<p>Records: {html.escape(str(counts))}</p>"
            "<p>SPARQL endpoint: <a href='/sparql?query=SELECT+%3Fd+%3Ft+WHERE+%7B%3Fd+a+"
            "%3Chttp%3A%2F%2Fwww.w3.org%2Fns%2Fdcat%23Dataset%3E%3B%3Chttp%3A%2F%2Fpurl.org%2F"
            "dc%2Fterms%2Ftitle%3E+%3Ft%7D+LIMIT+20'>/sparql</a></p>"
            f"<h2>Recent jobs</h2><table><tr><th>source</th><th>job</th><th>status</th>"
            f"<th>counts</th></tr>{rows}</table>"
        )
        return HTMLResponse(body)

    async def sparql(request: Request) -> Response:
        query: str | None = request.query_params.get("query")
        if request.method == "POST":
            ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype == "application/sparql-query":
                query = (await request.body()).decode("utf-8", errors="replace")
            elif ctype == "application/x-www-form-urlencoded":
                form = await request.form()
                if "update" in form:
                    return PlainTextResponse("this endpoint is read-only", status_code=403)
                value = form.get("query")
                query = value if isinstance(value, str) else None
            elif ctype == "application/sparql-update":
                return PlainTextResponse("this endpoint is read-only", status_code=403)
        if "update" in request.query_params:
            return PlainTextResponse("this endpoint is read-only", status_code=403)
        if not query:
            return PlainTextResponse("missing 'query' parameter", status_code=400)
        if uses_service(query):
            return PlainTextResponse("SERVICE (federated query) is not allowed", status_code=400)
        try:
            result = store.graphs.query(query)
        except SyntaxError as err:
            return PlainTextResponse(f"malformed query: {err}", status_code=400)
        except OSError as err:
            return PlainTextResponse(f"query failed: {err}", status_code=500)
        accept = request.headers.get("accept", "*/*")
        if isinstance(result, QueryTriples):
            mt = negotiate(accept, dict(GRAPH_TYPES), "text/turtle")
            if mt is None:
                return PlainTextResponse("not acceptable", status_code=406)
            data = serialize(result, format=GRAPH_TYPES[mt])
            return Response(data or b"", media_type=mt)
        mt = negotiate(accept, dict(RESULT_TYPES), "application/sparql-results+json")
        if mt is None:
            return PlainTextResponse("not acceptable", status_code=406)
        fmt = RESULT_TYPES[mt]
        data = result.serialize(format=fmt)
        media = {
            QueryResultsFormat.JSON: "application/sparql-results+json",
            QueryResultsFormat.XML: "application/sparql-results+xml",
        }.get(fmt, mt)
        return Response(data or b"", media_type=media)

    def record(request: Request) -> Response:
        source = request.path_params["source"]
        local_id = request.path_params["local_id"]
        with lock:
            row = store.record(source, local_id)
            if row is None:
                return PlainTextResponse("no such record", status_code=404)
            nt = store.catalog_record_ntriples(row) + store.dataset_ntriples(row)
        mt = negotiate(request.headers.get("accept", "*/*"), dict(GRAPH_TYPES), "text/turtle")
        if mt is None:
            return PlainTextResponse("not acceptable", status_code=406)
        if mt == "application/n-triples":
            return Response(nt, media_type=mt)
        data = serialize(parse(nt, format=RdfFormat.N_TRIPLES), format=GRAPH_TYPES[mt])
        return Response(data or b"", media_type=mt)

    def payload(request: Request) -> Response:
        with lock:
            found = store.payload(request.path_params["sha"])
        if found is None:
            return PlainTextResponse("no such payload", status_code=404)
        return Response(found[1], media_type=found[0])

    return Starlette(
        routes=[
            Route("/", home),
            Route("/sparql", sparql, methods=["GET", "POST"]),
            Route("/records/{source}/{local_id:path}", record),
            Route("/payload/{sha}", payload),
        ]
    )


def run_server(store: RecordStore, settings: Settings, host: str, port: int) -> None:
    uvicorn.run(create_app(store, settings), host=host, port=port, log_level="warning")
