"""Per-source validation chains: XSD, then Schematron, then SHACL, each step with its options.

Unit tests run records through ``process()`` with the small schema and rules of
tests/data/chains (written for these tests); the end-to-end test harvests a real OAI-PMH peer
on 127.0.0.1 that serves the test record format."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import plugins_for_tests
import pytest

import aggregator.mapping.dcat.input as dcat_input
import aggregator.mapping.payload as payload_module
from aggregator.config import (
    HarvestSettings,
    HttpSettings,
    Settings,
    ValidationStep,
    ViolationPolicy,
    load_settings,
)
from aggregator.core.errors import ConfigError, ParseError
from aggregator.core.models import (
    Finding,
    MappedDataset,
    RawRecord,
    Severity,
    Stage,
    ValidationReport,
)
from aggregator.demo.peers.oaipmh import MetadataFormat, OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.jobs.processing import process
from aggregator.mapping.base import MappingContext
from aggregator.mapping.payload import ParsedPayload
from aggregator.net.client import HttpClient
from aggregator.plugin import validators
from aggregator.store.records import RecordStore
from aggregator.validate.base import Validator

DATA = Path(__file__).parent / "data" / "chains"
XSD = str(DATA / "record.xsd")
SCH = str(DATA / "record.sch")
CTX = MappingContext("http://127.0.0.1:8000/", "recs")
BASE = "http://127.0.0.1:8000/"
T0 = datetime(2024, 5, 1, tzinfo=UTC)


def rec(ident: str, title: str = "A good title", *, keyword: bool = True, extra: str = "") -> bytes:
    kw = "\n  <keyword>testing</keyword>" if keyword else ""
    return (
        '<record xmlns="urn:test:record">\n'
        f"  <id>{ident}</id>\n"
        f"  <title>{title}</title>{extra}\n"
        "  <description>A record of the test format.</description>"
        f"{kw}\n"
        "</record>"
    ).encode()


GOOD = rec("rec-1")
BAD_XSD = rec("rec-2", extra="\n  <colour>red</colour>")  # an element the schema lacks
BAD_SCH = rec("x-3")  # schema-valid; its id breaks rule rec-id-prefix
BOTH = rec("x-4", extra="\n  <colour>red</colour>")  # fails both; the chain stops at the XSD
NO_KEYWORD = rec("rec-5", keyword=False)  # a Schematron warning only


def raw(payload: bytes, local_id: str = "r1") -> RawRecord:
    return RawRecord("recs", local_id, "test-record", payload, "application/xml")


CHAIN = (
    ValidationStep("xsd", (("schema", XSD),)),
    ValidationStep("schematron", (("rules", SCH),), "rules"),
    ValidationStep("shacl"),
)


@pytest.fixture(autouse=True)
def _plugins() -> None:
    plugins_for_tests.register()


def test_a_passing_record_goes_through_every_step() -> None:
    result = process(raw(GOOD), CTX, CHAIN)
    assert result.failure == ()
    [checked] = result.checked
    assert checked.conforms, checked.findings


def test_the_xsd_step_fails_with_rule_message_and_line_and_stops_the_chain() -> None:
    result = process(raw(BOTH), CTX, CHAIN)
    assert result.checked == ()
    assert {f.step for f in result.failure} == {"xsd"}  # the Schematron step did not run
    [finding] = result.failure
    assert finding.stage is Stage.XSD
    assert finding.severity is Severity.VIOLATION
    assert finding.rule.startswith("SCHEMAV_")
    assert "colour" in finding.message
    assert finding.location == "line 4"
    assert finding.path == "/*/*[3]"  # the XPath of the element the schema does not allow


def test_the_schematron_step_reports_the_assertion_id_and_where() -> None:
    result = process(raw(BAD_SCH), CTX, CHAIN)
    assert result.checked == ()
    [finding] = [f for f in result.failure if f.severity is Severity.VIOLATION]
    assert finding.stage is Stage.SCHEMATRON
    assert finding.step == "rules"
    assert finding.rule == "rec-id-prefix"
    assert finding.message == "The record id must start with 'rec-'."
    assert finding.location == "line 1"  # the r:record context node
    assert finding.path is not None and "record" in finding.path


def test_schematron_warnings_pass_and_stay_with_the_record() -> None:
    result = process(raw(NO_KEYWORD), CTX, CHAIN)
    [checked] = result.checked
    assert checked.conforms
    [warning] = [f for f in checked.findings if f.stage is Stage.SCHEMATRON]
    assert (warning.severity, warning.rule, warning.step) == (
        Severity.WARNING,
        "rec-keyword",
        "rules",
    )


def test_lenient_maps_a_record_that_fails_a_payload_step_and_keeps_its_findings() -> None:
    result = process(raw(BOTH), CTX, CHAIN, policy=ViolationPolicy.LENIENT)
    assert result.failure == ()
    [checked] = result.checked
    assert not checked.conforms
    steps = {f.step for f in checked.findings if f.severity is Severity.VIOLATION}
    assert steps == {"xsd"}  # still the first failing payload step only
    assert checked.dataset.dataset_iri.endswith("/x-4")


def test_lenient_does_not_rescue_a_payload_that_cannot_be_parsed() -> None:
    result = process(
        raw(b"<record xmlns='urn:test:record'><id>"), CTX, CHAIN, policy=ViolationPolicy.LENIENT
    )
    [finding] = result.failure
    assert (finding.stage, finding.step) == (Stage.PARSE, "xsd")
    assert "malformed XML" in finding.message


def test_the_payload_is_parsed_once_for_every_step_and_the_mapper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    real = payload_module.parse_xml

    def counting(data: bytes, *, url: str | None = None) -> Any:
        calls.append(len(data))
        return real(data, url=url)

    monkeypatch.setattr(payload_module, "parse_xml", counting)
    result = process(raw(NO_KEYWORD), CTX, CHAIN)
    assert result.checked and not result.failure
    assert calls == [len(NO_KEYWORD)]  # XSD, Schematron and the mapper share one tree
    process(raw(GOOD), CTX, ())  # no payload steps: the mapper parses, once
    assert len(calls) == 2


class _HasDataset(Validator):
    """A payload validator reading RDF: does the payload describe a dcat:Dataset?"""

    name = "has-dataset"
    target = "payload"

    def validate_payload(self, payload: ParsedPayload) -> ValidationReport:
        quads = payload.rdf().quads
        found = any(q.object.value == "http://www.w3.org/ns/dcat#Dataset" for q in quads)
        findings = () if found else (Finding(Stage.CHECK, Severity.VIOLATION, "no-ds", "none"),)
        return ValidationReport(self.name, findings)


def test_rdf_payloads_are_parsed_once_too(monkeypatch: pytest.MonkeyPatch) -> None:
    validators.register("has-dataset", _HasDataset)
    calls: list[int] = []
    real = dcat_input.parse_document

    def counting(payload: bytes, media_type: str | None, url: str | None, *limits: Any) -> Any:
        calls.append(len(payload))
        return real(payload, media_type, url, *limits)

    monkeypatch.setattr(dcat_input, "parse_document", counting)
    record = RawRecord("s", "d1", "dcat", generate_dataset(1), "application/rdf+xml")
    result = process(record, CTX, (ValidationStep("has-dataset"), ValidationStep("shacl")))
    assert [c.conforms for c in result.checked] == [True]
    assert len(calls) == 1


def test_parsed_payload_caches_failures_and_counts_parses() -> None:
    payload = ParsedPayload(raw(b"<unclosed>"))
    for _ in range(3):
        with pytest.raises(ParseError):
            payload.xml()
    assert payload.parses == {"xml": 1}
    doc = ParsedPayload(RawRecord("s", "j", "x", b'{"a": [1, 2]}', "application/json"))
    assert doc.json() == {"a": [1, 2]} and doc.json() is doc.json()
    assert doc.parses == {"json": 1}


# -- configuration --------------------------------------------------------------------------
def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "schemas").mkdir(exist_ok=True)
    for name in ("record.xsd", "record.sch", "broken.sch", "imports-over-http.xsd"):
        (tmp_path / "schemas" / name).write_bytes((DATA / name).read_bytes())
    path = tmp_path / "aggregator.toml"
    path.write_text(text, encoding="utf-8")
    return path


SOURCE = "[sources.recs]\ntype = 'oai-pmh'\nurl = 'http://127.0.0.1:9/oai'\nformat = 'dcat'\n"


def test_chain_tables_merge_over_the_global_defaults(tmp_path: Path) -> None:
    settings = load_settings(
        write(
            tmp_path,
            "[validation.schematron]\nrules = 'schemas/record.sch'\nmax_findings = 5\n"
            "[validation.shacl]\nengine = 'pyshacl'\n" + SOURCE + "[[sources.recs.validation]]\n"
            "validator = 'xsd'\nschema = 'schemas/record.xsd'\n"
            "[[sources.recs.validation]]\nvalidator = 'schematron'\nname = 'publisher-rules'\n"
            "max_findings = 9\n"
            "[[sources.recs.validation]]\nvalidator = 'shacl'\nengine = 'shacl'\n",
        )
    )
    xsd, sch, shacl = settings.source("recs").validation
    schemas = tmp_path.resolve() / "schemas"
    assert xsd == ValidationStep("xsd", (("schema", str(schemas / "record.xsd")),))
    assert sch.label == "publisher-rules"
    assert dict(sch.options) == {"rules": str(schemas / "record.sch"), "max_findings": 9}
    assert dict(shacl.options) == {"engine": "shacl"}  # the step's own key wins
    # today's form: names only, with the global defaults
    plain = load_settings(write(tmp_path, "[validation.shacl]\nengine = 'pyshacl'\n" + SOURCE))
    assert plain.source("recs").validation == (ValidationStep("shacl", (("engine", "pyshacl"),)),)
    named = load_settings(write(tmp_path, SOURCE + "validation = ['shacl']\n"))
    assert named.source("recs").validation == (ValidationStep("shacl"),)


@pytest.mark.parametrize(
    ("chain", "message"),
    [
        ("validator = 'xsd'\nschema = 'schemas/record.xsd'\nschemaa = 1\n", r"recs.*schemaa"),
        ("validator = 'xsd'\n", r"sources.recs.validation\[1\].*missing.*schema"),
        ("validator = 'xsd'\nschema = 'schemas/nope.xsd'\n", "no such file"),
        ("validator = 'xsd'\nschema = 'schemas/record.xsd'\nmax_findings = '7'\n", "integer"),
        ("validator = 'xsd'\nschema = 'schemas/record.xsd'\nmax_findings = 0\n", "at least 1"),
        ("validator = 'shacl'\nengine = 'fast'\n", "unknown SHACL engine"),
        ("validator = 'shacl'\nextra_shapes = 'x.ttl'\n", "list of file paths"),
        ("validator = 'nope'\n", "unknown validator 'nope'"),
        ("schema = 'schemas/record.xsd'\n", "a table with 'validator'"),
        (
            "validator = 'shacl'\n[[sources.recs.validation]]\nvalidator = 'shacl'\n",
            "shacl appear twice",
        ),
    ],
)
def test_bad_chains_are_refused_at_load_with_the_source_name(
    tmp_path: Path, chain: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(write(tmp_path, SOURCE + "[[sources.recs.validation]]\n" + chain))


def test_rules_are_compiled_from_local_files_only(tmp_path: Path) -> None:
    from aggregator.jobs.processing import build_chain

    settings = load_settings(
        write(
            tmp_path,
            SOURCE + "validation = [{validator = 'xsd', schema = "
            "'schemas/imports-over-http.xsd'}, {validator = 'schematron', "
            "rules = 'schemas/broken.sch'}]\n",
        )
    )
    xsd, sch = settings.source("recs").validation
    with pytest.raises(ConfigError, match="never fetched"):
        build_chain([xsd])
    with pytest.raises(ConfigError, match=r"broken\.sch cannot be compiled"):
        build_chain([sch])


def test_a_harvester_declares_its_default_format_and_what_it_yields(tmp_path: Path) -> None:
    oai = load_settings(write(tmp_path, SOURCE.replace("format = 'dcat'\n", "")))
    assert oai.source("recs").format == "dcat"  # OaiPmhHarvester.formats[0]
    plugins_for_tests.register()
    anything = load_settings(write(tmp_path, SOURCE.replace("'dcat'", "'test-record'")))
    assert anything.source("recs").format == "test-record"  # OAI-PMH carries any format
    sparql = "[sources.s]\ntype = 'sparql'\nurl = 'http://127.0.0.1:9/q'\nformat = 'test-record'\n"
    with pytest.raises(ConfigError, match="a sparql source yields dcat, not 'test-record'"):
        load_settings(write(tmp_path, sparql))


# -- end to end: a real OAI-PMH peer serving the test record format -------------------------
class Env:
    def __init__(self, tmp: Path, url: str, policy: str) -> None:
        keys = {"strict": "strict = true\n", "lenient": "lenient = true\n", "flag": ""}[policy]
        config = write(
            tmp,
            "[sources.recs]\ntype = 'oai-pmh'\n"
            f"url = '{url}'\nformat = 'test-record'\n{keys}"
            "options = { metadata_prefix = 'rec' }\n"
            "validation = [\n"
            "  { validator = 'xsd', schema = 'schemas/record.xsd' },\n"
            "  { validator = 'schematron', name = 'rules', rules = 'schemas/record.sch' },\n"
            "  'shacl',\n]\n",
        )
        loaded = load_settings(config)
        self.settings = Settings(
            config_path=config,
            store_path=tmp / "store",
            base_iri=BASE,
            http=HttpSettings(allow_private=True, retries=0),
            harvest=HarvestSettings(workers=0),
            sources=loaded.sources,
        )
        self.store = RecordStore(self.settings.store_path, BASE)
        self.http = HttpClient(self.settings.http)

    def run(self) -> Any:
        return run_source(self.settings, self.store, "recs", RunOptions(), http=self.http)


@pytest.fixture
def peer_url() -> Iterator[str]:
    records = [GOOD, BAD_XSD, BAD_SCH, NO_KEYWORD]
    items = MemoryItems(
        OaiItem(f"oai:recs:{i}", T0 + timedelta(hours=i), metadata=m)
        for i, m in enumerate(records, 1)
    )
    fmt = MetadataFormat("rec", "urn:test:record.xsd", "urn:test:record")
    with PeerServer(OaiPmhPeer(items, formats=(fmt,))) as server:
        yield f"{server.url}oai"


def test_a_strict_harvest_records_each_failing_step_on_the_job_and_the_dead_letters(
    tmp_path: Path, peer_url: str
) -> None:
    env = Env(tmp_path, peer_url, "strict")
    try:
        job = env.run()
        assert job.status == "succeeded", job.message
        assert {k: v for k, v in job.counters.items() if v} == {"added": 2, "rejected": 2}
        errors = env.store.jobs.errors(job.id)
        by_record = {e["local_id"]: e for e in errors}
        assert set(by_record) == {"oai:recs:2", "oai:recs:3"}
        assert by_record["oai:recs:2"]["stage"] == "xsd"
        assert by_record["oai:recs:2"]["rule"].startswith("SCHEMAV_")
        assert by_record["oai:recs:2"]["location"] == "line 4"
        assert by_record["oai:recs:3"]["stage"] == "rules"  # the step's name
        assert by_record["oai:recs:3"]["rule"] == "rec-id-prefix"
        assert by_record["oai:recs:3"]["location"] == "line 1"
        dead = env.store.db.conn.execute(
            "SELECT local_id, stage, findings FROM rejections ORDER BY local_id"
        ).fetchall()
        assert [(d[0], d[1]) for d in dead] == [("oai:recs:2", "xsd"), ("oai:recs:3", "rules")]
        assert '"step": "rules"' in dead[1][2] and "rec-id-prefix" in dead[1][2]
        assert env.store.db.counts_by_status("recs") == {"active": 2, "rejected": 2}
    finally:
        env.store.close()


def test_a_lenient_source_stores_the_failing_records_with_their_findings(
    tmp_path: Path, peer_url: str
) -> None:
    env = Env(tmp_path, peer_url, "lenient")
    try:
        job = env.run()
        assert {k: v for k, v in job.counters.items() if v} == {"added": 4, "flagged": 2}
        assert {e["stage"] for e in env.store.jobs.errors(job.id)} == {"xsd", "rules"}
        assert env.store.db.counts_by_status("recs") == {"active": 4}
        row = env.store.record("recs", "oai:recs:3")
        assert row is not None and "rec-id-prefix" in row.findings
    finally:
        env.store.close()


def test_by_default_records_failing_a_payload_step_are_stored_flagged(
    tmp_path: Path, peer_url: str
) -> None:
    """The default policy: a record that breaks an XSD or Schematron rule its source must fix
    is mapped anyway and stored, flagged, with the failing step's findings; nothing goes to
    the dead letters."""
    env = Env(tmp_path, peer_url, "flag")
    try:
        assert env.settings.source("recs").policy is ViolationPolicy.FLAG
        job = env.run()
        assert {k: v for k, v in job.counters.items() if v} == {"added": 4, "flagged": 2}
        assert env.store.db.counts_by_status("recs") == {"active": 4}
        flags = dict(env.store.db.conn.execute("SELECT local_id, flagged FROM records"))
        assert flags == {"oai:recs:1": 0, "oai:recs:2": 1, "oai:recs:3": 1, "oai:recs:4": 0}
        assert env.store.db.conn.execute("SELECT count(*) FROM rejections").fetchone() == (0,)
    finally:
        env.store.close()


def test_mapped_dataset_of_the_test_format_is_shacl_conformant() -> None:
    [checked] = process(raw(GOOD), CTX, (ValidationStep("shacl"),)).checked
    assert isinstance(checked.dataset, MappedDataset) and checked.conforms


def test_config_check_compiles_each_chain_and_source_show_lists_the_steps(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from aggregator.cli import main

    steps = (
        "validation = [{ validator = 'xsd', schema = 'schemas/record.xsd' },"
        " { validator = 'schematron', name = 'rules', rules = 'schemas/record.sch' }, 'shacl']\n"
    )
    path = write(tmp_path, SOURCE + steps)
    done = CliRunner().invoke(main, ["-c", str(path), "config", "check"])
    assert done.exit_code == 0, done.output
    assert "checks: xsd -> rules -> shacl" in done.output
    shown = CliRunner().invoke(main, ["-c", str(path), "source", "show", "recs"])
    assert shown.exit_code == 0, shown.output
    validation = json.loads(shown.output)["validation"]
    assert [(s["validator"], s["name"]) for s in validation] == [
        ("xsd", "xsd"),
        ("schematron", "rules"),
        ("shacl", "shacl"),
    ]
    broken = write(tmp_path, SOURCE + steps.replace("record.sch", "broken.sch"))
    done = CliRunner().invoke(main, ["-c", str(broken), "config", "check"])
    assert done.exit_code != 0
    assert "broken.sch cannot be compiled" in done.output


def test_a_schema_that_does_not_compile_fails_the_job_before_the_listing(
    tmp_path: Path, peer_url: str
) -> None:
    env = Env(tmp_path, peer_url, "strict")
    try:
        broken = (ValidationStep("schematron", (("rules", str(DATA / "broken.sch")),)),)
        source = replace(env.settings.source("recs"), validation=broken)
        job = run_source(env.settings, env.store, source, RunOptions(), http=env.http)
        assert job.status == "failed"
        assert "broken.sch cannot be compiled" in job.message
        assert job.listing["pages"] == 0
    finally:
        env.store.close()


def test_editing_a_source_resolves_its_chain_paths_against_the_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from aggregator.cli import main

    steps = "validation = [{ validator = 'xsd', schema = 'schemas/record.xsd' }, 'shacl']\n"
    conf = tmp_path / "conf"
    conf.mkdir()
    path = write(conf, SOURCE + steps)
    monkeypatch.chdir(tmp_path)  # elsewhere: 'schemas/record.xsd' is not there
    done = CliRunner().invoke(
        main, ["-c", str(path), "source", "edit", "recs", "--publisher", "Records Agency"]
    )
    assert done.exit_code == 0, done.output
    assert load_settings(path).source("recs").publisher == "Records Agency"
