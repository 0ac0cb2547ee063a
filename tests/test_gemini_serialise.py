"""What the ISO harvesters read from a record themselves: the bytes kept for a record from a
CSW page (its copy serialised: every namespace it uses declared on it, no others) and its
three facts (one XPath evaluation, the same as three)."""

from __future__ import annotations

import pytest
from lxml import etree

from aggregator.core.xml import parse_xml
from aggregator.demo.peers.csw import GeneratedCatalogue
from aggregator.harvest.gemini import (
    RecordFacts,
    parse_metadata_date,
    record_facts,
    serialise_embedded,
)

CSW = "http://www.opengis.net/cat/csw/2.0.2"
GMD = "http://www.isotc211.org/2005/gmd"
GCO = "http://www.isotc211.org/2005/gco"
OWS = "http://www.opengis.net/ows"
DC = "http://purl.org/dc/elements/1.1/"


def test_generated_catalogue_records_in_a_csw_page() -> None:
    items = list(GeneratedCatalogue(12))
    body = "".join(i.payload.decode() for i in items)
    root = parse_xml(
        f'<csw:GetRecordsResponse xmlns:csw="{CSW}" xmlns:ows="{OWS}">'
        f"<csw:SearchResults>{body}</csw:SearchResults></csw:GetRecordsResponse>".encode()
    )
    records = list(root[0])
    assert len(records) == 12
    for element, item in zip(records, items, strict=True):
        kept = serialise_embedded(element)
        assert b"xmlns:csw" not in kept and b"xmlns:ows" not in kept
        assert etree.tostring(parse_xml(kept)) == etree.tostring(parse_xml(item.payload))


def test_a_record_using_the_envelope_s_namespaces_gets_them_declared() -> None:
    page = (
        f'<csw:GetRecordsResponse xmlns:csw="{CSW}" xmlns:gmd="{GMD}" xmlns:gco="{GCO}"'
        f' xmlns:dc="{DC}"><csw:SearchResults><gmd:MD_Metadata><gmd:fileIdentifier>'
        "<gco:CharacterString>r-1</gco:CharacterString></gmd:fileIdentifier>"
        "</gmd:MD_Metadata></csw:SearchResults></csw:GetRecordsResponse>"
    )
    kept = serialise_embedded(parse_xml(page.encode())[0][0])
    standalone = parse_xml(kept)  # parses on its own
    assert record_facts(standalone).file_identifier == "r-1"
    assert b"xmlns:dc" not in kept and b"xmlns:csw" not in kept


def _facts_field_by_field(record: etree._Element) -> tuple[str, str, str]:
    paths = (
        "string(gmd:fileIdentifier/gco:CharacterString)",
        "string((gmd:dateStamp/gco:DateTime | gmd:dateStamp/gco:Date)[1])",
        "string(gmd:hierarchyLevel/gmd:MD_ScopeCode/@codeListValue)",
    )
    ns = {"gmd": GMD, "gco": GCO}
    a, b, c = (str(record.xpath(p, namespaces=ns)) for p in paths)
    return a, b, c


FACTS_CASES = [
    # (fileIdentifier, dateStamp, hierarchyLevel) as written
    "<gmd:fileIdentifier><gco:CharacterString> id-1 </gco:CharacterString></gmd:fileIdentifier>"
    "<gmd:dateStamp><gco:Date>2024-02-03</gco:Date></gmd:dateStamp>"
    '<gmd:hierarchyLevel><gmd:MD_ScopeCode codeListValue="series"/></gmd:hierarchyLevel>',
    "<gmd:fileIdentifier><gco:CharacterString>a<!-- c -->b<x>c</x></gco:CharacterString>"
    "</gmd:fileIdentifier><gmd:dateStamp><gco:DateTime>2024-02-03T10:00:00Z</gco:DateTime>"
    "<gco:Date>2020-01-01</gco:Date></gmd:dateStamp>",
    "<gmd:fileIdentifier/><gmd:fileIdentifier><gco:CharacterString>second</gco:CharacterString>"
    "</gmd:fileIdentifier>",
    "",
    "<gmd:fileIdentifier><gco:CharacterString>with \U0010fffd the separator</gco:CharacterString>"
    "</gmd:fileIdentifier><gmd:dateStamp><gco:Date>bad</gco:Date></gmd:dateStamp>",
]


@pytest.mark.parametrize("inner", FACTS_CASES)
def test_record_facts_are_the_three_xpaths(inner: str) -> None:
    record = parse_xml(
        f'<gmd:MD_Metadata xmlns:gmd="{GMD}" xmlns:gco="{GCO}">{inner}</gmd:MD_Metadata>'.encode()
    )
    file_id, stamp, level = _facts_field_by_field(record)
    facts = record_facts(record)
    assert facts == RecordFacts(file_id.strip(), parse_metadata_date(stamp), level.strip())
