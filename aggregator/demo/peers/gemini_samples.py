"""Sample UK GEMINI 2.3 / ISO 19139 records for the CSW and WAF peers, the demo and the tests.

* :func:`bundled_gemini_records` returns the hand-written records in ``data/gemini/`` (a
  dataset, a series and a service of a fictitious environment agency), written for this
  project from the GEMINI 2.3 encoding guidance; they are not copies of third-party records.
* :func:`generate_gemini_record` makes one realistic record (~11 KB) from the bundled dataset,
  deterministic from ``(index, revision)``: a fresh fileIdentifier, title, abstract,
  bounding box and dates per index; ``revision`` moves the metadata date on (an update).
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from importlib import resources

__all__ = ["bundled_gemini_records", "generate_gemini_record", "strip_declaration"]

_NAMESPACE = uuid.UUID("5d1f0c1e-0b7e-4c55-9a53-3c3f8d2b7e10")
_PLACES = (
    "Ashbourne",
    "Brackley",
    "Corbridge",
    "Dunmow",
    "Eynsham",
    "Frodsham",
    "Glossop",
    "Hexham",
    "Ilkley",
    "Jarrow",
)
_SUBJECTS = (
    ("Flood Zones for Planning", "inlandWaters"),
    ("Groundwater Vulnerability", "geoscientificInformation"),
    ("Ancient Woodland Inventory", "biota"),
    ("Air Quality Management Areas", "environment"),
    ("Public Rights of Way", "transportation"),
    ("Listed Building Locations", "structure"),
    ("Agricultural Land Classification", "farming"),
    ("Coastal Erosion Risk", "oceans"),
)


def strip_declaration(document: bytes) -> bytes:
    """The document without its XML declaration (to embed it in a response)."""
    if document.startswith(b"<?xml"):
        return document[document.index(b"?>") + 2 :].lstrip()
    return document


def bundled_gemini_records() -> list[tuple[str, bytes]]:
    """(file name, bytes) of each bundled GEMINI record, sorted by name."""
    folder = resources.files("aggregator.demo.peers") / "data" / "gemini"
    return sorted(
        (entry.name, entry.read_bytes())
        for entry in folder.iterdir()
        if entry.name.endswith(".xml")
    )


def _template() -> str:
    for name, data in bundled_gemini_records():
        if name.startswith("dataset-"):
            return data.decode("utf-8")
    raise FileNotFoundError("no bundled dataset record")  # pragma: no cover


_TEMPLATE: str | None = None
_ORIGINATOR = re.compile(
    r"<gmd:pointOfContact>(?:(?!</gmd:pointOfContact>).)*?Hydrology Consultants.*?"
    r"</gmd:pointOfContact>\s*",
    re.S,
)
_VIEW_LINK = re.compile(r"<gmd:onLine>(?:(?!</gmd:onLine>).)*?OGC:WMS.*?</gmd:onLine>\s*", re.S)
_ABSTRACT = re.compile(
    r"(<gmd:abstract>\s*<gco:CharacterString>)(.*?)(</gco:CharacterString>)", re.S
)


def generate_identifier(index: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"gemini-{index}"))


def generate_gemini_record(index: int, revision: int = 0) -> bytes:
    """One realistic GEMINI dataset record, deterministic from ``(index, revision)``."""
    global _TEMPLATE
    if _TEMPLATE is None:
        _TEMPLATE = _template()
    place = _PLACES[index % len(_PLACES)]
    subject, topic = _SUBJECTS[(index // len(_PLACES)) % len(_SUBJECTS)]
    stamp = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(minutes=index, days=30 * revision)
    west = -5.5 + (index % 70) * 0.05
    south = 50.1 + (index % 90) * 0.04
    text = (
        _TEMPLATE.replace("6f3c2a1e-9b4d-4c1a-8e2f-0d5b7a9c1e01", generate_identifier(index))
        .replace("Flood Zones for Planning: Riverside Catchment", f"{subject}: {place} ({index})")
        .replace("flood-zones-planning", f"record-{index}")
        .replace("2026-03-14T09:30:00", stamp.strftime("%Y-%m-%dT%H:%M:%S"))
        .replace("tp-fzp-rc", f"tp-{index}")
        .replace("<gco:Decimal>-2.85</gco:Decimal>", f"<gco:Decimal>{west:.2f}</gco:Decimal>")
        .replace("<gco:Decimal>-1.92</gco:Decimal>", f"<gco:Decimal>{west + 0.9:.2f}</gco:Decimal>")
        .replace("<gco:Decimal>52.41</gco:Decimal>", f"<gco:Decimal>{south:.2f}</gco:Decimal>")
        .replace(
            "<gco:Decimal>53.07</gco:Decimal>", f"<gco:Decimal>{south + 0.6:.2f}</gco:Decimal>"
        )
        .replace(">inlandWaters<", f">{topic}<")
    )
    abstract = (
        f"{subject} for the {place} area, record {index}, revision {revision}. Prepared by the"
        " Riverside Environment Agency from survey, modelling and partner data; updated as new"
        " evidence is received and checked."
    )
    text = _ABSTRACT.sub(lambda m: m.group(1) + abstract + m.group(3), text, count=1)
    # one responsible party and one online resource fewer than the bundled record
    text = _ORIGINATOR.sub("", text, count=1)
    text = _VIEW_LINK.sub("", text, count=1)
    # indentation is most of the template's weight: tighten it to the ~8 KB of a real record
    text = re.sub(r">\s+<", "><", text)
    return text.encode("utf-8")
