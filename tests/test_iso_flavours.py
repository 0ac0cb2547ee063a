"""Every ISO flavour in use: ``gmd:MD_Metadata`` and ``gmi:MI_Metadata`` (ISO 19115-2), bare or
inside a CSW ``GetRecordByIdResponse`` / ``GetRecordsResponse``, in the iso19139 mapper,
``aggregator map`` and ``aggregator validate``, and the iso19139-xsd step on gmi records.

The harvests through local peers (WAF, single document, CSW) are in
tests/test_harvest_iso_flavours.py.

Golden records (tests/data/iso/, our own): ``gmi-noaa-sst-daily.xml`` (a NOAA-style 19115-2
record with acquisition information), ``csw-getrecordbyid-flood-risk.xml`` (a GetRecordById
answer wrapping the demo GEMINI dataset record) and ``csw-getrecords-two.xml`` (a GetRecords
answer wrapping the demo GEMINI series record and the gmi record). What an envelope maps to is
exactly what its records map to when bare.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from lxml import etree
from pyoxigraph import Literal, NamedNode, RdfFormat, parse

from aggregator.cli import main
from aggregator.core.errors import ParseError
from aggregator.core.models import MappedDataset, RawRecord, Severity
from aggregator.mapping.base import MappingContext
from aggregator.mapping.iso19139 import IsoMapper
from aggregator.mapping.payload import ParsedPayload
from aggregator.validate.iso_xsd import Iso19139XsdValidator, schema_root

DATA = Path(__file__).parent / "data" / "iso"
DEMO = Path(__file__).parents[1] / "aggregator" / "demo" / "peers" / "data" / "iso"
GMI_RECORD = DATA / "gmi-noaa-sst-daily.xml"
BY_ID = DATA / "csw-getrecordbyid-flood-risk.xml"
TWO = DATA / "csw-getrecords-two.xml"
DATASET = DEMO / "gemini-dataset-flood-risk.xml"
SERIES = DEMO / "gemini-series-aerial-photography.xml"
GMI_ID = "org.example.ocean:SST-L3C-DAILY-v2"
CTX = MappingContext("http://127.0.0.1:8000/", "iso")
MAP_CTX = MappingContext("http://localhost:8000/", "file")  # what `aggregator map` mints
GMD = "http://www.isotc211.org/2005/gmd"
GMI = "http://www.isotc211.org/2005/gmi"
DCAT = "http://www.w3.org/ns/dcat#"
DCT = "http://purl.org/dc/terms/"
RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
ISO = Path("plugins", "profiles", "apiso", "schemas", "ogc", "iso", "19139")
EXCEPTION = (
    b'<ows:ExceptionReport xmlns:ows="http://www.opengis.net/ows" version="1.2.0">'
    b'<ows:Exception exceptionCode="InvalidParameterValue" locator="Id">'
    b"<ows:ExceptionText>No record with id abc-123</ows:ExceptionText>"
    b"</ows:Exception></ows:ExceptionReport>"
)
DUBLIN_CORE = (
    b'<csw:GetRecordsResponse xmlns:csw="http://www.opengis.net/cat/csw/2.0.2"'
    b' xmlns:dc="http://purl.org/dc/elements/1.1/"><csw:SearchStatus/>'
    b'<csw:SearchResults numberOfRecordsMatched="2" numberOfRecordsReturned="2">'
    b"<csw:Record><dc:identifier>a</dc:identifier></csw:Record>"
    b"<csw:Record><dc:identifier>b</dc:identifier></csw:Record>"
    b"</csw:SearchResults></csw:GetRecordsResponse>"
)
EMPTY_BY_ID = b'<csw:GetRecordByIdResponse xmlns:csw="http://www.opengis.net/cat/csw/2.0.2"/>'


@pytest.fixture(scope="module")
def mapper() -> IsoMapper:
    return IsoMapper()


def raw(payload: bytes, local_id: str = "doc.xml") -> RawRecord:
    return RawRecord("iso", local_id, "iso19139", payload, "application/xml")


def mapped(mapper: IsoMapper, path: Path) -> list[MappedDataset]:
    return mapper.map(raw(path.read_bytes(), path.name), CTX)


def as_md_metadata(document: bytes) -> bytes:
    """The gmi record's gmd twin: root gmd:MD_Metadata, no gmi:acquisitionInformation."""
    root = etree.fromstring(document)
    for extra in root.findall(f"{{{GMI}}}acquisitionInformation"):
        root.remove(extra)
    root.tag = f"{{{GMD}}}MD_Metadata"
    return etree.tostring(root)


def same_mapping(a: MappedDataset, b: MappedDataset) -> None:
    assert a.dataset_iri == b.dataset_iri
    assert a.ntriples == b.ntriples
    assert a.catalog_ntriples == b.catalog_ntriples
    assert a.datestamp == b.datestamp
    assert [f.rule for f in a.findings] == [f.rule for f in b.findings]


