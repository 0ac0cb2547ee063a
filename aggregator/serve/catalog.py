"""The DCAT catalogue of the aggregate, and dereferenceable dataset, record and payload IRIs.

Routes (see docs/serve/catalog.md; :func:`routes` returns them for the app to mount):

- ``/catalog`` (and ``/catalog.ttl|.jsonld|.rdf|.nt|.html``): the ``dcat:Catalog`` of the
  active records, paged by keyset on ``(modified, id)`` with a Hydra
  ``PartialCollectionView``; ``?modified_since=`` limits it to recent changes. Every page
  holds the full descriptions of its datasets and their catalogue records.
- ``/dataset/{source}/{key}`` (minted dataset IRIs) and ``/dataset?iri=`` (any dataset IRI):
  the dataset graph as stored, or an HTML page; 410 for withdrawn datasets.
- ``/record/{source}/{key}``: the ``dcat:CatalogRecord``.
- ``/payload/{sha256}``: the original payload, byte for byte, with its media type.

The functions that read SQLite are framework-neutral (:func:`load_page`, :func:`find_dataset`,
:func:`find_record`, :func:`page_triples`); the Starlette handlers only translate HTTP.
Everything is read from SQLite (``ctx.read_db()``); nothing from the graph store, whose
datatypes change on insert.
"""

from __future__ import annotations

import base64
import binascii
import re
import sqlite3
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from urllib.parse import quote, urlencode

from pyoxigraph import BlankNode, Literal, NamedNode, Triple
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from aggregator.errors import AggregatorError, NotFoundError
from aggregator.serve import pages
from aggregator.serve.context import ServeContext
from aggregator.serve.rdf_formats import (
    ALL_FORMATS,
    HTML,
    HTML_CSP,
    NTRIPLES,
    TURTLE,
    BadRequestError,
    Choice,
    Format,
    choose,
    etag,
    not_modified,
    parse_ntriples,
    respond,
    select,
    serialize_graph,
    split_suffix,
    with_format,
)
from aggregator.store.state import RECORD_COLUMNS, RecordRow, unpack, unpack_graph
from aggregator.vocab import DCAT, DCT, FOAF, RDF_TYPE, XSD

HYDRA = "http://www.w3.org/ns/hydra/core#"
MAX_LIMIT = 1000
_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")
_SHA = re.compile(r"^[0-9a-f]{64}$")
_COLS = RECORD_COLUMNS + ", ntriples"


# -- paging -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Cursor:
    """A position in the (modified, id) order: the first or last page, or after/before a key."""

    direction: str  # "first" | "last" | "after" | "before"
    modified: str = ""
    id: int = 0

    def token(self) -> str:
        if self.direction in ("first", "last"):
            return self.direction
        raw = f"{self.direction[0]}{self.modified}|{self.id}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")


FIRST = Cursor("first")
LAST = Cursor("last")


def decode_cursor(token: str | None) -> Cursor:
    if not token or token == "first":  # noqa: S105 - a page token, not a secret
        return FIRST
    if token == "last":  # noqa: S105
        return LAST
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        direction = {"a": "after", "b": "before"}[raw[:1]]
        modified, _, ident = raw[1:].rpartition("|")
        if not _STAMP.match(modified):
            raise ValueError(modified)
        return Cursor(direction, modified, int(ident))
    except (binascii.Error, UnicodeDecodeError, KeyError, ValueError):
        raise BadRequestError(f"invalid page token {token[:80]!r}") from None


def parse_since(value: str | None) -> str | None:
    """``modified_since`` (an ISO date or date-time, UTC if no offset) as a stored stamp."""
    if not value:
        return None
    text = value.strip()
    try:
        if len(text) == 10:
            when = datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC)
        else:
            when = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "+"))
            when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except ValueError:
        raise BadRequestError(
            f"modified_since must be an ISO date or date-time: {value!r}"
        ) from None
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class PageRequest:
    cursor: Cursor = FIRST
    since: str | None = None
    limit: int = 100


@dataclass(slots=True)
class Entry:
    row: RecordRow
    ntriples: bytes


@dataclass(slots=True)
class Page:
    request: PageRequest
    entries: list[Entry]
    total: int
    next: Cursor | None
    previous: Cursor | None
    version: tuple[str, int]  # (greatest modified, greatest id) of the whole table


