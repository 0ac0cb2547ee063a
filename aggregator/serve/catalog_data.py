"""The catalogue's data, read from SQLite, framework-neutral: keyset pages of active records
(:func:`load_page`), their triples with the Hydra view (:func:`page_triples`), and look-ups of
one dataset, record or payload. The HTTP side is :mod:`aggregator.serve.catalog`.
"""

from __future__ import annotations

import base64
import binascii
import re
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime

from pyoxigraph import BlankNode, Literal, NamedNode, Triple

from aggregator.core.vocab import DCAT, DCT, FOAF, RDF_TYPE, XSD
from aggregator.serve.context import ServeContext
from aggregator.serve.rdf_formats import (
    BadRequestError,
    parse_ntriples,
)
from aggregator.store.packing import unpack, unpack_graph
from aggregator.store.state import RECORD_COLUMNS, RecordRow

HYDRA = "http://www.w3.org/ns/hydra/core#"
MAX_LIMIT = 1000
_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")
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