# -- the mapper -----------------------------------------------------------------------------------
def test_a_gmi_record_maps_as_its_gmd_twin(mapper: IsoMapper) -> None:
    [gmi] = mapped(mapper, GMI_RECORD)
    [twin] = mapper.map(raw(as_md_metadata(GMI_RECORD.read_bytes()), GMI_RECORD.name), CTX)
    same_mapping(gmi, twin)
    triples = set(parse(gmi.ntriples, format=RdfFormat.N_TRIPLES))
    subject = NamedNode(gmi.dataset_iri)
    title = "Daily Global Sea Surface Temperature, Level 3 Collated, 0.05 degree, Version 2"
    wanted = {
        (RDF_TYPE, NamedNode(DCAT + "Dataset")),
        (NamedNode(DCT + "title"), Literal(title, language="en")),
        (NamedNode(DCT + "identifier"), Literal("doi:10.5555/ocean.sst-l3c-v2")),
        (NamedNode(DCAT + "keyword"), Literal("satellite", language="en")),
    }
    assert wanted <= {(t.predicate, t.object) for t in triples if t.subject == subject}
    assert gmi.dataset_iri == CTX.base_iri + "dataset/iso/" + gmi.dataset_iri.rsplit("/", 1)[1]
    assert gmi.local_id == GMI_RECORD.name  # a bare record keeps the harvester's local id


def test_a_get_record_by_id_answer_maps_as_the_bare_record(mapper: IsoMapper) -> None:
    [enveloped] = mapped(mapper, BY_ID)
    [bare] = mapped(mapper, DATASET)
    same_mapping(enveloped, bare)
    assert enveloped.local_id == BY_ID.name  # one record: the document's own id


def test_each_record_of_a_get_records_answer_is_its_own_dataset(mapper: IsoMapper) -> None:
    series, gmi = mapped(mapper, TWO)
    same_mapping(series, mapped(mapper, SERIES)[0])
    same_mapping(gmi, mapped(mapper, GMI_RECORD)[0])
    # several records: each under its own fileIdentifier
    assert (series.local_id, gmi.local_id) == ("b7e2a9d4-1c3f-4e8a-9d2b-6f5e4d3c2b10", GMI_ID)


def test_records_without_identifier_in_an_envelope_are_told_apart(mapper: IsoMapper) -> None:
    text = TWO.read_bytes()
    for fid in (b"b7e2a9d4-1c3f-4e8a-9d2b-6f5e4d3c2b10", GMI_ID.encode()):
        text = text.replace(b"<gco:CharacterString>" + fid, b"<gco:CharacterString>", 1)
    first, second = mapper.map(raw(text, "two.xml"), CTX)
    assert (first.local_id, second.local_id) == ("two.xml#1", "two.xml#2")
    assert first.dataset_iri != second.dataset_iri


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (EXCEPTION, "an OWS exception report, not an ISO 19139 record: InvalidParameterValue:"
         " No record with id abc-123"),
        (DUBLIN_CORE, r"the csw:GetRecordsResponse holds no ISO 19139 record \(2 csw:Record;"),
        (EMPTY_BY_ID, r"the csw:GetRecordByIdResponse holds no ISO 19139 record \(no record;"),
        (b"<rdf:RDF xmlns:rdf='http://www.w3.org/1999/02/22-rdf-syntax-ns#'/>",
         r"the root element is \{http://www.w3.org/1999/02/22-rdf-syntax-ns#\}RDF, not an ISO"),
        (b"<csw:Capabilities xmlns:csw='http://www.opengis.net/cat/csw/2.0.2'/>",
         "the root element is csw:Capabilities, not an ISO 19139 record"),
    ],
)  # fmt: skip
def test_a_document_without_iso_records_is_a_parse_error_naming_it(
    mapper: IsoMapper, document: bytes, message: str
) -> None:
    with pytest.raises(ParseError, match=message):
        mapper.map(raw(document), CTX)


# -- aggregator map / validate --------------------------------------------------------------------
def map_cli(path: Path, *options: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["map", "--from", "iso19139", *options, str(path)])
    return result.exit_code, result.stdout, result.stderr


def test_map_prints_each_record_of_an_envelope(mapper: IsoMapper) -> None:
    code, out, _ = map_cli(TWO, "--to", "ntriples")
    assert code == 0, out
    series, gmi = mapper.map(raw(TWO.read_bytes()), MAP_CTX)
    assert f"# dataset {series.dataset_iri} (record {series.local_id})" in out
    assert f"# dataset {gmi.dataset_iri} (record {GMI_ID})" in out
    printed = {
        (t.subject, t.predicate, t.object) for t in parse(out.encode(), format=RdfFormat.N_TRIPLES)
    }
    for dataset in (series, gmi):  # each dataset's named triples are all there
        own = parse(dataset.ntriples, format=RdfFormat.N_TRIPLES)
        named = {
            (t.subject, t.predicate, t.object) for t in own if isinstance(t.subject, NamedNode)
        }
        assert named and {t for t in named if isinstance(t[2], (NamedNode, Literal))} <= printed


