"""CKAN's ``spatial`` value (a GeoJSON geometry, as ckanext-spatial stores it) -> a dct:Location.

ckanext-spatial keeps a dataset's footprint as the text of a GeoJSON geometry (RFC 7946:
longitude/latitude in WGS 84) in the ``spatial`` extra; ckanext-dcat and some portals put it
in a top-level ``spatial`` field. DCAT-AP 3.0.1 allows one ``locn:geometry``, one
``dcat:bbox`` and one ``dcat:centroid`` per ``dct:Location`` (all literals), so the location
gets:

* ``locn:geometry``: the geometry as the source gives it (compact GeoJSON, key order kept),
  typed ``gsp:geoJSONLiteral`` (GeoSPARQL 1.1), as the iso19139 mapper writes its boxes;
* ``dcat:bbox``: the envelope of the coordinates as a WKT polygon (``gsp:wktLiteral``), a
  WKT point for a single point;
* ``dcat:centroid``: for a ``Point`` only (the point itself; the centroid of an area is not
  the centre of its envelope, so none is invented).

The bounding-box form ``"W,S,E,N"`` (four numbers, as data.gov writes some ``spatial``
values) becomes the same box. A value that is not a geometry this module can read (broken
JSON, an unknown type, coordinates that are not longitude/latitude numbers) is a
:class:`GeometryError` whose message says why; the caller keeps it as a finding.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

GSP = "http://www.opengis.net/ont/geosparql#"
WKT = GSP + "wktLiteral"
GEOJSON = GSP + "geoJSONLiteral"

#: the GeoJSON geometry types and the nesting depth of their coordinates
DEPTH = {
    "Point": 0,
    "MultiPoint": 1,
    "LineString": 1,
    "MultiLineString": 2,
    "Polygon": 2,
    "MultiPolygon": 3,
}
_BOX = re.compile(r"\s*(-?[\d.]+)\s*,\s*(-?[\d.]+)\s*,\s*(-?[\d.]+)\s*,\s*(-?[\d.]+)\s*")


class GeometryError(ValueError):
    """The value is not a geometry (the message says why)."""


@dataclass(frozen=True, slots=True)
class Footprint:
    """A readable geometry: its GeoJSON text, its envelope and, for a point, the point."""

    geojson: str
    bbox_wkt: str
    centroid_wkt: str | None


def looks_like_geometry(value: Any) -> bool:
    """Whether a ``spatial`` value is meant as a geometry (an object, JSON text or a box),
    not a place name or a place IRI."""
    if isinstance(value, dict | list):
        return True
    if not isinstance(value, str):
        return False
    return value.lstrip()[:1] in ("{", "[") or _BOX.fullmatch(value) is not None


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise GeometryError(f"coordinate {json.dumps(value)[:40]} is not a number")
    return float(value)


def _positions(coordinates: Any, depth: int) -> Iterator[tuple[float, float]]:
    if not isinstance(coordinates, list):
        raise GeometryError("coordinates are not an array")
    if depth == 0:
        if len(coordinates) < 2:
            raise GeometryError("a position has fewer than two numbers")
        lon, lat = _number(coordinates[0]), _number(coordinates[1])
        for extra in coordinates[2:]:
            _number(extra)  # an elevation must be a number too
        if not (-180 <= lon <= 180 and -90 <= lat <= 90):
            raise GeometryError(f"position ({lon}, {lat}) is not a longitude/latitude")
        yield lon, lat
        return
    if not coordinates:
        raise GeometryError("an empty array of coordinates")
    for item in coordinates:
        yield from _positions(item, depth - 1)


def _geometries(geometry: Any) -> Iterator[tuple[float, float]]:
    """Every position of a GeoJSON geometry (a collection's members too)."""
    if not isinstance(geometry, dict):
        raise GeometryError("not a GeoJSON object")
    kind = geometry.get("type")
    if kind == "GeometryCollection":
        members = geometry.get("geometries")
        if not isinstance(members, list) or not members:
            raise GeometryError("a GeometryCollection without geometries")
        for member in members:
            yield from _geometries(member)
        return
    if kind not in DEPTH:
        raise GeometryError(f"{json.dumps(kind)[:40]} is not a GeoJSON geometry type")
    yield from _positions(geometry.get("coordinates"), DEPTH[str(kind)])


def _coord(value: float) -> str:
    return repr(int(value)) if value.is_integer() else repr(value)


def _box(west: float, south: float, east: float, north: float) -> str:
    if west == east and south == north:
        return f"POINT({_coord(west)} {_coord(south)})"
    w, s, e, n = (_coord(v) for v in (west, south, east, north))
    return f"POLYGON(({w} {s},{e} {s},{e} {n},{w} {n},{w} {s}))"


def footprint(value: Any) -> Footprint:
    """The footprint of a ``spatial`` value (GeoJSON text or object, or ``"W,S,E,N"``);
    GeometryError when it is not one."""
    if isinstance(value, str):
        box = _BOX.fullmatch(value)
        if box is not None:
            try:
                west, south, east, north = (float(part) for part in box.groups())
            except ValueError as err:
                raise GeometryError(f"{value!r} is not a bounding box") from err
            ring = [[west, south], [east, south], [east, north], [west, north], [west, south]]
            value = {"type": "Polygon", "coordinates": [ring]}
        else:
            try:
                value = json.loads(value)
            except (ValueError, RecursionError) as err:
                raise GeometryError(f"not JSON ({err})") from err
    if isinstance(value, dict) and value.get("type") == "Feature":
        value = value.get("geometry")  # a feature's geometry is the footprint
    points = list(_geometries(value))
    lons = [p[0] for p in points]
    lats = [p[1] for p in points]
    west, east, south, north = min(lons), max(lons), min(lats), max(lats)
    centroid = None
    if isinstance(value, dict) and value.get("type") == "Point":
        centroid = f"POINT({_coord(lons[0])} {_coord(lats[0])})"
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return Footprint(text, _box(west, south, east, north), centroid)
