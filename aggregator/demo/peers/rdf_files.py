"""A local server of RDF documents with fault switches: the peer of the ``rdf-dump`` harvester.

Documents live in an in-memory mapping ``path -> Document`` (the path includes the query
string, e.g. ``/catalogue?page=2``) that tests and the demo change while the server runs::

    app = RdfFilesApp()
    app.put("/dump.ttl", Path("catalogue.ttl").read_bytes(), "text/turtle")
    app.fail("/dump.ttl", Fault(status=503, retry_after="1", times=2))
    first = app.add_hydra_catalogue("/paged", datasets=7, page_size=3)
    with PeerServer(app) as server:
        ...  # server.url + "dump.ttl", server.url + first.lstrip("/")

Fault switches (:class:`Fault`, one per path, used ``times`` times, ``-1`` for ever): an error
status with ``Retry-After``, a redirect, a delay before the response, a body larger or shorter
than the declared ``Content-Length``, and a wrong ``Content-Type``.

:meth:`RdfFilesApp.add_hydra_catalogue` builds a paged DCAT catalogue:
``hydra:PartialCollectionView`` + ``hydra:next``, the deprecated ``hydra:PagedCollection`` +
``hydra:nextPage``, or a loop where the last page points back to the first; optionally in
another serialisation than Turtle and with a wrong ``hydra:totalItems``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pyoxigraph import RdfFormat, parse, serialize

from aggregator.demo.peers.server import respond

Variant = Literal["next", "nextPage", "loop"]

_FORMATS: Mapping[str, tuple[RdfFormat, str]] = {
    "turtle": (RdfFormat.TURTLE, "text/turtle; charset=utf-8"),
    "rdfxml": (RdfFormat.RDF_XML, "application/rdf+xml"),
    "jsonld": (RdfFormat.JSON_LD, "application/ld+json"),
    "ntriples": (RdfFormat.N_TRIPLES, "application/n-triples"),
}

_PREFIXES = """\
@prefix dcat: <http://www.w3.org/ns/dcat#> .
@prefix dct:  <http://purl.org/dc/terms/> .
@prefix foaf: <http://xmlns.com/foaf/0.1/> .
@prefix hydra: <http://www.w3.org/ns/hydra/core#> .
@prefix xsd:  <http://www.w3.org/2001/XMLSchema#> .
"""


@dataclass(frozen=True, slots=True)
class Document:
    """A served document. ``turtle_template``: Turtle with relative IRIs, converted per request
    into ``syntax`` against the request URL (so pages in any serialisation can link relatively).
    """

    body: bytes
    content_type: str
    turtle_template: bool = False
    syntax: str = "turtle"


@dataclass(slots=True)
class Fault:
    """What goes wrong on one path, for ``times`` requests (``-1``: every request)."""

    status: int | None = None  # e.g. 500 or 503, or 301/302 with ``location``
    retry_after: str | None = None  # Retry-After header value sent with ``status``
    location: str | None = None  # Location header value sent with ``status``
    delay: float = 0.0  # seconds to wait before answering
    extra_bytes: bytes = b""  # sent after the body: a body larger than declared
    truncate: int = 0  # declare the full length, send this many bytes fewer
    content_type: str | None = None  # a wrong Content-Type
    times: int = 1


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    method: str
    path: str
    accept: str


class RdfFilesApp:
    """The WSGI callable. ``documents``, ``faults`` and ``requests`` are safe to inspect."""

    def __init__(self, documents: Mapping[str, Document] | None = None) -> None:
        self.documents: dict[str, Document] = dict(documents or {})
        self.faults: dict[str, Fault] = {}
        self.requests: list[LoggedRequest] = []
        self._lock = threading.Lock()

    # -- set-up -----------------------------------------------------------------------------
    def put(self, path: str, body: bytes, content_type: str) -> None:
        self.documents[path] = Document(body, content_type)

    def put_file(self, path: str, file: Path, content_type: str) -> None:
        self.put(path, file.read_bytes(), content_type)

    def fail(self, path: str, fault: Fault) -> None:
        with self._lock:
            self.faults[path] = fault

    def hits(self, path: str) -> int:
        """How many requests asked for ``path`` (query string included)."""
        with self._lock:
            return sum(1 for r in self.requests if r.path == path)

    def add_hydra_catalogue(
        self,
        path: str,
        *,
        datasets: int,
        page_size: int,
        variant: Variant = "next",
        total_items: int | None = None,
        syntax: str = "turtle",
    ) -> str:
        """Serve a paged catalogue at ``path?page=1..n``; return the first page's path."""
        pages = max(1, -(-datasets // page_size))
        total = datasets if total_items is None else total_items
        name = path.rsplit("/", 1)[-1]
        for number in range(1, pages + 1):
            start = (number - 1) * page_size
            members = range(start, min(datasets, start + page_size))
            if number < pages:
                nxt: int | None = number + 1
            else:
                nxt = 1 if variant == "loop" else None
            body = _hydra_page(name, number, pages, members, nxt, total, variant, page_size)
            fmt = _FORMATS[syntax]
            self.documents[f"{path}?page={number}"] = Document(
                body.encode("utf-8"), fmt[1], turtle_template=syntax != "turtle", syntax=syntax
            )
        return f"{path}?page=1"

    # -- WSGI -------------------------------------------------------------------------------
    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if environ.get("QUERY_STRING"):
            path += "?" + environ["QUERY_STRING"]
        method = environ.get("REQUEST_METHOD", "GET")
        with self._lock:
            self.requests.append(LoggedRequest(method, path, environ.get("HTTP_ACCEPT", "")))
            fault = self.faults.get(path)
            if fault is not None:
                if fault.times == 0:
                    fault = None
                elif fault.times > 0:
                    fault.times -= 1
        if method not in ("GET", "HEAD"):
            return respond(start_response, 405, b"method not allowed", headers=[("Allow", "GET")])
        if fault is not None and fault.delay:
            time.sleep(fault.delay)
        if fault is not None and fault.status is not None:
            headers = [("Retry-After", fault.retry_after)] if fault.retry_after else []
            if fault.location:
                headers.append(("Location", fault.location))
            return respond(start_response, fault.status, b"simulated failure", headers=headers)
        doc = self.documents.get(path)
        if doc is None:
            return respond(start_response, 404, b"not found")
        body = doc.body
        if doc.turtle_template:
            body = _convert(body, doc.syntax, _request_url(environ))
        content_type = doc.content_type
        if fault is not None and fault.content_type is not None:
            content_type = fault.content_type
        if fault is not None and (fault.extra_bytes or fault.truncate):
            start_response(
                "200 OK", [("Content-Type", content_type), ("Content-Length", str(len(body)))]
            )
            return _misdeclared(body, fault)
        return respond(start_response, 200, body, content_type)


def _misdeclared(body: bytes, fault: Fault) -> Iterator[bytes]:
    """The body, then extra bytes, or cut short: Content-Length was already sent."""
    if fault.truncate:
        yield body[: max(0, len(body) - fault.truncate)]
        return
    yield body
    yield fault.extra_bytes


def _request_url(environ: Mapping[str, Any]) -> str:
    host = environ.get("HTTP_HOST") or f"{environ['SERVER_NAME']}:{environ['SERVER_PORT']}"
    url = f"http://{host}{environ.get('PATH_INFO', '/')}"
    if environ.get("QUERY_STRING"):
        url += "?" + environ["QUERY_STRING"]
    return url


def _convert(turtle: bytes, syntax: str, base: str) -> bytes:
    quads = parse(turtle, RdfFormat.TURTLE, base_iri=base)
    return serialize((q.triple for q in quads), format=_FORMATS[syntax][0]) or b""


def _hydra_page(
    name: str,
    number: int,
    pages: int,
    members: range,
    nxt: int | None,
    total: int,
    variant: Variant,
    page_size: int,
) -> str:
    """One page of a paged DCAT catalogue in Turtle, links relative to the page URL."""
    lines = [_PREFIXES]
    ds_iris = [f"<https://data.example.org/{name}/dataset/{i + 1:04d}>" for i in members]
    listed = " , ".join(ds_iris)
    lines.append(
        f"<https://data.example.org/{name}> a dcat:Catalog, hydra:Collection ;\n"
        f'    dct:title "Paged catalogue {name}"@en ;\n'
        + (f"    dcat:dataset {listed} ;\n" if listed else "")
        + (f"    hydra:totalItems {total} ;\n" if variant != "nextPage" else "")
        + (f"    hydra:view <?page={number}> .\n" if variant != "nextPage" else "    .\n")
    )
    if variant == "nextPage":  # the deprecated Hydra vocabulary, as older portals publish it
        view = [
            f"<?page={number}> a hydra:PagedCollection",
            f'hydra:totalItems "{total}"^^xsd:integer',
            f"hydra:itemsPerPage {page_size}",
            "hydra:firstPage <?page=1>",
            f"hydra:lastPage <?page={pages}>",
        ]
        if nxt is not None:
            view.append(f"hydra:nextPage <?page={nxt}>")
    else:
        view = [
            f"<?page={number}> a hydra:PartialCollectionView",
            "hydra:first <?page=1>",
            f"hydra:last <?page={pages}>",
        ]
        if number > 1:
            view.append(f"hydra:previous <?page={number - 1}>")
        if nxt is not None:
            view.append(f"hydra:next <?page={nxt}>")
    lines.append(" ;\n    ".join(view) + " .\n")
    for i, iri in zip(members, ds_iris, strict=True):
        n = i + 1
        lines.append(
            f"{iri} a dcat:Dataset ;\n"
            f'    dct:identifier "{name}-{n:04d}" ;\n'
            f'    dct:title "Monitoring dataset {n}"@en ;\n'
            f'    dct:description "Measurements from station {n}."@en ;\n'
            "    dct:publisher <https://data.example.org/org/env-agency> ;\n"
            f'    dct:modified "2025-01-{1 + n % 28:02d}"^^xsd:date ;\n'
            "    dcat:distribution [ a dcat:Distribution ;\n"
            f"        dcat:accessURL <https://data.example.org/files/{name}-{n:04d}.csv> ;\n"
            "        dct:license <https://creativecommons.org/licenses/by/4.0/> ] .\n"
        )
    return "\n".join(lines)
