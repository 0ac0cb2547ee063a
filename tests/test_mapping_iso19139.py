"""The iso19139 mapper: golden GEMINI records, SHACL conformance, the irregular parts, bad input.

The three bundled GEMINI 2.3 records (aggregator/demo/peers/data/iso/gemini-*.xml: a dataset, a
series and a service, written by us to cover every mapped element) are mapped and compared by
graph isomorphism (rdflib, tests only) with tests/data/iso/<name>.trig, whose graph
``urn:golden:resource`` is the mapped resource and ``urn:golden:record`` the catalogue record.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyoxigraph as ox
import pytest
import rdflib
from rdflib.compare import graph_diff, isomorphic, to_isomorphic

from aggregator.core.errors import MappingError, ParseError, UnsafeInputError
from aggregator.core.models import MappedDataset, RawRecord, Severity
from aggregator.mapping.base import MappingContext
from aggregator.mapping.iso19139 import IsoMapper
from aggregator.mapping.iso19139._parts import crs_iri
from aggregator.mapping.iso19139._table import load_table
from aggregator.mapping.ranges import complete_ranges
from aggregator.plugin import mappers
from aggregator.validate.shacl import ShaclValidator, shapes_dir

SAMPLES = Path(__file__).parents[1] / "aggregator" / "demo" / "peers" / "data" / "iso"
GOLDEN = Path(__file__).parent / "data" / "iso"
CTX = MappingContext(base_iri="https://aggregator.example.org/", source="gemini")
NAMES = [
    "gemini-dataset-flood-risk",
    "gemini-series-aerial-photography",
    "gemini-service-flood-wms",
]
DS = "https://aggregator.example.org/dataset/gemini/"


@pytest.fixture(scope="module")
def mapper() -> IsoMapper:
    return IsoMapper()


def _raw(payload: bytes, local_id: str = "rec") -> RawRecord:
    return RawRecord("gemini", local_id, "iso19139", payload, "application/xml")


def _map(mapper: IsoMapper, name: str) -> MappedDataset:
    raw = _raw((SAMPLES / f"{name}.xml").read_bytes(), f"local-{name}")
    [mapped] = mapper.map(raw, CTX)
    return mapped


def _graph(ntriples: bytes) -> rdflib.Graph:
    return rdflib.Graph().parse(data=ntriples.decode(), format="nt")


def _assert_isomorphic(got: rdflib.Graph, want: rdflib.Graph, what: str) -> None:
    if isomorphic(got, want):
        return
    _, only_got, only_want = graph_diff(to_isomorphic(got), to_isomorphic(want))
    pytest.fail(
        f"{what} differs from the golden graph:\n"
        f"only in the mapping:\n{only_got.serialize(format='nt')}\n"
        f"only in the golden file:\n{only_want.serialize(format='nt')}"
    )


def test_registered_as_iso19139() -> None:
    assert mappers.get("iso19139") is IsoMapper


@pytest.mark.parametrize("name", NAMES)
def test_golden_records(mapper: IsoMapper, name: str) -> None:
    mapped = _map(mapper, name)
    quads = list(ox.parse(path=GOLDEN / f"{name}.trig", format=ox.RdfFormat.TRIG))
    want_resource, want_record = (
        _graph(
            ox.serialize(
                (q.triple for q in quads if q.graph_name.value == f"urn:golden:{g}"),
                format=ox.RdfFormat.N_TRIPLES,
            )
            or b""
        )
        for g in ("resource", "record")
    )
    assert len(want_resource) > 50 and len(want_record) > 5
    _assert_isomorphic(_graph(mapped.ntriples), want_resource, f"{name} resource")
    _assert_isomorphic(_graph(mapped.catalog_ntriples), want_record, f"{name} catalogue record")
    assert mapped.local_id == f"local-{name}"
    # only notes: a keyword of a thesaurus no table knows stays a keyword, and says so
    assert {f.rule for f in mapped.findings} <= {"iso-keyword-not-a-concept"}
    assert all(f.severity is Severity.INFO for f in mapped.findings)


@pytest.mark.parametrize("name", NAMES)
def test_golden_records_conform_to_dcat_ap_3_and_geodcat_ap(mapper: IsoMapper, name: str) -> None:
    mapped = _map(mapper, name)
    validator = ShaclValidator(extra_shapes=[str(shapes_dir() / "geodcat-ap.ttl")])
    ranged = complete_ranges(mapped)  # as a harvest stores it: after the range step
    # the two graphs label their blank nodes apart (the store scopes them per graph)
    catalog = ranged.catalog_ntriples.replace(b"_:", b"_:record")
    report = validator.validate_ntriples(ranged.ntriples + catalog)
    violations = [f for f in report.findings if f.severity is Severity.VIOLATION]
    assert not violations, violations
    # the plain pipeline check (DCAT-AP 3 shapes on the resource graph) too
    assert ShaclValidator().validate_graph(ranged).conforms


def test_identity_datestamp_and_themes(mapper: IsoMapper) -> None:
    dataset = _map(mapper, "gemini-dataset-flood-risk")
    assert dataset.dataset_iri == DS + "4f0c6f3e-5a7b-4d0e-9b1a-2c3d4e5f6a01"
    assert dataset.datestamp is not None and dataset.datestamp.isoformat() == (
        "2024-11-28T09:30:00+00:00"
    )
    assert "http://inspire.ec.europa.eu/theme/nz" in dataset.themes
    assert "http://publications.europa.eu/resource/authority/data-theme/ENVI" in dataset.themes
    service = _map(mapper, "gemini-service-flood-wms")
    # the service's srv:operatesOn names the dataset record: its IRI is the dataset's
    assert f"<{DS}4f0c6f3e-5a7b-4d0e-9b1a-2c3d4e5f6a01>".encode() in service.ntriples
    assert b"<http://www.w3.org/ns/dcat#servesDataset>" in service.ntriples


def test_mapping_is_deterministic(mapper: IsoMapper) -> None:
    one = _map(mapper, "gemini-dataset-flood-risk")
    two = _map(IsoMapper(), "gemini-dataset-flood-risk")
    assert one.ntriples == two.ntriples and one.content_hash == two.content_hash


def test_one_parse_shared_through_the_payload(mapper: IsoMapper) -> None:
    from aggregator.mapping.payload import ParsedPayload

    payload = ParsedPayload(_raw((SAMPLES / "gemini-service-flood-wms.xml").read_bytes()))
    payload.xml()
    mapper.map_payload(payload, CTX)
    assert payload.parses == {"xml": 1}


@pytest.mark.parametrize(
    ("code", "space", "href", "want"),
    [
        ("EPSG:27700", "", "", "http://www.opengis.net/def/crs/EPSG/0/27700"),
        ("urn:ogc:def:crs:EPSG::4258", "", "", "http://www.opengis.net/def/crs/EPSG/0/4258"),
        ("ETRS89", "", "", "http://www.opengis.net/def/crs/EPSG/0/4258"),
        ("urn:ogc:def:crs:EPSG:6.18:27700", "", "", "http://www.opengis.net/def/crs/EPSG/0/27700"),
        ("4326", "EPSG", "", "http://www.opengis.net/def/crs/EPSG/0/4326"),
        ("CRS84", "OGC", "", "http://www.opengis.net/def/crs/OGC/1.3/CRS84"),
        (
            "x",
            "",
            "http://www.opengis.net/def/crs/EPSG/0/3035",
            "http://www.opengis.net/def/crs/EPSG/0/3035",
        ),
        ("OSGB36 / British National Grid", "", "", ""),
    ],
)
def test_reference_system_iris(code: str, space: str, href: str, want: str) -> None:
    assert crs_iri(code, space, href) == want


def _minimal(body: str = "", level: str = "dataset", stamp: str = "2024-01-02") -> bytes:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<gmd:MD_Metadata xmlns:gmd="http://www.isotc211.org/2005/gmd"
    xmlns:gco="http://www.isotc211.org/2005/gco">
  <gmd:fileIdentifier><gco:CharacterString>min-1</gco:CharacterString></gmd:fileIdentifier>
  <gmd:language><gmd:LanguageCode codeList="x" codeListValue="fre">French</gmd:LanguageCode>
  </gmd:language>
  <gmd:hierarchyLevel><gmd:MD_ScopeCode codeList="x" codeListValue="{level}"/></gmd:hierarchyLevel>
  <gmd:dateStamp><gco:Date>{stamp}</gco:Date></gmd:dateStamp>
  <gmd:identificationInfo><gmd:MD_DataIdentification>
    <gmd:citation><gmd:CI_Citation>
      <gmd:title><gco:CharacterString>Titre</gco:CharacterString></gmd:title>
    </gmd:CI_Citation></gmd:citation>
    <gmd:abstract><gco:CharacterString>Résumé</gco:CharacterString></gmd:abstract>
    {body}
  </gmd:MD_DataIdentification></gmd:identificationInfo>
</gmd:MD_Metadata>""".encode()


