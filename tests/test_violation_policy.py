"""What a violation does to a record (aggregator/validate/policy.py, docs/validation.md).

End to end through a local RDF dump peer: a dataset without ``dct:description`` (a DCAT-AP
rule its source must fix) is stored, flagged, republished in OAI-PMH and SPARQL with its
findings and shown in the dashboard; one without a title (unusable) is rejected; a strict
source rejects both. The rule itself, unit by unit; the migration of a store made before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from dashboard_site import free_port, serving
from sickle import Sickle
from SPARQLWrapper import JSON, SPARQLWrapper
from test_store_migrations import connect, load, migrate_one

from aggregator.config import ValidationStep, ViolationPolicy, load_settings, violation_policy
from aggregator.core.errors import ConfigError
from aggregator.core.models import Finding, Severity, Stage
from aggregator.core.vocab import DCT
from aggregator.demo.peers.rdf_files import RdfFilesApp
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore
from aggregator.validate.policy import UNUSABLE, Verdict, decide, unusable
from aggregator.validate.quality.runner import run_quality

EX = "https://portal.example.org/dataset/"
DOCUMENT = f"""
@prefix dcat: <http://www.w3.org/ns/dcat#> .
@prefix dct: <http://purl.org/dc/terms/> .
<https://portal.example.org/catalog> a dcat:Catalog ;
  dct:title "Example portal" ; dct:description "Three datasets, two of them incomplete." ;
  dcat:dataset <{EX}complete>, <{EX}undescribed>, <{EX}untitled> .
<{EX}complete> a dcat:Dataset ;
  dct:title "Bathing water quality"@en ;
  dct:description "Samples taken at the designated bathing sites."@en .
<{EX}undescribed> a dcat:Dataset ;
  dct:title "Cycle paths"@en .
<{EX}untitled> a dcat:Dataset ;
  dct:description "A dataset its publisher forgot to name."@en .
