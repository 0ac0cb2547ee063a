"""A small SPARQL 1.1 endpoint over an in-memory pyoxigraph Store, with fault switches.

The tests of the ``sparql`` harvester run against a real ``oxigraph serve``; this peer exists
for what a real server will not do on demand: fail with 500/503 and ``Retry-After``, answer
slowly, or send malformed results. Faults are keyed by query kind (``count``, ``select``,
``closure`` (the harvester's batch of dataset closures), ``construct`` or ``any``)::

    app = SparqlApp()
    app.load(Path("endpoint.trig").read_bytes(), RdfFormat.TRIG)
    app.fail("closure", SparqlFault(status=500, times=-1))
    with PeerServer(app) as server:
        endpoint = server.url + "query"

Supported: the query operation by GET, form POST and ``application/sparql-query`` POST;
SELECT/ASK results as SPARQL JSON; CONSTRUCT/DESCRIBE as N-Triples or Turtle by ``Accept``.
``SERVICE`` is refused: pyoxigraph would make outbound requests for it.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from pyoxigraph import (
    NamedNode,
    QueryBoolean,
    QueryResultsFormat,
    QuerySolutions,
    RdfFormat,
    Store,
)

from aggregator.demo.peers.server import respond

_SERVICE = re.compile(r"\bSERVICE\b", re.IGNORECASE)
_IRIS_AND_STRINGS = re.compile(r'<[^<>"{}|^`\\\s]*>|"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_CONSTRUCT = re.compile(r"\b(CONSTRUCT|DESCRIBE)\b", re.IGNORECASE)
_COUNT = re.compile(r"\bCOUNT\s*\(", re.IGNORECASE)
_CLOSURE = re.compile(r"\?reached\b")  # the variable the sparql harvester's batch query binds
MAX_BODY = 1024 * 1024


@dataclass(slots=True)
class SparqlFault:
    """What goes wrong for one query kind, ``times`` times (``-1``: always)."""

    status: int | None = None
    retry_after: str | None = None
    delay: float = 0.0
    body: bytes | None = None  # replaces the real answer (malformed or lying results)
    content_type: str | None = None
    times: int = 1


def query_kind(query: str) -> str:
    """``construct``, ``closure``, ``count`` or ``select`` (ASK counts as select)."""
    if _CONSTRUCT.search(query):
        return "construct"
    if _CLOSURE.search(query):
        return "closure"
    if _COUNT.search(query):
        return "count"
    return "select"


def uses_service(query: str) -> bool:
    """Whether the query has a SERVICE clause (the word inside IRIs or strings does not count)."""
    return bool(_SERVICE.search(_IRIS_AND_STRINGS.sub(" ", query)))


class SparqlApp:
    """The WSGI callable. ``queries`` logs every query received, in order."""

    def __init__(self, store: Store | None = None) -> None:
        self.store = store if store is not None else Store()
        self.faults: dict[str, SparqlFault] = {}
        self.queries: list[str] = []
        self._lock = threading.Lock()

    def load(self, data: bytes, rdf_format: RdfFormat, graph: str | None = None) -> None:
        self.store.load(data, rdf_format, to_graph=NamedNode(graph) if graph is not None else None)

    def fail(self, kind: str, fault: SparqlFault) -> None:
        with self._lock:
            self.faults[kind] = fault

    def _take_fault(self, kind: str) -> SparqlFault | None:
        with self._lock:
            for key in (kind, "any"):
                fault = self.faults.get(key)
                if fault is None or fault.times == 0:
                    continue
                if fault.times > 0:
                    fault.times -= 1
                return fault
        return None

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        query = _read_query(environ)
        if query is None:
            return respond(start_response, 400, b"no query given")
        with self._lock:
            self.queries.append(query)
        kind = query_kind(query)
        fault = self._take_fault(kind)
        if fault is not None:
            if fault.delay:
                time.sleep(fault.delay)
            if fault.status is not None:
                headers = [("Retry-After", fault.retry_after)] if fault.retry_after else []
                return respond(start_response, fault.status, b"simulated failure", headers=headers)
            if fault.body is not None:
                content_type = fault.content_type or "application/sparql-results+json"
                return respond(start_response, 200, fault.body, content_type)
        if uses_service(query):
            return respond(start_response, 400, b"SERVICE is not allowed on this endpoint")
        try:
            result = self.store.query(query)
        except (SyntaxError, ValueError, OSError) as err:
            return respond(start_response, 400, f"query error: {err}".encode())
        accept = environ.get("HTTP_ACCEPT", "")
        if isinstance(result, QuerySolutions | QueryBoolean):
            body = result.serialize(format=QueryResultsFormat.JSON) or b""
            content_type = "application/sparql-results+json"
        else:
            fmt = RdfFormat.TURTLE if _prefers_turtle(accept) else RdfFormat.N_TRIPLES
            body = result.serialize(format=fmt) or b""
            content_type = fmt.media_type
        if fault is not None and fault.content_type is not None:
            content_type = fault.content_type
        return respond(start_response, 200, body, content_type)


def _prefers_turtle(accept: str) -> bool:
    ranked: list[tuple[float, str]] = []
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        ranked.append((q, media.lower()))
    ranked.sort(key=lambda item: -item[0])
    for _, media in ranked:
        if media in ("text/turtle", "application/x-turtle"):
            return True
        if media in ("application/n-triples", "text/plain", "*/*"):
            return False
    return False


def _read_query(environ: dict[str, Any]) -> str | None:
    method = environ.get("REQUEST_METHOD", "GET")
    if method == "GET":
        values = parse_qs(environ.get("QUERY_STRING", "")).get("query")
        return values[0] if values else None
    if method != "POST":
        return None
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw: bytes = environ["wsgi.input"].read(min(length, MAX_BODY))
    content_type = environ.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
    if content_type == "application/sparql-query":
        return raw.decode("utf-8", errors="replace")
    values = parse_qs(raw.decode("ascii", errors="replace")).get("query")
    return values[0] if values else None
