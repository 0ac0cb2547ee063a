"""The source's registered publisher fills ``dct:publisher`` for every format when the mapped
dataset names none (aggregator.mapping.publisher, applied in jobs/processing.py), with an INFO
finding; a dataset's own publisher wins; the MQA publisher indicator counts it; and a CKAN
source harvested end to end through the local CKAN peer stores it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyoxigraph import RdfFormat, parse

from aggregator.cli import main
from aggregator.config import load_settings
from aggregator.core.models import RawRecord, Severity
from aggregator.demo.peers.ckan import CkanPeer, MemoryCatalogue
from aggregator.demo.peers.ckan_data import generate_package
from aggregator.demo.peers.metashare import sample_xml, storage_id
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.processing import process
from aggregator.mapping.base import MappingContext, canonical_ntriples, content_hash
from aggregator.mapping.publisher import publisher_iri, with_source_publisher
from aggregator.plugin import mappers
from aggregator.store.records import RecordStore
from aggregator.validate.quality import assess

BASE = "http://agg.example/"
CTX = MappingContext(BASE, "portal", "City Statistics Office")
DCT = "http://purl.org/dc/terms/"
FOAF = "http://xmlns.com/foaf/0.1/"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"


def orphan_package(i: int = 0) -> dict[str, object]:
    """A CKAN package without an organization (nor publisher fields): no publisher of its own."""
    package = copy.deepcopy(generate_package(i))
    del package["organization"]
    package["owner_org"] = None
    return package


def ckan_raw(package: dict[str, object]) -> RawRecord:
    body = json.dumps(package).encode()
    return RawRecord("portal", str(package["id"]), "ckan", body, "application/json")


def publisher_triples(ntriples: bytes, dataset_iri: str) -> set[tuple[str, str, str]]:
    """(subject, predicate, object) of the dataset's dct:publisher and what the graph says of it."""
    triples = list(parse(ntriples, RdfFormat.N_TRIPLES))
    agents = {
        t.object
        for t in triples
        if t.subject.value == dataset_iri and t.predicate.value == DCT + "publisher"
    }
    return {
        (str(t.subject), str(t.predicate), str(t.object))
        for t in triples
        if t.object in agents or t.subject in agents
    }


def test_a_ckan_package_without_a_publisher_gets_the_sources() -> None:
    [mapped] = mappers.get("ckan")().map(ckan_raw(orphan_package()), CTX)
    assert not publisher_triples(mapped.ntriples, mapped.dataset_iri)
    done = with_source_publisher(mapped, CTX)
    agent = f"<{publisher_iri(CTX, 'City Statistics Office')}>"
    assert agent.startswith(f"<{BASE}publisher/portal/")  # one agent for the whole source
    assert publisher_triples(done.ntriples, done.dataset_iri) == {
        (f"<{done.dataset_iri}>", f"<{DCT}publisher>", agent),
        (agent, f"<{RDF_TYPE}>", f"<{FOAF}Agent>"),
        (agent, f"<{FOAF}name>", '"City Statistics Office"'),
    }
    # still canonical: sorted lines, the same labelling, its hash
    assert done.ntriples == canonical_ntriples(parse(done.ntriples, RdfFormat.N_TRIPLES))
    assert done.content_hash == content_hash(done.ntriples)
    [finding] = [f for f in done.findings if f.rule == "publisher-from-source"]
    assert finding.severity is Severity.INFO
    assert finding.location == done.dataset_iri and finding.path == DCT + "publisher"
    assert "'City Statistics Office'" in finding.message


def test_a_dataset_with_its_own_publisher_keeps_it_alone() -> None:
    [mapped] = mappers.get("ckan")().map(ckan_raw(generate_package(0)), CTX)
    own = publisher_triples(mapped.ntriples, mapped.dataset_iri)
    assert any('"City of' in o for _, _, o in own)
    assert with_source_publisher(mapped, CTX) is mapped


def test_without_a_registered_publisher_nothing_is_added() -> None:
    [mapped] = mappers.get("ckan")().map(ckan_raw(orphan_package()), CTX)
    assert with_source_publisher(mapped, MappingContext(BASE, "portal")) is mapped


@pytest.mark.parametrize(
    ("fmt", "raw"),
    [
        ("ckan", ckan_raw(orphan_package())),
        (
            "meta-share",
            RawRecord("portal", storage_id(0), "meta-share", sample_xml("corpus"), "text/xml"),
        ),
    ],
)
def test_the_harvest_step_adds_it_for_every_format_and_the_mqa_counts_it(
    fmt: str, raw: RawRecord
) -> None:
    without = process(raw, MappingContext(BASE, "portal"), [])
    [plain] = without.checked
    before = {r.key: r.met for r in assess(plain.dataset.ntriples).indicators}
    assert before["publisher"] is False
    result = process(raw, CTX, [])
    [checked] = result.checked
    after = {r.key: r.met for r in assess(checked.dataset.ntriples).indicators}
    assert after["publisher"] is True
    assert "publisher-from-source" in {f.rule for f in checked.findings}
    assert {k: v for k, v in after.items() if k != "publisher"} == {
        k: v for k, v in before.items() if k != "publisher"
    }


def test_a_ckan_source_harvested_end_to_end_stores_and_scores_its_publisher(
    tmp_path: Path,
) -> None:
    packages = [orphan_package(0), orphan_package(1), generate_package(2)]
    with PeerServer(CkanPeer(MemoryCatalogue(packages))) as server:
        config = tmp_path / "aggregator.toml"
        config.write_text(
            f'[store]\npath = "data"\nbase_iri = "{BASE}"\n'
            "[http]\nallow_private = true\nretries = 0\n"
            "[harvest]\nworkers = 0\n"
            f'[sources.portal]\ntype = "ckan"\nurl = "{server.url}"\nformat = "ckan"\n'
            'publisher = "City Statistics Office"\n',
            encoding="utf-8",
        )
        result = CliRunner().invoke(main, ["-c", str(config), "harvest", "portal"])
    assert result.exit_code == 0, result.output
    settings = load_settings(config)
    names: dict[str, set[str]] = {}
    with RecordStore(settings.store_path, settings.base_iri) as store:
        for package in packages:
            row = store.record("portal", str(package["id"]))
            assert row is not None and row.dataset_iri is not None
            found = publisher_triples(store.dataset_ntriples(row), row.dataset_iri)
            names[str(package["id"])] = {o for _, p, o in found if p == f"<{FOAF}name>"}
    assert names == {
        str(packages[0]["id"]): {'"City Statistics Office"'},
        str(packages[1]["id"]): {'"City Statistics Office"'},
        str(packages[2]["id"]): {f'"{generate_package(2)["organization"]["title"]}"'},
    }
    out = CliRunner().invoke(main, ["-c", str(config), "quality", "--json"])
    assert out.exit_code == 0, out.output
    scopes = {a["scope"]: a for a in json.loads(out.output)}
    assert scopes["portal"]["datasets"] == 3
    assert scopes["portal"]["indicators"]["publisher"]["met"] == 3
