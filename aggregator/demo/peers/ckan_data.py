"""Sample CKAN packages: a generator of realistic package dicts and the bundled ones.

* :func:`generate_package` writes package ``index`` as a CKAN 2.9 portal returns it from
  ``package_search`` (organization, groups, tags, licence, extras, 2-4 resources; every
  third one multilingual in the ckanext-fluent way), deterministic from ``(index,
  revision)``; ``metadata_modified`` grows with the index (one minute apart from
  2024-01-01), so the ``metadata_modified asc`` order is the index order.
* :func:`small_package` writes a minimal package (title, notes, one resource) with the id and
  ``metadata_modified`` it is given: cheap to map, for listings of tens of thousands of
  packages that change while they are read (tests).
* :func:`load_bundled_packages` is ``data/ckan/packages.json``: the example of the
  data.europa.eu harvesting requirements, a plain CKAN package with extras, one with every
  field of the extended data.europa.eu schema, a multilingual one and one with values the
  vocabularies do not know. Written for this project.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from functools import lru_cache
from importlib import resources
from typing import Any

T0 = datetime(2024, 1, 1)

# fmt: off
_TOPICS = (
    ("transport", "Transport", "Bus stop passenger counts", "Fahrgastzählungen an Haltestellen",
     "Boardings and alightings counted at every bus stop, by hour and line", ["mobility", "buses"]),
    ("environment", "Environment", "Noise measurements", "Lärmmessungen",
     "Day, evening and night noise levels measured at the permanent stations",
     ["noise", "monitoring"]),
    ("economy-and-finance", "Economy and finance", "Municipal budget", "Gemeindehaushalt",
     "Planned and actual revenue and expenditure by budget line", ["budget", "finance"]),
    ("health", "Health", "Pharmacy opening hours", "Öffnungszeiten der Apotheken",
     "Opening hours and night duty of the pharmacies", ["pharmacies", "health care"]),
    ("education-culture-and-sport", "Education, culture and sport", "Library loans",
     "Ausleihen der Bibliotheken", "Loans and returns per branch library and media type",
     ["libraries", "culture"]),
    ("population-and-society", "Population and society", "Registered residents",
     "Gemeldete Einwohner", "Residents with main residence by district, age group and sex",
     ["population", "districts"]),
)
_FORMATS = (
    ("CSV", "text/csv", "csv"), ("JSON", "application/json", "json"),
    ("XLSX", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "xlsx"),
    ("GeoJSON", "application/geo+json", "geojson"), ("PDF", "application/pdf", "pdf"),
    ("XML", "application/xml", "xml"),
)
_LICENCES = (
    ("cc-by", "Creative Commons Attribution", "http://www.opendefinition.org/licenses/cc-by"),
    ("cc-zero", "Creative Commons CCZero", "http://www.opendefinition.org/licenses/cc-zero"),
    ("dl-de-by-2.0", "Datenlizenz Deutschland Namensnennung 2.0", "https://www.govdata.de/dl-de/by-2-0"),
    ("odc-odbl", "Open Data Commons Open Database License (ODbL)", "http://www.opendefinition.org/licenses/odc-odbl"),
)
_PLACES = ("Northport", "Eastvale", "Southbridge", "Westfield", "Lakeside", "Hillcrest")
_FREQUENCIES = ("daily", "weekly", "monthly", "annual", "irregular")
# fmt: on


def package_id(index: int) -> str:
    return f"{index:08x}-5c7a-4e1f-9b2d-{index * 7919 % 16**12:012x}"


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f")


def generate_package(index: int, revision: int = 0) -> dict[str, Any]:
    """Package ``index`` (see the module docstring)."""
    group, group_title, title, title_de, notes, tags = _TOPICS[index % len(_TOPICS)]
    place = _PLACES[index // len(_TOPICS) % len(_PLACES)]
    year = 2015 + index % 10
    licence = _LICENCES[index % len(_LICENCES)]
    modified = T0 + timedelta(minutes=index + revision * 10_000_000)
    pid = package_id(index)
    org = f"city-of-{place.lower()}"
    full_title = f"{title}, {place} {year}" + (f" (rev. {revision})" if revision else "")
    package: dict[str, Any] = {
        "id": pid,
        "name": f"{group}-{place.lower()}-{year}-{index}",
        "title": full_title,
        "notes": f"{notes} in {place}, {year}.",
        "type": "dataset",
        "state": "active",
        "private": False,
        "metadata_created": stamp(T0 + timedelta(minutes=index) - timedelta(days=30)),
        "metadata_modified": stamp(modified),
        "license_id": licence[0],
        "license_title": licence[1],
        "license_url": licence[2],
        "author": f"Statistics Office of {place}",
        "author_email": f"statistics@{place.lower()}.example.org",
        "maintainer": "Open Data Team",
        "maintainer_email": f"opendata@{place.lower()}.example.org",
        "url": f"https://data.{place.lower()}.example.org/dataset/{pid}",
        "version": f"1.{revision}",
        "num_resources": 0,
        "organization": {
            "id": f"org-{place.lower()}",
            "name": org,
            "title": f"City of {place}",
            "type": "organization",
            "is_organization": True,
            "state": "active",
        },
        "groups": [
            {"id": f"g-{group}", "name": group, "title": group_title, "display_name": group_title}
        ],
        "tags": [{"name": t, "display_name": t, "state": "active"} for t in (*tags, place.lower())],
        "extras": [
            {"key": "frequency", "value": _FREQUENCIES[index % len(_FREQUENCIES)]},
            {"key": "language", "value": '["en", "de"]' if index % 3 == 0 else "en"},
            {"key": "temporal_start", "value": f"{year}-01-01"},
            {"key": "temporal_end", "value": f"{year}-12-31"},
        ],
    }
    if index % 3 == 0:
        package["title_translated"] = {"en": full_title, "de": f"{title_de}, {place} {year}"}
    resources = []
    for r in range(2 + index % 3):
        fmt, mime, ext = _FORMATS[(index + r) % len(_FORMATS)]
        resources.append(
            {
                "id": f"{pid[:8]}-r{r}",
                "package_id": pid,
                "name": f"{title} {year} ({fmt})",
                "description": f"{title} for {place}, {year}, as {fmt}.",
                "format": fmt,
                "mimetype": mime,
                "url": f"https://data.{place.lower()}.example.org/files/{pid}/{r}.{ext}",
                "size": 1024 * (index % 977 + 1) * (r + 1),
                "created": stamp(T0 + timedelta(minutes=index) - timedelta(days=30)),
                "last_modified": stamp(modified),
                "position": r,
                "state": "active",
            }
        )
    package["resources"] = resources
    package["num_resources"] = len(resources)
    return package


def small_package(package_id: str, modified: str, revision: int = 0) -> dict[str, Any]:
    """A minimal package ``package_id`` at ``metadata_modified`` ``modified``."""
    return {
        "id": package_id,
        "name": f"p-{package_id}",
        "title": f"Dataset {package_id}" + (f" (rev. {revision})" if revision else ""),
        "notes": f"Counts for dataset {package_id}.",
        "type": "dataset",
        "state": "active",
        "private": False,
        "metadata_modified": modified,
        "license_id": "cc-by",
        "resources": [
            {
                "id": f"{package_id}-r0",
                "url": f"https://data.example.org/files/{package_id}.csv",
                "format": "CSV",
            }
        ],
    }


@lru_cache(maxsize=1)
def _bundled() -> str:
    return (resources.files("aggregator.demo.peers") / "data" / "ckan" / "packages.json").read_text(
        encoding="utf-8"
    )


def load_bundled_packages() -> list[dict[str, Any]]:
    """The bundled packages (a fresh copy each call: callers may change them)."""
    packages: list[dict[str, Any]] = json.loads(_bundled())
    return packages
