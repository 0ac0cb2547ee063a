"""Sample OGC API - Records features: a generator and the bundled ones.

* :func:`generate_record` writes record ``index`` as a Records 1.0 GeoJSON feature (title,
  description, keywords, an ISO topic category theme, a contact, a bounding box, a time
  interval, created/updated, licence, formats and two links), deterministic from
  ``(index, revision)``; ``updated`` grows with the index.
* :func:`load_bundled_records` is ``data/ogc-records/records.json``: three hand-written
  records (themes of several schemes, contacts with roles, links of several relations,
  French and English). Written for this project.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from importlib import resources
from typing import Any

T0 = datetime(2024, 1, 1)
_TOPICS = (
    ("inlandWaters", "River gauge levels", "water level"),
    ("transportation", "Road works", "roads"),
    ("biota", "Bird counts", "birds"),
    ("planningCadastre", "Zoning plans", "zoning"),
    ("health", "Air ambulance bases", "emergency"),
)
_FORMATS = (("GeoJSON", "application/geo+json", "geojson"), ("CSV", "text/csv", "csv"))


def record_id(index: int) -> str:
    return f"urn:example:generated:{index:07d}"


def generate_record(index: int, revision: int = 0) -> dict[str, Any]:
    topic, title, keyword = _TOPICS[index % len(_TOPICS)]
    fmt, mime, ext = _FORMATS[index % len(_FORMATS)]
    x, y = -10 + (index % 400) * 0.1, 35 + (index // 400 % 300) * 0.1
    updated = T0 + timedelta(minutes=index + revision * 10_000_000)
    return {
        "id": record_id(index),
        "type": "Feature",
        "geometry": {
            "type": "Polygon",
            "coordinates": [[[x, y], [x + 0.1, y], [x + 0.1, y + 0.1], [x, y + 0.1], [x, y]]],
        },
        "time": {"interval": [f"{2000 + index % 24}-01-01", ".."]},
        "properties": {
            "type": "dataset",
            "title": f"{title}, area {index}" + (f" (rev. {revision})" if revision else ""),
            "description": f"{title} in survey area {index}, kept up to date by the agency.",
            "keywords": [keyword, f"area {index % 50}"],
            "themes": [
                {
                    "concepts": [{"id": topic}],
                    "scheme": "http://inspire.ec.europa.eu/metadata-codelist/TopicCategory",
                }
            ],
            "contacts": [
                {
                    "organization": "Regional Mapping Agency",
                    "emails": [{"value": "data@mapping.example.org"}],
                    "roles": ["pointOfContact", "publisher"],
                }
            ],
            "language": {"code": "en"},
            "created": "2023-06-01T00:00:00Z",
            "updated": updated.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "license": "CC-BY-4.0",
            "formats": [{"name": fmt, "mediaType": mime}],
        },
        "links": [
            {
                "rel": "enclosure",
                "href": f"https://mapping.example.org/data/{index}.{ext}",
                "type": mime,
                "title": f"{title} ({fmt})",
            },
            {
                "rel": "alternate",
                "href": f"https://mapping.example.org/records/{index}",
                "type": "text/html",
            },
        ],
    }


def load_bundled_records() -> list[dict[str, Any]]:
    text = (
        resources.files("aggregator.demo.peers") / "data" / "ogc-records" / "records.json"
    ).read_text(encoding="utf-8")
    records: list[dict[str, Any]] = json.loads(text)
    return records