def _query(
    db: sqlite3.Connection,
    req: PageRequest,
    cmp: str | None,
    key: Cursor | None,
    descending: bool,
    limit: int,
    columns: str = _COLS,
) -> list[tuple[object, ...]]:
    where: list[str] = ["status = 'active'"]
    args: list[object] = []
    if req.since:
        where.append("modified >= ?")
        args.append(req.since)
    if cmp and key is not None:
        where.append(f"(modified, id) {cmp} (?, ?)")
        args += [key.modified, key.id]
    order = "DESC" if descending else "ASC"
    sql = (
        f"SELECT {columns} FROM records WHERE {' AND '.join(where)}"
        f" ORDER BY modified {order}, id {order} LIMIT ?"
    )
    return list(db.execute(sql, (*args, limit)))


def _exists(db: sqlite3.Connection, req: PageRequest, cmp: str, key: Cursor) -> bool:
    return bool(_query(db, req, cmp, key, cmp.startswith("<"), 1, "1"))


def _entry(row: tuple[object, ...] | sqlite3.Row) -> Entry:
    return Entry(RecordRow.from_row(row[:-1]), unpack_graph(row[-1]))  # type: ignore[arg-type]


def _key(row: RecordRow, direction: str) -> Cursor:
    return Cursor(direction, row.modified, row.id)


class Counter:
    """``hydra:totalItems`` per ``modified_since``, cached until the table changes.

    The count walks an index (tens of ms at a million records), so a harvester walking ten
    thousand pages should not pay it on every page; any write changes the table's greatest
    ``modified`` or ``id``, which is the cache key.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str | None, tuple[str, int]], int] = {}

    def count(self, db: sqlite3.Connection, since: str | None, version: tuple[str, int]) -> int:
        with self._lock:
            cached = self._counts.get((since, version))
        if cached is not None:
            return cached
        sql = "SELECT count(*) FROM records WHERE status = 'active'"
        args: tuple[str, ...] = ()
        if since:
            sql, args = sql + " AND modified >= ?", (since,)
        total = int(db.execute(sql, args).fetchone()[0])
        with self._lock:
            if len(self._counts) > 256:
                self._counts.clear()
            self._counts[(since, version)] = total
        return total


def table_version(db: sqlite3.Connection) -> tuple[str, int]:
    """Cheap (two index lookups) and changes on every write: writes stamp ``modified``."""
    modified = db.execute("SELECT max(modified) FROM records").fetchone()[0]
    ident = db.execute("SELECT max(id) FROM records").fetchone()[0]
    return (str(modified or ""), int(ident or 0))


def load_page(db: sqlite3.Connection, req: PageRequest, counter: Counter) -> Page:
    """One keyset page of active records, in (modified, id) order, with its neighbours."""
    cur, n = req.cursor, req.limit
    forward = cur.direction in ("first", "after")
    cmp = {"after": ">", "before": "<"}.get(cur.direction)
    rows = _query(db, req, cmp, cur, not forward, n + 1)
    more = len(rows) > n  # one more row in the direction of travel
    rows = rows[:n] if forward else rows[:n][::-1]
    entries = [_entry(r) for r in rows]
    version = table_version(db)
    total = counter.count(db, req.since, version)
    nxt = prev = None
    if entries:
        first, last = entries[0].row, entries[-1].row
        if forward:
            has_next = more
            has_prev = cur.direction == "after" and _exists(db, req, "<", _key(first, "before"))
        else:
            has_prev = more
            has_next = cur.direction == "before" and _exists(db, req, ">", _key(last, "after"))
        nxt = _key(last, "after") if has_next else None
        prev = _key(first, "before") if has_prev else None
    elif total:  # a cursor past either end: point back into the collection
        nxt = FIRST if cur.direction == "before" else None
        prev = LAST if cur.direction == "after" else None
    return Page(req, entries, total, nxt, prev, version)


# -- the catalogue graph ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CatalogInfo:
    """What the catalogue says about itself, from the settings where they have it."""

    iri: str
    homepage: str
    title: str
    description: str
    publisher: str
    email: str | None

    @classmethod
    def from_context(cls, ctx: ServeContext) -> CatalogInfo:
        serve = ctx.settings.serve
        name = str(serve.catalog_title or serve.oai_repository_name)
        description = str(
            serve.catalog_description
            or f"Datasets harvested by {name} from {len(ctx.settings.sources) or 'its'} "
            "source catalogue(s), republished as DCAT."
        )
        publisher = str(serve.catalog_publisher or name)
        email = str(serve.catalog_email or serve.oai_admin_email) or None
        return cls(
            f"{ctx.store.base_iri}catalog", ctx.base_url, name, description, publisher, email
        )


def _n(iri: str) -> NamedNode:
    return NamedNode(iri)


def record_triples(ctx: ServeContext, entry: Entry, scope: str = "") -> list[Triple]:
    """The dataset graph plus the catalogue record, blank nodes scoped to the record."""
    return parse_ntriples(entry.ntriples, scope) + parse_ntriples(
        ctx.store.catalog_record_ntriples(entry.row), scope
    )


def page_triples(
    ctx: ServeContext, info: CatalogInfo, page: Page, link: Callable[[Cursor], str]
) -> list[Triple]:
    """One page as triples: the catalogue (its members on this page), the Hydra view, then
    each member's dataset graph and catalogue record (grouped by subject for Turtle)."""
    cat, view = _n(info.iri), _n(link(page.request.cursor))
    a, integer = _n(RDF_TYPE), _n(XSD + "integer")
    publisher = BlankNode("publisher")
    head = [
        Triple(cat, a, _n(DCAT + "Catalog")),
        Triple(cat, a, _n(HYDRA + "Collection")),
        Triple(cat, _n(DCT + "title"), Literal(info.title)),
        Triple(cat, _n(DCT + "description"), Literal(info.description)),
        Triple(cat, _n(DCT + "publisher"), publisher),
        Triple(cat, _n(FOAF + "homepage"), _n(info.homepage)),
        Triple(cat, _n(HYDRA + "totalItems"), Literal(str(page.total), datatype=integer)),
        Triple(cat, _n(HYDRA + "view"), view),
    ]
    if page.version[0]:
        stamp = Literal(page.version[0], datatype=_n(XSD + "dateTime"))
        head.append(Triple(cat, _n(DCT + "modified"), stamp))
    members: list[Triple] = []
    service_type = _n(DCAT + "DataService")
    for entry in page.entries:
        row = entry.row
        triples = record_triples(ctx, entry, f"r{row.id}x")
        members += triples
        head.append(Triple(cat, _n(DCAT + "record"), _n(row.record_iri)))
        if row.dataset_iri:
            subject = _n(row.dataset_iri)
            is_service = (subject, a, service_type) in {
                (t.subject, t.predicate, t.object) for t in triples if t.subject == subject
            }
            head.append(Triple(cat, _n(DCAT + ("service" if is_service else "dataset")), subject))
    head += [
        # PagedCollection too: older CKAN DCAT harvesters look for that type only
        Triple(view, a, _n(HYDRA + "PartialCollectionView")),
        Triple(view, a, _n(HYDRA + "PagedCollection")),
        Triple(view, _n(HYDRA + "first"), _n(link(FIRST))),
        Triple(view, _n(HYDRA + "last"), _n(link(LAST))),
        Triple(
            view, _n(HYDRA + "itemsPerPage"), Literal(str(page.request.limit), datatype=integer)
        ),
    ]
    if page.next is not None:
        head.append(Triple(view, _n(HYDRA + "next"), _n(link(page.next))))
    if page.previous is not None:
        head.append(Triple(view, _n(HYDRA + "previous"), _n(link(page.previous))))
    head += [
        Triple(publisher, a, _n(FOAF + "Agent")),
        Triple(publisher, _n(FOAF + "name"), Literal(info.publisher)),
    ]
    if info.email:
        head.append(Triple(publisher, _n(FOAF + "mbox"), _n(f"mailto:{info.email}")))
    return head + members


