"""A local CKAN-like action API: the peer of the ``ckan`` harvester (tests, demo, benchmark).

Only ``/api/3/action/package_search`` is served, as a CKAN 2.9+ portal serves it: ``q``
(``*:*``), ``fq`` (``metadata_modified:[FROM TO *]`` and ``organization:NAME``, joined with
``AND``), ``sort`` (any of ``metadata_modified``, ``id``, ``name`` asc/desc; ``score`` is
ignored), ``rows`` (capped at ``rows_max``, as ``ckan.search.rows_max``) and ``start``; the
answer is ``{"help", "success", "result": {"count", "sort", "facets", "results",
"search_facets"}}``. A wrong sort is a 409 with ``success: false``, as CKAN answers it.

The catalogue is either a :class:`MemoryCatalogue` (packages a test changes while the server
runs: ``put``, ``delete``, ``touch``) or a :class:`GeneratedCatalogue` (N packages made by
:func:`aggregator.peers.ckan_data.generate_package` on request, for the benchmark).

Faults (:meth:`CkanPeer.fail`, each for ``times`` requests, ``at_start`` to pick one page):
``success-false`` (HTTP 200, ``success: false``), ``html-500`` (an HTML error page),
``not-json`` (HTTP 200, a body that is not JSON), ``slow`` (``delay`` seconds before the
answer), ``repeat`` (the page before, again: a server that ignores ``start``), ``status``
(``status`` with a plain body). ``on_request`` is called with the request's number and
parameters before it is answered (tests change the catalogue mid-listing there). With
``api_key`` set, a request without ``Authorization: <key>`` gets a 403 ``success: false``;
private packages are listed only with the key and ``include_private=true``.
"""

from __future__ import annotations

import bisect
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import parse_qs

from aggregator.peers.server import respond

PATH = "/api/3/action/package_search"
_RANGE = re.compile(r"metadata_modified:\[(\S+) TO (\S+)\]")
_ORG = re.compile(r"organization:([\w.-]+)")
_SORT_FIELDS = ("metadata_modified", "id", "name", "score")


def ckan_stamp(solr: str) -> str:
    """A Solr date (``2015-09-15T13:17:51.405Z``) in CKAN's ``metadata_modified`` form."""
    return solr.rstrip("Z").replace(" ", "T")


class Catalogue(Protocol):
    def search(
        self, since: str | None, organization: str | None, sort: Sequence[tuple[str, bool]],
        start: int, rows: int, private: bool,
    ) -> tuple[int, list[dict[str, Any]]]: ...  # fmt: skip


def _key(package: dict[str, Any], field: str) -> str:
    return str(package.get(field) or "")


def _when(stamp: str) -> datetime:
    """A CKAN/Solr date as a comparable datetime (fractions of any length, with or without Z)."""
    try:
        return datetime.fromisoformat(stamp.rstrip("Z"))
    except ValueError:
        return datetime.min


class MemoryCatalogue:
    """Packages held as dicts; thread-safe; changed by tests while the server runs."""

    def __init__(self, packages: Iterable[dict[str, Any]] = ()) -> None:
        self._lock = threading.Lock()
        self.packages: dict[str, dict[str, Any]] = {}
        for p in packages:
            self.put(p)

    def put(self, package: dict[str, Any]) -> None:
        with self._lock:
            self.packages[str(package["id"])] = package

    def delete(self, package_id: str) -> None:
        with self._lock:
            del self.packages[package_id]

    def touch(self, package_id: str, modified: str) -> None:
        """Change a package's ``metadata_modified`` (and its title, so its content changes)."""
        with self._lock:
            old = self.packages[package_id]
            self.packages[package_id] = {
                **old,
                "metadata_modified": modified,
                "title": f"{old.get('title', '')} (revised {modified})",
            }

    def search(
        self, since: str | None, organization: str | None, sort: Sequence[tuple[str, bool]],
        start: int, rows: int, private: bool,
    ) -> tuple[int, list[dict[str, Any]]]:  # fmt: skip
        with self._lock:
            low = None if since is None else _when(since)
            found = [
                p
                for p in self.packages.values()
                if (low is None or _when(_key(p, "metadata_modified")) >= low)
                and (
                    organization is None
                    or (p.get("organization") or {}).get("name") == organization
                )
                and (private or not p.get("private"))
            ]
        for field, ascending in reversed(sort):
            if field != "score":
                found.sort(key=lambda p, f=field: _key(p, f), reverse=not ascending)  # type: ignore[misc]
        return len(found), found[start : start + rows]


class GeneratedCatalogue:
    """``count`` generated packages, in ``metadata_modified`` (= index) order, made on request."""

    def __init__(self, count: int, make: Callable[[int], dict[str, Any]]) -> None:
        self.count = count
        self.make = make

    def _stamp_of(self, index: int) -> str:
        return _key(self.make(index), "metadata_modified")

    def search(
        self, since: str | None, organization: str | None, sort: Sequence[tuple[str, bool]],
        start: int, rows: int, private: bool,
    ) -> tuple[int, list[dict[str, Any]]]:  # fmt: skip
        first = 0
        if since is not None:  # stamps grow with the index: binary search over the index
            first = bisect.bisect_left(range(self.count), since, key=self._stamp_of)
        total = self.count - first
        descending = bool(sort) and sort[0][0] == "metadata_modified" and not sort[0][1]
        indexes = range(first, self.count)
        if descending:
            indexes = indexes[::-1]
        return total, [self.make(i) for i in indexes[start : start + rows]]


@dataclass(slots=True)
class PeerFault:
    kind: str  # success-false, html-500, not-json, slow, repeat, status
    times: int = 1  # -1: for ever
    at_start: int | None = None  # only the page starting there
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

    def _fault(self, start: int) -> PeerFault | None:
        with self._lock:
            for fault in self.faults:
                if fault.times == 0 or (fault.at_start is not None and fault.at_start != start):
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
            sort = _sort(params.get("sort", "score desc, metadata_modified desc"))
        except ValueError as err:
            error = {"__type": "Validation Error", "message": f"Search Query is invalid: {err}"}
            return _json(start_response, 409, {"success": False, "error": error})
        fault = self._fault(start)
        if fault is not None:
            answered = self._faulty(fault, start_response)
            if answered is not None:
                return answered
        fq = params.get("fq", "")
        since_m = _RANGE.search(fq)
        org_m = _ORG.search(fq)
        count, results = self.catalogue.search(
            ckan_stamp(since_m.group(1)) if since_m else None,
            org_m.group(1) if org_m else None,
            sort,
            start,
            rows,
            self.api_key is not None and params.get("include_private") == "true",
        )
        doc = {
            "help": f"{self.base_url}api/3/action/help_show?name=package_search",
            "success": True,
            "result": {
                "count": count,
                "sort": params.get("sort", "score desc, metadata_modified desc"),
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


def _sort(text: str) -> list[tuple[str, bool]]:
    out = []
    for part in text.split(","):
        words = part.split()
        if not words:
            continue
        field = words[0]
        direction = words[1].lower() if len(words) > 1 else "asc"
        if field not in _SORT_FIELDS or direction not in ("asc", "desc") or len(words) > 2:
            raise ValueError(f"cannot sort by {part.strip()!r}")
        out.append((field, direction == "asc"))
    return out


def _json(start_response: Callable[..., Any], status: int, doc: dict[str, Any]) -> list[bytes]:
    return respond(start_response, status, json.dumps(doc).encode(), "application/json")
