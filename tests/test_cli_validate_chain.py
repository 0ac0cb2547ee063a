"""``aggregator validate --profile/--source``: a publisher runs on a file exactly the chain a
harvest runs (payload steps, mapping, SHACL), reads every step's findings, and gets exit 1
exactly when the harvest would reject the record. The last test harvests the same files
through a local WAF peer and compares the store's decisions with the CLI's exit codes."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from aggregator.cli import main
from aggregator.demo.peers.gemini_samples import bundled_gemini_records, generate_gemini_record
from aggregator.demo.peers.server import PeerServer
from aggregator.demo.peers.waf import WafApp
from aggregator.store.records import ReadOnlyStore

BASE = "http://127.0.0.1:8000/"


def bad_language(i: int) -> bytes:
    """Valid ISO 19139 (XSD, Table A.1) but not GEMINI 2.3: metadata language "en"."""
    return generate_gemini_record(i).replace(b'codeListValue="eng"', b'codeListValue="en"', 1)


def bad_schema(i: int) -> bytes:
    """An element the ISO 19139 schema does not allow, before the file identifier."""
    record = generate_gemini_record(i)
    return record.replace(
        b"<gmd:fileIdentifier>", b"<gmd:bogus>x</gmd:bogus><gmd:fileIdentifier>", 1
    )


def no_topic_category(i: int) -> bytes:
    """Schema-valid, but a dataset without a topic category breaks ISO 19139 Table A.1."""
    record = generate_gemini_record(i).decode()
    return re.sub(r"<gmd:topicCategory>.*?</gmd:topicCategory>", "", record).encode()


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def as_json(result: Result) -> dict[str, Any]:
    assert result.output.lstrip().startswith("{"), result.output
    doc: dict[str, Any] = json.loads(result.output)
    return doc


def steps(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["step"], s["status"]) for s in doc["steps"]]


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_gemini_profile_rejects_what_the_harvest_rejects_and_shows_the_finding(
    tmp_path: Path,
) -> None:
    record = write(tmp_path, "record.xml", bad_language(2))
    # the real console entry point: what a publisher types
    cmd = [sys.executable, "-m", "aggregator.cli", "validate", "--from", "iso19139"]
    done = subprocess.run(
        [*cmd, "--profile", "gemini", str(record)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "rejected"
    [finding] = [line.split("\t") for line in lines if line.startswith("violation")]
    assert finding[:3] == ["violation", "gemini-2.3", "gemini-metadata-language"]
    assert finding[3].startswith("line ") and "Metadata language" in finding[5]
    assert "# step 1 iso19139-xsd, payload: passed: no finding" in lines
    assert (
        "# step 3 gemini-2.3 (schematron), payload: failed: 1 violation(s), 0 warning(s)" in lines
    )
    assert "# step 5 shacl, graph: not run" in lines  # a failed payload step stops the chain

    # the same, machine-readable
    doc = as_json(
        run("validate", "--from", "iso19139", "--profile", "gemini", "--json", str(record))
    )
    assert doc["decision"] == "rejected" and doc["datasets"] == []
    assert steps(doc) == [
        ("iso19139-xsd", "passed"),
        ("iso19139-table-a1", "passed"),
        ("gemini-2.3", "failed"),
        ("mapping", "not run"),
        ("shacl", "not run"),
    ]
    [gemini] = doc["steps"][2]["findings"]
    assert (gemini["rule"], gemini["step"], gemini["severity"]) == (
        "gemini-metadata-language", "gemini-2.3", "violation",
    )  # fmt: skip


def test_profile_none_maps_and_reports_shacl_only(tmp_path: Path) -> None:
    record = write(tmp_path, "record.xml", bad_language(2))
    result = run("validate", "--from", "iso19139", "--profile", "none", "--json", str(record))
    assert result.exit_code == 0, result.output
    doc = as_json(result)
    assert [c["validator"] for c in doc["chain"]] == ["shacl"]
    [dataset] = doc["datasets"]
    assert dataset["decision"] == "stored"
    assert [(s["step"], s["status"], s["dataset"]) for s in doc["steps"]] == [
        ("mapping", "passed", None),
        ("shacl", "passed", dataset["dataset"]),
    ]
    assert not any(f["step"] == "gemini-2.3" for f in dataset["findings"])
    assert any(f["step"] == "shacl" for f in dataset["findings"])  # its recommendations


def test_an_xsd_invalid_record_stops_before_schematron(tmp_path: Path) -> None:
    """A failed payload step stops the later payload steps under every policy; a strict
    chain (gemini) then rejects the record, a flagging one (iso19139) maps it and stores it
    flagged, as the harvest does (docs/validation.md: what a violation does to a record)."""
    record = write(tmp_path, "record.xml", bad_schema(3))
    result = run("validate", "--from", "iso19139", "--profile", "gemini", "--json", str(record))
    assert result.exit_code == 1, result.output
    doc = as_json(result)
    assert steps(doc)[0] == ("iso19139-xsd", "failed")
    assert all(status == "not run" for _, status in steps(doc)[1:]), steps(doc)
    assert [f["rule"] for f in doc["steps"][0]["findings"]] == ["SCHEMAV_ELEMENT_CONTENT"]
    assert all(s["findings"] == [] for s in doc["steps"][1:])
    assert doc["decision"] == "rejected"
    result = run("validate", "--from", "iso19139", "--profile", "iso19139", "--json", str(record))
    assert result.exit_code == 0, result.output
    doc = as_json(result)
    assert steps(doc)[:3] == [
        ("iso19139-xsd", "failed"),
        ("iso19139-table-a1", "not run"),
        ("mapping", "passed"),
    ]
    assert doc["decision"] == "stored, flagged"
    [dataset] = doc["datasets"]
    assert "SCHEMAV_ELEMENT_CONTENT" in {f["rule"] for f in dataset["findings"]}
    text = run("validate", "--from", "iso19139", "--profile", "gemini", str(record)).output
    assert "# step 2 iso19139-table-a1 (schematron), payload: not run" in text.splitlines()


def test_an_iso19139_file_gets_the_chain_of_an_iso19139_source(tmp_path: Path) -> None:
    """--normalised without --profile: the chain a source of that format gets by default."""
    record = write(tmp_path, "record.xml", bad_language(2))
    result = run("validate", "--from", "iso19139", "--normalised", "--json", str(record))
    assert result.exit_code == 1, result.output
    assert ("gemini-2.3", "failed") in steps(as_json(result))


def test_profile_lists_and_bad_profiles(tmp_path: Path) -> None:
    record = write(tmp_path, "record.xml", no_topic_category(4))
    result = run(
        "validate", "--from", "iso19139", "--profile", "iso19139,shacl", "--json", str(record)
    )
    doc = as_json(result)
    assert result.exit_code == 0, result.output  # an iso19139 chain flags: stored, flagged
    assert steps(doc)[:3] == [
        ("iso19139-xsd", "passed"),
        ("iso19139-table-a1", "failed"),
        ("mapping", "passed"),
    ]
    assert doc["decision"] == "stored, flagged"
    assert [f["rule"] for f in doc["steps"][1]["findings"]] == ["iso-a1-topic-category"]
    unknown = run("validate", "--from", "iso19139", "--profile", "gemni", str(record))
    assert unknown.exit_code == 2 and "unknown validator 'gemni'" in unknown.output
    both = run("validate", "--profile", "none", "--source", "x", str(record))
    assert both.exit_code == 2 and "not both" in both.output


HOUSE_RULES = """<?xml version="1.0" encoding="UTF-8"?>
<sch:schema xmlns:sch="http://purl.oclc.org/dsdl/schematron" queryBinding="xslt">
  <sch:ns prefix="gmd" uri="http://www.isotc211.org/2005/gmd"/>
  <sch:ns prefix="gco" uri="http://www.isotc211.org/2005/gco"/>
  <sch:pattern id="house">
    <sch:rule context="gmd:MD_Metadata">
      <sch:assert id="house-file-identifier"
          test="starts-with(gmd:fileIdentifier/gco:CharacterString, 'uk-')"
        >Our file identifiers start with 'uk-'.</sch:assert>
    </sch:rule>
  </sch:pattern>
