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
- ``/``, ``/sources``, ``/jobs``, ``/quality``, ``/datasets``, ``/admin/...`` the harvest
  dashboard (:mod:`aggregator.serve.dashboard`), which also answers ``/sparql`` for browsers.

:func:`run_server` (``aggregator serve``, the demo) runs the app in several serving processes
under a supervisor (:mod:`aggregator.serve.supervisor`); none of them holds the store open, so
``aggregator harvest`` writes it meanwhile and the SPARQL endpoint follows the snapshots it
publishes. ``create_app`` around a ``RecordStore`` gives the same app in the process that
writes the store (tests, embedding): :meth:`Aggregate.refresh` waits for the snapshot of its
writes, and a query past its deadline gets its 503 but runs on in its thread (nothing can stop
it inside one process).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message

from aggregator.config import Settings
from aggregator.serve import catalog, metrics, oai, provenance, sparql
from aggregator.serve.context import ServeContext
from aggregator.serve.dashboard import DashboardApp, wants_html
from aggregator.serve.sparql import Receive, Scope, Send
from aggregator.serve.sparql_runner import Supervision
from aggregator.serve.supervisor import SchedulerProcess, Supervisor
from aggregator.store.names import StoreNames


@dataclass
class Aggregate:
    app: Starlette
    sparql: sparql.SparqlEndpoint
    sparql_page: Callable[[Request], Awaitable[Response]]
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
        """``/sparql`` goes straight to its endpoint (the hot path: no router to pay per query,
        docs/benchmarks.md#serving; the endpoint answers its own errors), everything else
        through Starlette."""
        if scope["type"] == "http" and scope["path"] == "/sparql":
            if scope["method"] == "GET" and wants_html(_accept(scope)):
                response = await self.sparql_page(Request(scope, receive))
                await response(scope, receive, send)
                return
            sparql_counter = metrics.counters().sparql

            async def counted(message: Message) -> None:
                if message["type"] == "http.response.start":
                    sparql_counter.labels(str(message["status"])).inc()
                await send(message)

            await self.sparql(scope, receive, counted)
        else:
            await self.app(scope, receive, send)


def _accept(scope: Scope) -> str | None:
    for key, value in scope["headers"]:
        if key == b"accept":
            return bytes(value).decode("latin-1")
    return None


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
    board = DashboardApp(ctx, sparql_routes.endpoint)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with sparql_routes.endpoint.lifespan(app):
            yield

    app = Starlette(
        routes=[
            *sparql_routes,
            *oai.routes(ctx),
            *catalog.routes(ctx, board.dataset_html),
            *provenance.routes(ctx),
            *metrics.routes(ctx),
            *board.routes(),
        ],
        lifespan=lifespan,
    )
    return Aggregate(app, sparql_routes.endpoint, board.sparql_page)


def run_server(
    store: StoreNames,
    settings: Settings,
    host: str,
    port: int,
    processes: int | None = None,
    *,
    scheduler: bool = False,
    sock: socket.socket | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM: a supervisor and its serving processes, and with
    ``scheduler`` the scheduler in a process of its own (:mod:`aggregator.schedule.service`),
    which harvests (it becomes the store's writer while jobs run) and ends with ``serve``.
    ``sock``: the socket :func:`~aggregator.serve.supervisor.bind_listener` bound for
    ``host:port`` (a caller checks the port before it says it serves)."""
    supervisor = Supervisor(store, settings, host, port, processes=processes, sock=sock)
    child = SchedulerProcess(settings) if scheduler else None
    try:
        supervisor.serve_forever()
    finally:
        if child is not None:
            child.stop()