# -- lookups ------------------------------------------------------------------------------------
def find_dataset(db: sqlite3.Connection, iri: str) -> Entry | None:
    """The record publishing a dataset IRI: an active one first, else the latest."""
    row = db.execute(
        f"SELECT {_COLS} FROM records WHERE dataset_iri = ?"
        " ORDER BY status = 'active' DESC, modified DESC, id DESC LIMIT 1",
        (iri,),
    ).fetchone()
    return _entry(row) if row else None


def find_record(db: sqlite3.Connection, iri: str) -> RecordRow | None:
    row = db.execute(
        f"SELECT {RECORD_COLUMNS} FROM records WHERE record_iri = ?", (iri,)
    ).fetchone()
    return RecordRow.from_row(row) if row else None


def find_payload(db: sqlite3.Connection, sha: str) -> tuple[str, bytes] | None:
    row = db.execute("SELECT media_type, data FROM payloads WHERE sha256 = ?", (sha,)).fetchone()
    return (str(row[0]), unpack(row[1])) if row else None


# -- HTTP ---------------------------------------------------------------------------------------
@dataclass
class _Web:
    ctx: ServeContext
    info: CatalogInfo
    counter: Counter = field(default_factory=Counter)

    # links to our own pages (the public base URL, which may differ from the base IRI)
    def local(self, iri: str, kind: str = "dataset") -> str:
        base = self.ctx.store.base_iri
        if iri.startswith(f"{base}{kind}/"):
            return self.ctx.base_url + iri[len(base) :]
        return f"{self.ctx.base_url}{kind}?{urlencode({'iri': iri})}"

    def links(self) -> pages.Links:
        return pages.Links(self.ctx.base_url, self.local, self.ctx.store.payload_iri)


