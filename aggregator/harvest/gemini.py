"""What the ISO 19139 harvesters (CSW, WAF, single document) read from a record themselves.

A harvester needs three facts of each ``gmd:MD_Metadata`` record before the pipeline sees it:
whether it looks like a GEMINI / ISO 19139 document at all, its ``fileIdentifier`` (the
record's local id, so that the lifecycle rules of the UK DMS collection interface apply:
skip when not newer, newest of two with the same id, reinstate after withdrawal) and its
``dateStamp`` (the metadata date those rules compare). Everything else is the mapper's job.

The XPaths are compiled once; they read a parsed tree (the hardened parser of
:mod:`aggregator.xml`) and never change it.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from lxml import etree

GMD = "http://www.isotc211.org/2005/gmd"
GCO = "http://www.isotc211.org/2005/gco"
GMI = "http://www.isotc211.org/2005/gmi"
NS = {"gmd": GMD, "gco": GCO, "gmi": GMI}
MD_METADATA = f"{{{GMD}}}MD_Metadata"
MI_METADATA = f"{{{GMI}}}MI_Metadata"
#: root elements of an ISO 19139 record (MI_Metadata: the ISO 19115-2 extension of it)
RECORD_TAGS = frozenset({MD_METADATA, MI_METADATA})

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


def serialise_embedded(record: etree._Element) -> bytes:
    """The bytes kept for a record that came inside a protocol response (a CSW page).

    They are those of a copy of the element serialised on its own: the namespaces the record
    uses from the envelope are declared on it and no others, so the bytes parse on their own
    and are the same whenever the record is the same (the store tells unchanged records by
    their hash, so these bytes must never change for the same record).

    Copying a 12 KB record cost more than serialising it. Serialised in place, lxml declares
    on the record every namespace of the envelope it does not declare itself, after its own
    declarations (and the one of its own prefix); when the record uses none of those, they
    are cut out and the bytes are the copy's (see :func:`_without_envelope_namespaces`).
    That is tried only under an envelope of at most ``_MAX_ENVELOPE`` namespaces (each costs
    a search of the bytes; pycsw's declares ten, and its records use some of them) and not
    again for a while for records laid out like one it did not fit; otherwise, the copy."""
    parent = record.getparent()
    if parent is not None and len(parent.nsmap) <= _MAX_ENVELOPE:
        key, tag = _start_tag_of(record, parent)
        if tag is not None and _declined.get(key, 0) <= 0:
            inplace = etree.tostring(
                record, encoding="UTF-8", xml_declaration=False, with_tail=False
            )
            standalone = _cut(tag, inplace)
            if standalone is not None:
                return standalone
            _declined[key] = _DECLINED_FOR
        elif tag is not None:
            _declined[key] = _declined.get(key, 1) - 1
    return etree.tostring(
        copy.deepcopy(record), encoding="UTF-8", xml_declaration=False, with_tail=False
    )


_MAX_ENVELOPE = 3  # namespaces in scope from the envelope
_DECLINED_FOR = 32  # records of the same layout copied before the cut is tried again
_declined: dict[tuple[object, ...], int] = {}


_PLAIN_URI = re.compile(r"[^\"'<>&\s]*")  # written between double quotes as it is


def _declared(element: etree._Element) -> tuple[tuple[str, str], ...]:
    """The namespace declarations on ``element`` itself, in document order ("" for the
    default namespace); not those it inherits."""
    found: list[tuple[str, str]] = []
    for event, value in etree.iterwalk(element, events=("start-ns", "start")):
        if event == "start":
            break
        found.append(value)
    return tuple(found)


def _declaration(prefix: str, uri: str) -> bytes:
    return (f' xmlns:{prefix}="{uri}"' if prefix else f' xmlns="{uri}"').encode()


@dataclass(frozen=True, slots=True)
class _StartTag:
    """How the in-place start tag of a record begins, and what of it the copy leaves out."""

    kept: bytes  # "<qname" and the declarations the copy writes too
    cut: bytes  # the envelope's declarations that follow them in place
    marks: tuple[bytes, ...]  # "p:" of each cut prefix (the record must use none)


_start_tags: dict[tuple[object, ...], _StartTag | None] = {}  # the same few in every page
_UNKNOWN = _StartTag(b"", b"", ())


def _start_tag(
    own: tuple[tuple[str, str], ...],
    prefix: str,
    name: etree.QName,
    inherited: tuple[tuple[str, ...], ...],
) -> _StartTag | None:
    seen = {declared for declared, _ in own}
    kept = [_declaration(declared, uri) for declared, uri in own]
    uris = [uri for _, uri in own]
    if name.namespace is not None and prefix not in seen:
        kept.append(_declaration(prefix, name.namespace))
        uris.append(name.namespace)
        seen.add(prefix)
    envelope = []
    for declared, uri in inherited:  # nearest ancestor first, each in declaration order
        if declared not in seen and declared != "xml":
            seen.add(declared)
            envelope.append((declared, uri))
            uris.append(uri)
    if any(not declared for declared, _ in envelope):
        return None  # the envelope's default namespace: no cheap test of its use
    if not all(_PLAIN_URI.fullmatch(uri) for uri in uris):
        return None
    qname = f"{prefix}:{name.localname}" if prefix else name.localname
    return _StartTag(
        b"<" + qname.encode() + b"".join(kept),
        b"".join(_declaration(declared, uri) for declared, uri in envelope),
        tuple(declared.encode() + b":" for declared, _ in envelope),
    )


def _without_envelope_namespaces(
    record: etree._Element, parent: etree._Element, inplace: bytes
) -> bytes | None:
    """``inplace`` (the record serialised where it is) as its copy would serialise, or None.

    In place, lxml writes the record's start tag as: its own declarations, then the one of
    its own prefix if an ancestor declares it, then every other namespace in scope from the
    ancestors (nearest first, in declaration order). The copy declares its own, that of its
    prefix, then only those the record's elements and attributes use (libxml2 reconciles the
    copied tree). So when no element or attribute of the record uses one of the others (no
    ``p:`` anywhere in the bytes, which is conservative), the copy's bytes are the in-place
    ones without those declarations. The start tag is checked byte for byte against that
    account; anything else (a default namespace from the envelope, a URI that would need
    escaping) answers None."""
    tag = _start_tag_of(record, parent)[1]
    return None if tag is None else _cut(tag, inplace)


def _start_tag_of(
    record: etree._Element, parent: etree._Element
) -> tuple[tuple[object, ...], _StartTag | None]:
    inherited = tuple(d for a in (parent, *parent.iterancestors()) for d in _declared(a))
    key = (_declared(record), record.prefix or "", record.tag, inherited)
    tag = _start_tags.get(key, _UNKNOWN)
    if tag is _UNKNOWN:
        if len(_start_tags) >= 256:
            _start_tags.clear()
            _declined.clear()
        tag = _start_tags[key] = _start_tag(key[0], key[1], etree.QName(record), inherited)
    return key, tag


def _cut(tag: _StartTag, inplace: bytes) -> bytes | None:
    if not tag.cut:
        return inplace
    if any(mark in inplace for mark in tag.marks):
        return None  # the record may use a prefix of the envelope's
    end = len(tag.kept) + len(tag.cut)
    if not inplace.startswith(tag.kept + tag.cut) or inplace.startswith(b" xmlns", end):
        return None
    if inplace[end : end + 1] not in (b">", b"/", b" "):
        return None
    return tag.kept + inplace[end:]
