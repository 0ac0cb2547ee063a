"""serialise_embedded: the bytes kept for a record from a CSW page are exactly those of the
element copied out of the page and serialised (what the store has always hashed), whether the
envelope's namespaces are cut from the in-place serialisation or the copy is made."""

from __future__ import annotations

import copy
import random

import pytest
from lxml import etree

from aggregator.harvest import gemini
from aggregator.harvest.gemini import (
    RecordFacts,
    _without_envelope_namespaces,
    parse_metadata_date,
    record_facts,
    serialise_embedded,
)
from aggregator.peers.csw import GeneratedCatalogue
from aggregator.xml import parse_xml

CSW = "http://www.opengis.net/cat/csw/2.0.2"
GMD = "http://www.isotc211.org/2005/gmd"
GCO = "http://www.isotc211.org/2005/gco"
XLINK = "http://www.w3.org/1999/xlink"
OWS = "http://www.opengis.net/ows"
DC = "http://purl.org/dc/elements/1.1/"


def copied(record: etree._Element) -> bytes:
    """The bytes as every earlier version kept them."""
    return etree.tostring(
        copy.deepcopy(record), encoding="UTF-8", xml_declaration=False, with_tail=False
    )


def records_of(page: str) -> list[etree._Element]:
    root = parse_xml(page.encode())
    return [e for e in root.iter() if isinstance(e.tag, str) and e.get("id") == "r"]


def page(envelope: str, record: str) -> str:
    return (
        f'<csw:GetRecordsResponse xmlns:csw="{CSW}" {envelope}>'
        f"<csw:SearchResults>\n  {record}\n</csw:SearchResults></csw:GetRecordsResponse>"
    )


SELF_CONTAINED = (
    f'<gmd:MD_Metadata xmlns:gmd="{GMD}" xmlns:gco="{GCO}" id="r" xml:lang="en">'
    "<gmd:fileIdentifier><gco:CharacterString>a &amp; b</gco:CharacterString>"
    "</gmd:fileIdentifier><!-- c --><gmd:x><![CDATA[<y>]]></gmd:x></gmd:MD_Metadata>"
)

