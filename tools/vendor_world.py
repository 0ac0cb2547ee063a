"""Vendor a world outline for the dashboard's map from the npm registry (run by `make`).

The dataset page draws spatial extents with no tile server; this outline (land and country
borders at 1:110m, Natural Earth's public-domain data as packaged by the `world-atlas` npm
package, ISC licence) gives them geographic context offline. The script fetches the pinned
release with `npm pack` (the npm client, no other download), checks the tarball against the
registry's sha512 integrity pinned here, converts `countries-110m.json` from TopoJSON to
GeoJSON (a small decoder below: arcs are delta-encoded and quantised; a ring is its arcs
joined, a negative index being an arc reversed) and writes

    aggregator/serve/dashboard/static/vendor/world/world-110m.geojson
        a FeatureCollection of two features: "land" (MultiPolygon: every coastline) and
        "borders" (MultiLineString: the arcs two countries share, each drawn once)
    aggregator/serve/dashboard/static/vendor/world/LICENSE, VERSION

which git ignores. Nothing of the data is kept in the repository; the wheel built afterwards
carries the vendored copy.

    python tools/vendor_world.py            # fetch when missing or of another version
    python tools/vendor_world.py --force    # fetch again
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

VERSION = "2.0.2"
INTEGRITY = "sha512-IXfV0qwlKXpckz1FhwXVwKRjiIhOnWttOskm5CtxMsjgE/MXAYRHWJqgXOpM8IkcPBoXnyTU5lFHcYa5ChG0LQ=="  # noqa: E501
ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "aggregator" / "serve" / "dashboard" / "static" / "vendor" / "world"
OUTLINE = "world-110m.geojson"
DIGITS = 3  # decimals kept: ~100 m, far below what 1:110m draws

Position = list[float]


def vendored() -> bool:
    stamp = TARGET / "VERSION"
    return stamp.is_file() and stamp.read_text().strip() == VERSION and (TARGET / OUTLINE).is_file()


def decode_arcs(topology: dict[str, Any]) -> list[list[Position]]:
    """Every arc as absolute longitude / latitude positions."""
    transform = topology.get("transform")
    arcs: list[list[Position]] = []
    for arc in topology["arcs"]:
        if transform is None:
            arcs.append([[float(p[0]), float(p[1])] for p in arc])
            continue
        (sx, sy), (tx, ty) = transform["scale"], transform["translate"]
        x = y = 0
        points = []
        for dx, dy in arc:
            x, y = x + dx, y + dy
            points.append([round(x * sx + tx, DIGITS), round(y * sy + ty, DIGITS)])
        arcs.append(points)
    return arcs


def ring(indexes: list[int], arcs: list[list[Position]]) -> list[Position]:
    """Arcs joined into one line; ``~i`` (negative) is arc ``i`` reversed; the first point of
    each arc after the first repeats the last of the one before."""
    points: list[Position] = []
    for i in indexes:
        arc = arcs[i] if i >= 0 else arcs[~i][::-1]
        points.extend(arc if not points else arc[1:])
    return points


def polygons(geometry: dict[str, Any], arcs: list[list[Position]]) -> list[list[list[Position]]]:
    kind = geometry.get("type")
    if kind == "Polygon":
        return [[ring(r, arcs) for r in geometry["arcs"]]]
    if kind == "MultiPolygon":
        return [[ring(r, arcs) for r in poly] for poly in geometry["arcs"]]
    return []


def shared_arcs(collection: dict[str, Any]) -> list[int]:
    """Arcs used by two different geometries of the collection (borders), in index order."""
    users: dict[int, set[int]] = {}

    def walk(node: Any, owner: int) -> None:
        if isinstance(node, int):
            users.setdefault(node if node >= 0 else ~node, set()).add(owner)
        elif isinstance(node, list):
            for item in node:
                walk(item, owner)

    for n, geometry in enumerate(collection.get("geometries", [])):
        walk(geometry.get("arcs", []), n)
    return sorted(i for i, owners in users.items() if len(owners) > 1)


def to_geojson(topology: dict[str, Any]) -> dict[str, Any]:
    arcs = decode_arcs(topology)
    objects = topology["objects"]
    land: list[list[list[Position]]] = []
    for geometry in objects["land"].get("geometries", [objects["land"]]):
        land.extend(polygons(geometry, arcs))
    borders = [arcs[i] for i in shared_arcs(objects["countries"])]
    return {
        "type": "FeatureCollection",
        "features": [
            {
                "type": "Feature",
                "properties": {"kind": "land"},
                "geometry": {"type": "MultiPolygon", "coordinates": land},
            },
            {
                "type": "Feature",
                "properties": {"kind": "borders"},
                "geometry": {"type": "MultiLineString", "coordinates": borders},
            },
        ],
    }


def main(argv: list[str]) -> int:
    if vendored() and "--force" not in argv:
        return 0
    npm = shutil.which("npm")
    if npm is None:
        print(
            "vendor_world: npm is needed to fetch world-atlas (apt-get install npm)",
            file=sys.stderr,
        )
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(  # noqa: S603 - the npm client with fixed arguments
            [npm, "pack", f"world-atlas@{VERSION}", "--silent", "--pack-destination", tmp],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        tgz = Path(tmp) / f"world-atlas-{VERSION}.tgz"
        digest = base64.b64encode(hashlib.sha512(tgz.read_bytes()).digest()).decode()
        if f"sha512-{digest}" != INTEGRITY:
            print(f"vendor_world: {tgz.name} does not match the pinned integrity", file=sys.stderr)
            return 1
        wanted = {"package/countries-110m.json": b"", "package/LICENSE": b""}
        with tarfile.open(tgz) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name in wanted:
                    source = tar.extractfile(member)
                    assert source is not None
                    wanted[member.name] = source.read()
        topology = json.loads(wanted["package/countries-110m.json"])
        staging = Path(tmp) / "out"
        staging.mkdir()
        outline = json.dumps(to_geojson(topology), separators=(",", ":"))
        (staging / OUTLINE).write_text(outline, encoding="utf-8")
        (staging / "LICENSE").write_bytes(
            wanted["package/LICENSE"]
            + b"\nThe map data: Natural Earth (naturalearthdata.com), public domain.\n"
        )
        (staging / "VERSION").write_text(VERSION + "\n")
        if TARGET.exists():
            shutil.rmtree(TARGET)
        TARGET.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, TARGET)
    print(f"vendored world-atlas {VERSION} (1:110m outline) into {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
