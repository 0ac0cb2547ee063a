"""EU data-theme categorisation after the format mapping: the lookups, the configuration, and
real harvests of a CKAN source and of a DCAT-AP (rdf-dump) source through the pipeline."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from pyoxigraph import RdfFormat, parse

from aggregator.config import load_settings
from aggregator.config.categorisation import (
    CategorisationConfig,
    label_key,
    parse_categorisation,
)
from aggregator.core.errors import ConfigError
from aggregator.core.models import MappedDataset, RawRecord
from aggregator.core.vocab import EU_DATA_THEME
from aggregator.demo.peers.ckan import CkanPeer, MemoryCatalogue
from aggregator.demo.peers.ckan_data import load_bundled_packages
from aggregator.demo.peers.rdf_files import RdfFilesApp
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.mapping.base import MappingContext, canonical_ntriples, content_hash
from aggregator.mapping.categorisation import categorise
from aggregator.mapping.ckan import CkanMapper
from aggregator.mapping.dcat import DcatMapper
from aggregator.mapping.ranges import complete_ranges
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore
from aggregator.validate.shacl import ShaclValidator

CTX = MappingContext("http://example.org/", "src")
DEFAULTS = CategorisationConfig()
TURTLE = """\
@prefix dcat: <http://www.w3.org/ns/dcat#> . @prefix dct: <http://purl.org/dc/terms/> .
@prefix skos: <http://www.w3.org/2004/02/skos/core#> .
<https://geo.example.org/ds/rivers> a dcat:Dataset ; dct:title "River network"@en ;
  dct:description "Watercourses of the region."@en ;
  dcat:theme <http://inspire.ec.europa.eu/theme/hy> ;
  dct:subject <http://inspire.ec.europa.eu/metadata-codelist/TopicCategory/transportation> ;
  dcat:keyword "farming" ;
  dcat:theme <https://geo.example.org/cat/7> .
