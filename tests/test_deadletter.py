"""The dead-letter store: every failure kind lands with its step, findings and payload, and
revalidation after a rule change moves records into the store."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from storecheck import make_unversioned

from aggregator.cli import main
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.rdf_files import RdfFilesApp
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer

T0 = datetime(2024, 6, 1, tzinfo=UTC)
RDF = "xmlns:rdf='http://www.w3.org/1999/02/22-rdf-syntax-ns#'"
# well-formed XML but not RDF/XML: a property with both rdf:resource and text
NOT_RDF = (
    f"<rdf:RDF {RDF} xmlns:d='http://purl.org/dc/terms/'><rdf:Description rdf:about='http://x/1'>"
    "<d:title rdf:resource='http://a'>text</d:title></rdf:Description></rdf:RDF>"
)
NO_DATASET = f"<rdf:RDF {RDF}/>"
# conforms except for a byte size the shapes reject (a violation of the SHACL step)
BAD_SIZE = re.sub(rb"(<dcat:byteSize[^>]*>)\d+<", rb"\g<1>412 kB<", generate_dataset(5), count=1)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Path, OaiPmhPeer, RdfFilesApp]]:
    items = MemoryItems(
        [
            OaiItem(generate_identifier(i), T0 + timedelta(hours=i), (), False, generate_dataset(i))
            for i in range(3)
        ]
        + [
            OaiItem("oai:x:not-rdf", T0, (), False, NOT_RDF.encode()),
            OaiItem("oai:x:no-dataset", T0, (), False, NO_DATASET.encode()),
        ]
    )
    peer = OaiPmhPeer(items)
    files = RdfFilesApp()
    files.put(
        "/broken.ttl", b"@prefix dcat: <http://www.w3.org/ns/dcat#> .\n<x> a dcat:", "text/turtle"
    )
    with PeerServer(peer) as oai, PeerServer(files) as dump:
        config = tmp_path / "aggregator.toml"
        config.write_text(
            '[store]\npath = "data"\n[http]\nallow_private = true\nretries = 0\n'
            "[harvest]\nworkers = 0\n"
            # strict: a record with any violation is rejected (the dead letters' subject)
            f'[sources.oai]\ntype = "oai-pmh"\nurl = "{oai.url}oai"\nstrict = true\n'
            f'[sources.dump]\ntype = "rdf-dump"\nurl = "{dump.url}broken.ttl"\n',
            encoding="utf-8",
        )
        yield config, peer, files


def cli(config: Path, *args: str) -> str:
    result = CliRunner().invoke(main, ["-c", str(config), *args], catch_exceptions=False)
    return result.output


def test_each_failure_kind_lands_with_its_step_findings_and_payload(
    setup: tuple[Path, OaiPmhPeer, RdfFilesApp],
) -> None:
    config, _, _ = setup
    cli(config, "harvest", "oai", "dump")
    listed = cli(config, "rejected", "list")
    rows = [line.split("\t") for line in listed.strip().splitlines()]
    by_id = {r[2]: r for r in rows}
    assert by_id["oai:x:not-rdf"][4] == "parse"
    assert by_id["oai:x:no-dataset"][4] == "map"
    page = next(r for r in rows if r[1] == "dump")
    assert page[4] == "parse" and page[2].endswith("broken.ttl")
    shown = json.loads(cli(config, "rejected", "show", by_id["oai:x:not-rdf"][0]))
    assert shown["findings"][0]["severity"] == "violation"
    assert shown["findings"][0]["message"]
    payload = (
        CliRunner()
        .invoke(
            main, ["-c", str(config), "rejected", "show", by_id["oai:x:not-rdf"][0], "--payload"]
        )
        .stdout_bytes
    )
    # the OAI harvester keeps the metadata element as lxml serialises it (quotes normalised)
    assert payload == NOT_RDF.replace("'", '"').encode()
    exported = list(
        csv.DictReader(io.StringIO(cli(config, "rejected", "export", "--format", "csv")))
    )
    assert {r["local_id"] for r in exported} >= {"oai:x:not-rdf", "oai:x:no-dataset"}
    data = json.loads(cli(config, "rejected", "export", "--format", "json", "--source", "oai"))
    assert {d["source"] for d in data} == {"oai"}
    per_job = cli(config, "rejected", "list", "--job", "2")
    assert per_job.strip() and all("\tdump\t" in line for line in per_job.strip().splitlines())


def test_an_active_record_keeps_its_good_version_and_the_bad_one_is_kept(
    setup: tuple[Path, OaiPmhPeer, RdfFilesApp],
) -> None:
    config, peer, _ = setup
    cli(config, "harvest", "oai")
    ident = generate_identifier(1)
    peer.items.put(OaiItem(ident, T0 + timedelta(days=2), (), False, NO_DATASET.encode()))  # type: ignore[attr-defined]
    cli(config, "harvest", "oai", "--full")
    assert f"oai\t{ident}\tactive" in cli(config, "records", "--source", "oai")
    assert ident in cli(config, "rejected", "list", "--source", "oai")


def test_revalidate_after_a_rule_change_stores_what_now_passes(
    setup: tuple[Path, OaiPmhPeer, RdfFilesApp], tmp_path: Path
) -> None:
    config, peer, _ = setup
    ident = generate_identifier(9)
    peer.items.put(OaiItem(ident, T0, (), False, BAD_SIZE))  # type: ignore[attr-defined]
    cli(config, "harvest", "oai")
    listed = cli(config, "rejected", "list", "--source", "oai")
    assert f"{ident}\tjob 1\tshacl" in listed
    # the operator swaps in a profile without the byte-size rule: the record now passes
    lax = tmp_path / "lax.ttl"
    lax.write_text(
        "@prefix sh: <http://www.w3.org/ns/shacl#> .\n"
        "<https://example.org/lax#Dataset> a sh:NodeShape ;\n"
        "  sh:targetClass <http://www.w3.org/ns/dcat#Dataset> ;\n"
        "  sh:property [ sh:path <http://purl.org/dc/terms/title> ; sh:minCount 1 ] .\n"
    )
    config.write_text(config.read_text() + "[validation.shacl]\nshapes = ['lax.ttl']\n")
    out = cli(config, "rejected", "revalidate", "--source", "oai")
    assert "succeeded" in out and "added=1" in out
    assert f"oai\t{ident}\tactive" in cli(config, "records", "--source", "oai")
    still = cli(config, "rejected", "list", "--source", "oai")
    assert ident not in still  # closed
    assert "oai:x:not-rdf" in still  # still broken: a new rejection from the revalidation job
    assert "retried in job" in cli(config, "rejected", "list", "--all", "--source", "oai")


def test_revalidate_after_a_mapping_fix(tmp_path: Path) -> None:
    """A mapper that could not read a record is fixed (a new rule); revalidation stores it."""
    import plugins_for_tests as plugins

    from aggregator.config import HarvestSettings, Settings, SourceConfig
    from aggregator.core.models import RawRecord
    from aggregator.jobs.deadletter import rejections, revalidate
    from aggregator.jobs.pipeline import run_source
    from aggregator.store.records import RecordStore

    plugins.register()
    ok = (
        "<http://example.org/d1> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
        " <http://www.w3.org/ns/dcat#Dataset> .\n"
    )
    # a source that writes its datasets with a typo the mapper does not know yet
    typo = ok.replace("dcat#Dataset", "dcat#Datset")
    raw = RawRecord("s", "r1", "test-nt", typo.encode(), "application/n-triples", datestamp=T0)
    plugins.FEEDS["s"] = ([raw], True)
    src = SourceConfig(
        name="s", type="memory", url="http://127.0.0.1/", format="test-nt", validation=()
    )
    settings = Settings(
        None,
        tmp_path / "st",
        "http://127.0.0.1:8000/",
        harvest=HarvestSettings(workers=0),
        sources={"s": src},
    )
    plugins.NTriplesMapper.fix_typos = False
    with RecordStore(settings.store_path, settings.base_iri) as store:
        job = run_source(settings, store, "s")
        assert job.counters["rejected"] == 1
        assert [r.stage for r in rejections(store, source="s")] == ["map"]
        plugins.NTriplesMapper.fix_typos = True  # the mapping fix
        try:
            (again,) = revalidate(settings, store, source="s")
        finally:
            plugins.NTriplesMapper.fix_typos = False
        assert again.counters["added"] == 1
        row = store.record("s", "r1")
        assert row is not None and row.status == "active"
        assert rejections(store, source="s") == []


def run(config: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["-c", str(config), *args], catch_exceptions=False)


def open_rejections(config: Path, ident: str, *extra: str) -> list[list[str]]:
    listed = cli(config, "rejected", "list", "--source", "oai", *extra)
    return [line.split("\t") for line in listed.splitlines() if f"\t{ident}\t" in line]


def test_a_record_that_fails_again_updates_its_one_open_rejection(
    setup: tuple[Path, OaiPmhPeer, RdfFilesApp],
) -> None:
    config, peer, _ = setup
    ident = "oai:x:not-rdf"
    assert run(config, "harvest", "oai").exit_code == 3  # job 1: rejected (parse)
    (first,) = open_rejections(config, ident)
    assert (first[3], first[4]) == ("job 1", "parse")
    # the source changes the record, and it fails again, at another step
    later = T0 + timedelta(days=1)
    peer.items.put(OaiItem(ident, later, (), False, NO_DATASET.encode()))  # type: ignore[attr-defined]
    assert run(config, "harvest", "oai", "--full").exit_code == 3  # job 2
    (again,) = open_rejections(config, ident)
    assert again[0] == first[0]  # the same rejection, brought up to date
    assert (again[3], again[4]) == ("job 2", "map")
    shown = json.loads(cli(config, "rejected", "show", again[0]))
    assert shown["datestamp"] == later.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert [f["rule"] for f in shown["findings"]] == ["mappingError"]
    payload = run(config, "rejected", "show", again[0], "--payload").stdout_bytes
    assert payload == NO_DATASET.replace("'", '"').encode()
    assert run(config, "harvest", "oai", "--full", "--force").exit_code == 3  # job 3, same date
    (forced,) = open_rejections(config, ident, "--all")  # no closed copies pile up either
    assert (forced[0], forced[3]) == (first[0], "job 3")
    # fixed at the source: stored, and its rejection is closed by the job that stored it
    peer.items.put(OaiItem(ident, later + timedelta(days=1), (), False, generate_dataset(7)))  # type: ignore[attr-defined]
    run(config, "harvest", "oai", "--full")  # job 4
    assert f"oai\t{ident}\tactive" in cli(config, "records", "--source", "oai")
    assert open_rejections(config, ident) == []
    (closed,) = open_rejections(config, ident, "--all")
    assert "(retried in job 4)" in closed[5]


def test_an_older_store_keeps_one_open_rejection_per_record(
    setup: tuple[Path, OaiPmhPeer, RdfFilesApp],
) -> None:
    """A store made when every failure opened a rejection: when a writer opens it, the older
    open ones of a record are closed as superseded by the job of its newest."""
    import sqlite3

    config, _, _ = setup
    cli(config, "harvest", "oai")
    db = config.parent / "data" / "state.sqlite3"
    con = sqlite3.connect(db)
    with con:
        con.execute("DROP INDEX rejections_open_record")
        con.execute("DELETE FROM meta WHERE key = 'one_open_rejection'")
        make_unversioned(con)  # a store made before schema versions
        con.execute(  # a second, newer rejection of the same record by a job 7
            "INSERT INTO rejections (source, local_id, job_id, stage, payload_sha, media_type,"
            " format, url, datestamp, is_collection, findings, created)"
            " SELECT source, local_id, 7, stage, payload_sha, media_type, format, url, datestamp,"
            " is_collection, findings, created FROM rejections WHERE local_id = 'oai:x:not-rdf'"
        )
    con.close()
    run(config, "harvest", "oai")  # the writer opens the store (read commands only read it)
    (newest,) = open_rejections(config, "oai:x:not-rdf")
    assert newest[3] == "job 7"
    assert "(retried in job 7)" in " ".join(open_rejections(config, "oai:x:not-rdf", "--all")[0])


def test_rejected_list_shows_the_violation_that_caused_the_rejection(
    setup: tuple[Path, OaiPmhPeer, RdfFilesApp],
) -> None:
    config, peer, _ = setup
    ident = generate_identifier(9)
    peer.items.put(OaiItem(ident, T0, (), False, BAD_SIZE))  # type: ignore[attr-defined]
    cli(config, "harvest", "oai")
    (row,) = open_rejections(config, ident)
    findings = json.loads(cli(config, "rejected", "show", row[0]))["findings"]
    assert findings[0]["severity"] == "info"  # the mapper's notes come first ...
    cause = next(f for f in findings if f["severity"] == "violation")
    assert "byteSize" in cause["rule"]
    assert row[6] == f"{cause['rule']}: {cause['message']}"  # ... the list shows the cause
    (parse,) = open_rejections(config, "oai:x:not-rdf")
    (broken,) = json.loads(cli(config, "rejected", "show", parse[0]))["findings"]
    assert parse[6] == f"parseError: {broken['message']}"


def test_revalidate_exits_non_zero_when_records_are_rejected_again(
    setup: tuple[Path, OaiPmhPeer, RdfFilesApp], tmp_path: Path
) -> None:
    config, peer, _ = setup
    ident = generate_identifier(9)
    peer.items.put(OaiItem(ident, T0, (), False, BAD_SIZE))  # type: ignore[attr-defined]
    cli(config, "harvest", "oai")
    still = run(config, "rejected", "revalidate", "--source", "oai")  # nothing has changed
    assert still.exit_code == 3, still.output
    assert "rejected=3" in still.output
    assert len(cli(config, "rejected", "list", "--source", "oai").splitlines()) == 3
    # the source fixes the two records the mapper could not read (a harvest stores them and
    # closes their rejections) and the operator drops the byte-size rule: all pass
    lax = tmp_path / "lax.ttl"
    lax.write_text(
        "@prefix sh: <http://www.w3.org/ns/shacl#> .\n"
        "<https://example.org/lax#Dataset> a sh:NodeShape ;\n"
        "  sh:targetClass <http://www.w3.org/ns/dcat#Dataset> ;\n"
        "  sh:property [ sh:path <http://purl.org/dc/terms/title> ; sh:minCount 1 ] .\n"
    )
    config.write_text(config.read_text() + "[validation.shacl]\nshapes = ['lax.ttl']\n")
    for i, bad in enumerate(("oai:x:not-rdf", "oai:x:no-dataset")):
        peer.items.put(OaiItem(bad, T0 + timedelta(days=1), (), False, generate_dataset(20 + i)))  # type: ignore[attr-defined]
    fixed = run(config, "harvest", "oai", "--full")  # the third is skipped by date
    assert fixed.exit_code == 0 and "added=2" in fixed.output, fixed.output
    assert len(cli(config, "rejected", "list", "--source", "oai").splitlines()) == 1
    passed = run(config, "rejected", "revalidate", "--source", "oai")
    assert passed.exit_code == 0, passed.output
    assert "added=1" in passed.output
    assert cli(config, "rejected", "list", "--source", "oai") == ""
    assert run(config, "rejected", "revalidate").output.strip() == "no open rejections"
