"""``aggregator map`` output: every dataset keeps its own blank nodes, in every syntax offered.

Each mapped dataset's canonical N-Triples label blank nodes from ``c14n0``; written side by
side without renaming, a reader joins the distributions of unrelated datasets.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from pathlib import Path

import pytest
import rdflib
from click.testing import CliRunner
from pyoxigraph import BlankNode, NamedNode, RdfFormat, parse

from aggregator.cli import main
from aggregator.cli.files import MAP_SYNTAXES

DCAT = "http://www.w3.org/ns/dcat#"
DATASETS = 25


def catalogue() -> str:
    lines = [
        "@prefix dcat: <http://www.w3.org/ns/dcat#> .",
        "@prefix dct: <http://purl.org/dc/terms/> .",
        "@prefix foaf: <http://xmlns.com/foaf/0.1/> .",
        '<http://example.org/cat> a dcat:Catalog ; dct:title "C"@en ;',
        '    dct:description "A catalogue."@en ;',
        "    dcat:dataset " + ", ".join(f"<http://example.org/d{i}>" for i in range(DATASETS)),
        ".",
    ]
    for i in range(DATASETS):
        lines.append(
            f'<http://example.org/d{i}> a dcat:Dataset ; dct:title "D{i}"@en ;'
            f' dct:description "Dataset {i}."@en ;'
            f' dct:publisher [ a foaf:Agent ; foaf:name "Agent {i}" ] ;'
            f" dcat:distribution"
            f" [ a dcat:Distribution ; dcat:accessURL <http://example.org/d{i}/a> ],"
            f" [ a dcat:Distribution ; dcat:accessURL <http://example.org/d{i}/b> ] ."
        )
    return "\n".join(lines) + "\n"


PYOXIGRAPH = {
    "turtle": RdfFormat.TURTLE,
    "ntriples": RdfFormat.N_TRIPLES,
    "rdfxml": RdfFormat.RDF_XML,
    "jsonld": RdfFormat.JSON_LD,
    "trig": RdfFormat.TRIG,
    "nquads": RdfFormat.N_QUADS,
}
RDFLIB = {
    "turtle": "turtle",
    "ntriples": "nt",
    "rdfxml": "xml",
    "jsonld": "json-ld",
    "trig": "trig",
    "nquads": "nquads",
}


def _links_pyoxigraph(data: str, syntax: str) -> list[tuple[str, str, str]]:
    out = []
    for quad in parse(data.encode(), format=PYOXIGRAPH[syntax]):
        s, o = quad.subject, quad.object
        key = (
            f"_:{s.value}" if isinstance(s, BlankNode) else s.value,
            quad.predicate.value,
            f"_:{o.value}" if isinstance(o, BlankNode) else o.value,
        )
        out.append(key)
    return out


def _links_rdflib(data: str, syntax: str) -> list[tuple[str, str, str]]:
    graph = rdflib.Dataset() if syntax in ("trig", "nquads") else rdflib.Graph()
    with warnings.catch_warnings():  # rdflib 7's JSON-LD parser uses its own deprecated API
        warnings.simplefilter("ignore", DeprecationWarning)
        graph.parse(data=data, format=RDFLIB[syntax])
    triples = graph.quads() if isinstance(graph, rdflib.Dataset) else graph
    out = []
    for row in triples:
        s, p, o = row[0], row[1], row[2]
        out.append(
            (
                f"_:{s}" if isinstance(s, rdflib.BNode) else str(s),
                str(p),
                f"_:{o}" if isinstance(o, rdflib.BNode) else str(o),
            )
        )
    return out


def _check(links: list[tuple[str, str, str]]) -> None:
    owners: dict[str, set[str]] = defaultdict(set)
    urls: dict[str, set[str]] = defaultdict(set)
    publishers: dict[str, set[str]] = defaultdict(set)
    for s, p, o in links:
        if p == DCAT + "distribution":
            owners[o].add(s)
        elif p == DCAT + "accessURL":
            urls[s].add(o)
        elif p == "http://purl.org/dc/terms/publisher":
            publishers[o].add(s)
    assert len(owners) == 2 * DATASETS, "distributions merged across datasets"
    for dist, datasets in owners.items():
        assert len(datasets) == 1, f"{dist} belongs to {sorted(datasets)}"
        (dataset,) = datasets
        assert dist.startswith("_:")
        assert len(urls[dist]) == 1
        assert next(iter(urls[dist])).startswith(dataset + "/")
    assert len(publishers) == DATASETS and all(len(v) == 1 for v in publishers.values())


@pytest.mark.parametrize("syntax", list(MAP_SYNTAXES))
def test_map_keeps_blank_nodes_of_datasets_apart(tmp_path: Path, syntax: str) -> None:
    source = tmp_path / "catalogue.ttl"
    source.write_text(catalogue())
    result = CliRunner().invoke(main, ["map", "--from", "dcat", "--to", syntax, str(source)])
    assert result.exit_code == 0, result.output
    data = result.stdout
    _check(_links_pyoxigraph(data, syntax))
    _check(_links_rdflib(data, syntax))
    if syntax in ("trig", "nquads"):  # each dataset in its own named graph
        graphs = {q.graph_name for q in parse(data.encode(), format=PYOXIGRAPH[syntax])}
        assert graphs == {NamedNode(f"http://example.org/d{i}") for i in range(DATASETS)}


def test_map_findings_go_to_stderr_in_syntaxes_without_comments(tmp_path: Path) -> None:
    source = tmp_path / "catalogue.ttl"
    source.write_text(catalogue())
    result = CliRunner().invoke(main, ["map", "--from", "dcat", "--to", "rdfxml", str(source)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("<?xml")
    assert "# dataset http://example.org/d0" in result.stderr
