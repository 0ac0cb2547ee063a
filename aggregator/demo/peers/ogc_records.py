"""A local OGC API - Records server: the peer of the ``ogc-records`` harvester.

Routes (JSON only; ``f=json`` and ``Accept: application/geo+json`` are both accepted)::

    /                                   landing page (links to conformance and collections)
    /conformance                        conformsTo: Common, Records core, GeoJSON
    /collections                        the collections (itemType "record")
    /collections/{id}                   one collection
    /collections/{id}/items?limit=N&datetime=A/B     the first page of a collection
    /collections/{id}/items?cursor=TOKEN             a later page

``next`` links carry an **opaque** cursor: a random token the server remembers (not an
offset), so a harvester that builds its own URLs gets a 400. ``datetime`` selects records
whose ``updated`` (else ``created``) falls in the interval (``..`` open). A collection's
records are a list of features or, for large collections, a count and a function making
feature ``i`` (:func:`aggregator.demo.peers.ogc_records_data.generate_record`). ``malformed``
holds indexes whose feature is served broken (no ``id``, ``properties`` not an object).
``delay`` slows every items page.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode

from aggregator.demo.peers.server import respond

CONFORMANCE = (
    "http://www.opengis.net/spec/ogcapi-common-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-records-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-records-1/1.0/conf/record-core",
    "http://www.opengis.net/spec/ogcapi-records-1/1.0/conf/json",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/geojson",
)


@dataclass(slots=True)
class RecordCollection:
    id: str
    title: str
    features: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0  # generated records, when ``make`` is given
    make: Callable[[int], dict[str, Any]] | None = None
    malformed: set[int] = field(default_factory=set)

    def size(self) -> int:
        return self.count if self.make is not None else len(self.features)

    def feature(self, index: int) -> Any:
        made = self.make(index) if self.make is not None else self.features[index]
        if index in self.malformed:
            return {"type": "Feature", "properties": "broken", "geometry": None}
        return made


def _stamp(feature: Any) -> str:
    props = feature.get("properties") if isinstance(feature, dict) else None
    if not isinstance(props, dict):
        return ""
    return str(props.get("updated") or props.get("created") or "")


class OgcRecordsPeer:
    """The WSGI app. ``requests`` logs (path, query) of each request."""

    def __init__(self, collections: Sequence[RecordCollection], *, delay: float = 0.0) -> None:
        self.collections = {c.id: c for c in collections}
        self.delay = delay
        self.requests: list[tuple[str, str]] = []
        self._cursors: dict[str, tuple[str, int, int, str | None]] = {}
        self._lock = threading.Lock()

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/").rstrip("/") or "/"
        query = environ.get("QUERY_STRING", "")
        with self._lock:
            self.requests.append((path, query))
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        base = _base(environ)
        if params.get("f", "json") != "json":
            return _json(start_response, 400, {"code": "InvalidParameterValue", "description": "f"})
        parts = path.strip("/").split("/")
        if path == "/":
            links = [
                {"rel": "conformance", "href": f"{base}conformance", "type": "application/json"},
                {"rel": "data", "href": f"{base}collections", "type": "application/json"},
            ]
            return _json(start_response, 200, {"title": "Local records", "links": links})
        if path == "/conformance":
            return _json(start_response, 200, {"conformsTo": list(CONFORMANCE)})
        if path == "/collections":
            listed = [self._collection(c, base) for c in self.collections.values()]
            return _json(start_response, 200, {"collections": listed, "links": []})
        if parts[0] == "collections" and len(parts) >= 2 and parts[1] in self.collections:
            collection = self.collections[parts[1]]
            if len(parts) == 2:
                return _json(start_response, 200, self._collection(collection, base))
            if len(parts) == 3 and parts[2] == "items":
                return self._items(collection, params, base, start_response)
        return _json(start_response, 404, {"code": "NotFound", "description": path})

    def _collection(self, c: RecordCollection, base: str) -> dict[str, Any]:
        items = f"{base}collections/{c.id}/items"
        return {
            "id": c.id,
            "title": c.title,
            "itemType": "record",
            "links": [{"rel": "items", "href": items, "type": "application/geo+json"}],
        }

    def _items(
        self,
        c: RecordCollection,
        params: dict[str, str],
        base: str,
        start_response: Callable[..., Any],
    ) -> list[bytes]:
        if self.delay:
            time.sleep(self.delay)
        if "cursor" in params:
            with self._lock:
                state = self._cursors.get(params["cursor"])
            if state is None or state[0] != c.id:
                error = {"code": "InvalidParameterValue", "description": "unknown cursor"}
                return _json(start_response, 400, error)
            _cid, offset, limit, interval = state
        else:
            try:
                offset, limit = 0, max(1, min(1000, int(params.get("limit", "10"))))
            except ValueError:
                return _json(start_response, 400, {"code": "InvalidParameterValue"})
            if "offset" in params or "startindex" in params:
                return _json(start_response, 400, {"code": "InvalidParameterValue"})
            interval = params.get("datetime")
        indexes = self._matching(c, interval)
        page = [c.feature(i) for i in indexes[offset : offset + limit]]
        links = [
            {
                "rel": "self",
                "href": f"{base}collections/{c.id}/items",
                "type": "application/geo+json",
            }
        ]
        if offset + limit < len(indexes):
            token = secrets.token_urlsafe(12)
            with self._lock:
                self._cursors[token] = (c.id, offset + limit, limit, interval)
            href = f"{base}collections/{c.id}/items?{urlencode({'cursor': token})}"
            links.append({"rel": "next", "href": href, "type": "application/geo+json"})
        doc = {
            "type": "FeatureCollection",
            "numberMatched": len(indexes),
            "numberReturned": len(page),
            "features": page,
            "links": links,
        }
        return _json(start_response, 200, doc, "application/geo+json")

    @staticmethod
    def _matching(c: RecordCollection, interval: str | None) -> list[int]:
        if not interval:
            return list(range(c.size()))
        start, _, end = interval.partition("/")
        low = "" if start in ("", "..") else start
        high = None if end in ("", "..") else end
        out = []
        for i in range(c.size()):
            stamp = _stamp(c.make(i) if c.make is not None else c.features[i])
            if stamp >= low and (high is None or stamp <= high):
                out.append(i)
        return out


def _base(environ: dict[str, Any]) -> str:
    host = environ.get("HTTP_HOST") or f"{environ['SERVER_NAME']}:{environ['SERVER_PORT']}"
    return f"http://{host}/"


def _json(
    start_response: Callable[..., Any],
    status: int,
    doc: dict[str, Any],
    content_type: str = "application/json",
) -> list[bytes]:
    return respond(start_response, status, json.dumps(doc).encode(), content_type)