CASES = {
    # (envelope declarations, record): whether the in-place bytes can be used
    "unused envelope namespaces": (f'xmlns:ows="{OWS}" xmlns:dc="{DC}"', SELF_CONTAINED, True),
    "envelope redeclares the record's": (
        f'xmlns:gmd="{GMD}" xmlns:ows="{OWS}"',
        SELF_CONTAINED,
        True,
    ),
    "record redeclares the envelope's": (
        "",
        f'<gmd:MD_Metadata xmlns:gmd="{GMD}" xmlns:csw="{CSW}" id="r"><gmd:a/></gmd:MD_Metadata>',
        True,
    ),
    "own prefix from the envelope": (
        f'xmlns:gmd="{GMD}" xmlns:ows="{OWS}"',
        f'<gmd:MD_Metadata id="r" xmlns:gco="{GCO}"><gco:x/></gmd:MD_Metadata>',
        True,
    ),
    "a prefix bound otherwise": (
        f'xmlns:dc="{DC}"',
        f'<gmd:MD_Metadata xmlns:gmd="{GMD}" xmlns:dc="urn:other" id="r"><dc:x/></gmd:MD_Metadata>',
        True,
    ),
    "empty record": (f'xmlns:dc="{DC}"', f'<gmd:MD_Metadata xmlns:gmd="{GMD}" id="r"/>', True),
    "no own declaration": ("", f'<gmd:MD_Metadata xmlns:gmd="{GMD}" id="r"/>', True),
    "descendants use the envelope's": (
        f'xmlns:gmd="{GMD}" xmlns:gco="{GCO}" xmlns:ows="{OWS}"',
        '<gmd:MD_Metadata id="r"><gmd:a><gco:b/></gmd:a><ows:c/></gmd:MD_Metadata>',
        False,
    ),
    "an attribute uses the envelope's": (
        f'xmlns:xlink="{XLINK}"',
        f'<gmd:MD_Metadata xmlns:gmd="{GMD}" id="r"><gmd:a xlink:href="x"/></gmd:MD_Metadata>',
        False,
    ),
    "the record's attribute uses the envelope's": (
        f'xmlns:xlink="{XLINK}"',
        f'<gmd:MD_Metadata xmlns:gmd="{GMD}" xlink:href="x" id="r"/>',
        False,
    ),
    "a descendant redeclares an envelope prefix": (
        f'xmlns:dc="{DC}"',
        f'<gmd:MD_Metadata xmlns:gmd="{GMD}" id="r"><dc:x xmlns:dc="{DC}"/></gmd:MD_Metadata>',
        False,
    ),
    "text that looks like a prefix": (
        f'xmlns:dc="{DC}"',
        f'<gmd:MD_Metadata xmlns:gmd="{GMD}" id="r"><gmd:a>see dc:x</gmd:a></gmd:MD_Metadata>',
        False,  # conservative: copied
    ),
    "escaped markup in text": (
        f'xmlns:dc="{DC}"',
        f'<gmd:MD_Metadata xmlns:gmd="{GMD}" id="r"><gmd:a>&lt;dc:x&gt;</gmd:a></gmd:MD_Metadata>',
        False,  # conservative: copied
    ),
    "a default namespace in the envelope": (
        'xmlns="urn:default"',
        f'<gmd:MD_Metadata xmlns:gmd="{GMD}" id="r"><gmd:a/></gmd:MD_Metadata>',
        False,
    ),
    "an unprefixed record in the envelope's default namespace": (
        f'xmlns="{GMD}"',
        '<MD_Metadata id="r"><a/></MD_Metadata>',
        True,
    ),
    "a URI written escaped": (
        'xmlns:q="urn:a&amp;b"',
        f'<gmd:MD_Metadata xmlns:gmd="{GMD}" id="r"/>',
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_bytes_are_the_copy_s(name: str) -> None:
    envelope, record, fast = CASES[name]
    (element,) = records_of(page(envelope, record))
    kept = serialise_embedded(element)
    assert kept == copied(element)
    assert etree.tostring(parse_xml(kept)) == etree.tostring(parse_xml(copied(element)))
    inplace = etree.tostring(element, encoding="UTF-8", with_tail=False)
    cut = _without_envelope_namespaces(element, element.getparent(), inplace)  # type: ignore[arg-type]
    assert (cut is not None) is fast  # the cheap path is taken where it can be, and only there


def test_nested_envelopes_nearest_declaration_first() -> None:
    text = (
        f'<a xmlns:pa="urn:outer" xmlns:qa="urn:q"><b xmlns:pa="urn:inner" xmlns:ra="urn:r">'
        f'<gmd:MD_Metadata xmlns:gmd="{GMD}" id="r"><gmd:x/></gmd:MD_Metadata></b></a>'
    )
    (element,) = records_of(text)
    assert serialise_embedded(element) == copied(element)
    inplace = etree.tostring(element, encoding="UTF-8", with_tail=False)
    assert _without_envelope_namespaces(element, element.getparent(), inplace) is not None  # type: ignore[arg-type]


def test_a_record_that_is_a_document_root_is_copied() -> None:
    root = parse_xml(SELF_CONTAINED.encode())
    assert serialise_embedded(root) == copied(root)


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
        assert kept == copied(element)
        assert etree.tostring(parse_xml(kept)) == etree.tostring(parse_xml(item.payload))


PREFIXES = ["gmd", "gco", "p", "q", "dc", ""]
URIS = ["urn:a", "urn:b", GMD, "urn:c"]


def _random_case(rng: random.Random) -> str:
    """A page of one record, namespaces declared and used at random (the copy's bytes are
    the reference, whatever they are)."""

    def decls(k: int) -> str:
        chosen = rng.sample(PREFIXES, k)
        return " ".join(
            (f'xmlns:{p}="{rng.choice(URIS)}"' if p else f'xmlns="{rng.choice(URIS)}"')
            for p in chosen
        )

    def element(depth: int, declared: set[str]) -> str:
        candidates = sorted(declared)
        prefix = rng.choice(candidates) if candidates else ""
        tag = f"{prefix}:e{depth}" if prefix else f"e{depth}"
        here = decls(rng.randint(0, 2)) if rng.random() < 0.3 else ""
        attr = ""
        prefixed = [c for c in candidates if c]
        if prefixed and rng.random() < 0.3:
            attr = f' {rng.choice(prefixed)}:at="v"'
        inner = ""
        if depth < 3:
            inner = "".join(element(depth + 1, declared) for _ in range(rng.randint(0, 2)))
        return f"<{tag} {here}{attr}>{inner}</{tag}>"

    outer = decls(rng.randint(0, 4))
    own = decls(rng.randint(0, 3))
    # every prefix the envelope or the record declares may be used below
    declared = {d.split("=")[0].partition(":")[2] for d in f"{outer} {own}".split() if d}
    body = "".join(element(1, declared) for _ in range(rng.randint(0, 3)))
    rec_prefix = rng.choice(sorted(declared)) if declared else ""
    tag = f"{rec_prefix}:Rec" if rec_prefix else "Rec"
    return f'<w:env xmlns:w="urn:w" {outer}><w:r><{tag} id="r" {own}>{body}</{tag}></w:r></w:env>'


def test_random_namespace_layouts_keep_the_copy_s_bytes() -> None:
    rng = random.Random(20261126)
    fast = 0
    checked = 0
    for _ in range(1500):
        text = _random_case(rng)
        try:
            records = records_of(text)
        except Exception:  # an unbound prefix drawn at random: not a document
            continue
        (element,) = records
        checked += 1
        assert serialise_embedded(element) == copied(element), text
        inplace = etree.tostring(element, encoding="UTF-8", with_tail=False)
        if _without_envelope_namespaces(element, element.getparent(), inplace) is not None:  # type: ignore[arg-type]
            fast += 1
    assert checked > 1000 and fast > 100  # both paths were exercised


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


def test_layouts_the_cut_does_not_fit_are_copied_without_trying_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under pycsw's envelope (ten namespaces, its records using some) and after a record
    the cut did not fit, records are copied straight away (the bytes are the copy's always)."""
    monkeypatch.setattr(gemini, "_declined", {})
    wide = " ".join(f'xmlns:n{i}="urn:n{i}"' for i in range(4))
    (element,) = records_of(page(wide, SELF_CONTAINED))
    assert serialise_embedded(element) == copied(element)
    assert not gemini._declined
    uses = '<gmd:MD_Metadata id="r"><gco:b/></gmd:MD_Metadata>'
    envelope = f'xmlns:gmd="{GMD}" xmlns:gco="{GCO}"'
    elements = [records_of(page(envelope, uses))[0] for _ in range(3)]
    assert [serialise_embedded(e) for e in elements] == [copied(e) for e in elements]
    assert list(gemini._declined.values()) == [gemini._DECLINED_FOR - 2]