def test_minimal_record_language_tag_and_unknown_level(mapper: IsoMapper) -> None:
    [mapped] = mapper.map(_raw(_minimal(level="nonGeographicDataset")), CTX)
    text = mapped.ntriples.decode()
    assert '"Titre"@fr' in text and '"Résumé"@fr' in text
    assert "<http://www.w3.org/ns/dcat#Dataset>" in text
    [other] = mapper.map(_raw(_minimal(level="feature")), CTX)  # not in [hierarchy]: dataset
    assert "<http://www.w3.org/ns/dcat#Dataset>" in other.ntriples.decode()
    assert ShaclValidator().validate_graph(mapped).conforms
    as_text = _minimal().replace(
        b'<gmd:LanguageCode codeList="x" codeListValue="fre">French</gmd:LanguageCode>',
        b"<gco:CharacterString>fre</gco:CharacterString>",
    )
    [older] = mapper.map(_raw(as_text), CTX)  # GEMINI 2.1 wrote the language code as text
    assert b'"Titre"@fr' in older.ntriples
    degrees = _minimal(
        "<gmd:spatialResolution><gmd:MD_Resolution><gmd:distance>"
        '<gco:Distance uom="deg">0.00010</gco:Distance>'
        "</gmd:distance></gmd:MD_Resolution></gmd:spatialResolution>"
    )
    [angular] = mapper.map(_raw(degrees), CTX)
    assert b'<http://data.europa.eu/930/spatialResolutionAsText> "0.0001 deg"' in angular.ntriples
    assert b"authority/language/FRA>" in older.catalog_ntriples


