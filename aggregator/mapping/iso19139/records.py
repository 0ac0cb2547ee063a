"""The ISO records an XML document holds: bare, or inside a CSW response envelope.

ISO metadata is published in four shapes, all read here:

- a bare ``gmd:MD_Metadata`` (ISO 19139) or ``gmi:MI_Metadata`` (ISO 19115-2, its extension
  for acquisition and imagery, as NOAA, Sentinel and many data centres write it; every
  ``gmd:`` element a mapper or a harvester reads is where ``MD_Metadata`` has it);
- a CSW ``csw:GetRecordByIdResponse`` (CSW 2.0.2) holding one or more records, as a
  catalogue's "download the XML" link or a saved request gives it;
- a CSW ``csw:GetRecordsResponse`` whose ``csw:SearchResults`` hold the records.

Each record of an envelope is one record, with its own ``fileIdentifier``: the harvesters
(WAF, single document) list each one under it, ``aggregator map`` maps each one to its own
dataset. A document that holds no ISO record is a :class:`ParseError` that names what it holds
instead: an OWS exception report (with its code and text), an envelope with no record (or
records in another schema, such as Dublin Core ``csw:Record``), or another root element.

Used by the mapper, the harvesters and the CLI; it reads the parsed tree and never changes it.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from lxml import etree

from aggregator.core.errors import ParseError

GMD = "http://www.isotc211.org/2005/gmd"
GMI = "http://www.isotc211.org/2005/gmi"
MD_METADATA = f"{{{GMD}}}MD_Metadata"
MI_METADATA = f"{{{GMI}}}MI_Metadata"
#: root elements of an ISO 19139 record (MI_Metadata: the ISO 19115-2 extension of it)
RECORD_TAGS = frozenset({MD_METADATA, MI_METADATA})
#: the CSW namespaces whose responses are read (2.0.2, the one in use; 3.0 has the same shape)
CSW_NAMESPACES = ("http://www.opengis.net/cat/csw/2.0.2", "http://www.opengis.net/cat/csw/3.0")
_PREFIXES = {GMD: "gmd", GMI: "gmi", **dict.fromkeys(CSW_NAMESPACES, "csw")}


class NotIsoRecordError(ParseError):
    """A well-formed document that holds no ISO record; ``found`` says what it is instead:
    ``exception`` (an OWS exception report), ``empty`` (a CSW envelope with no ISO record) or
    ``other`` (any other root element)."""

    def __init__(self, message: str, found: Literal["exception", "empty", "other"]) -> None:
        super().__init__(message)
        self.found = found


def qualified_name(element: etree._Element) -> str:
    """``gmd:MD_Metadata``, ``csw:Record``... (the namespace URI in braces when unknown)."""
    name = etree.QName(element)
    prefix = _PREFIXES.get(name.namespace or "")
    if prefix:
        return f"{prefix}:{name.localname}"
    if name.namespace:
        return f"{{{name.namespace}}}{name.localname}"
    return name.localname


@dataclass(frozen=True, slots=True)
class IsoDocument:
    """The ISO records of one document and the envelope they came in (None: bare record)."""

    records: tuple[etree._Element, ...]
    envelope: str | None = None  # "csw:GetRecordsResponse", "csw:GetRecordByIdResponse"
    others: tuple[str, ...] = ()  # what else the envelope held: "2 csw:Record"

    @property
    def is_envelope(self) -> bool:
        return self.envelope is not None


def _exception_message(root: etree._Element) -> str:
    parts = []
    for exc in root.iter("{*}Exception"):
        code = exc.get("exceptionCode", "")
        texts = [(t.text or "").strip() for t in exc.iter("{*}ExceptionText")]
        detail = "; ".join(t for t in texts if t)
        parts.append(f"{code}: {detail}".strip(": ") if detail else code)
    return " | ".join(p for p in parts if p) or "no exception given"


def _envelope_children(root: etree._Element) -> list[etree._Element] | None:
    """The children of a CSW envelope that may be records; None when root is no envelope."""
    name = etree.QName(root)
    if name.namespace not in CSW_NAMESPACES:
        return None
    if name.localname == "GetRecordByIdResponse":
        return [c for c in root if isinstance(c.tag, str)]
    if name.localname == "GetRecordsResponse":
        results = root.find(f"{{{name.namespace}}}SearchResults")
        return [] if results is None else [c for c in results if isinstance(c.tag, str)]
    return None


def iso_records(root: etree._Element, where: str) -> IsoDocument:
    """The ISO records ``root`` holds; ParseError naming what it holds when there is none.

    ``where`` names the document in the message (its URL or file name)."""
    if root.tag in RECORD_TAGS:
        return IsoDocument((root,))
    found = qualified_name(root)
    if etree.QName(root).localname == "ExceptionReport":
        raise NotIsoRecordError(
            f"{where}: an OWS exception report, not an ISO 19139 record:"
            f" {_exception_message(root)}",
            "exception",
        )
    children = _envelope_children(root)
    if children is None:
        raise NotIsoRecordError(
            f"{where}: the root element is {found}, not an ISO 19139 record (gmd:MD_Metadata or"
            " gmi:MI_Metadata, bare or in a CSW GetRecordByIdResponse / GetRecordsResponse)",
            "other",
        )
    records = tuple(c for c in children if c.tag in RECORD_TAGS)
    counted = Counter(qualified_name(c) for c in children if c.tag not in RECORD_TAGS)
    others = tuple(f"{n} {name}" for name, n in sorted(counted.items()))
    if not records:
        held = ", ".join(others) if others else "no record"
        raise NotIsoRecordError(
            f"{where}: the {found} holds no ISO 19139 record ({held}; gmd:MD_Metadata or"
            " gmi:MI_Metadata expected: was the request made with"
            " outputSchema=http://www.isotc211.org/2005/gmd?)",
            "empty",
        )
    return IsoDocument(records, found, others)


def serialise_embedded(record: etree._Element) -> bytes:
    """The bytes kept for a record that came inside an envelope (a CSW response).

    A copy of the element is serialised, so the namespaces the record uses from the envelope
    are declared on it and no others: the bytes parse on their own and are the same whenever
    the record is the same (the store tells unchanged records by their hash)."""
    return etree.tostring(
        copy.deepcopy(record), encoding="UTF-8", xml_declaration=False, with_tail=False
    )