def _error(
    request: Request, err: AggregatorError, extra: Mapping[str, str] | None = None
) -> Response:
    wants_html = choose(request.headers.get("accept"), None, None, ALL_FORMATS, TURTLE)
    headers = dict(extra or {})
    if isinstance(wants_html, Choice) and wants_html.fmt is HTML:
        body = pages.error_page(err.http_status, err.message)
        return Response(body, err.http_status, headers, media_type=HTML.content_type)
    return Response(
        err.message + "\n", err.http_status, headers, media_type="text/plain; charset=utf-8"
    )


def routes(ctx: ServeContext) -> list[BaseRoute]:
    """The catalogue, dataset, record and payload routes, for the app to mount at its root."""
    web = _Web(ctx, CatalogInfo.from_context(ctx))
    base_iri = ctx.store.base_iri

    def guarded(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        def run(request: Request) -> Response:
            try:
                return handler(request)
            except AggregatorError as err:
                return _error(request, err)

        return run

    def catalog(request: Request) -> Response:
        suffix = request.path_params.get("ext")
        fmt_suffix = split_suffix(f"c.{suffix}")[1] if suffix else None
        if suffix and fmt_suffix is None:
            raise NotFoundError(f"no catalogue format {suffix!r}")
        choice = select(request, fmt_suffix, ALL_FORMATS)
        params = request.query_params
        try:
            limit = int(params.get("limit") or ctx.settings.serve.catalog_page_size)
        except ValueError:
            raise BadRequestError("limit must be an integer") from None
        if not 1 <= limit <= MAX_LIMIT:
            raise BadRequestError(f"limit must be between 1 and {MAX_LIMIT}")
        since_raw = params.get("modified_since")
        req = PageRequest(decode_cursor(params.get("page")), parse_since(since_raw), limit)
        page = load_page(ctx.read_db(), req, web.counter)
        path = f"{ctx.base_url}catalog" + (f".{suffix}" if suffix else "")
        fixed: dict[str, str] = {}
        if params.get("format") and not suffix:
            fixed["format"] = choice.fmt.key
        if since_raw:
            fixed["modified_since"] = since_raw
        if limit != ctx.settings.serve.catalog_page_size:
            fixed["limit"] = str(limit)

        def make_link(path: str, fixed: dict[str, str]) -> Callable[[Cursor], str]:
            def link(cursor: Cursor) -> str:
                # the first page too has a page token: a view's IRI is never the catalogue's
                return f"{path}?{urlencode({**fixed, 'page': cursor.token()})}"

            return link

        link = make_link(path, fixed)
        plain = make_link(
            f"{ctx.base_url}catalog", {k: v for k, v in fixed.items() if k != "format"}
        )

        tag = etag(
            "catalog",
            choice.fmt.key,
            link(req.cursor),
            page.total,
            page.version,
            web.info,
            [
                (e.row.id, e.row.modified, e.row.content_hash, e.row.payload_sha)
                for e in page.entries
            ],
        )

        def body() -> bytes | str:
            if choice.fmt is HTML:
                return pages.catalog_page(web.info, page, link, plain(req.cursor), web.links())
            return serialize_graph(page_triples(ctx, web.info, page, link), choice.fmt)

        location = with_format(plain(req.cursor), choice.fmt)
        return respond(
            request,
            body,
            choice.fmt,
            tag,
            page.version[0] or None,
            negotiated=choice.negotiated,
            location=location,
        )

    def dataset_response(
        request: Request, iri: str, entry: Entry | None, suffix: Format | None
    ) -> Response:
        choice = select(request, suffix, ALL_FORMATS)
        if entry is None or entry.row.status == "rejected":
            raise NotFoundError(f"no dataset {iri} in this catalogue")
        row = entry.row
        record_link = web.local(row.record_iri, "record")
        if row.status != "active":
            headers = {"Link": f'<{record_link}>; rel="describedby"', "Vary": "Accept"}
            if choice.fmt is HTML:
                gone_html = pages.gone_page(iri, row, web.links())
                headers["Content-Security-Policy"] = HTML_CSP
                return Response(gone_html, 410, headers, media_type=HTML.content_type)
            gone = f"dataset {iri} was withdrawn on {row.modified}; catalogue record: {record_link}"
            return Response(gone + "\n", 410, headers, media_type="text/plain; charset=utf-8")
        tag = etag(
            "dataset",
            row.id,
            row.modified,
            row.status,
            row.content_hash,
            row.payload_sha,
            choice.fmt.key,
        )

        def body() -> bytes | str:
            if choice.fmt is HTML:
                triples = parse_ntriples(entry.ntriples)
                return pages.dataset_page(iri, row, triples, web.links())
            if choice.fmt is NTRIPLES:
                return entry.ntriples  # exactly as stored
            return serialize_graph(parse_ntriples(entry.ntriples), choice.fmt)

        return respond(
            request,
            body,
            choice.fmt,
            tag,
            row.modified,
            negotiated=choice.negotiated,
            location=with_format(web.local(iri), choice.fmt),
            extra={"Link": f'<{record_link}>; rel="describedby"'},
        )

    def dataset(request: Request) -> Response:
        source, key = request.path_params["source"], request.path_params["key"]
        prefix = f"{base_iri}dataset/{quote(source, safe='')}/"
        iri = prefix + quote(key, safe="")
        db = ctx.read_db()
        entry, suffix = find_dataset(db, iri), None
        if entry is None:  # not a key of its own: maybe a key with a format suffix
            stem, suffix = split_suffix(key)
            if suffix is not None:
                iri = prefix + quote(stem, safe="")
                entry = find_dataset(db, iri)
        return dataset_response(request, iri, entry, suffix)

    def dataset_lookup(request: Request) -> Response:
        iri = request.query_params.get("iri")
        if not iri:
            raise BadRequestError("give the dataset IRI: /dataset?iri=<IRI>")
        return dataset_response(request, iri, find_dataset(ctx.read_db(), iri), None)

    def record(request: Request) -> Response:
        source, key = request.path_params["source"], request.path_params["key"]
        prefix = f"{base_iri}record/{quote(source, safe='')}/"
        db = ctx.read_db()
        iri, suffix = prefix + quote(key, safe=""), None
        row = find_record(db, iri)
        if row is None:
            stem, suffix = split_suffix(key)
            if suffix is not None:
                iri = prefix + quote(stem, safe="")
                row = find_record(db, iri)
        choice = select(request, suffix, ALL_FORMATS)
        if row is None:
            raise NotFoundError(f"no catalogue record {iri}")
        found = row
        nt = ctx.store.catalog_record_ntriples(found)
        tag = etag(
            "record",
            found.id,
            found.modified,
            found.status,
            found.content_hash,
            found.payload_sha,
            found.source_datestamp,
            found.job_id,
            choice.fmt.key,
        )

        def body() -> bytes | str:
            if choice.fmt is HTML:
                return pages.record_page(found, parse_ntriples(nt), web.links())
            if choice.fmt is NTRIPLES:
                return nt
            return serialize_graph(parse_ntriples(nt), choice.fmt)

        return respond(
            request,
            body,
            choice.fmt,
            tag,
            found.modified,
            negotiated=choice.negotiated,
            location=with_format(web.local(iri, "record"), choice.fmt),
        )

    def payload(request: Request) -> Response:
        sha = request.path_params["sha"]
        found = find_payload(ctx.read_db(), sha) if _SHA.match(sha) else None
        if found is None:
            raise NotFoundError(f"no payload {sha[:80]}")
        media_type, data = found
        tag = f'"{sha}"'
        headers = {
            "ETag": tag,
            "Cache-Control": "public, max-age=31536000, immutable",  # content-addressed
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox; default-src 'none'",  # harvested bytes
        }
        if not_modified(request.headers.get("if-none-match"), None, tag, None):
            return Response(None, 304, headers)
        # the media type as harvested: Starlette would append a charset to text/* types
        headers["Content-Type"] = media_type
        return Response(data, 200, headers)

    return [
        Route("/catalog", guarded(catalog), methods=["GET"]),
        Route("/catalog.{ext}", guarded(catalog), methods=["GET"]),
        Route("/dataset", guarded(dataset_lookup), methods=["GET"]),
        Route("/dataset/{source}/{key}", guarded(dataset), methods=["GET"]),
        Route("/record/{source}/{key}", guarded(record), methods=["GET"]),
        Route("/payload/{sha}", guarded(payload), methods=["GET"]),
    ]


__all__ = [
    "BadRequestError",
    "CatalogInfo",
    "Counter",
    "Cursor",
    "Page",
    "PageRequest",
    "decode_cursor",
    "find_dataset",
    "find_record",
    "load_page",
    "page_triples",
    "parse_since",
    "routes",
]