def test_bad_values_are_findings_not_crashes(mapper: IsoMapper) -> None:
    body = """
    <gmd:resourceMaintenance><gmd:MD_MaintenanceInformation><gmd:maintenanceAndUpdateFrequency>
      <gmd:MD_MaintenanceFrequencyCode codeList="x" codeListValue="sometimes"/>
    </gmd:maintenanceAndUpdateFrequency></gmd:MD_MaintenanceInformation></gmd:resourceMaintenance>
    <gmd:extent><gmd:EX_Extent><gmd:geographicElement><gmd:EX_GeographicBoundingBox>
      <gmd:westBoundLongitude><gco:Decimal>400000</gco:Decimal></gmd:westBoundLongitude>
      <gmd:eastBoundLongitude><gco:Decimal>500000</gco:Decimal></gmd:eastBoundLongitude>
      <gmd:southBoundLatitude><gco:Decimal>100000</gco:Decimal></gmd:southBoundLatitude>
      <gmd:northBoundLatitude><gco:Decimal>200000</gco:Decimal></gmd:northBoundLatitude>
    </gmd:EX_GeographicBoundingBox></gmd:geographicElement></gmd:EX_Extent></gmd:extent>"""
    [mapped] = mapper.map(_raw(_minimal(body, stamp="yesterday")), CTX)
    rules = {f.rule for f in mapped.findings}
    assert rules == {"iso-code-unknown", "iso-bbox-out-of-range", "iso-metadata-date-unreadable"}
    assert all(f.severity is Severity.WARNING for f in mapped.findings)
    assert any(f.location and f.location.startswith("line ") for f in mapped.findings)
    assert b"bbox" not in mapped.ntriples and b"accrualPeriodicity" not in mapped.ntriples


