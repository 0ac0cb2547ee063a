"""The mdr mapper: golden N-Triples for realistic pages, every mapped page SHACL-conformant
(both engines), and the rules of mappings/mdr.toml one by one."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

from aggregator.core.models import MappedDataset, RawRecord, Severity
from aggregator.demo.peers.mdr_messages import page_element
from aggregator.demo.peers.mdr_pages import generate_page, load_sample_pages
from aggregator.mapping.base import MappingContext
from aggregator.mapping.mdr import MdrMapper, period_bounds
from aggregator.mapping.ranges import complete_ranges
from aggregator.validate.shacl import ShaclValidator

DATA = Path(__file__).parent / "data" / "mdr"
CTX = MappingContext(base_iri="http://127.0.0.1:8000/", source="portal")
GOLDEN = ["crop-insurance-scheme", "right-to-services-act", "hospitals"]


def mapped(payload: bytes, url: str = "https://portal.example.gov.in/x.html") -> MappedDataset:
    raw = RawRecord(
        source="portal",
        local_id=url,
        format="mdr",
        payload=payload,
        media_type="application/xml",
        url=url,
    )
    [dataset] = MdrMapper().map(raw, CTX)
    return dataset


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_pages(name: str) -> None:
    payload = (DATA / f"{name}.xml").read_bytes()
    dataset = mapped(payload)
    assert dataset.ntriples == (DATA / f"{name}.nt").read_bytes()


@pytest.mark.parametrize("engine", ["shacl", "pyshacl"])
def test_every_sample_page_conforms(engine: str) -> None:
    validator = ShaclValidator(engine=engine)
    pages = [*load_sample_pages(), generate_page(7, load_sample_pages()[0].published)]
    for page in pages:
        dataset = mapped(etree.tostring(page_element(page)), page.identifier)
        report = validator.validate_graph(complete_ranges(dataset))  # as a harvest stores it
        violations = [f for f in report.findings if f.severity is Severity.VIOLATION]
        assert violations == [], (page.identifier, violations)


def test_the_rules_one_by_one() -> None:
    text = (DATA / "crop-insurance-scheme.nt").read_text()
    page = "https://portal.example.gov.in/agriculture/crop-insurance-scheme.html"
    dcat, dct = "http://www.w3.org/ns/dcat#", "http://purl.org/dc/terms/"
    expected = [
        f"<{dcat}landingPage> <{page}>",
        f"<{dcat}accessURL> <{page}>",
        f'<{dct}title> "Crop Insurance Scheme"@en',
        f'<{dct}alternative> "PMFBY State Guidelines"@en',
        *(f'<{dcat}keyword> "{k}"@en' for k in ("crop insurance", "kharif", "rabi", "farmers")),
        f"<{dcat}theme> <http://publications.europa.eu/resource/authority/data-theme/AGRI>",
        f"<{dcat}theme> <http://publications.europa.eu/resource/authority/data-theme/SOCI>",
        '<http://xmlns.com/foaf/0.1/name> "Department of Agriculture"',
        '<http://xmlns.com/foaf/0.1/name> "Directorate of Agriculture"',
        "<http://www.w3.org/2006/vcard/ns#hasEmail> <mailto:agri-web@example.gov.in>",
        "<http://www.w3.org/2006/vcard/ns#hasValue> <tel:+91-40-23450000>",
        '<http://www.w3.org/2006/vcard/ns#street-address> "Secretariat, Block 4, Hyderabad',
        '<http://www.w3.org/ns/locn#geographicName> "Andhra Pradesh"',
        f'<{dcat}startDate> "2025"^^<http://www.w3.org/2001/XMLSchema#gYear>',
        '<http://www.w3.org/2000/01/rdf-schema#label> "State of Andhra Pradesh"',
        f'<{dct}issued> "2026-01-05T06:30:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>',
        f'<{dct}created> "2025-12-20T00:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>',
        f"<{dct}language> <http://publications.europa.eu/resource/authority/language/ENG>",
        f"<{dct}format> <http://publications.europa.eu/resource/authority/file-type/HTML>",
        f"<{dcat}mediaType> <https://www.iana.org/assignments/media-types/text/html>",
        f"<{dct}type> <http://127.0.0.1:8000/resource-type/portal/SERVICES>",
        f"<{dct}relation> <https://portal.example.gov.in/forms/crop-insurance.pdf>",
        '<http://purl.org/dc/elements/1.1/source> "Crop Insurance Guidelines 2025"',
    ]
    for line in expected:
        assert line in text, line
    hindi = (DATA / "right-to-services-act.nt").read_text()
    assert '"Right to Services Act, 2024"@hi' in hindi
    assert f'<{dcat}startDate> "2024-04-01"^^<http://www.w3.org/2001/XMLSchema#date>' in hindi


def test_unmapped_classifications_become_keywords_and_text_relations_are_kept() -> None:
    page = load_sample_pages()[1]
    page.metadata["subjectClasification"] = ["Health", "Rural Folk"]
    page.metadata["relation"] = ["see the hospitals register"]
    text = mapped(etree.tostring(page_element(page)), page.identifier).ntriples.decode()
    assert '<http://www.w3.org/ns/dcat#keyword> "Rural Folk"@en' in text
    assert '<http://www.w3.org/2000/01/rdf-schema#seeAlso> "see the hospitals register"' in text
    assert "http://purl.org/dc/terms/relation" not in text


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("2025-2026", "2025", "2026"),
        ("2024", "2024", "2024"),
        ("from 2024-04-01", "2024-04-01", None),
        ("2024-04-01 to 2025-03-31", "2024-04-01", "2025-03-31"),
        ("the monsoon season", None, None),
    ],
)
def test_temporal_coverage_bounds(text: str, start: str | None, end: str | None) -> None:
    got = period_bounds(text)
    assert (got[0].value if got[0] else None, got[1].value if got[1] else None) == (start, end)
