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
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.peers.oaipmh import OaiPmhPeer
from aggregator.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.peers.rdf_files import RdfFilesApp
from aggregator.peers.sample_data import generate_dataset, generate_identifier
from aggregator.peers.server import PeerServer

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
            f'[sources.oai]\ntype = "oai-pmh"\nurl = "{oai.url}oai"\n'
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
    from aggregator.deadletter import rejections, revalidate
    from aggregator.models import RawRecord
    from aggregator.pipeline import run_source
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
