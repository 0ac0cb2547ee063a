"""A local CKAN-like action API: the peer of the ``ckan`` harvester (tests, demo, benchmark).

Only ``/api/3/action/package_search`` is served, as a CKAN 2.9+ portal serves it: ``q``
(``*:*``), ``fq`` (conjunctions of ranges and terms in Solr's syntax, read by
:mod:`aggregator.demo.peers.ckan_query`: ``metadata_modified:[2024-01-01T00:00:00.000Z TO *]``,
``{A TO *]``, ``id:{"abc" TO *]``, ``organization:NAME``, joined with ``AND``), ``sort`` (any
of ``metadata_modified``, ``metadata_created``, ``id``, ``name`` asc/desc; ``score`` is
ignored; dates at millisecond precision as Solr holds them), ``rows`` (capped at
``rows_max``, as ``ckan.search.rows_max``) and ``start``; the answer is ``{"help",
"success", "result": {"count", "sort", "facets", "results", "search_facets"}}``. A sort or a
filter it cannot read is a 409 with ``success: false``, as CKAN answers it.

The catalogue is either a :class:`MemoryCatalogue` (packages a test changes while the server
runs, even between two pages of a listing: ``put``, ``delete``, ``touch``) or a
:class:`GeneratedCatalogue` (N packages made by
:func:`aggregator.demo.peers.ckan_data.generate_package` on request, for the benchmark).

Faults (:meth:`CkanPeer.fail`, each for ``times`` requests, from request number
``from_request`` on): ``success-false`` (HTTP 200, ``success: false``), ``html-500`` (an
HTML error page), ``not-json`` (HTTP 200, a body that is not JSON), ``slow`` (``delay``
seconds before the answer), ``repeat`` (the answer before, again: a server that ignores
``fq``), ``status`` (``status`` with a plain body). ``on_request`` is called with the
request's number and parameters before it is answered (tests change the catalogue
mid-listing there). With ``api_key`` set, a request without ``Authorization: <key>`` gets a
403 ``success: false``; private packages are listed only with the key and
``include_private=true``.
"""

from __future__ import annotations

import bisect
import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any, Protocol
from urllib.parse import parse_qs

from aggregator.demo.peers.ckan_query import (
    Clause,
    Query,
    QueryError,
    field_values,
    parse_fq,
    parse_sort,
    solr_time,
    sort_packages,
)
from aggregator.demo.peers.server import respond

PATH = "/api/3/action/package_search"
DEFAULT_SORT = "score desc, metadata_modified desc"


class Catalogue(Protocol):
    def search(
        self, query: Query, sort: Sequence[tuple[str, bool]], start: int, rows: int,
        private: bool,
    ) -> tuple[int, list[dict[str, Any]]]: ...  # fmt: skip


