"""The mdr and ogc-records mappings against the official DCAT-AP 3.0.1 Base + Range shapes (read
from ../shared/reference where it is; skipped with the reason otherwise): every sample page and
record of the demo peers conforms, and the exact triples of each class of fix."""

from __future__ import annotations

import json
from typing import Any

import pytest
from lxml import etree
from official_shapes import official_violations
from pyoxigraph import NamedNode, RdfFormat, Triple, parse

from aggregator.core.models import MappedDataset, RawRecord, Severity
from aggregator.demo.peers.mdr_messages import page_element
from aggregator.demo.peers.mdr_pages import generate_page, load_sample_pages
from aggregator.demo.peers.ogc_records_data import generate_record, load_bundled_records
from aggregator.mapping.base import MappingContext
from aggregator.mapping.mdr import MdrMapper
from aggregator.mapping.ogc_records import OgcRecordsMapper

CTX = MappingContext("http://127.0.0.1:8000/", "portal")
DCAT = "http://www.w3.org/ns/dcat#"
DCT = "http://purl.org/dc/terms/"
FOAF = "http://xmlns.com/foaf/0.1/"
SKOS = "http://www.w3.org/2004/02/skos/core#"
VCARD = "http://www.w3.org/2006/vcard/ns#"
A = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")


def triples(ds: MappedDataset) -> list[Triple]:
    return [q.triple for q in parse(ds.ntriples, RdfFormat.N_TRIPLES)]


def mdr(payload: bytes, url: str) -> MappedDataset:
    raw = RawRecord("portal", url, "mdr", payload, "application/xml", url=url)
    [ds] = MdrMapper().map(raw, CTX)
    return ds


def ogc(feature: Any) -> MappedDataset:
    raw = RawRecord("portal", "r", "ogc-records", json.dumps(feature).encode(), "application/json")
    [ds] = OgcRecordsMapper().map(raw, CTX)
    return ds


def mdr_pages() -> list[Any]:
    pages = load_sample_pages()
    return [*pages, generate_page(7, pages[0].published)]


@pytest.mark.parametrize("page", mdr_pages(), ids=lambda p: p.identifier.rsplit("/", 1)[-1])
def test_every_mdr_page_conforms_to_the_official_shapes(page: Any) -> None:
    ds = mdr(etree.tostring(page_element(page)), page.identifier)
    assert official_violations(ds.ntriples) == []


def test_what_the_mdr_mapping_creates_carries_its_range_class() -> None:
    page = load_sample_pages()[0]
    ds = mdr(etree.tostring(page_element(page)), page.identifier)
    ts = triples(ds)
    subject = NamedNode(ds.dataset_iri)

    def classes(p: str) -> list[set[str]]:
        return [
            {t.object.value for t in ts if t.subject == o and t.predicate == A}
            for o in (t.object for t in ts if t.subject == subject and t.predicate.value == p)
        ]

    assert all(
        {VCARD + "Kind", VCARD + "Organization"} <= c for c in classes(DCAT + "contactPoint")
    )
    assert classes(DCAT + "contactPoint")
    for role in ("creator", "publisher"):
        assert all({FOAF + "Agent", FOAF + "Organization"} <= c for c in classes(DCT + role))
    assert classes(DCAT + "landingPage") == [{FOAF + "Document"}]
    assert classes(DCT + "language") == [{DCT + "LinguisticSystem"}]
    assert classes(DCAT + "theme") and all(c == {SKOS + "Concept"} for c in classes(DCAT + "theme"))
    kind = NamedNode("http://purl.org/adms/publishertype/RegionalAuthority")
    assert Triple(kind, A, NamedNode(SKOS + "Concept")) in ts
    assert [t.object.value for t in ts if t.subject == kind and t.predicate.value != A.value] == [
        "Regional authority"
    ]
    [dist] = [t.object for t in ts if t.predicate.value == DCAT + "distribution"]
    [media] = [
        t.object for t in ts if t.subject == dist and t.predicate.value == DCAT + "mediaType"
    ]
    assert media.value.startswith("https://www.iana.org/assignments/media-types/")
    assert Triple(media, A, NamedNode(DCT + "MediaType")) in ts  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "feature",
    [*load_bundled_records(), generate_record(3)],
    ids=lambda f: str(f["id"]).rsplit(":", 1)[-1],
)
def test_every_ogc_record_conforms_to_the_official_shapes(feature: Any) -> None:
    assert official_violations(ogc(feature).ntriples) == []


def test_an_ogc_concept_without_a_url_is_a_keyword_and_a_subject_not_a_theme() -> None:
    feature = {
        "id": "urn:x:soil",
        "type": "Feature",
        "geometry": None,
        "properties": {
            "title": "Soil moisture",
            "description": "Daily soil moisture index.",
            "language": "en",
            "themes": [
                {
                    "scheme": "http://inspire.ec.europa.eu/metadata-codelist/TopicCategory",
                    "concepts": [{"id": "farming", "title": "Farming"}],
                },
                {
                    "scheme": "http://inspire.ec.europa.eu/theme",
                    "concepts": [
                        {"id": "so", "title": "Soil", "url": "http://inspire.ec.europa.eu/theme/so"}
                    ],
                },
            ],
        },
        "links": [],
    }
    ds = ogc(feature)
    ts = triples(ds)
    subject = NamedNode(ds.dataset_iri)
    soil = NamedNode("http://inspire.ec.europa.eu/theme/so")
    assert [
        t.object for t in ts if t.subject == subject and t.predicate.value == DCAT + "theme"
    ] == [soil]
    assert Triple(soil, A, NamedNode(SKOS + "Concept")) in ts
    [concept] = [
        t.object for t in ts if t.subject == subject and t.predicate.value == DCT + "subject"
    ]
    assert {(t.predicate.value, str(t.object)) for t in ts if t.subject == concept} == {
        (A.value, f"<{SKOS}Concept>"),
        (SKOS + "prefLabel", '"Farming"'),
        (SKOS + "notation", '"farming"'),
        (SKOS + "inScheme", "<http://inspire.ec.europa.eu/metadata-codelist/TopicCategory>"),
    }
    keywords = {str(t.object) for t in ts if t.predicate.value == DCAT + "keyword"}
    assert '"Farming"@en' in keywords
    [note] = [f for f in ds.findings if f.rule == "ogc-theme-without-iri"]
    assert note.severity is Severity.INFO and "Farming" in note.message
    assert official_violations(ds.ntriples) == []