<https://geo.example.org/cat/7> a skos:Concept ; skos:prefLabel "Stadtplanung"@de .
<http://inspire.ec.europa.eu/theme/hy> skos:prefLabel "Hydrography"@en .
"""


def dcat_record(text: str = TURTLE) -> MappedDataset:
    raw = RawRecord("src", "rivers", "dcat", text.encode(), "text/turtle")
    (mapped,) = DcatMapper().map(raw, CTX)
    return mapped


def codes(mapped: MappedDataset) -> set[str]:
    return {t.removeprefix(EU_DATA_THEME) for t in mapped.themes if t.startswith(EU_DATA_THEME)}


def test_iso_topic_categories_inspire_themes_keywords_and_own_labels() -> None:
    mapped = dcat_record()
    assert codes(mapped) == set()
    done = categorise(mapped, DEFAULTS)
    assert codes(done) == {"ENVI", "TRAN", "AGRI"}  # hy, transportation, keyword farming
    own = CategorisationConfig(labels=(("Stadtplanung", ("REGI",)),))
    assert codes(categorise(mapped, own)) == {"ENVI", "TRAN", "AGRI", "REGI"}
    no_keywords = CategorisationConfig(keywords=False)
    assert codes(categorise(mapped, no_keywords)) == {"ENVI", "TRAN"}
    assert categorise(mapped, CategorisationConfig(enabled=False)) is mapped
    (finding,) = [f for f in done.findings if f.rule == "eu-theme-assigned"]
    assert "AGRI from keyword 'farming'" in finding.message
    assert "ENVI from <http://inspire.ec.europa.eu/theme/hy>" in finding.message


def test_the_result_is_canonical_labelled_and_conformant() -> None:
    done = categorise(dcat_record(), DEFAULTS)
    triples = list(parse(done.ntriples, RdfFormat.N_TRIPLES))
    assert done.ntriples == canonical_ntriples(triples)  # sorted, same labelling
    assert done.content_hash == content_hash(done.ntriples)
    text = done.ntriples.decode()
    assert (
        f'<{EU_DATA_THEME}ENVI> <http://www.w3.org/2004/02/skos/core#prefLabel> "Environment"@en'
        in text
    )
    # conformant as a harvest validates it: after the range step that follows categorisation
    assert ShaclValidator().validate_graph(complete_ranges(done)).conforms


def test_themes_already_there_are_not_added_again() -> None:
    mapped = CkanMapper().map(
        RawRecord(
            "src", "x", "ckan", json.dumps(load_bundled_packages()[0]).encode(), "application/json"
        ),
        CTX,
    )[0]
    assert codes(mapped) == {"ECON"}  # the group economy-and-finance, by the dcat rules
    assert categorise(mapped, DEFAULTS) is mapped  # "Example Tag" means nothing


def test_only_the_statements_it_reads_are_parsed_and_none_is_missed() -> None:
    """Categorisation parses the lines that name its predicates, not the whole graph: a
    literal quoting such a predicate brings its line along and changes nothing, a statement
    on the last line without a line feed is still read, and the result is the same as
    reading every statement."""
    mapped = dcat_record()
    quoting = (
        b'<https://geo.example.org/ds/rivers> <http://purl.org/dc/terms/description> "see '
        b'<http://www.w3.org/ns/dcat#keyword> for the list"@en .\n'
    )
    last = b'<https://geo.example.org/ds/rivers> <http://www.w3.org/ns/dcat#keyword> "crops" .'
    data = quoting + mapped.ntriples + last
    from aggregator.mapping import categorisation

    read = categorisation._statements_read(data)
    assert read.splitlines()[0] == quoting.rstrip(b"\n") and read.endswith(last)
    predicates = {t.predicate.value for t in parse(read, RdfFormat.N_TRIPLES)}
    assert "http://www.w3.org/ns/dcat#theme" in predicates
    wanted = {t for t in parse(data, RdfFormat.N_TRIPLES) if t.predicate.value != DCT_DESC}
    got = {t for t in parse(read, RdfFormat.N_TRIPLES) if t.predicate.value != DCT_DESC}
    assert got == {t for t in wanted if t.predicate.value in READ_PREDICATES}
    fed = replace(mapped, ntriples=data)
    assert codes(categorise(fed, DEFAULTS)) >= {"AGRI"}  # "crops" and "farming": keywords


DCT_DESC = "http://purl.org/dc/terms/description"
READ_PREDICATES = {
    "http://www.w3.org/ns/dcat#theme",
    "http://purl.org/dc/terms/subject",
    "http://data.europa.eu/930/topicCategory",
    "http://www.w3.org/ns/dcat#keyword",
    "http://www.w3.org/2004/02/skos/core#prefLabel",
    "http://www.w3.org/2004/02/skos/core#notation",
    "http://www.w3.org/2004/02/skos/core#altLabel",
    "http://www.w3.org/2000/01/rdf-schema#label",
    "http://www.w3.org/2004/02/skos/core#inScheme",
}


def test_ckan_group_names_of_the_defaults() -> None:
    groups = [
        "agriculture-fisheries-forestry-and-food",
        "government-and-public-sector",
        "hospitals",
    ]
    package = {"id": "p", "title": "t", "groups": [{"name": g} for g in groups]}
    raw = RawRecord("src", "p", "ckan", json.dumps(package).encode(), "application/json")
    (mapped,) = CkanMapper().map(raw, CTX)
    done = categorise(mapped, DEFAULTS)
    assert codes(done) == {"AGRI", "GOVE"}
    own = CategorisationConfig(labels=(("hospitals", ("HEAL",)),))
    assert codes(categorise(mapped, own)) == {"AGRI", "GOVE", "HEAL"}


def test_label_keys() -> None:
    assert label_key("Economy and finance") == label_key("economy-and-finance")
    assert label_key("Agriculture, fisheries, forestry and food") == label_key(
        "agriculture-fisheries-forestry-and-food"
    )


def test_configuration_is_checked(tmp_path: Path) -> None:
    where = "sources.p"
    with pytest.raises(ConfigError, match="'XYZ' is not an EU data theme"):
        parse_categorisation({"labels": {"a": "XYZ"}}, where, tmp_path)
    with pytest.raises(ConfigError, match="unknown key"):
        parse_categorisation({"label": {}}, where, tmp_path)
    with pytest.raises(ConfigError, match="no such file"):
        parse_categorisation({"file": "themes.toml"}, where, tmp_path)
    (tmp_path / "themes.toml").write_text(
        '[labels]\n"verkehr" = ["TRAN"]\n[iris]\n"https://x.example/c/1" = "ECON"\n'
    )
    config = parse_categorisation({"file": "themes.toml", "defaults": False}, where, tmp_path)
    assert config.file == str((tmp_path / "themes.toml").resolve()) and not config.defaults
    (tmp_path / "bad.toml").write_text('[labels]\n"x" = ["NOPE"]\n')
    with pytest.raises(ConfigError, match="NOPE"):
        parse_categorisation({"file": "bad.toml"}, where, tmp_path)
    assert parse_categorisation(False, where, tmp_path) == CategorisationConfig(enabled=False)


def test_a_dcat_source_and_a_ckan_source_are_categorised_in_the_pipeline(tmp_path: Path) -> None:
    files = RdfFilesApp()
    files.put("/catalog.ttl", TURTLE.encode(), "text/turtle")
    packages = MemoryCatalogue(load_bundled_packages())
    with PeerServer(files) as dump, PeerServer(CkanPeer(packages)) as portal:
        config = tmp_path / "aggregator.toml"
        config.write_text(
            f"""
[store]
path = "data"
base_iri = "http://127.0.0.1:8000/"
[http]
allow_private = true
[harvest]
workers = 0
[sources.dump]
type = "rdf-dump"
url = "{dump.url}catalog.ttl"
[sources.dump.categorisation]
labels = {{ "Stadtplanung" = "REGI" }}
[sources.portal]
type = "ckan"
url = "{portal.url}"
[sources.portal.categorisation]
labels = {{ "urban-traffic" = ["TRAN", "REGI"], "hospitals" = "HEAL" }}
keywords = false
""",
            encoding="utf-8",
        )
        settings = load_settings(config)
        http = HttpClient(settings.http)
        with RecordStore(settings.store_path, settings.base_iri) as store:
            for name in ("dump", "portal"):
                job = run_source(settings, store, name, RunOptions(), http=http)
                assert job.status == "succeeded", job.message
            query = (
                "SELECT ?d ?t WHERE { ?d <http://www.w3.org/ns/dcat#theme> ?t"
                f" FILTER(STRSTARTS(STR(?t), '{EU_DATA_THEME}')) }}"
            )
            found = {
                (str(r[0].value), str(r[1].value).removeprefix(EU_DATA_THEME))
                for r in store.graphs.query(query)
            }  # type: ignore[union-attr]
    assert ("https://geo.example.org/ds/rivers", "REGI") in found
    assert ("https://geo.example.org/ds/rivers", "ENVI") in found
    traffic = "http://127.0.0.1:8000/dataset/portal/b3c1e0a4-58f1-4f7e-9a39-2d6f3c7b1a01"
    assert {t for d, t in found if d == traffic} == {"TRAN", "REGI"}
    hospital = "http://127.0.0.1:8000/dataset/portal/c0ffee00-1111-4222-8333-444455556604"
    assert {t for d, t in found if d == hospital} == {"HEAL"}