def test_not_an_iso_record_is_a_parse_or_mapping_error(mapper: IsoMapper) -> None:
    csw = b"<csw:GetRecordsResponse xmlns:csw='http://www.opengis.net/cat/csw/2.0.2'/>"
    with pytest.raises(ParseError, match="csw:GetRecordsResponse holds no ISO 19139 record"):
        mapper.map(_raw(csw), CTX)
    no_ident = b"<gmd:MD_Metadata xmlns:gmd='http://www.isotc211.org/2005/gmd'/>"
    with pytest.raises(MappingError, match="identificationInfo"):
        mapper.map(_raw(no_ident), CTX)
    with pytest.raises(ParseError, match="malformed XML"):
        mapper.map(_raw(_minimal()[:-30]), CTX)


def test_hostile_xml_is_refused_before_mapping(mapper: IsoMapper) -> None:
    xxe = b"""<?xml version="1.0"?>
<!DOCTYPE gmd:MD_Metadata [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<gmd:MD_Metadata xmlns:gmd="http://www.isotc211.org/2005/gmd">&x;</gmd:MD_Metadata>"""
    with pytest.raises(UnsafeInputError, match="DOCTYPE"):
        mapper.map(_raw(xxe), CTX)


def test_every_table_row_is_documented() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "mappings" / "iso19139.md").read_text()
    doc = doc.replace("\\|", "|")  # a | inside a Markdown table cell is written \|
    table = load_table()
    for rule in table.elements:
        assert f"`{rule.path}`" in doc, f"element {rule.name!r} is missing from the docs table"
    for code in table.roles:
        assert f"`{code}`" in doc, f"role {code!r} is missing from the docs table"


def test_the_same_record_reordered_maps_to_the_same_bytes(mapper: IsoMapper) -> None:
    text = (SAMPLES / "gemini-dataset-flood-risk.xml").read_text(encoding="utf-8")
    onlines = re.findall(r"<gmd:onLine>.*?</gmd:onLine>", text, flags=re.S)
    parties = re.findall(r"<gmd:pointOfContact>.*?</gmd:pointOfContact>", text, flags=re.S)
    assert len(onlines) == 3 and len(parties) == 4
    swapped = text.replace(onlines[0], "@@0@@").replace(onlines[1], onlines[0])
    swapped = swapped.replace("@@0@@", onlines[1])
    swapped = swapped.replace(parties[2], "@@2@@").replace(parties[3], parties[2])
    swapped = swapped.replace("@@2@@", parties[3])
    assert swapped != text
    [one] = mapper.map(_raw(text.encode()), CTX)
    [two] = mapper.map(_raw(swapped.encode()), CTX)
    assert one.ntriples == two.ntriples and one.content_hash == two.content_hash
    assert b"_:b" in one.ntriples  # blank nodes named by their content


def test_cyclic_blank_nodes_fall_back_to_rdfc(mapper: IsoMapper) -> None:
    from aggregator.mapping.iso19139._xml import blank, canonical_ntriples, named

    a, b, p = blank(), blank(), named("http://example.org/p")
    out = canonical_ntriples([(a, p, b), (b, p, a)])
    assert out.count(b"_:c14n") == 4 and out.endswith(b" .\n")


def test_values_that_are_not_iris_are_skipped_not_a_crash(mapper: IsoMapper) -> None:
    text = (SAMPLES / "gemini-dataset-flood-risk.xml").read_text(encoding="utf-8")
    text = text.replace("enquiries@naturalresources.example.wales", "enquiries at nrw@x y")
    text = text.replace(
        "https://datamap.example.gov.wales/downloads/fraw-flood-zones.gml.zip",
        "https://datamap.example.gov.wales/downloads/100%zz.zip",
    )
    text = text.replace(
        'xlink:href="http://www.eionet.europa.eu/gemet/concept/3311"',
        'xlink:href="http://www.eionet.europa.eu/gemet/concept/33 11"',
    )
    [mapped] = mapper.map(_raw(text.encode()), CTX)
    assert b"enquiries at" not in mapped.ntriples and b"%zz" not in mapped.ntriples
    # the GEMET keyword whose link is no IRI stays a keyword (DCAT-AP 3: a theme is an IRI)
    assert {f.rule for f in mapped.findings} == {"iso-link-not-url", "iso-keyword-not-a-concept"}
    assert b'<http://www.w3.org/ns/dcat#keyword> "flood"@en' in mapped.ntriples
    assert ShaclValidator().validate_graph(mapped).conforms
