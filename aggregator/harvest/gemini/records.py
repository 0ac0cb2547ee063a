"""What the ISO 19139 harvesters (CSW, WAF, single document) read from a record themselves.

A harvester needs three facts of each ``gmd:MD_Metadata`` record before the pipeline sees it:
whether it looks like a GEMINI / ISO 19139 document at all, its ``fileIdentifier`` (the
record's local id, so that the lifecycle rules of the UK DMS collection interface apply:
skip when not newer, newest of two with the same id, reinstate after withdrawal) and its
``dateStamp`` (the metadata date those rules compare). Everything else is the mapper's job.

The XPaths are compiled once; they read a parsed tree (the hardened parser of
:mod:`aggregator.core.xml`) and never change it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from lxml import etree

from aggregator.mapping.iso19139.records import (
    GMD,
    GMI,
    MD_METADATA,
    MI_METADATA,
    RECORD_TAGS,
    serialise_embedded,
)

GCO = "http://www.isotc211.org/2005/gco"
NS = {"gmd": GMD, "gco": GCO, "gmi": GMI}

_FILE_ID = etree.XPath("string(gmd:fileIdentifier/gco:CharacterString)", namespaces=NS)
_DATE_STAMP = etree.XPath(
    "string((gmd:dateStamp/gco:DateTime | gmd:dateStamp/gco:Date)[1])", namespaces=NS
)
_HIERARCHY = etree.XPath(
    "string(gmd:hierarchyLevel/gmd:MD_ScopeCode/@codeListValue)", namespaces=NS
)


def looks_like_gemini(root: etree._Element) -> bool:
    """An ISO 19139 metadata record: its root is ``gmd:MD_Metadata`` (or ``gmi:MI_Metadata``).

    This is the test the DMS spec means by "looks like a GEMINI XML document": whether the
    record is *valid* GEMINI is for the validation chain (XSD, Schematron) to say."""
    return root.tag in RECORD_TAGS


def parse_metadata_date(text: str) -> datetime | None:
    """A ``gco:Date`` or ``gco:DateTime`` as an aware UTC datetime (naive: taken as UTC);
    None when empty or unreadable (the record is then never skipped by date)."""
    value = text.strip()
    if not value:
        return None
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class RecordFacts:
    """The facts a harvester takes from one record."""

    file_identifier: str  # "" when the record has none
    date_stamp: datetime | None
    hierarchy_level: str  # "dataset", "series", "service" ... ("" when not given)


#: one evaluation for the three facts, joined by a character no record is expected to hold
#: in them (a private-use one); a record that does hold it is read field by field
_SEPARATOR = "\U0010fffd"
_FACTS = etree.XPath(
    f'concat({_FILE_ID.path}, "{_SEPARATOR}", {_DATE_STAMP.path}, "{_SEPARATOR}",'
    f" {_HIERARCHY.path})",
    namespaces=NS,
)


def record_facts(record: etree._Element) -> RecordFacts:
    """Read fileIdentifier, dateStamp and hierarchy level of one ``MD_Metadata`` element."""
    facts = str(_FACTS(record)).split(_SEPARATOR)
    if len(facts) != 3:
        facts = [str(_FILE_ID(record)), str(_DATE_STAMP(record)), str(_HIERARCHY(record))]
    file_identifier, date_stamp, hierarchy_level = facts
    return RecordFacts(
        file_identifier.strip(), parse_metadata_date(date_stamp), hierarchy_level.strip()
    )


__all__ = [
    "MD_METADATA",
    "MI_METADATA",
    "RECORD_TAGS",
    "RecordFacts",
    "looks_like_gemini",
    "parse_metadata_date",
    "record_facts",
    "serialise_embedded",
]
