"""Golden mappings of realistic META-SHARE v3.0 descriptions, one per resource type, compared
by graph isomorphism, and each conformant to the DCAT-AP 3 SHACL shapes (ours, and the official
DCAT-AP 3.0.1 Base + Range shapes where ../shared/reference has them). The goldens are what a
harvest stores: the mapping and the steps after it (the source's publisher)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import rdflib
from official_shapes import official_violations
from rdflib.compare import graph_diff, isomorphic

from aggregator.core.errors import MappingError
from aggregator.core.models import RawRecord, Severity
from aggregator.demo.peers.metashare import SAMPLES, ascii_xml, sample_xml, storage_id
from aggregator.jobs.processing import process
from aggregator.mapping.base import MappingContext
from aggregator.mapping.metashare import MetaShareMapper, node_url
from aggregator.mapping.payload import ParsedPayload
from aggregator.mapping.ranges import complete_ranges
from aggregator.validate.metashare import MetaShareStructureValidator
from aggregator.validate.shacl import ShaclValidator

GOLDEN = Path(__file__).parent / "data" / "meta-share"
CTX = MappingContext("http://agg.example/", "elra", "ELRA")
WHEN = datetime(2013, 2, 1, 9, 30, tzinfo=UTC)


def raw_of(n: int, xml: bytes, when: datetime | None = WHEN) -> RawRecord:
    lr = storage_id(n)
    return RawRecord(
        "elra", lr, "meta-share", xml, "application/xml",
        url=f"https://metashare.elda.org/sync/{lr}/metadata/", datestamp=when,
    )  # fmt: skip


@pytest.mark.parametrize(("n", "name"), list(enumerate(SAMPLES)))
def test_each_resource_type_maps_to_its_golden_graph_and_conforms(n: int, name: str) -> None:
    raw = raw_of(n, ascii_xml(sample_xml(name)))
    assert not MetaShareStructureValidator().validate_payload(ParsedPayload(raw)).findings
    [checked] = process(raw, CTX, []).checked
    ds = checked.dataset
    assert ds.local_id == storage_id(n)
    assert ds.dataset_iri == f"http://agg.example/dataset/elra/{storage_id(n)}"
    got = rdflib.Graph().parse(data=ds.ntriples.decode(), format="nt")
    want = rdflib.Graph().parse(GOLDEN / f"{name}.ttl", format="turtle")
    if not isomorphic(got, want):
        _, only_got, only_want = graph_diff(got, want)
        pytest.fail(
            f"mapped graph differs from {name}.ttl\nonly mapped:\n"
            f"{only_got.serialize(format='nt')}\nonly golden:\n{only_want.serialize(format='nt')}"
        )
    report = ShaclValidator().validate_graph(complete_ranges(ds))  # as a harvest stores it
    violations = [f for f in report.findings if f.severity is Severity.VIOLATION]
    assert not violations, violations
    assert not [f for f in ds.findings if f.severity is not Severity.INFO]
    assert not official_violations(ds.ntriples)


def test_the_ascii_and_the_utf8_forms_map_alike() -> None:
    utf8 = MetaShareMapper().map(raw_of(0, sample_xml("corpus")), CTX)[0]
    ascii_ = MetaShareMapper().map(raw_of(0, ascii_xml(sample_xml("corpus"))), CTX)[0]
    assert utf8.content_hash == ascii_.content_hash


def test_a_tool_without_an_execution_location_is_a_dataset() -> None:
    xml = sample_xml("tool-service").replace(
        b"<executionLocation>http://nlp.ilsp.gr/ws/tagger</executionLocation>",
        b"<downloadLocation>http://nlp.ilsp.gr/tagger.tgz</downloadLocation>",
    )
    [ds] = MetaShareMapper().map(raw_of(3, xml), CTX)
    assert b"<http://www.w3.org/ns/dcat#Dataset>" in ds.ntriples
    assert b"<http://www.w3.org/ns/dcat#downloadURL> <http://nlp.ilsp.gr/tagger.tgz>" in ds.ntriples
    assert not [f for f in ShaclValidator().validate_graph(complete_ranges(ds)).findings
                if f.severity is Severity.VIOLATION]  # fmt: skip


def test_without_the_node_date_the_metadata_date_is_the_modification_date() -> None:
    [ds] = MetaShareMapper().map(raw_of(0, sample_xml("corpus"), when=None), CTX)
    modified = (
        b'<http://purl.org/dc/terms/modified> "2012-11-02"^^<http://www.w3.org/2001/XMLSchema#date>'
    )
    assert modified in ds.ntriples


def test_odd_values_are_left_out_with_warnings() -> None:
    xml = sample_xml("grammar").replace(
        b"<languageId>mt</languageId>", b"<languageId>x-klingon</languageId>"
    )
    xml = xml.replace(b"<url>http://www.molto-project.eu</url>", b"<url>molto dot eu</url>")
    [ds] = MetaShareMapper().map(raw_of(2, xml), CTX)
    rules = {f.rule for f in ds.findings}
    assert rules == {"unknownLanguage", "notAnIri"}
    assert all(f.severity is Severity.WARNING and f.location for f in ds.findings)


def test_another_root_is_a_mapping_error() -> None:
    with pytest.raises(MappingError, match="resourceInfo"):
        MetaShareMapper().map(raw_of(0, b"<resourceInfo/>"), CTX)


def test_relations_to_storage_ids_point_at_our_iri_for_that_lr() -> None:
    other = storage_id(7)
    xml = sample_xml("corpus").replace(
        b"Hellenic Parliament Proceedings Corpus 1.0</targetResourceNameURI>",
        other.encode() + b"</targetResourceNameURI>",
    )
    [ds] = MetaShareMapper().map(raw_of(0, xml), CTX)
    # dct:hasVersion demands a dcat:Dataset described here (DCAT-AP 3.0.1): a dct:relation
    assert (
        f"<http://purl.org/dc/terms/relation> <http://agg.example/dataset/elra/{other}>".encode()
        in ds.ntriples
    )
    assert b"/hasVersion>" not in ds.ntriples
    [note] = [f for f in ds.findings if f.rule == "ms-relation-generalised"]
    assert note.severity is Severity.INFO and other in note.message


def test_the_node_url_comes_from_the_record_url() -> None:
    lr = storage_id(1)
    assert node_url(f"https://n.example/ms/sync/{lr}/metadata/") == "https://n.example/ms"
    assert node_url("https://n.example/other") is None


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ((b"<sizeInfo>", b"<sizeInfoX>"), "ms-size"),
        ((b"<languageId>el</languageId>", b""), "ms-language"),
        ((b'<resourceName lang="en">', b"<resourceName>"), "ms-lang"),
        (
            (b"<metadataCreationDate>2012-05-21", b"<metadataCreationDate>21.5.2012"),
            "ms-creation-date",
        ),
        ((b"<availability>available-unrestrictedUse", b"<availability>yes"), "ms-availability"),
        ((b"<resourceType>corpus", b"<resourceType>toolService"), "ms-corpus-type"),
    ],
)
def test_the_structure_rules_name_what_is_missing(change: tuple[bytes, bytes], rule: str) -> None:
    xml = sample_xml("corpus")
    if change[0] == b"<sizeInfo>":  # every sizeInfo goes
        xml = xml.replace(b"<sizeInfo>", b"<sizeInfoX>").replace(b"</sizeInfo>", b"</sizeInfoX>")
    else:
        xml = xml.replace(*change)
    report = MetaShareStructureValidator().validate_payload(ParsedPayload(raw_of(0, xml)))
    assert rule in {f.rule for f in report.findings}, report.findings
    assert not report.conforms


def test_another_document_element_fails_the_structure_rules() -> None:
    xml = b'<resourceInfo xmlns="urn:other"><identificationInfo/></resourceInfo>'
    report = MetaShareStructureValidator().validate_payload(ParsedPayload(raw_of(0, xml)))
    assert "ms-root" in {f.rule for f in report.findings}
