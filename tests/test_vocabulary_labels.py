"""The bundled English labels of the EU and ADMS vocabularies whose terms DCAT-AP 3.0.1 types
``skos:Concept`` (a concept must have a ``skos:prefLabel``): dataset type, dataset status and
the ADMS status, besides the tables that had them already.

A golden record of our own making per vocabulary: exactly the triples the range step adds, and
the record judged by the official shapes with no background knowledge.
"""

from __future__ import annotations

import tomllib

import pytest
from official_shapes import official_violations
from pyoxigraph import RdfFormat, parse

from aggregator.core.models import MappedDataset, Severity
from aggregator.core.resources import bundled
from aggregator.mapping.base import canonical_ntriples, content_hash
from aggregator.mapping.dcat.vocab import load_vocabularies
from aggregator.mapping.ranges import complete_ranges

PREFIXES = """
@prefix dcat: <http://www.w3.org/ns/dcat#> .
@prefix dct:  <http://purl.org/dc/terms/> .
@prefix adms: <http://www.w3.org/ns/adms#> .
@prefix skos: <http://www.w3.org/2004/02/skos/core#> .
@prefix dtype: <http://publications.europa.eu/resource/authority/dataset-type/> .
@prefix dstat: <http://publications.europa.eu/resource/authority/dataset-status/> .
@prefix astat: <http://purl.org/adms/status/> .
@prefix ex:   <https://stats.example.eu/> .
"""
DATASET = "https://stats.example.eu/unemployment"
GIVEN = """
ex:unemployment a dcat:Dataset ;
    dct:title "Registered unemployment by region"@en ;
    dct:description "Monthly counts of registered unemployed persons."@en ;
    dct:type dtype:STATISTICAL , dtype:GEOSPATIAL ;
    adms:status dstat:COMPLETED ;
    dcat:distribution ex:unemployment.csv .
ex:unemployment.csv a dcat:Distribution ; dcat:accessURL ex:download ;
    adms:status astat:UnderDevelopment .
"""
ADDED = """
dtype:STATISTICAL a skos:Concept ; skos:prefLabel "Statistical data"@en .
dtype:GEOSPATIAL a skos:Concept ; skos:prefLabel "Geospatial data"@en .
dstat:COMPLETED a skos:Concept ; skos:prefLabel "Completed"@en .
astat:UnderDevelopment a skos:Concept ; skos:prefLabel "Under Development"@en .
"""


def graph(turtle: str) -> bytes:
    text = (PREFIXES + turtle).encode()
    return canonical_ntriples(q.triple for q in parse(text, format=RdfFormat.TURTLE))


def test_the_range_step_labels_dataset_types_and_statuses() -> None:
    nt = graph(GIVEN)
    done = complete_ranges(MappedDataset(DATASET, DATASET, nt, content_hash(nt)))
    assert done.ntriples == graph(GIVEN + ADDED), done.ntriples.decode()
    rules = {f.rule: f.severity for f in done.findings}
    assert rules == {"range-label-added": Severity.INFO, "range-class-added": Severity.INFO}
    label = next(f for f in done.findings if f.rule == "range-label-added")
    assert "'Statistical data'" in label.message and "'Completed'" in label.message


def test_the_labelled_record_conforms_to_the_official_shapes() -> None:
    nt = graph(GIVEN)
    done = complete_ranges(MappedDataset(DATASET, DATASET, nt, content_hash(nt)))
    assert official_violations(done.ntriples) == []
    # without the labels the official concept shape fails each of the four concepts
    unlabelled = graph(GIVEN + ADDED.replace("skos:prefLabel", "skos:altLabel"))
    paths = [v.path for v in official_violations(unlabelled)]
    assert paths.count("http://www.w3.org/2004/02/skos/core#prefLabel") == 4


@pytest.mark.parametrize("name", ["dataset-type", "dataset-status", "adms-status"])
def test_every_code_of_the_new_tables_has_its_label(name: str) -> None:
    table = load_vocabularies()[name]
    codes = {iri.value for iri in table.table.values()}
    assert codes and codes == {iri.value for iri in table.labels}


def test_every_labels_table_the_ranges_name_exists() -> None:
    data = tomllib.loads(bundled("mappings", "dcat-ap-3-ranges.toml").read_text("utf-8"))
    named = {name for row in data["range"] for name in row.get("labels", [])}
    assert {"dataset-type", "dataset-status", "adms-status"} <= named
    assert named <= set(load_vocabularies())