class MemoryCatalogue:
    """Packages held as dicts; thread-safe; changed by tests while the server runs.

    The harvesting order (``metadata_modified asc, id asc``) is kept as a sorted index, so a
    listing of tens of thousands of packages that change between its pages is answered
    without sorting the catalogue for each page; other sorts and filters are answered by
    filtering and sorting every package."""

    def __init__(self, packages: Iterable[dict[str, Any]] = ()) -> None:
        self._lock = threading.Lock()
        self.packages: dict[str, dict[str, Any]] = {}
        self._order: list[tuple[datetime, str]] = []  # (Solr's metadata_modified, id), sorted
        self._key: dict[str, tuple[datetime, str]] = {}
        self._undated: set[str] = set()  # packages outside the index (no readable date)
        self._private: set[str] = set()
        for p in packages:
            self.put(p)

    def put(self, package: dict[str, Any]) -> None:
        with self._lock:
            self._put(package)

    def delete(self, package_id: str) -> None:
        with self._lock:
            del self.packages[package_id]
            self._unindex(package_id)

    def touch(self, package_id: str, modified: str) -> None:
        """Change a package's ``metadata_modified`` (and its title, so its content changes)."""
        with self._lock:
            old = self.packages[package_id]
            self._put(
                {
                    **old,
                    "metadata_modified": modified,
                    "title": f"{old.get('title', '')} (revised {modified})",
                }
            )

    def _put(self, package: dict[str, Any]) -> None:
        pid = str(package["id"])
        self._unindex(pid)
        self.packages[pid] = package
        if package.get("private"):
            self._private.add(pid)
        dates = field_values(package, "metadata_modified")
        if not dates:
            self._undated.add(pid)
            return
        key = (dates[0], pid)
        bisect.insort(self._order, key)
        self._key[pid] = key

    def _unindex(self, pid: str) -> None:
        self._private.discard(pid)
        self._undated.discard(pid)
        key = self._key.pop(pid, None)
        if key is not None:
            del self._order[bisect.bisect_left(self._order, key)]

    def search(
        self, query: Query, sort: Sequence[tuple[str, bool]], start: int, rows: int,
        private: bool,
    ) -> tuple[int, list[dict[str, Any]]]:  # fmt: skip
        with self._lock:
            if self._indexed(query, sort, private):
                keys = self._by_index(query)
                return len(keys), [self.packages[pid] for _, pid in keys[start : start + rows]]
            found = [
                p
                for p in self.packages.values()
                if (private or not p.get("private")) and query.matches(p)
            ]
        found = sort_packages(found, sort)
        return len(found), found[start : start + rows]

    def _indexed(self, query: Query, sort: Sequence[tuple[str, bool]], private: bool) -> bool:
        """Whether the index answers: the harvesting order, ranges on its two fields only."""
        return (
            [s for s in sort if s[0] != "score"] == [("metadata_modified", True), ("id", True)]
            and not self._undated
            and (private or not self._private)
            and all(c.everything or c.field in ("metadata_modified", "id") for c in query.clauses)
        )

    def _by_index(self, query: Query) -> list[tuple[datetime, str]]:
        first, end = 0, len(self._order)
        for clause in query.ranges("metadata_modified"):
            first, end = _narrow(self._order, itemgetter(0), clause, first, end)
        keys = self._order[first:end]
        for clause in query.ranges("id"):
            keys = [k for k in keys if clause.admits(k[1])]
        return keys


class GeneratedCatalogue:
    """``count`` generated packages, made on request. Their ``metadata_modified``,
    ``metadata_created`` and ``id`` all grow with the index (as
    :func:`~aggregator.demo.peers.ckan_data.generate_package` makes them), so a range on those
    fields is a binary search over the index and either sort is the index order; other
    filters and sorts are refused (QueryError)."""

    _ORDERED = ("metadata_modified", "metadata_created", "id")

    def __init__(self, count: int, make: Callable[[int], dict[str, Any]]) -> None:
        self.count = count
        self.make = make

    def _key(self, field: str) -> Callable[[int], Any]:
        if field == "id":
            return lambda i: str(self.make(i)["id"])
        return lambda i: solr_time(str(self.make(i)[field]))

    def search(
        self, query: Query, sort: Sequence[tuple[str, bool]], start: int, rows: int,
        private: bool,
    ) -> tuple[int, list[dict[str, Any]]]:  # fmt: skip
        first, end = 0, self.count
        indexes = range(self.count)
        for clause in query.clauses:
            if clause.everything:
                continue
            if clause.field not in self._ORDERED:
                raise QueryError(f"the generated catalogue cannot filter by {clause.field}")
            first, end = _narrow(indexes, self._key(clause.field), clause, first, end)
        chosen = range(first, max(first, end))
        ordering = [(f, asc) for f, asc in sort if f != "score"]
        if ordering and ordering[0][0] not in self._ORDERED:
            raise QueryError(f"the generated catalogue cannot sort by {ordering[0][0]}")
        if ordering and not ordering[0][1]:
            chosen = chosen[::-1]
        return len(chosen), [self.make(i) for i in chosen[start : start + rows]]


def _narrow(
    ordered: Sequence[Any], key: Callable[[Any], Any], clause: Clause, first: int, end: int
) -> tuple[int, int]:
    """``[first, end)`` of ``ordered`` (sorted by ``key``) narrowed to the range ``clause``."""
    low, high = clause.low, clause.high
    low_inclusive, high_inclusive = clause.low_inclusive, clause.high_inclusive
    if clause.equals is not None:
        low = high = clause.equals
        low_inclusive = high_inclusive = True
    if low is not None:
        find = bisect.bisect_left if low_inclusive else bisect.bisect_right
        first = max(first, find(ordered, low, key=key))
    if high is not None:
        find = bisect.bisect_right if high_inclusive else bisect.bisect_left
        end = min(end, find(ordered, high, key=key))
    return first, end


