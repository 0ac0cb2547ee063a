"""Spatial extents of a dataset as GeoJSON geometries, for the map on its page.

Reads ``dct:spatial`` nodes' ``dcat:bbox``, ``locn:geometry`` and ``dcat:centroid`` literals
written as WKT (GeoSPARQL ``wktLiteral``: POINT, POLYGON, MULTIPOLYGON, ENVELOPE, with an
optional ``<CRS IRI>`` prefix, which must be CRS84/WGS 84) or as GeoJSON. Anything else is
shown as text only; coordinates out of range are refused, never drawn somewhere wrong.
"""

from __future__ import annotations

import json
import re
from typing import Any

_CRS84 = (
    "http://www.opengis.net/def/crs/OGC/1.3/CRS84",
    "http://www.opengis.net/def/crs/EPSG/0/4326",
)
_NUM = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_PAIR = re.compile(rf"({_NUM})\s+({_NUM})")

Geometry = dict[str, Any]


def _ring(text: str) -> list[list[float]]:
    return [[float(x), float(y)] for x, y in _PAIR.findall(text)]


def _ok(coords: list[list[float]]) -> bool:
    return bool(coords) and all(-180 <= x <= 180 and -90 <= y <= 90 for x, y in coords)


def from_wkt(text: str) -> Geometry | None:
    wkt = text.strip()
    if wkt.startswith("<"):
        crs, _, wkt = wkt[1:].partition(">")
        if crs.strip() not in _CRS84:
            return None  # EPSG:4326 axis order and other CRSs: not guessed
        wkt = wkt.strip()
    head = wkt.split("(", 1)[0].strip().upper()
    body = wkt[len(wkt.split("(", 1)[0]) :]
    if head == "POINT":
        pts = _ring(body)
        return {"type": "Point", "coordinates": pts[0]} if len(pts) == 1 and _ok(pts) else None
    if head == "POLYGON":
        rings = [_ring(r) for r in re.findall(r"\(([^()]*)\)", body)]
        if rings and all(_ok(r) and len(r) >= 4 for r in rings):
            return {"type": "Polygon", "coordinates": rings}
        return None
    if head == "MULTIPOLYGON":
        polys = []
        for poly in re.findall(r"\(((?:\s*\([^()]*\)\s*,?)+)\)", body):
            rings = [_ring(r) for r in re.findall(r"\(([^()]*)\)", poly)]
            if not rings or not all(_ok(r) and len(r) >= 4 for r in rings):
                return None
            polys.append(rings)
        return {"type": "MultiPolygon", "coordinates": polys} if polys else None
    if head == "ENVELOPE":  # ENVELOPE(minX, maxX, maxY, minY)
        nums = [float(n) for n in re.findall(_NUM, body)]
        if len(nums) != 4:
            return None
        w, e, n, s = nums
        ring = [[w, s], [e, s], [e, n], [w, n], [w, s]]
        return {"type": "Polygon", "coordinates": [ring]} if _ok(ring) else None
    return None


def from_geojson(text: str) -> Geometry | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("type") not in ("Point", "Polygon", "MultiPolygon"):
        return None
    flat: list[list[float]] = []

    def walk(node: Any) -> bool:
        if (
            isinstance(node, list)
            and len(node) >= 2
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in node)
        ):
            flat.append([float(node[0]), float(node[1])])
            return True
        return isinstance(node, list) and bool(node) and all(walk(n) for n in node)

    if not walk(value.get("coordinates")) or not _ok(flat):
        return None
    return {"type": value["type"], "coordinates": value["coordinates"]}


def parse_geometry(text: str, datatype: str | None) -> Geometry | None:
    if (datatype and datatype.endswith("geoJSONLiteral")) or text.lstrip().startswith("{"):
        return from_geojson(text)
    return from_wkt(text)
