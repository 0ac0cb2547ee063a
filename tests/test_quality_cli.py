"""`aggregator quality` over a harvested store: scores, DQV kept in the store and queryable
with SPARQL, link checks against local servers, withdrawn records' measurements removed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.config import load_settings
from aggregator.demo.peers.rdf_files import RdfFilesApp
from aggregator.demo.peers.server import PeerServer
from aggregator.store.records import RecordStore

CATALOGUE = """\
@prefix dcat: <http://www.w3.org/ns/dcat#> .
@prefix dct: <http://purl.org/dc/terms/> .
<http://example.org/d/{n}> a dcat:Dataset ;
  dct:title "Dataset {n}"@en ; dct:description "About {n}."@en ;
  dcat:keyword "water"@en ;
  dcat:distribution <http://example.org/d/{n}/csv> .
<http://example.org/d/{n}/csv> a dcat:Distribution ;
  dcat:accessURL <{base}files/{n}.csv> ; dcat:downloadURL <{base}files/{missing}.csv> ;
  dct:format <http://publications.europa.eu/resource/authority/file-type/CSV> .
"""


@pytest.fixture
def harvested(tmp_path: Path) -> Iterator[tuple[Path, RdfFilesApp]]:
    files = RdfFilesApp()
    with PeerServer(files) as server:
        base = server.url
        body = "".join(CATALOGUE.format(n=n, base=base, missing=f"missing-{n}") for n in range(3))
        files.put("/catalog.ttl", body.encode(), "text/turtle")
        for n in range(3):
            files.put(f"/files/{n}.csv", b"a,b\n1,2\n", "text/csv")
        config = tmp_path / "aggregator.toml"
        config.write_text(
            '[store]\npath = "data"\n[http]\nallow_private = true\nretries = 0\n'
            "[harvest]\nworkers = 0\n"
            f'[sources.dump]\ntype = "rdf-dump"\nurl = "{base}catalog.ttl"\n',
            encoding="utf-8",
        )
        result = CliRunner().invoke(main, ["-c", str(config), "harvest", "dump"])
        assert result.exit_code in (0, 3), result.output
        yield config, files


def test_quality_scores_and_dqv_in_the_store(harvested: tuple[Path, RdfFilesApp]) -> None:
    config, files = harvested
    out = CliRunner().invoke(main, ["-c", str(config), "quality", "--check-links", "--json"])
    assert out.exit_code == 0, out.output
    scopes = {a["scope"]: a for a in json.loads(out.output)}
    assert scopes["dump"]["datasets"] == 3
    dump = scopes["dump"]["indicators"]
    assert dump["accessUrlReachable"]["met"] == 3  # the local files answer 200
    assert dump["downloadUrlReachable"]["met"] == 0  # ... the download URLs 404
    assert dump["keyword"]["met"] == 3
    assert files.hits("/files/0.csv") >= 1
    settings = load_settings(config)
    with RecordStore(settings.store_path, settings.base_iri) as store:
        q = (
            "PREFIX dqv: <http://www.w3.org/ns/dqv#>"
            " SELECT (COUNT(DISTINCT ?d) AS ?n) WHERE { ?m a dqv:QualityMeasurement ;"
            " dqv:computedOn ?d }"
        )
        assert next(iter(store.graphs.query(q)))[0].value == "3"  # type: ignore[call-overload]


def test_text_report_lists_shortcomings(harvested: tuple[Path, RdfFilesApp]) -> None:
    config, _ = harvested
    out = CliRunner().invoke(main, ["-c", str(config), "quality", "--source", "dump"])
    assert out.exit_code == 0, out.output
    assert "source dump: 3 datasets, mean" in out.output
    assert "points lost" in out.output
