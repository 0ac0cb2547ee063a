"""The ISO 19139 validation chain: XSD (pycsw's schemas), Table A.1 and GEMINI 2.3 Schematron,
the profiles, and a harvest through them.

* the three bundled GEMINI records pass every step with no finding at all;
* every assertion of schemas/iso19139-table-a1.sch and schemas/gemini-2.3.sch has a broken
  copy of a bundled record that it reports, with its id and a line (``CASES``, checked for
  coverage);
* a real OAI-PMH peer on 127.0.0.1 serves GEMINI records under the ``iso19139`` prefix: the
  default chain of an ``iso19139`` source rejects the broken ones at the right step, and a
  lenient source stores them with their findings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from lxml import etree

from aggregator.config import (
    HarvestSettings,
    HttpSettings,
    Settings,
    ViolationPolicy,
    load_settings,
)
from aggregator.core.errors import ConfigError
from aggregator.core.models import RawRecord, Severity, Stage
from aggregator.core.resources import bundled
from aggregator.demo.peers.oaipmh import MetadataFormat, OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.jobs.processing import build_chain, process
from aggregator.mapping.base import MappingContext
from aggregator.mapping.payload import ParsedPayload
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore
from aggregator.validate.iso_xsd import Iso19139XsdValidator, schema_root
from aggregator.validate.schematron import SchematronValidator

SAMPLES = Path(__file__).parents[1] / "aggregator" / "demo" / "peers" / "data" / "iso"
DATASET = (SAMPLES / "gemini-dataset-flood-risk.xml").read_text(encoding="utf-8")
SERIES = (SAMPLES / "gemini-series-aerial-photography.xml").read_text(encoding="utf-8")
SERVICE = (SAMPLES / "gemini-service-flood-wms.xml").read_text(encoding="utf-8")
TABLE_A1 = bundled("schemas", "iso19139-table-a1.sch")
GEMINI = bundled("schemas", "gemini-2.3.sch")
CTX = MappingContext("http://127.0.0.1:8000/", "gemini")
BASE = "http://127.0.0.1:8000/"
T0 = datetime(2024, 5, 1, tzinfo=UTC)


def _raw(text: str, local_id: str = "rec") -> RawRecord:
    return RawRecord("gemini", local_id, "iso19139", text.encode(), "application/xml")


def _payload(text: str) -> ParsedPayload:
    return ParsedPayload(_raw(text))


def drop(pattern: str, count: int = 0) -> Callable[[str], str]:
    """Remove what the regex matches (``count`` 0: every match)."""
    return lambda text: _sub(pattern, "", text, count)


def sub(pattern: str, replacement: str, count: int = 1) -> Callable[[str], str]:
    return lambda text: _sub(pattern, replacement, text, count)


def _sub(pattern: str, replacement: str, text: str, count: int) -> str:
    changed, n = re.subn(pattern, replacement, text, count=count, flags=re.S)
    assert n, f"the case's pattern {pattern!r} matched nothing"
    return changed


def el(name: str, inner: str = ".*?") -> str:
    """A regex for one element ``name`` (non-greedy) with the white space before it."""
    return rf"\s*<{name}(?:\s[^>]*)?>{inner}</{name}>"


# (rule file, rule id, sample, mutation)
CASES: list[tuple[Path, str, str, Callable[[str], str]]] = [
    # ISO 19139 Table A.1
    (
        TABLE_A1,
        "iso-a1-nil-reason",
        DATASET,
        drop(r"<gco:CharacterString>2024\.4</gco:CharacterString>"),
    ),
    (TABLE_A1, "iso-a1-empty-text", DATASET, sub(">FRAW Flood Zones<", "> <")),
    (
        TABLE_A1,
        "iso-a1-party-name",
        DATASET,
        drop(
            el(
                "gmd:organisationName",
                r"\s*<gco:CharacterString>DataMapWales</gco:CharacterString>\s*",
            )
        ),
    ),
    (
        TABLE_A1,
        "iso-a1-other-constraints",
        DATASET,
        drop(
            el(
                "gmd:otherConstraints",
                r"\s*<gmx:Anchor xlink:href=\"http://www\.nationalarchives[^<]*</gmx:Anchor>\s*",
            )
        ),
    ),
    (
        TABLE_A1,
        "iso-a1-quality-report-or-lineage",
        DATASET,
        lambda t: drop(el("gmd:report"))(drop(el("gmd:lineage"))(t)),
    ),
    (TABLE_A1, "iso-a1-scope-description", SERVICE, drop(el("gmd:levelDescription"))),
    (TABLE_A1, "iso-a1-lineage-statement", DATASET, sub(el("gmd:LI_Lineage"), "<gmd:LI_Lineage/>")),
    (
        TABLE_A1,
        "iso-a1-lineage-source",
        SERVICE,
        sub(
            r"</gmd:report>\s*</gmd:DQ_DataQuality>",
            "</gmd:report><gmd:lineage><gmd:LI_Lineage/></gmd:lineage></gmd:DQ_DataQuality>",
        ),
    ),
    (TABLE_A1, "iso-a1-distribution-format", DATASET, drop(el("gmd:distributionFormat"))),
    (
        TABLE_A1,
        "iso-a1-medium-density",
        DATASET,
        sub(
            r"</gmd:MD_DigitalTransferOptions>",
            "<gmd:offLine><gmd:MD_Medium><gmd:densityUnits><gco:CharacterString>bpi</gco:CharacterString></gmd:densityUnits></gmd:MD_Medium></gmd:offLine></gmd:MD_DigitalTransferOptions>",
        ),
    ),
    (
        TABLE_A1,
        "iso-a1-extent-content",
        DATASET,
        sub(
            r"</gmd:MD_DataIdentification>",
            "<gmd:extent><gmd:EX_Extent/></gmd:extent></gmd:MD_DataIdentification>",
        ),
    ),
    (TABLE_A1, "iso-a1-hierarchy-level-name", SERIES, drop(el("gmd:hierarchyLevelName"))),
    (TABLE_A1, "iso-a1-topic-category", DATASET, drop(el("gmd:topicCategory"))),
    (TABLE_A1, "iso-a1-geographic-extent", DATASET, drop(el("gmd:geographicElement"))),
    (
        TABLE_A1,
        "iso-a1-band-units",
        DATASET,
        sub(
            r"</gmd:identificationInfo>",
            "</gmd:identificationInfo><gmd:contentInfo><gmd:MD_CoverageDescription><gmd:dimension><gmd:MD_Band><gmd:maxValue><gco:Real>255</gco:Real></gmd:maxValue></gmd:MD_Band></gmd:dimension></gmd:MD_CoverageDescription></gmd:contentInfo>",
        ),
    ),
    (
        TABLE_A1,
        "iso-a1-check-point-description",
        DATASET,
        sub(
            r"<gmd:referenceSystemInfo>",
            "<gmd:spatialRepresentationInfo><gmd:MD_Georectified><gmd:checkPointAvailability><gco:Boolean>true</gco:Boolean></gmd:checkPointAvailability></gmd:MD_Georectified></gmd:spatialRepresentationInfo><gmd:referenceSystemInfo>",
        ),
    ),
    (
        TABLE_A1,
        "iso-a1-aggregate-name",
        DATASET,
        sub(
            r"<gmd:spatialRepresentationType>",
            "<gmd:aggregationInfo><gmd:MD_AggregateInformation><gmd:associationType>"
            '<gmd:DS_AssociationTypeCode codeList="x" codeListValue="crossReference"/>'
            "</gmd:associationType></gmd:MD_AggregateInformation></gmd:aggregationInfo>"
            "<gmd:spatialRepresentationType>",
        ),
    ),
    # UK GEMINI 2.3: the record
    (
        GEMINI,
        "gemini-root",
        SERIES,
        lambda t: "<gmd:MD_DataIdentification xmlns:gmd='http://www.isotc211.org/2005/gmd'/>",
    ),
    (GEMINI, "gemini-file-identifier", SERIES, drop(el("gmd:fileIdentifier"))),
    (
        GEMINI,
        "gemini-resource-type",
        SERIES,
        sub(
            r'codeListValue="series">series</gmd:MD_ScopeCode>\s*</gmd:hierarchyLevel>',
            'codeListValue="feature">feature</gmd:MD_ScopeCode></gmd:hierarchyLevel>',
        ),
    ),
    (
        GEMINI,
        "gemini-resource-type-single",
        SERIES,
        sub(r"(<gmd:hierarchyLevel>.*?</gmd:hierarchyLevel>)", r"\1\1"),
    ),
    (GEMINI, "gemini-hierarchy-level-name", SERIES, drop(el("gmd:hierarchyLevelName"))),
    (
        GEMINI,
        "gemini-metadata-date",
        SERIES,
        sub(r"<gco:Date>2024-03-02</gco:Date>", "<gco:Date>2024</gco:Date>"),
    ),
    (GEMINI, "gemini-metadata-language", SERIES, sub(r'codeListValue="eng"', 'codeListValue="en"')),
    (GEMINI, "gemini-metadata-point-of-contact", SERIES, drop(el("gmd:contact"))),
    (GEMINI, "gemini-identification", SERIES, drop(el("gmd:identificationInfo"))),
    (
        GEMINI,
        "gemini-service-identification",
        SERVICE,
        sub(
            r'codeListValue="service">service</gmd:MD_ScopeCode>\s*</gmd:hierarchyLevel>',
            'codeListValue="dataset">dataset</gmd:MD_ScopeCode></gmd:hierarchyLevel>',
        ),
    ),
    (
        GEMINI,
        "gemini-quality-scope",
        SERVICE,
        sub(
            r'codeListValue="service">service</gmd:MD_ScopeCode>\s*</gmd:level>',
            'codeListValue="dataset">dataset</gmd:MD_ScopeCode></gmd:level>',
        ),
    ),
    (GEMINI, "gemini-conformity", SERVICE, drop(el("gmd:report"))),
    (
        GEMINI,
        "gemini-metadata-contact-email",
        SERIES,
        drop(r"\s*<gco:CharacterString>metadata@aerial\.example\.gov\.scot</gco:CharacterString>"),
    ),
    (
        GEMINI,
        "gemini-metadata-contact-role",
        SERIES,
        sub(r'codeListValue="pointOfContact">pointOfContact', 'codeListValue="author">author'),
    ),
    # every resource
    (GEMINI, "gemini-title", SERVICE, sub(r">Flood Risk Assessment Wales - View Service<", "><")),
    (GEMINI, "gemini-abstract", SERVICE, sub(r">INSPIRE view service \(WMS 1\.3\.0\)[^<]*", ">")),
    (
        GEMINI,
        "gemini-abstract-not-title",
        SERVICE,
        sub(
            r">INSPIRE view service \(WMS 1\.3\.0\)[^<]*",
            ">Flood Risk Assessment Wales - View Service",
        ),
    ),
    (
        GEMINI,
        "gemini-reference-date",
        SERVICE,
        drop(
            el(
                "gmd:date",
                r"\s*<gmd:CI_Date>\s*<gmd:date>\s*<gco:Date>2020-02-01</gco:Date>.*?</gmd:CI_Date>\s*",
            )
        ),
    ),
    (
        GEMINI,
        "gemini-creation-date-single",
        DATASET,
        sub(
            r"(<gmd:date>\s*<gmd:CI_Date>\s*<gmd:date>\s*<gco:Date>2019-06-01</gco:Date>.*?</gmd:CI_Date>\s*</gmd:date>)",
            r"\1\1",
        ),
    ),
    (GEMINI, "gemini-keyword", SERVICE, drop(el("gmd:descriptiveKeywords"))),
    (GEMINI, "gemini-responsible-organisation", SERVICE, drop(el("gmd:pointOfContact"))),
    (
        GEMINI,
        "gemini-limitations-on-public-access",
        SERVICE,
        drop(
            el(
                "gmd:resourceConstraints",
                r"\s*<gmd:MD_LegalConstraints>\s*<gmd:accessConstraints>.*?",
            )
        ),
    ),
    (
        GEMINI,
        "gemini-use-constraints",
        SERVICE,
        drop(
            el("gmd:resourceConstraints", r"\s*<gmd:MD_LegalConstraints>\s*<gmd:useConstraints>.*?")
        ),
    ),
    (GEMINI, "gemini-bounding-box", SERVICE, drop(el("gmd:geographicElement"))),
    (
        GEMINI,
        "gemini-bounding-box-longitude",
        SERVICE,
        sub(r"<gco:Decimal>-5\.5</gco:Decimal>", "<gco:Decimal>400000</gco:Decimal>"),
    ),
    (
        GEMINI,
        "gemini-bounding-box-latitude",
        SERVICE,
        sub(r"<gco:Decimal>51\.35</gco:Decimal>", "<gco:Decimal>60</gco:Decimal>"),
    ),
    (
        GEMINI,
        "gemini-responsible-organisation-email",
        DATASET,
        drop(r"\s*<gco:CharacterString>hydrology@research\.example\.ac\.uk</gco:CharacterString>"),
    ),
    (
        GEMINI,
        "gemini-responsible-organisation-role",
        DATASET,
        sub(r'codeListValue="originator">originator', 'codeListValue="">'),
    ),
    (
        GEMINI,
        "gemini-resource-locator-url",
        DATASET,
        sub(
            r"<gmd:URL>https://naturalresources\.example\.wales/flood-risk-assessment-wales</gmd:URL>",
            "<gmd:URL>naturalresources.example.wales/about</gmd:URL>",
        ),
    ),
    (
        GEMINI,
        "gemini-temporal-extent-bounds",
        SERIES,
        sub(r"<gml:beginPosition>2015</gml:beginPosition>", "<gml:beginPosition/>"),
    ),
    # datasets and series
    # the resource language sits after gmd:spatialResolution (the metadata one comes first)
    (
        GEMINI,
        "gemini-dataset-language",
        SERIES,
        sub(r"(</gmd:spatialResolution>)\s*<gmd:language>.*?</gmd:language>", r"\1"),
    ),
    (GEMINI, "gemini-topic-category", SERIES, drop(el("gmd:topicCategory"))),
    (GEMINI, "gemini-temporal-extent", SERIES, drop(el("gmd:temporalElement"))),
    (GEMINI, "gemini-lineage", SERIES, drop(el("gmd:lineage"))),
    (GEMINI, "gemini-spatial-reference-system", SERIES, drop(el("gmd:referenceSystemInfo"))),
    (GEMINI, "gemini-data-format", SERIES, drop(el("gmd:distributionFormat"))),
    (GEMINI, "gemini-resource-identifier", SERIES, drop(el("gmd:identifier"))),
    (
        GEMINI,
        "gemini-spatial-representation-type",
        SERIES,
        drop(el("gmd:spatialRepresentationType")),
    ),
    (GEMINI, "gemini-maintenance-information", SERIES, drop(el("gmd:resourceMaintenance"))),
    (
        GEMINI,
        "gemini-inspire-theme",
        SERIES,
        sub(r"GEMET - INSPIRE themes, version 1\.0", "Scottish imagery themes"),
    ),
    (GEMINI, "gemini-resource-locator", SERIES, drop(el("gmd:transferOptions"))),
    # services
    (
        GEMINI,
        "gemini-spatial-data-service-type",
        SERVICE,
        sub(r"<gco:LocalName>view</gco:LocalName>", "<gco:LocalName>map</gco:LocalName>"),
    ),
    (GEMINI, "gemini-coupled-resource", SERVICE, drop(r"\s*<srv:operatesOn [^>]*/>")),
    (GEMINI, "gemini-coupling-type", SERVICE, drop(el("srv:couplingType"))),
    (
        GEMINI,
        "gemini-service-locator",
        SERVICE,
        lambda t: drop(el("srv:containsOperations"))(drop(el("gmd:transferOptions"))(t)),
    ),
]


def _rule_ids(path: Path) -> set[str]:
    tree = etree.parse(str(path))
    ns = {"sch": "http://purl.oclc.org/dsdl/schematron"}
    return {str(a.get("id")) for a in tree.iterfind(".//sch:assert", ns)}


@pytest.fixture(scope="module")
def schematron() -> dict[Path, SchematronValidator]:
    return {path: SchematronValidator(str(path)) for path in (TABLE_A1, GEMINI)}


@pytest.fixture(scope="module")
def xsd() -> Iso19139XsdValidator:
    return Iso19139XsdValidator()


@pytest.mark.parametrize("sample", [DATASET, SERIES, SERVICE], ids=["dataset", "series", "service"])
def test_bundled_records_pass_every_step_without_a_finding(
    sample: str, xsd: Iso19139XsdValidator, schematron: dict[Path, SchematronValidator]
) -> None:
    payload = _payload(sample)
    assert xsd.validate_payload(payload).findings == ()
    for validator in schematron.values():
        assert validator.validate_payload(payload).findings == ()
    assert payload.parses == {"xml": 1}


def test_every_assertion_has_a_case() -> None:
    for path in (TABLE_A1, GEMINI):
        ids = _rule_ids(path)
        covered = {rule for p, rule, _, _ in CASES if p == path}
        assert ids == covered, f"{path.name}: no case for {sorted(ids - covered)}"


def test_every_assertion_has_an_id_and_a_message() -> None:
    for path in (TABLE_A1, GEMINI):
        tree = etree.parse(str(path))
        ns = {"sch": "http://purl.oclc.org/dsdl/schematron"}
        for a in tree.iterfind(".//sch:assert", ns):
            assert a.get("id"), etree.tostring(a)
            assert len(" ".join(a.itertext()).split()) >= 8, a.get("id")


@pytest.mark.parametrize(("path", "rule", "sample", "mutate"), CASES, ids=[c[1] for c in CASES])
def test_each_assertion_reports_its_case(
    path: Path,
    rule: str,
    sample: str,
    mutate: Callable[[str], str],
    schematron: dict[Path, SchematronValidator],
) -> None:
    report = schematron[path].validate_payload(_payload(mutate(sample)))
    found = [f for f in report.findings if f.rule == rule]
    assert found, f"{rule} not reported; got {[f.rule for f in report.findings]}"
    finding = found[0]
    assert finding.stage is Stage.SCHEMATRON
    want = Severity.WARNING if rule in WARNINGS else Severity.VIOLATION
    assert finding.severity is want
    assert finding.location is not None and finding.location.startswith("line ")
    assert len(finding.message) > 30 and "{" not in finding.message


WARNINGS = {
    "gemini-abstract-not-title",
    "gemini-responsible-organisation-email",
    "gemini-inspire-theme",
    "gemini-resource-locator",
}


# -- the XSD step --------------------------------------------------------------------------


def test_xsd_reports_libxml2_rule_message_and_line(xsd: Iso19139XsdValidator) -> None:
    broken = SERVICE.replace("<gco:Decimal>-5.5</gco:Decimal>", "<gco:Decimal>west</gco:Decimal>")
    [finding] = xsd.validate_payload(_payload(broken)).findings
    assert finding.stage is Stage.XSD and finding.severity is Severity.VIOLATION
    assert finding.rule == "SCHEMAV_CVC_DATATYPE_VALID_1_2_1"
    assert "'west' is not a valid value" in finding.message
    line = 1 + broken[: broken.index(">west<")].count("\n")
    assert finding.location == f"line {line}"


def test_xsd_checks_element_order_and_the_srv_schema(xsd: Iso19139XsdValidator) -> None:
    swapped = re.sub(
        r"(<srv:serviceType>.*?</srv:serviceType>)(\s*)(<srv:serviceTypeVersion>.*?"
        r"</srv:serviceTypeVersion>)",
        r"\3\2\1",
        SERVICE,
        flags=re.S,
    )
    report = xsd.validate_payload(_payload(swapped))
    assert not report.conforms
    assert report.findings[0].rule == "SCHEMAV_ELEMENT_CONTENT"


def test_xsd_schemas_load_from_the_installed_pycsw_once_and_fast() -> None:
    root = schema_root()
    assert "pycsw" in str(root) and (root / "20070417" / "gmd" / "gmd.xsd").is_file()
    one = Iso19139XsdValidator()
    two = Iso19139XsdValidator(max_findings=5)
    assert one.compiled is two.compiled  # compiled once per process
    assert one.compiled.seconds < 10  # ~0.05-0.1 s on the 2-core VM


def test_xsd_step_without_pycsw_fails_clearly() -> None:
    with pytest.raises(ConfigError, match=r"pip install 'ld-aggregator\[iso\]'"):
        schema_root("no_such_package_for_iso_schemas")


def test_validator_pickles_as_its_options() -> None:
    import pickle

    again = pickle.loads(pickle.dumps(Iso19139XsdValidator(max_findings=7)))
    assert isinstance(again, Iso19139XsdValidator) and again.max_findings == 7


# -- profiles ---------------------------------------------------------------------------------

SOURCE = "[sources.gemini]\ntype = 'oai-pmh'\nurl = 'http://127.0.0.1:9/oai'\nformat = 'iso19139'\n"


def _labels(tmp_path: Path, extra: str = "", source: str = SOURCE) -> list[str]:
    path = tmp_path / "aggregator.toml"
    path.write_text(source + extra, encoding="utf-8")
    return [s.label for s in load_settings(path).source("gemini").validation]


def test_profiles_expand_to_their_steps(tmp_path: Path) -> None:
    full = ["iso19139-xsd", "iso19139-table-a1", "gemini-2.3", "shacl"]
    assert _labels(tmp_path) == full  # the default of an iso19139 source
    assert _labels(tmp_path, "validation = 'gemini'\n") == full
    assert _labels(tmp_path, "validation = 'iso19139'\n") == [*full[:2], "shacl"]
    assert _labels(tmp_path, "validation = 'none'\n") == ["shacl"]
    assert _labels(tmp_path, "validation = ['iso19139', 'shacl']\n") == [*full[:2], "shacl"]
    dcat = SOURCE.replace("'iso19139'", "'dcat'")
    assert _labels(tmp_path, "", dcat) == ["shacl"]  # other formats keep ["shacl"]
    with pytest.raises(ConfigError, match="not a profile"):
        _labels(tmp_path, "validation = 'gemini-strict'\n")


def test_profile_steps_build_and_run_in_order(tmp_path: Path) -> None:
    path = tmp_path / "aggregator.toml"
    path.write_text(SOURCE, encoding="utf-8")
    chain = load_settings(path).source("gemini").validation
    build_chain(chain)
    broken_xsd = SERIES.replace("<gco:Decimal>-8.65</gco:Decimal>", "<gco:Decimal>x</gco:Decimal>")
    result = process(_raw(broken_xsd), CTX, chain)
    assert {f.step for f in result.failure} == {"iso19139-xsd"}  # the chain stopped there
    no_lineage = drop(el("gmd:lineage"))(SERIES)
    result = process(_raw(no_lineage), CTX, chain)
    assert {(f.step, f.rule) for f in result.failure} == {("gemini-2.3", "gemini-lineage")}
    lenient = process(_raw(no_lineage), CTX, chain, policy=ViolationPolicy.LENIENT)
    [checked] = lenient.checked
    assert any(f.rule == "gemini-lineage" for f in checked.findings)


# -- end to end: a real OAI-PMH peer serving GEMINI records ----------------------------------


class Env:
    def __init__(
        self, tmp: Path, url: str, lenient: bool, workers: int = 0, extra: str = ""
    ) -> None:
        config = tmp / "aggregator.toml"
        config.write_text(
            "[sources.gemini]\ntype = 'oai-pmh'\n"
            f"url = '{url}'\nformat = 'iso19139'\nlenient = {str(lenient).lower()}\n{extra}"
            "options = { metadata_prefix = 'iso19139' }\n",
            encoding="utf-8",
        )
        loaded = load_settings(config)
        self.settings = Settings(
            config_path=config,
            store_path=tmp / "store",
            base_iri=BASE,
            http=HttpSettings(allow_private=True, retries=0),
            harvest=HarvestSettings(workers=workers),
            sources=loaded.sources,
        )
        self.store = RecordStore(self.settings.store_path, BASE)
        self.http = HttpClient(self.settings.http)


def _strip_prolog(text: str) -> bytes:
    return re.sub(r"^<\?xml[^>]*>\s*(<!--.*?-->\s*)?", "", text, flags=re.S).encode()


@pytest.fixture
def peer_url() -> Iterator[str]:
    bad_xsd = SERIES.replace("<gco:Decimal>-8.65</gco:Decimal>", "<gco:Decimal>x</gco:Decimal>")
    bad_gemini = drop(el("gmd:lineage"))(
        DATASET.replace(
            "4f0c6f3e-5a7b-4d0e-9b1a-2c3d4e5f6a01", "4f0c6f3e-0000-4d0e-9b1a-2c3d4e5f6a01"
        )
    )
    records = [DATASET, SERIES, SERVICE, bad_xsd, bad_gemini]
    items = MemoryItems(
        OaiItem(f"oai:gemini:{i}", T0 + timedelta(hours=i), metadata=_strip_prolog(m))
        for i, m in enumerate(records, 1)
    )
    fmt = MetadataFormat(
        "iso19139", "http://www.isotc211.org/2005/gmd/gmd.xsd", "http://www.isotc211.org/2005/gmd"
    )
    with PeerServer(OaiPmhPeer(items, formats=(fmt,))) as server:
        yield f"{server.url}oai"


def test_a_gemini_harvest_rejects_at_the_failing_step(tmp_path: Path, peer_url: str) -> None:
    """The GEMINI chain is strict unless the source says otherwise: the UK specification
    publishes no record that fails validation."""
    env = Env(tmp_path, peer_url, lenient=False)
    assert env.settings.source("gemini").policy is ViolationPolicy.STRICT
    try:
        job = run_source(env.settings, env.store, "gemini", RunOptions(), http=env.http)
        assert job.status == "succeeded", job.message
        assert {k: v for k, v in job.counters.items() if v} == {"added": 3, "rejected": 2}
        by_record = {e["local_id"]: e for e in env.store.jobs.errors(job.id)}
        assert by_record["oai:gemini:4"]["stage"] == "iso19139-xsd"
        assert by_record["oai:gemini:4"]["rule"].startswith("SCHEMAV_")
        assert by_record["oai:gemini:4"]["location"].startswith("line ")
        assert by_record["oai:gemini:5"]["stage"] == "gemini-2.3"
        assert by_record["oai:gemini:5"]["rule"] == "gemini-lineage"
        assert env.store.db.counts_by_status("gemini") == {"active": 3, "rejected": 2}
        dead = env.store.db.conn.execute(
            "SELECT local_id, stage FROM rejections ORDER BY local_id"
        ).fetchall()
        assert [tuple(d) for d in dead] == [
            ("oai:gemini:4", "iso19139-xsd"),
            ("oai:gemini:5", "gemini-2.3"),
        ]
    finally:
        env.store.close()


def test_a_lenient_gemini_source_keeps_the_failing_records(tmp_path: Path, peer_url: str) -> None:
    env = Env(tmp_path, peer_url, lenient=True, workers=2)  # validators travel to the workers
    try:
        job = run_source(env.settings, env.store, "gemini", RunOptions(), http=env.http)
        assert {k: v for k, v in job.counters.items() if v} == {"added": 5, "flagged": 2}
        row = env.store.record("gemini", "oai:gemini:5")
        assert row is not None and "gemini-lineage" in row.findings and row.flagged
    finally:
        env.store.close()


@pytest.mark.parametrize(
    "extra", ["strict = false\n", "validation = 'iso19139'\n"], ids=["not-strict", "iso19139"]
)
def test_an_iso_source_that_is_not_strict_flags_what_its_chain_finds(
    tmp_path: Path, peer_url: str, extra: str
) -> None:
    """``strict = false`` on the GEMINI chain, or the plain ISO 19139 chain: the records
    failing the XSD or the GEMINI rules are stored, flagged, none rejected."""
    env = Env(tmp_path, peer_url, lenient=False, extra=extra)
    assert env.settings.source("gemini").policy is ViolationPolicy.FLAG
    try:
        job = run_source(env.settings, env.store, "gemini", RunOptions(), http=env.http)
        counts = {k: v for k, v in job.counters.items() if v}
        flagged = 2 if "strict" in extra else 1  # the plain chain has no GEMINI rules
        assert counts == {"added": 5, "flagged": flagged}
        row = env.store.record("gemini", "oai:gemini:4")
        assert row is not None and row.status == "active" and row.flagged
    finally:
        env.store.close()


# -- hostile records through the chain: per-record errors, nothing read, nothing fetched -----

BOMB = (
    '<?xml version="1.0"?>\n<!DOCTYPE gmd:MD_Metadata [<!ENTITY a "aaaaaaaaaa">'
    + "".join(f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(8))
    + ']>\n<gmd:MD_Metadata xmlns:gmd="http://www.isotc211.org/2005/gmd">&i;</gmd:MD_Metadata>'
)


def _chain(tmp_path: Path) -> tuple[Any, ...]:
    path = tmp_path / "aggregator.toml"
    path.write_text(SOURCE, encoding="utf-8")
    return load_settings(path).source("gemini").validation


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("billion-laughs", BOMB, "DOCTYPE"),
        (
            "xxe",
            '<!DOCTYPE x [<!ENTITY s SYSTEM "file:///etc/passwd">]>'
            '<gmd:MD_Metadata xmlns:gmd="http://www.isotc211.org/2005/gmd">&s;</gmd:MD_Metadata>',
            "DOCTYPE",
        ),
        (
            "external-dtd",
            '<!DOCTYPE gmd:MD_Metadata SYSTEM "http://127.0.0.1:9/evil.dtd">'
            '<gmd:MD_Metadata xmlns:gmd="http://www.isotc211.org/2005/gmd"/>',
            "DOCTYPE",
        ),
        (
            "huge-text",
            SERIES.replace("Annual 25 cm", "x" * 11_000_000, 1),
            "malformed XML",
        ),
        ("deep", "<a>" * 5000 + "</a>" * 5000, "malformed XML"),
    ],
)
def test_hostile_records_are_rejected_per_record_with_a_clear_error(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    result = process(_raw(text, name), CTX, _chain(tmp_path), policy=ViolationPolicy.LENIENT)
    assert not result.checked
    [failure] = result.failure
    assert failure.stage in (Stage.PARSE, Stage.XSD) and message in failure.message
    assert failure.severity is Severity.VIOLATION


def test_xinclude_is_neither_expanded_nor_accepted(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-VALUE")
    text = SERIES.replace(
        "<gco:CharacterString>Annual 25 cm",
        f'<xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="{secret.as_uri()}"'
        ' parse="text"/><gco:CharacterString>Annual 25 cm',
        1,
    )
    result = process(_raw(text), CTX, _chain(tmp_path))
    assert {f.step for f in result.failure} == {"iso19139-xsd"}
    assert any("XInclude" in f.message for f in result.failure)
    lenient = process(_raw(text), CTX, _chain(tmp_path), policy=ViolationPolicy.LENIENT)
    [checked] = lenient.checked
    assert b"TOP-SECRET-VALUE" not in checked.dataset.ntriples