</sch:schema>
"""


def config_file(tmp_path: Path, waf_url: str = "http://127.0.0.1:9/waf/") -> Path:
    (tmp_path / "rules").mkdir(exist_ok=True)
    (tmp_path / "rules" / "house.sch").write_text(HOUSE_RULES, encoding="utf-8")
    (tmp_path / "empty-schemas").mkdir(exist_ok=True)
    path = tmp_path / "aggregator.toml"
    path.write_text(
        f"""[store]
path = "data"
base_iri = "{BASE}"
[http]
allow_private = true
retries = 0
[harvest]
workers = 0

[sources.strict]        # no validation named: an iso19139 source gets the gemini chain
type = "waf"
url = "{waf_url}"
format = "iso19139"

[sources.lenient]
type = "waf"
url = "{waf_url}"
format = "iso19139"
validation = "iso19139"
lenient = true

[sources.house]         # an explicit chain: a profile, a rule file of its own, shacl
type = "waf"
url = "{waf_url}"
format = "iso19139"
strict = true          # its own chain, held as strictly as the gemini one
validation = [
    "iso19139",
    {{ validator = "schematron", rules = "rules/house.sch", name = "house-rules" }},
    "shacl",
]

[sources.own-schemas]   # the ISO schemas from a directory of its own (here: an empty one)
type = "waf"
url = "{waf_url}"
format = "iso19139"
validation = [{{ validator = "iso19139-xsd", schemas = "empty-schemas" }}, "shacl"]
""",
        encoding="utf-8",
    )
    return path


def test_source_runs_its_own_chain_with_its_options(tmp_path: Path) -> None:
    config = config_file(tmp_path)
    record = write(tmp_path, "record.xml", bad_language(2))

    house = run("-c", str(config), "validate", "--source", "house", "--json", str(record))
    assert house.exit_code == 1, house.output
    doc = as_json(house)
    assert steps(doc) == [
        ("iso19139-xsd", "passed"),
        ("iso19139-table-a1", "passed"),  # not GEMINI: the language code is not checked
        ("house-rules", "failed"),
        ("mapping", "not run"),
        ("shacl", "not run"),
    ]
    [finding] = doc["steps"][2]["findings"]
    assert finding["rule"] == "house-file-identifier" and finding["step"] == "house-rules"
    assert doc["chain"][2]["options"]["rules"] == str(tmp_path / "rules" / "house.sch")

    strict = as_json(
        run("-c", str(config), "validate", "--source", "strict", "--json", str(record))
    )
    assert ("gemini-2.3", "failed") in steps(strict) and strict["decision"] == "rejected"

    # lenient: the failing step's findings are kept and the record is stored, as a harvest does
    lenient = run("-c", str(config), "validate", "--source", "lenient", str(record))
    assert lenient.exit_code == 0, lenient.output
    assert lenient.output.splitlines()[-1] == "stored"
    invalid = write(tmp_path, "invalid.xml", bad_schema(3))
    lenient = run("-c", str(config), "validate", "--source", "lenient", "--json", str(invalid))
    assert lenient.exit_code == 0, lenient.output
    doc = as_json(lenient)
    assert steps(doc)[:3] == [
        ("iso19139-xsd", "failed"), ("iso19139-table-a1", "not run"), ("mapping", "passed"),
    ]  # fmt: skip
    [dataset] = doc["datasets"]
    assert dataset["decision"] == "stored, flagged"  # lenient: stored with its findings
    assert any(f["rule"] == "SCHEMAV_ELEMENT_CONTENT" for f in dataset["findings"])
    assert dataset["dataset"].startswith(BASE + "dataset/lenient/")  # the source's context

    # its schema directory: the chain fails to build, as the harvest's job would
    own = run("-c", str(config), "validate", "--source", "own-schemas", str(record))
    assert own.exit_code == 2 and "empty-schemas" in own.output, own.output

    mismatch = run(
        "-c", str(config), "validate", "--source", "house", "--from", "dcat", str(record)
    )
    assert mismatch.exit_code == 2 and "harvests iso19139 records" in mismatch.output
    unknown = run("-c", str(config), "validate", "--source", "nope", str(record))
    assert unknown.exit_code == 2 and "no source named 'nope'" in unknown.output


@pytest.fixture
def waf_files() -> dict[str, bytes]:
    files = {name: data for name, data in bundled_gemini_records()}
    files |= {
        "valid-0.xml": generate_gemini_record(0),
        "language-1.xml": bad_language(1),
        "schema-2.xml": bad_schema(2),
        "topic-3.xml": no_topic_category(3),
        "broken-4.xml": generate_gemini_record(4)[:-40],  # not well-formed
    }
    return files


@pytest.fixture
def waf(waf_files: dict[str, bytes]) -> Iterator[str]:
    app = WafApp()
    for name, data in waf_files.items():
        app.put(name, data, datetime(2026, 3, 14, tzinfo=UTC))
    with PeerServer(app) as server:
        yield server.url + "waf/"


def test_harvest_and_cli_agree_on_the_same_records(
    tmp_path: Path, waf: str, waf_files: dict[str, bytes]
) -> None:
    config = config_file(tmp_path, waf)
    sources = ("strict", "lenient", "house")
    harvest = run("-c", str(config), "harvest", *sources)
    assert harvest.exit_code == 3, harvest.output  # 3: it ran, and rejected some records
    assert harvest.output.count(": succeeded") == len(sources), harvest.output
    store = ReadOnlyStore(tmp_path / "data", BASE)
    try:
        by_payload = {
            (row.source, row.payload_sha): row.status
            for source in sources
            for row in store.db.iter_records(source)
        }
    finally:
        store.close()
    folder = tmp_path / "files"
    folder.mkdir()
    decisions: dict[str, dict[str, tuple[str, str]]] = {}
    for source in sources:
        for name, data in waf_files.items():
            harvested = by_payload[(source, hashlib.sha256(data).hexdigest())]
            result = run(
                "-c", str(config), "validate", "--source", source, str(write(folder, name, data))
            )
            cli = {0: "stored", 1: "rejected"}[result.exit_code]
            assert result.output.splitlines()[-1] in {cli, f"{cli}, flagged"}
            decisions.setdefault(source, {})[name] = (
                "stored" if harvested == "active" else harvested, cli,
            )  # fmt: skip
    disagree = {s: {n: d for n, d in ds.items() if d[0] != d[1]} for s, ds in decisions.items()}
    assert disagree == {s: {} for s in sources}, decisions
    # and the set is not trivial: each source stores some and rejects some, differently
    outcomes = {s: {n: d[0] for n, d in ds.items()} for s, ds in decisions.items()}
    assert outcomes["strict"]["language-1.xml"] == "rejected"
    assert outcomes["lenient"]["language-1.xml"] == "stored"
    assert outcomes["lenient"]["schema-2.xml"] == "stored"  # lenient: mapped anyway
    assert outcomes["strict"]["topic-3.xml"] == "rejected"
    assert all(o["broken-4.xml"] == "rejected" for o in outcomes.values())
    assert all(o["valid-0.xml"] == "stored" for o in (outcomes["strict"], outcomes["lenient"]))
    assert outcomes["house"]["valid-0.xml"] == "rejected"  # the house rule
