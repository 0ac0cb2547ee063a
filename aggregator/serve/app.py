"""``aggregator serve``: the ASGI app that republishes the aggregate.

Each feature is a module exposing ``routes(ctx)``; this module only assembles them:

- ``/sparql``   SPARQL 1.1 Protocol endpoint (:mod:`aggregator.serve.sparql`): read-only,
  SERVICE refused, a per-query deadline kept by replacing the serving process, queries
  reading a snapshot of the store;
- ``/oai``      OAI-PMH 2.0 data provider (:mod:`aggregator.serve.oai`);
- ``/catalog``, ``/dataset/...``, ``/record/...``, ``/payload/...`` the DCAT catalogue with
  Hydra paging and dereferenceable IRIs (:mod:`aggregator.serve.catalog`);
- ``/source/...``, ``/job/...`` provenance (:mod:`aggregator.serve.provenance`);
- ``/metrics``  Prometheus figures (:mod:`aggregator.serve.metrics`);
- ``/`` an overview page.

:func:`run_server` (``aggregator serve``, the demo) runs the app in several serving processes
under a supervisor (:mod:`aggregator.serve.supervisor`); none of them holds the store open, so
``aggregator harvest`` writes it meanwhile and the SPARQL endpoint follows the snapshots it
publishes. ``create_app`` around a ``RecordStore`` gives the same app in the process that
writes the store (tests, embedding): :meth:`Aggregate.refresh` waits for the snapshot of its
writes, and a query past its deadline gets its 503 but runs on in its thread (nothing can stop
it inside one process).
"""

from __future__ import annotations

import html
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route
from starlette.types import Message

from aggregator.config import Settings
from aggregator.serve import catalog, metrics, oai, provenance, sparql
from aggregator.serve.context import ServeContext
from aggregator.serve.rdf_formats import HTML_CSP
from aggregator.serve.sparql import Receive, Scope, Send
from aggregator.serve.sparql_runner import Supervision
from aggregator.serve.supervisor import SchedulerProcess, Supervisor
from aggregator.store.records import StoreNames


@dataclass
class Aggregate:
    app: Starlette
    sparql: sparql.SparqlEndpoint
    _compressing: GZipMiddleware = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # gzip when the client accepts it (streamed OAI pages too), with Vary:
        # Accept-Encoding; bodies under 512 bytes go as they are
        self._compressing = GZipMiddleware(self._route, minimum_size=512)

    def refresh(self) -> None:
        """Make the SPARQL endpoint see the store as it is now."""
        self.sparql.refresh()

    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app as served: HTTP responses compressed when the client accepts gzip, then
        :meth:`_route`."""
        if scope["type"] == "http":
            await self._compressing(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``/sparql`` goes straight to its endpoint (the hot path: no router, ~15 us less
        per query; the endpoint answers its own errors), everything else through Starlette."""
        if scope["type"] == "http" and scope["path"] == "/sparql":
            sparql_counter = metrics.counters().sparql

            async def counted(message: Message) -> None:
                if message["type"] == "http.response.start":
                    sparql_counter.labels(str(message["status"])).inc()
                await send(message)

            await self.sparql(scope, receive, counted)
        else:
            await self.app(scope, receive, send)


def create_app(
    store: StoreNames,
    settings: Settings,
    *,
    oai_key: bytes | None = None,
    snapshot_root: Path | None = None,
    supervision: Supervision | None = None,
) -> Aggregate:
    """Build the app. ``store``: the ``RecordStore`` (the process writing it), or its names
    (a reader: a serving process gets the OAI token key, the snapshot folder and the
    supervision hooks too). Call in the main thread (the OAI module reads its token key
    here)."""
    ctx = ServeContext(store, settings, oai_key=oai_key, snapshot_root=snapshot_root)
    sparql_routes = sparql.SparqlEndpoint(ctx, supervision=supervision).routes()

    def home(request: Request) -> HTMLResponse:
        db = ctx.read_db()
        counts = dict(db.execute("SELECT status, count(*) FROM records GROUP BY status"))
        jobs = db.execute(
            "SELECT id, source, status, counters, started FROM jobs ORDER BY id DESC LIMIT 10"
        ).fetchall()
        base = ctx.base_url
        rows = "".join(
            f"<tr><td><a href='{base}job/{j[0]}'>{j[0]}</a></td><td>{html.escape(j[1])}</td>"
            f"<td>{html.escape(j[2])}</td><td>{html.escape(j[4])}</td>"
            f"<td><code>{html.escape(j[3])}</code></td></tr>"
            for j in jobs
        )
        body = f"""<!doctype html><meta charset=utf-8>
<title>{html.escape(settings.serve.oai_repository_name)}</title>
<h1>{html.escape(settings.serve.oai_repository_name)}</h1>
<p>Records: {counts.get("active", 0)} active, {counts.get("withdrawn", 0)} withdrawn,
{counts.get("rejected", 0)} rejected.</p>
<ul>
<li><a href="{base}catalog.html">The catalogue</a> (also as
<a href="{base}catalog.ttl">Turtle</a>, <a href="{base}catalog.jsonld">JSON-LD</a>,
<a href="{base}catalog.rdf">RDF/XML</a>)</li>
<li>SPARQL endpoint: <code>{base}sparql</code>
(<a href="{base}sparql">service description</a>)</li>
<li>OAI-PMH: <a href="{base}oai?verb=Identify">{base}oai</a>
(<a href="{base}oai?verb=ListRecords&amp;metadataPrefix=dcat_ap">ListRecords</a>)</li>
</ul>
<h2>Recent jobs</h2>
<table><tr><th>job</th><th>source</th><th>status</th><th>started</th><th>counters</th></tr>
{rows}</table>"""
        return HTMLResponse(body, headers={"Content-Security-Policy": HTML_CSP})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with sparql_routes.endpoint.lifespan(app):
            yield

    app = Starlette(
        routes=[
            Route("/", home),
            *sparql_routes,
            *oai.routes(ctx),
            *catalog.routes(ctx),
            *provenance.routes(ctx),
            *metrics.routes(ctx),
        ],
        lifespan=lifespan,
    )
    return Aggregate(app, sparql_routes.endpoint)


def run_server(
    store: StoreNames,
    settings: Settings,
    host: str,
    port: int,
    processes: int | None = None,
    *,
    scheduler: bool = False,
) -> None:
    """Serve until SIGINT or SIGTERM: a supervisor and its serving processes, and with
    ``scheduler`` the scheduler in a process of its own (:mod:`aggregator.schedule.service`),
    which harvests (it becomes the store's writer while jobs run) and ends with ``serve``."""
    supervisor = Supervisor(store, settings, host, port, processes=processes)
    child = SchedulerProcess(settings) if scheduler else None
    try:
        supervisor.serve_forever()
    finally:
        if child is not None:
            child.stop()