@pytest.mark.parametrize("path", [GMI_RECORD, BY_ID])
def test_map_reads_a_gmi_record_and_a_get_record_by_id_answer(path: Path) -> None:
    code, out, _ = map_cli(path)
    assert code == 0, out
    assert out.count("# dataset ") == 1 and "dcat:Dataset" in out


def test_map_names_what_a_document_holds_instead(tmp_path: Path) -> None:
    report = tmp_path / "answer.xml"
    report.write_bytes(EXCEPTION)
    code, _, err = map_cli(report)
    assert code != 0
    assert "an OWS exception report" in err and "No record with id abc-123" in err


def test_validate_checks_each_record_of_an_envelope_as_a_harvest_does(tmp_path: Path) -> None:
    args = ["validate", "--from", "iso19139", "--normalised", "--profile", "iso19139-xsd,shacl"]
    result = CliRunner().invoke(main, [*args, str(TWO)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "# record b7e2a9d4-1c3f-4e8a-9d2b-6f5e4d3c2b10 of csw-getrecords-two.xml" in lines
    assert f"# record {GMI_ID} of csw-getrecords-two.xml" in lines
    assert lines[-1] == "stored"
    # the gmi record: the installed schemas have no gmi schema, and the output says so
    assert any("iso19115-2-schema-missing" in line for line in lines)
    # a broken record inside the envelope is found by the XSD step, on the record itself
    broken = TWO.read_text(encoding="utf-8").replace("gmd:dateStamp>", "gmd:dateStampX>", 2)
    (tmp_path / "broken.xml").write_text(broken, encoding="utf-8")
    failed = CliRunner().invoke(main, [*args, str(tmp_path / "broken.xml")])
    assert failed.exit_code == 0, failed.output  # this chain flags: stored with its findings
    assert failed.output.splitlines()[-1] == "stored, flagged"
    [xsd] = [
        line for line in failed.output.splitlines() if line.startswith("violation\tiso19139-xsd")
    ]
    assert "{http://www.isotc211.org/2005/gmd}dateStampX': This element is not expected" in xsd


# -- the iso19139-xsd step on gmi records ---------------------------------------------------------
def _report(validator: Iso19139XsdValidator, document: bytes) -> list[tuple[Severity, str]]:
    report = validator.validate_payload(ParsedPayload(raw(document)))
    return [(f.severity, f.rule) for f in report.findings]


def test_without_a_gmi_schema_a_gmi_record_gets_one_clear_warning() -> None:
    validator = Iso19139XsdValidator()  # pycsw's schemas: no gmi
    report = validator.validate_payload(ParsedPayload(raw(GMI_RECORD.read_bytes())))
    assert report.conforms
    [finding] = report.findings
    assert (finding.severity, finding.rule) == (Severity.WARNING, "iso19115-2-schema-missing")
    assert "not checked against XML Schema" in finding.message
    assert "[validation.iso19139-xsd] schemas" in finding.message
    assert _report(validator, DATASET.read_bytes()) == []  # gmd records as before


def test_with_a_gmi_schema_a_gmi_record_is_validated(tmp_path: Path) -> None:
    package = schema_root("pycsw").parents[len(ISO.parts) - 1]
    for part in (ISO, Path("core", "schemas")):
        shutil.copytree(package / part, tmp_path / part)
    (tmp_path / ISO / "20070417" / "gmi").mkdir()
    shutil.copy(DATA / "gmi-minimal.xsd", tmp_path / ISO / "20070417" / "gmi" / "gmi.xsd")
    validator = Iso19139XsdValidator(schemas=str(tmp_path / ISO))
    assert validator.compiled.gmi
    record = GMI_RECORD.read_bytes()
    assert _report(validator, record) == []
    assert _report(validator, DATASET.read_bytes()) == []
    broken = record.replace(b"<gmd:contact>", b"<gmd:contactX>", 1).replace(
        b"</gmd:contact>", b"</gmd:contactX>", 1
    )
    assert _report(validator, broken) == [(Severity.VIOLATION, "SCHEMAV_ELEMENT_CONTENT")]
    stray = record.replace(b"</gmi:MI_Metadata>", b"<gmi:unknown/></gmi:MI_Metadata>")
    assert [rule for _, rule in _report(validator, stray)] == ["SCHEMAV_ELEMENT_CONTENT"]