"""
QUERY = """
PREFIX dqv: <http://www.w3.org/ns/dqv#>
PREFIX oa: <http://www.w3.org/ns/oa#>
PREFIX sh: <http://www.w3.org/ns/shacl#>
PREFIX foaf: <http://xmlns.com/foaf/0.1/>
SELECT ?dataset ?path WHERE {
  ?record dqv:hasQualityAnnotation ?flag ; foaf:primaryTopic ?dataset .
  ?flag a dqv:QualityAnnotation ; oa:hasTarget ?dataset ; oa:hasBody ?report .
  ?report sh:conforms false ; sh:result ?result .
  ?result sh:resultSeverity sh:Violation ; sh:resultPath ?path .
}
"""


@dataclass
class Harvested:
    config: Path
    port: int


def configure(tmp: Path, url: str, extra: str = "") -> tuple[Path, int]:
    port = free_port()
    config = tmp / "aggregator.toml"
    config.write_text(
        f'[store]\npath = "data"\nbase_iri = "http://127.0.0.1:{port}/"\n'
        "[http]\nallow_private = true\nretries = 0\n[harvest]\nworkers = 0\n"
        f'[sources.portal]\ntype = "rdf-dump"\nurl = "{url}"\nschedule = "manual"\n{extra}'
        "[serve]\ndashboard_public = true\n",
        encoding="utf-8",
    )
    return config, port


@pytest.fixture
def dump_url() -> Iterator[str]:
    files = RdfFilesApp()
    files.put("/catalog.ttl", DOCUMENT.encode(), "text/turtle")
    with PeerServer(files) as server:
        yield f"{server.url}catalog.ttl"


def harvest(config: Path) -> dict[str, int]:
    settings = load_settings(config)
    with RecordStore(settings.store_path, settings.base_iri) as store:
        job = run_source(settings, store, "portal", RunOptions(), http=HttpClient(settings.http))
    assert job.status == "succeeded", job.message
    return {k: v for k, v in job.counters.items() if v}


def states(config: Path) -> dict[str, tuple[str, int]]:
    settings = load_settings(config)
    db = sqlite3.connect(settings.store_path / "state.sqlite3")
    try:
        rows = db.execute("SELECT dataset_iri, local_id, status, flagged FROM records")
        return {
            (iri or lid).rsplit("/", 1)[-1]: (status, flagged) for iri, lid, status, flagged in rows
        }
    finally:
        db.close()


def test_a_record_without_description_is_stored_flagged_and_published_with_its_findings(
    tmp_path: Path, dump_url: str
) -> None:
    config, port = configure(tmp_path, dump_url)
    assert harvest(config) == {"added": 2, "flagged": 1, "rejected": 1}
    assert states(config) == {
        "complete": ("active", 0),
        "undescribed": ("active", 1),
        "untitled": ("rejected", 0),
    }
    settings = load_settings(config)
    with RecordStore(settings.store_path, settings.base_iri) as store:
        (dead,) = store.db.conn.execute("SELECT local_id, findings FROM rejections").fetchall()
        assert dead[0] == f"{EX}untitled" and "dataset-without-title" in dead[1]
        # the quality scores count the flagged record as not DCAT-AP compliant
        quality = run_quality(settings, store, keep_measurements=False).per_source["portal"]
        compliance = next(i for i in quality.indicators if i.key == "dcatApCompliance")
        assert (compliance.met, quality.datasets) == (1, 2)
    base = f"http://127.0.0.1:{port}/"
    with serving(settings, port, scheduler=False):
        # OAI-PMH: both stored datasets are republished, the untitled one is not
        listed = Sickle(f"{base}oai").ListRecords(metadataPrefix="dcat_ap")
        xml = " ".join(r.raw for r in listed)
        assert f"{EX}undescribed" in xml and f"{EX}complete" in xml
        assert f"{EX}untitled" not in xml
        # SPARQL: the flag and its findings on the catalogue record
        sparql = SPARQLWrapper(f"{base}sparql")
        sparql.setQuery(QUERY)
        sparql.setReturnFormat(JSON)
        rows = sparql.query().convert()["results"]["bindings"]  # type: ignore[index]
        assert {(r["dataset"]["value"], r["path"]["value"]) for r in rows} == {
            (f"{EX}undescribed", DCT + "description")
        }
        # the dashboard: counted on the source page, a facet of the search, the findings shown
        source_page = requests.get(f"{base}sources/portal", timeout=30).text
        assert 'id="flagged"' in source_page and ">1</a> stored with violations" in source_page
        assert "flag: records that cannot be used" in source_page
        flagged = requests.get(f"{base}datasets?conformance=flagged", timeout=30).text
        assert "Cycle paths" in flagged and "Bathing water quality" not in flagged
        html = {"Accept": "text/html"}
        page = requests.get(f"{base}dataset?iri={EX}undescribed", headers=html, timeout=30)
        assert page.status_code == 200 and 'id="flagged"' in page.text
        assert DCT + "description" in page.text
        clean = requests.get(f"{base}dataset?iri={EX}complete", headers=html, timeout=30).text
        assert 'id="flagged"' not in clean


def test_a_strict_source_rejects_every_record_with_a_violation(
    tmp_path: Path, dump_url: str
) -> None:
    config, _ = configure(tmp_path, dump_url, "strict = true\n")
    assert load_settings(config).source("portal").policy is ViolationPolicy.STRICT
    assert harvest(config) == {"added": 1, "rejected": 2}
    assert states(config) == {
        "complete": ("active", 0),
        "undescribed": ("rejected", 0),
        "untitled": ("rejected", 0),
    }


def test_a_source_that_fixes_its_record_clears_the_flag(tmp_path: Path) -> None:
    files = RdfFilesApp()
    files.put("/catalog.ttl", DOCUMENT.encode(), "text/turtle")
    with PeerServer(files) as server:
        config, _ = configure(tmp_path, f"{server.url}catalog.ttl")
        harvest(config)
        fixed = DOCUMENT.replace(
            'dct:title "Cycle paths"@en .',
            'dct:title "Cycle paths"@en ; dct:description "Every cycle path of the city."@en .',
        )
        files.put("/catalog.ttl", fixed.encode(), "text/turtle")
        counts = harvest(config)
    assert counts.get("flagged", 0) == 0 and counts["updated"] == 1
    assert states(config)["undescribed"] == ("active", 0)


def test_strict_and_lenient_together_are_refused(tmp_path: Path) -> None:
    config, _ = configure(tmp_path, "http://127.0.0.1:9/x.ttl", "strict = true\nlenient = true\n")
    with pytest.raises(ConfigError, match="both strict and lenient"):
        load_settings(config)
    config, _ = configure(tmp_path, "http://127.0.0.1:9/x.ttl", 'strict = "yes"\n')
    with pytest.raises(ConfigError, match="strict must be true or false"):
        load_settings(config)


# -- the rule ---------------------------------------------------------------------------------
def violation(stage: Stage, path: str | None = None) -> Finding:
    return Finding(stage, Severity.VIOLATION, "rule", "message", path=path)


NO_DESCRIPTION = violation(Stage.SHACL, DCT + "description")
NO_TITLE = violation(Stage.SHACL, DCT + "title")


@pytest.mark.parametrize(
    ("findings", "flag", "strict", "lenient"),
    [
        ((), Verdict.STORE, Verdict.STORE, Verdict.STORE),
        ((Finding(Stage.SHACL, Severity.WARNING, "r", "m"),), *[Verdict.STORE] * 3),
        ((NO_DESCRIPTION,), Verdict.FLAG, Verdict.REJECT, Verdict.FLAG),
        ((violation(Stage.XSD),), Verdict.FLAG, Verdict.REJECT, Verdict.FLAG),
        ((violation(Stage.SCHEMATRON),), Verdict.FLAG, Verdict.REJECT, Verdict.FLAG),
        ((NO_DESCRIPTION, NO_TITLE), Verdict.REJECT, Verdict.REJECT, Verdict.FLAG),
        ((violation(Stage.MAP),), Verdict.REJECT, Verdict.REJECT, Verdict.FLAG),
        ((violation(Stage.PARSE),), Verdict.REJECT, Verdict.REJECT, Verdict.FLAG),
        ((violation(Stage.CHECK),), Verdict.REJECT, Verdict.REJECT, Verdict.FLAG),
    ],
)
def test_the_verdict_of_each_policy(
    findings: tuple[Finding, ...], flag: Verdict, strict: Verdict, lenient: Verdict
) -> None:
    assert decide(findings, ViolationPolicy.FLAG) is flag
    assert decide(findings, ViolationPolicy.STRICT) is strict
    assert decide(findings, ViolationPolicy.LENIENT) is lenient


def test_the_gemini_chain_is_strict_unless_the_source_says_otherwise() -> None:
    gemini = (ValidationStep("schematron", name="gemini-2.3"), ValidationStep("shacl"))
    plain = (ValidationStep("shacl"),)
    assert violation_policy(gemini) is ViolationPolicy.STRICT
    assert violation_policy(gemini, strict=False) is ViolationPolicy.FLAG
    assert violation_policy(plain) is ViolationPolicy.FLAG
    assert violation_policy(plain, strict=True) is ViolationPolicy.STRICT
    assert violation_policy(gemini, lenient=True) is ViolationPolicy.LENIENT


def test_the_unusable_rules_are_one_list_and_name_why() -> None:
    assert all(rule.why for rule in UNUSABLE)
    assert unusable(NO_TITLE) and not unusable(NO_DESCRIPTION)
    assert not unusable(Finding(Stage.MAP, Severity.WARNING, "r", "a note of the mapper"))


# -- the migration ------------------------------------------------------------------------------
def test_migration_4_flags_the_records_a_lenient_source_stored_with_violations(
    tmp_path: Path,
) -> None:
    conn = connect(load("v2.sql", tmp_path / "state.sqlite3"))
    migrate_one(conn, 2)
    violating = '[{"stage": "shacl", "severity": "violation", "rule": "r", "message": "m"}]'
    conn.execute("UPDATE records SET findings = ? WHERE id = 2", (violating,))
    conn.execute("UPDATE records SET findings = ? WHERE status = 'rejected'", (violating,))
    migrate_one(conn, 3)
    flags = dict(conn.execute("SELECT id, flagged FROM records"))
    statuses = dict(conn.execute("SELECT id, status FROM records"))
    # the active record with a violation is flagged; warnings only, or rejected: not
    assert flags[2] == 1 and statuses[2] == "active"
    assert all(flags[i] == 0 for i in flags if i != 2)
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "records_flagged" in indexes