@dataclass(slots=True)
class PeerFault:
    kind: str  # success-false, html-500, not-json, slow, repeat, status
    times: int = 1  # -1: for ever
    from_request: int = 1  # not before this request (numbered from 1, retries included)
    delay: float = 0.0
    status: int = 503


class CkanPeer:
    """The WSGI app. ``requests`` logs each request's parameters."""

    def __init__(
        self,
        catalogue: Catalogue,
        *,
        api_key: str | None = None,
        rows_max: int = 1000,
        base_url: str = "http://127.0.0.1/",
    ) -> None:
        self.catalogue = catalogue
        self.api_key = api_key
        self.rows_max = rows_max
        self.base_url = base_url
        self.faults: list[PeerFault] = []
        self.requests: list[dict[str, str]] = []
        self.on_request: Callable[[int, dict[str, str]], None] | None = None
        self._last_body: bytes | None = None
        self._lock = threading.Lock()

    def fail(self, kind: str, **kwargs: Any) -> PeerFault:
        fault = PeerFault(kind, **kwargs)
        with self._lock:
            self.faults.append(fault)
        return fault

    def _fault(self, number: int) -> PeerFault | None:
        with self._lock:
            for fault in self.faults:
                if fault.times == 0 or number < fault.from_request:
                    continue
                if fault.times > 0:
                    fault.times -= 1
                return fault
        return None

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH:
            return _json(start_response, 404, {"success": False, "error": {"message": "Not found"}})
        params = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        with self._lock:
            self.requests.append(params)
            number = len(self.requests)
        if self.on_request is not None:
            self.on_request(number, params)
        authorised = self.api_key is None or environ.get("HTTP_AUTHORIZATION") == self.api_key
        if not authorised:
            error = {"__type": "Authorization Error", "message": "Access denied"}
            return _json(start_response, 403, {"success": False, "error": error})
        try:
            start = max(0, int(params.get("start", "0")))
            rows = min(self.rows_max, max(0, int(params.get("rows", "10"))))
            sort = parse_sort(params.get("sort", DEFAULT_SORT))
        except ValueError as err:
            error = {"__type": "Validation Error", "message": f"Search Query is invalid: {err}"}
            return _json(start_response, 409, {"success": False, "error": error})
        fault = self._fault(number)
        if fault is not None:
            answered = self._faulty(fault, start_response)
            if answered is not None:
                return answered
        private = self.api_key is not None and params.get("include_private") == "true"
        try:
            query = parse_fq(params.get("fq", ""))
            count, results = self.catalogue.search(query, sort, start, rows, private)
        except QueryError as err:  # what CKAN answers when Solr cannot run the query
            error = {"__type": "Search Error", "message": f"Search error: {err}"}
            return _json(start_response, 409, {"success": False, "error": error})
        doc = {
            "help": f"{self.base_url}api/3/action/help_show?name=package_search",
            "success": True,
            "result": {
                "count": count,
                "sort": params.get("sort", DEFAULT_SORT),
                "facets": {},
                "results": results,
                "search_facets": {},
            },
        }
        try:
            body = json.dumps(doc, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate in a field: sent as its \ud800 escape
            body = json.dumps(doc).encode("ascii")
        with self._lock:
            self._last_body = body
        return respond(start_response, 200, body, "application/json;charset=utf-8")

    def _faulty(self, fault: PeerFault, start_response: Callable[..., Any]) -> list[bytes] | None:
        if fault.kind == "slow":
            time.sleep(fault.delay)
            return None
        if fault.kind == "repeat":
            with self._lock:
                body = self._last_body
            if body is None:
                return None
            return respond(start_response, 200, body, "application/json;charset=utf-8")
        if fault.kind == "success-false":
            error = {"__type": "Search Error", "message": "Solr returned an error: timeout"}
            return _json(start_response, 200, {"success": False, "error": error})
        if fault.kind == "html-500":
            page = (
                b"<!DOCTYPE html><html><head><title>500 Internal Server Error</title></head>"
                b"<body><h1>Internal Server Error</h1><p>The server encountered an internal"
                b" error.</p></body></html>"
            )
            return respond(start_response, 500, page, "text/html; charset=utf-8")
        if fault.kind == "not-json":
            return respond(start_response, 200, b"Service temporarily in maintenance mode")
        return respond(start_response, fault.status, f"status {fault.status}".encode())


def _json(start_response: Callable[..., Any], status: int, doc: dict[str, Any]) -> list[bytes]:
    return respond(start_response, status, json.dumps(doc).encode(), "application/json")
