"""The ckan and ogc-records mappers: golden graphs (compared by isomorphism), every field of
the data.europa.eu CKAN tables, plain CKAN fields, multilingual values, bad input, and SHACL
conformance of every bundled and generated sample."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import rdflib
from rdflib.compare import isomorphic

from aggregator.core.errors import MappingError
from aggregator.core.models import MappedDataset, RawRecord
from aggregator.demo.peers.ckan_data import generate_package, load_bundled_packages
from aggregator.demo.peers.ogc_records_data import generate_record, load_bundled_records
from aggregator.mapping.base import MappingContext
from aggregator.mapping.ckan import CkanMapper, load_table
from aggregator.mapping.ogc_records import OgcRecordsMapper
from aggregator.mapping.ranges import complete_ranges
from aggregator.validate.shacl import ShaclValidator

DATA = Path(__file__).parent / "data" / "json_mappers"
CTX = MappingContext("http://example.org/", "src")
DCAT = "http://www.w3.org/ns/dcat#"
DCT = "http://purl.org/dc/terms/"


def ckan(package: dict[str, Any]) -> MappedDataset:
    raw = RawRecord(
        "src", str(package.get("id")), "ckan", json.dumps(package).encode(), "application/json"
    )
    (mapped,) = CkanMapper().map(raw, CTX)
    return mapped


def ogc(feature: Any) -> MappedDataset:
    raw = RawRecord("src", "r", "ogc-records", json.dumps(feature).encode(), "application/geo+json")
    (mapped,) = OgcRecordsMapper().map(raw, CTX)
    return mapped


def graph(mapped: MappedDataset) -> rdflib.Graph:
    return rdflib.Graph().parse(data=mapped.ntriples.decode(), format="nt")


def values(mapped: MappedDataset, subject: str, predicate: str) -> set[str]:
    g = graph(mapped)
    return {str(o) for o in g.objects(rdflib.URIRef(subject), rdflib.URIRef(predicate))}


def bundled(package_id_prefix: str) -> dict[str, Any]:
    return next(p for p in load_bundled_packages() if p["id"].startswith(package_id_prefix))


def test_the_spec_example_maps_to_the_golden_graph() -> None:
    mapped = ckan(bundled("525abe30"))
    expected = rdflib.Graph().parse(DATA / "ckan-spec-example.ttl")
    assert isomorphic(graph(mapped), expected), graph(mapped).serialize(format="turtle")
    assert mapped.themes == ("http://publications.europa.eu/resource/authority/data-theme/ECON",)


def test_an_ogc_record_maps_to_the_golden_graph() -> None:
    feature = next(f for f in load_bundled_records() if f["id"].endswith("bus-stops"))
    mapped = ogc(feature)
    expected = rdflib.Graph().parse(DATA / "ogc-bus-stops.ttl")
    assert isomorphic(graph(mapped), expected), graph(mapped).serialize(format="turtle")


EXTENDED = {  # every field of the data.europa.eu dataset table -> the property it must give
    "title": DCT + "title",
    "notes": DCT + "description",
    "contact_point": DCAT + "contactPoint",
    "tags": DCAT + "keyword",
    "publisher": DCT + "publisher",
    "groups": DCAT + "theme",
    "resources": DCAT + "distribution",
    "conforms_to": DCT + "conformsTo",
    "creator": DCT + "creator",
    "accrual_periodicity": DCT + "accrualPeriodicity",
    "identifier": DCT + "identifier",
    "url": DCAT + "landingPage",
    "language": DCT + "language",
    "other_identifier": "http://www.w3.org/ns/adms#identifier",
    "issued": DCT + "issued",
    "dcat_spatial": DCT + "spatial",
    "temporal": DCT + "temporal",
    "modified": DCT + "modified",
    "version_info": DCAT + "version",  # owl:versionInfo, renamed by the DCAT 3 rule
    "version_notes": "http://www.w3.org/ns/adms#versionNotes",
    "provenance": DCT + "provenance",
    "source": "http://www.w3.org/ns/prov#wasDerivedFrom",  # a link no record describes
    "access_rights": DCT + "accessRights",
    "has_version": DCAT + "hasVersion",  # dct:hasVersion, renamed by the DCAT 3 rule
    "is_version_of": DCAT + "isVersionOf",
    "relation": DCT + "relation",
    "page": "http://xmlns.com/foaf/0.1/page",
    "sample": "http://www.w3.org/ns/adms#sample",
    "dct_type": DCT + "type",
}
EXTENDED_DISTRIBUTION = {
    "url": DCAT + "accessURL",
    "description": DCT + "description",
    "format": DCT + "format",
    "license": DCT + "license",
    "checksum": "http://spdx.org/rdf/terms#checksum",
    "mimetype": DCAT + "mediaType",
    "download_url": DCAT + "downloadURL",
    "issued": DCT + "issued",
    "status": "http://www.w3.org/ns/adms#status",
    "name": DCT + "title",
    "modified": DCT + "modified",
    "rights": DCT + "rights",
    "page": "http://xmlns.com/foaf/0.1/page",
    "size": DCAT + "byteSize",
    "language": DCT + "language",
    "conforms_to": DCT + "conformsTo",
}


def test_every_field_of_the_extended_schema_is_mapped() -> None:
    package = bundled("4f1b9a8e")
    assert set(EXTENDED) <= set(package) and set(EXTENDED_DISTRIBUTION) <= set(
        package["resources"][0]
    )
    mapped = ckan(package)
    iri = mapped.dataset_iri
    g = graph(mapped)
    for field, prop in EXTENDED.items():
        assert list(g.objects(rdflib.URIRef(iri), rdflib.URIRef(prop))), field
    (first,) = [
        d
        for d in g.objects(rdflib.URIRef(iri), rdflib.URIRef(DCAT + "distribution"))
        if (d, rdflib.URIRef(DCAT + "downloadURL"), None) in g
    ]
    for field, prop in EXTENDED_DISTRIBUTION.items():
        assert list(g.objects(first, rdflib.URIRef(prop))), f"resources.{field}"
    eu = "http://publications.europa.eu/resource/authority/"
    assert values(mapped, iri, DCT + "accrualPeriodicity") == {eu + "frequency/ANNUAL"}
    assert values(mapped, iri, DCT + "language") == {eu + "language/ENG", eu + "language/FRA"}
    assert eu + "licence/CC_BY_4_0" in {
        str(o) for o in g.objects(first, rdflib.URIRef(DCT + "license"))
    }


def test_plain_ckan_fields_extras_organization_and_licence() -> None:
    mapped = ckan(bundled("b3c1e0a4"))
    iri = mapped.dataset_iri
    g = graph(mapped)
    eu = "http://publications.europa.eu/resource/authority/"
    # organization as publisher (no publisher given)
    (publisher,) = g.objects(rdflib.URIRef(iri), rdflib.URIRef(DCT + "publisher"))
    assert str(g.value(publisher, rdflib.URIRef("http://xmlns.com/foaf/0.1/name"))) == (
        "City of Example, Mobility Department"
    )
    # author -> creator, maintainer -> contact point, version -> dcat:version
    assert values(mapped, iri, DCAT + "version") == {"2.1"}
    assert len(values(mapped, iri, DCT + "creator")) == 1
    assert len(values(mapped, iri, DCAT + "contactPoint")) == 1
    # extras: frequency, spatial_uri, theme, language; an unknown extra is reported
    assert values(mapped, iri, DCT + "spatial") == {eu + "place/BEL_BRU"}
    assert eu + "data-theme/TRAN" in values(mapped, iri, DCAT + "theme")
    assert values(mapped, iri, DCT + "language") == {eu + "language/ENG"}
    assert any("extras.source_system" in f.message for f in mapped.findings)
    # license_id cc-by -> the EU licence on every resource; unknown format kept as text
    licences = {str(o) for d in g.objects(rdflib.URIRef(iri), rdflib.URIRef(DCAT + "distribution"))
                for o in g.objects(d, rdflib.URIRef(DCT + "license"))}  # fmt: skip
    assert licences == {eu + "licence/CC_BY_4_0"}
    assert "Shapefile (zipped)" in mapped.ntriples.decode()
    # resource created / last_modified -> issued / modified, size typed
    text = mapped.ntriples.decode()
    assert '"2024-02-01T08:05:00.000000Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>' in text
    assert '"1843200"^^<http://www.w3.org/2001/XMLSchema#nonNegativeInteger>' in text


def test_multilingual_values_keep_their_language_tags() -> None:
    mapped = ckan(bundled("7e2d4c6a"))
    text = mapped.ntriples.decode()
    for literal in (
        '"Schülerzahlen nach Gemeinde"@de',
        '"Effectifs scolaires par commune"@fr',
        '"School enrolment by municipality"@en',
        '"Schulen"@de',
        '"élèves"@fr',
        '"Tabelle der Schülerzahlen"@de',
    ):
        assert literal in text, literal
    assert '"School enrolment by municipality" .' not in text  # the plain copy adds nothing
    eu = "http://publications.europa.eu/resource/authority/"
    assert f"<{eu}licence/ODC_ODBL>" in text and f"<{eu}frequency/ANNUAL>" in text
    assert "Some local licence v2" in text  # unrecognised: kept as a licence document


def test_bad_packages_are_mapping_errors() -> None:
    with pytest.raises(MappingError, match="no title"):
        ckan({"id": "x", "notes": "no title"})
    with pytest.raises(MappingError, match="no id"):
        ckan({"title": "t"})
    raw = RawRecord("src", "a", "ckan", b"[1, 2]", "application/json")
    with pytest.raises(MappingError, match="not a CKAN package"):
        CkanMapper().map(raw, CTX)
    raw = RawRecord("src", "a", "ckan", b"{broken", "application/json")
    with pytest.raises(Exception, match="malformed JSON"):
        CkanMapper().map(raw, CTX)


def test_a_package_show_answer_is_unwrapped() -> None:
    package = generate_package(1)
    raw = RawRecord(
        "src",
        "p",
        "ckan",
        json.dumps({"success": True, "result": package}).encode(),
        "application/json",
    )
    (mapped,) = CkanMapper().map(raw, CTX)
    assert mapped.ntriples == ckan(package).ntriples


def test_bad_records_are_mapping_errors() -> None:
    with pytest.raises(MappingError, match="no id"):
        ogc({"type": "Feature", "properties": {"title": "t"}})
    with pytest.raises(MappingError, match="not an object"):
        ogc({"id": "a", "type": "Feature", "properties": "broken"})
    with pytest.raises(MappingError, match="no title"):
        ogc({"id": "a", "type": "Feature", "properties": {}})


def test_ogc_record_extent_themes_contacts_and_links() -> None:
    feature = next(f for f in load_bundled_records() if "soil" in f["id"])
    mapped = ogc(feature)
    text = mapped.ntriples.decode()
    assert '"POLYGON((5.8 47.2, 15.1 47.2, 15.1 55.1, 5.8 55.1, 5.8 47.2))"' in text
    assert '"2023-12-31T23:59:59Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>' in text
    assert "<http://inspire.ec.europa.eu/theme/so>" in text and '"farming"' in text
    assert "<mailto:soil-data@fsi.example.org>" in text and "<tel:+49301234567>" in text
    assert "<https://fsi.example.org/data/soil-moisture-2023>" in text  # landing page
    assert "licence/CC_BY_4_0>" in text and '"10.0000/fsi.sm.2023"' in text
    budget = ogc(next(f for f in load_bundled_records() if "budget" in f["id"]))
    assert '"2024-01-01T00:00:00Z"' in budget.ntriples.decode()  # extent.temporal


def test_the_ckan_table_names_real_kinds_and_every_field_is_documented() -> None:
    table = load_table()
    page = (Path(__file__).parent.parent / "docs" / "mappings" / "ckan.md").read_text()
    for row in (*table.dataset, *table.distribution):
        assert f"`{row.field}`" in page, row.field
    for key in table.extras:
        assert f"`{key}`" in page, key


@pytest.mark.parametrize(
    "mapped",
    [
        *(ckan(p) for p in load_bundled_packages()),
        *(ckan(generate_package(i)) for i in range(12)),
        *(ogc(f) for f in load_bundled_records()),
        *(ogc(generate_record(i)) for i in range(10)),
    ],
    ids=lambda m: m.dataset_iri.rsplit("/", 1)[-1][:16],
)
def test_every_sample_is_shacl_conformant(mapped: MappedDataset) -> None:
    report = ShaclValidator().validate_graph(complete_ranges(mapped))  # as a harvest stores it
    violations = {(f.location, f.path) for f in report.findings if f.severity.value == "violation"}
    # (the water-bodies package's EU dataset-type term gets its label from the bundled table)
    assert report.conforms, violations
