"""The DCAT-AP 3.0.1 range step after every mapper (aggregator/mapping/ranges.py) and the class
ranges of the SHACL gate (shapes/dcat-ap-3-ranges.ttl).

* golden records of our own making, one per class of fix: the exact graph that comes out, the
  findings that say what was rewritten, and (where ../shared/reference has them) no violation
  of the official DCAT-AP 3.0.1 shapes;
* the step is the one both ``aggregator map`` and a harvest run (the same record comes out);
* our gate and the official shapes agree on deliberately broken records, and
  ``aggregator validate`` with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from official_shapes import official_violations
from pyoxigraph import RdfFormat, parse

from aggregator.cli import main
from aggregator.config import ValidationStep
from aggregator.core.models import MappedDataset, RawRecord, Severity, Stage
from aggregator.demo.peers.metashare import sample_xml
from aggregator.jobs.processing import process
from aggregator.mapping.base import MappingContext, canonical_ntriples, content_hash
from aggregator.mapping.ranges import complete_ranges
from aggregator.validate.shacl import ShaclValidator

PREFIXES = """
@prefix rdf:    <http://www.w3.org/1999/02/22-rdf-syntax-ns#> .
@prefix rdfs:   <http://www.w3.org/2000/01/rdf-schema#> .
@prefix dcat:   <http://www.w3.org/ns/dcat#> .
@prefix dct:    <http://purl.org/dc/terms/> .
@prefix foaf:   <http://xmlns.com/foaf/0.1/> .
@prefix vcard:  <http://www.w3.org/2006/vcard/ns#> .
@prefix adms:   <http://www.w3.org/ns/adms#> .
@prefix skos:   <http://www.w3.org/2004/02/skos/core#> .
@prefix prov:   <http://www.w3.org/ns/prov#> .
@prefix lang:   <http://publications.europa.eu/resource/authority/language/> .
@prefix freq:   <http://publications.europa.eu/resource/authority/frequency/> .
@prefix theme:  <http://publications.europa.eu/resource/authority/data-theme/> .
@prefix lic:    <http://publications.europa.eu/resource/authority/licence/> .
@prefix ar:     <http://publications.europa.eu/resource/authority/access-right/> .
@prefix ctry:   <http://publications.europa.eu/resource/authority/country/> .
@prefix ptype:  <http://purl.org/adms/publishertype/> .
@prefix ex:     <https://data.example.org/> .
"""
DATASET = "https://data.example.org/air-quality"
# what every golden record has besides the values under test: a conforming DCAT-AP dataset
BASE = """
ex:air-quality a dcat:Dataset ;
    dct:title "Air quality readings"@en ;
    dct:description "Hourly readings of the regional monitoring stations."@en .
"""


def graph(turtle: str) -> bytes:
    """Canonical N-Triples of BASE + ``turtle``, as a mapper hands them over."""
    text = (PREFIXES + BASE + turtle).encode()
    return canonical_ntriples(q.triple for q in parse(text, format=RdfFormat.TURTLE))


def mapped(turtle: str) -> MappedDataset:
    nt = graph(turtle)
    return MappedDataset(DATASET, DATASET, nt, content_hash(nt))


def same_graph(ntriples: bytes, turtle: str) -> bool:
    """Whether ``ntriples`` is the graph BASE + ``turtle`` (blank nodes up to isomorphism)."""
    got = canonical_ntriples(q.triple for q in parse(ntriples, format=RdfFormat.N_TRIPLES))
    return got == graph(turtle)


@dataclass(frozen=True)
class Golden:
    """One class of fix: what a mapper wrote, what the step makes of it, the findings."""

    id: str
    given: str
    expected: str
    rules: dict[str, Severity]


INF, W = Severity.INFO, Severity.WARNING

GOLDEN = [
    Golden(
        "untyped-vocabulary-and-document-iris",
        given="""
        ex:air-quality dct:language lang:ENG ; dct:accrualPeriodicity freq:ANNUAL ;
            dct:conformsTo <https://eur-lex.europa.eu/eli/dir/2008/50/oj> ;
            dct:accessRights ar:PUBLIC ;
            foaf:page ex:methodology ; dcat:landingPage ex:air-quality.html ;
            dct:spatial ctry:AUT ;
            dct:temporal [ dcat:startDate "2024-01-01"^^<http://www.w3.org/2001/XMLSchema#date> ] ;
            dcat:distribution ex:air-quality.csv .
        ex:air-quality.csv a dcat:Distribution ; dcat:accessURL ex:download ;
            dct:license lic:CC_BY_4_0 ;
            dct:format <http://publications.europa.eu/resource/authority/file-type/CSV> ;
            dcat:mediaType <https://www.iana.org/assignments/media-types/text/csv> .
        """,
        expected="""
        ex:air-quality dct:language lang:ENG ; dct:accrualPeriodicity freq:ANNUAL ;
            dct:conformsTo <https://eur-lex.europa.eu/eli/dir/2008/50/oj> ;
            dct:accessRights ar:PUBLIC ;
            foaf:page ex:methodology ; dcat:landingPage ex:air-quality.html ;
            dct:spatial ctry:AUT ;
            dct:temporal [ a dct:PeriodOfTime ;
                dcat:startDate "2024-01-01"^^<http://www.w3.org/2001/XMLSchema#date> ] ;
            dcat:distribution ex:air-quality.csv .
        ex:air-quality.csv a dcat:Distribution ; dcat:accessURL ex:download ;
            dct:license lic:CC_BY_4_0 ;
            dct:format <http://publications.europa.eu/resource/authority/file-type/CSV> ;
            dcat:mediaType <https://www.iana.org/assignments/media-types/text/csv> .
        lang:ENG a dct:LinguisticSystem .
        freq:ANNUAL a dct:Frequency .
        <https://eur-lex.europa.eu/eli/dir/2008/50/oj> a dct:Standard .
        ar:PUBLIC a dct:RightsStatement .
        ex:methodology a foaf:Document .
        ex:air-quality.html a foaf:Document .
        ctry:AUT a dct:Location .
        lic:CC_BY_4_0 a dct:LicenseDocument .
        <http://publications.europa.eu/resource/authority/file-type/CSV> a dct:MediaTypeOrExtent .
        <https://www.iana.org/assignments/media-types/text/csv> a dct:MediaType .
        """,
        rules={"range-class-added": INF},
    ),
    Golden(
        "subclass-types-are-not-the-range-class",
        given="""
        ex:air-quality dcat:contactPoint [ a vcard:Organization ; vcard:fn "Data desk" ;
                vcard:hasEmail <mailto:data@example.org> ] ;
            dct:publisher ex:agency .
        ex:agency a foaf:Organization ; foaf:name "Environment Agency"@en ;
            dct:type ptype:NationalAuthority .
        """,
        expected="""
        ex:air-quality dcat:contactPoint [ a vcard:Organization , vcard:Kind ;
                vcard:fn "Data desk" ; vcard:hasEmail <mailto:data@example.org> ] ;
            dct:publisher ex:agency .
        ex:agency a foaf:Organization , foaf:Agent ; foaf:name "Environment Agency"@en ;
            dct:type ptype:NationalAuthority .
        ptype:NationalAuthority a skos:Concept ; skos:prefLabel "National authority"@en .
        """,
        rules={"range-class-added": INF, "range-label-added": INF},
    ),
    Golden(
        "vocabulary-term-gets-its-label",
        given="ex:air-quality dcat:theme theme:ENVI .",
        expected="""
        ex:air-quality dcat:theme theme:ENVI .
        theme:ENVI a skos:Concept ; skos:prefLabel "Environment"@en .
        """,
        rules={"range-class-added": INF, "range-label-added": INF},
    ),
    Golden(
        "literal-naming-a-vocabulary-term",
        given='ex:air-quality dct:language "de" ; dct:accrualPeriodicity "monthly"@en .',
        expected="""
        ex:air-quality dct:language lang:DEU ; dct:accrualPeriodicity freq:MONTHLY .
        lang:DEU a dct:LinguisticSystem .
        freq:MONTHLY a dct:Frequency .
        """,
        rules={"range-literal-to-term": INF},
    ),
    Golden(
        "literal-url",
        given='ex:air-quality dcat:landingPage "https://air.example.org/readings" .',
        expected="""
        ex:air-quality dcat:landingPage <https://air.example.org/readings> .
        <https://air.example.org/readings> a foaf:Document .
        """,
        rules={"range-literal-url": INF},
    ),
    Golden(
        "literal-kept-on-a-node-of-the-range-class",
        given="""
        ex:air-quality dct:publisher "Environment Agency"@en ;
            dcat:contactPoint "Data desk, Environment Agency" ;
            dct:accessRights "Open to everyone after registration"@en ;
            dcat:distribution ex:air-quality.csv .
        ex:air-quality.csv a dcat:Distribution ; dcat:accessURL ex:download ;
            dct:rights "Crown copyright 2024"@en ; dct:format "text/csv" ;
            dct:license "Use freely, naming the agency"@en .
        """,
        expected="""
        ex:air-quality dct:publisher [ a foaf:Agent ; foaf:name "Environment Agency"@en ] ;
            dcat:contactPoint [ a vcard:Kind ; vcard:fn "Data desk, Environment Agency" ] ;
            dct:accessRights [ a dct:RightsStatement ;
                rdfs:label "Open to everyone after registration"@en ] ;
            dcat:distribution ex:air-quality.csv .
        ex:air-quality.csv a dcat:Distribution ; dcat:accessURL ex:download ;
            dct:rights [ a dct:RightsStatement ; rdfs:label "Crown copyright 2024"@en ] ;
            dct:format [ a dct:MediaTypeOrExtent ; rdfs:label "text/csv" ] ;
            dct:license [ a dct:LicenseDocument ; rdfs:label "Use freely, naming the agency"@en ] .
        """,
        rules={"range-literal-to-node": W},
    ),
    Golden(
        "free-text-theme-becomes-a-keyword",
        given='ex:air-quality dcat:theme "air pollution"@en , theme:ENVI .',
        expected="""
        ex:air-quality dcat:keyword "air pollution"@en ; dcat:theme theme:ENVI .
        theme:ENVI a skos:Concept ; skos:prefLabel "Environment"@en .
        """,
        rules={
            "range-theme-literal-to-keyword": W,
            "range-class-added": INF,
            "range-label-added": INF,
        },
    ),
    Golden(
        "theme-without-an-iri-becomes-subject-and-keyword",
        given="""
        ex:air-quality dcat:theme [ a skos:Concept ; skos:prefLabel "Air"@en , "Luft"@de ;
            skos:inScheme ex:local-topics ] .
        """,
        expected="""
        ex:air-quality dct:subject [ a skos:Concept ; skos:prefLabel "Air"@en , "Luft"@de ;
                skos:inScheme ex:local-topics ] ;
            dcat:keyword "Air"@en , "Luft"@de .
        """,
        rules={"range-theme-node-to-keyword": W},
    ),
    Golden(
        "a-version-named-but-not-described-is-kept-as-a-relation",
        given='ex:air-quality dct:hasVersion [ rdfs:label "Air quality readings 1.0" ] .',
        expected='ex:air-quality dct:relation [ rdfs:label "Air quality readings 1.0" ] .',
        rules={"range-link-to-relation": W},
    ),
    Golden(
        "links-to-other-records-and-types-of-other-resources-are-left-alone",
        given="""
        ex:air-quality dcat:inSeries ex:air-quality-series ; prov:wasGeneratedBy ex:campaign .
        ex:campaign a prov:Activity ; dct:type ex:measurement-campaign .
        """,
        expected="""
        ex:air-quality dcat:inSeries ex:air-quality-series ; prov:wasGeneratedBy ex:campaign .
        ex:campaign a prov:Activity ; dct:type ex:measurement-campaign .
        """,
        rules={},
    ),
]


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: c.id)
def test_golden_record_gets_exactly_the_expected_graph(case: Golden) -> None:
    given = mapped(case.given)
    done = complete_ranges(given)
    assert same_graph(done.ntriples, case.expected), done.ntriples.decode()
    added = done.findings[len(given.findings) :]
    assert {f.rule: f.severity for f in added} == case.rules
    assert all(f.stage is Stage.MAP and f.location == DATASET for f in added)
    assert done.content_hash == content_hash(done.ntriples)
    if not case.rules:
        assert done is given  # nothing to do: the record itself, no copy


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: c.id)
def test_golden_record_conforms_to_the_official_shapes(case: Golden) -> None:
    done = complete_ranges(mapped(case.given))
    assert official_violations(done.ntriples) == []
    assert ShaclValidator().validate_graph(done).conforms


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: c.id)
def test_the_step_is_idempotent_and_deterministic(case: Golden) -> None:
    once = complete_ranges(mapped(case.given))
    again = complete_ranges(once)
    assert again is once  # a completed record needs nothing more
    assert complete_ranges(mapped(case.given)).ntriples == once.ntriples  # same bytes


def test_a_rewrite_names_the_values_it_rewrote() -> None:
    done = complete_ranges(
        mapped('ex:air-quality dcat:theme "air pollution"@en , "smog"@en ; dct:language "de" .')
    )
    by_rule = {f.rule: f.message for f in done.findings}
    assert "'air pollution'" in by_rule["range-theme-literal-to-keyword"]
    assert "'smog'" in by_rule["range-theme-literal-to-keyword"]
    assert (
        "dct:language 'de' -> <http://publications.europa.eu/resource/authority/language/DEU>"
        in (by_rule["range-literal-to-term"])
    )


# --- one step for `aggregator map` and the harvest ---------------------------------------------


def test_map_and_the_harvest_give_the_same_ranged_record(tmp_path: Path) -> None:
    """A META-SHARE description (whose mapper leaves some agents and contacts untyped) comes
    out of ``aggregator map`` and out of the harvest's processing as the same complete
    record."""
    path = tmp_path / "corpus.xml"
    path.write_bytes(sample_xml("corpus"))
    result = CliRunner().invoke(
        main, ["map", "--from", "meta-share", "--to", "ntriples", str(path)]
    )
    assert result.exit_code == 0, result.output
    printed = canonical_ntriples(
        q.triple for q in parse(result.output.encode(), format=RdfFormat.N_TRIPLES)
    )
    raw = RawRecord("file", path.name, "meta-share", path.read_bytes(), "application/xml")
    ctx = MappingContext("http://localhost:8000/", "file")
    [checked] = process(raw, ctx, [ValidationStep("shacl")]).checked
    harvested = canonical_ntriples(
        q.triple for q in parse(checked.dataset.ntriples, format=RdfFormat.N_TRIPLES)
    )
    assert printed == harvested
    assert "range-class-added" in result.output  # the finding, printed as a comment
    assert "range-class-added" in {f.rule for f in checked.findings}
    assert checked.conforms, checked.findings
    assert official_violations(harvested) == []


# --- our gate and the official shapes agree ----------------------------------------------------

GOOD = complete_ranges(mapped(GOLDEN[0].given + GOLDEN[1].given + GOLDEN[2].given)).ntriples


def broken(drop: str = "", add: str = "") -> bytes:
    """GOOD less the lines that contain ``drop``, plus ``add`` (Turtle)."""
    lines = [line for line in GOOD.decode().splitlines() if not drop or drop not in line]
    extra = ""
    if add:
        triples = parse((PREFIXES + add).encode(), format=RdfFormat.TURTLE)
        extra = "".join(f"{q.triple} .\n" for q in triples)
    return ("\n".join(lines) + "\n" + extra).encode()


TYPE = "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type> "
BROKEN = {
    "licence-untyped": broken(TYPE + "<http://purl.org/dc/terms/LicenseDocument>"),
    "language-untyped": broken(TYPE + "<http://purl.org/dc/terms/LinguisticSystem>"),
    "frequency-untyped": broken(TYPE + "<http://purl.org/dc/terms/Frequency>"),
    "standard-untyped": broken(TYPE + "<http://purl.org/dc/terms/Standard>"),
    "rights-untyped": broken(TYPE + "<http://purl.org/dc/terms/RightsStatement>"),
    "document-untyped": broken(TYPE + "<http://xmlns.com/foaf/0.1/Document>"),
    "location-untyped": broken(TYPE + "<http://purl.org/dc/terms/Location>"),
    "format-untyped": broken(TYPE + "<http://purl.org/dc/terms/MediaTypeOrExtent>"),
    "media-type-untyped": broken(TYPE + "<http://purl.org/dc/terms/MediaType>"),
    "contact-only-a-vcard-organization": broken(TYPE + "<http://www.w3.org/2006/vcard/ns#Kind>"),
    "agent-only-a-foaf-organization": broken(TYPE + "<http://xmlns.com/foaf/0.1/Agent>"),
    "theme-untyped": broken(TYPE + "<http://www.w3.org/2004/02/skos/core#Concept>"),
    "concept-without-label": broken("<http://www.w3.org/2004/02/skos/core#prefLabel>"),
    "theme-as-text": broken(add='ex:air-quality dcat:theme "air" .'),
    "theme-as-blank-node": broken(
        add='ex:air-quality dcat:theme [ a skos:Concept ; skos:prefLabel "air"@en ] .'
    ),
    "creator-untyped": broken(add="ex:air-quality dct:creator ex:someone ."),
    "provenance-untyped": broken(add="ex:air-quality dct:provenance ex:lineage ."),
    "identifier-as-text": broken(add='ex:air-quality adms:identifier "AQ-1" .'),
    "attribution-untyped": broken(add="ex:air-quality prov:qualifiedAttribution ex:att ."),
}


@pytest.fixture(scope="module")
def gate() -> ShaclValidator:
    return ShaclValidator()


def test_the_good_record_passes_both(gate: ShaclValidator) -> None:
    assert official_violations(GOOD) == []
    assert gate.validate_ntriples(GOOD).conforms


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_our_gate_rejects_what_the_official_shapes_reject(gate: ShaclValidator, name: str) -> None:
    data = BROKEN[name]
    official = official_violations(data)
    ours = [f for f in gate.validate_ntriples(data).findings if f.severity is Severity.VIOLATION]
    assert official, f"{name}: the official shapes should reject it"
    assert ours, f"{name}: our gate passes what the official shapes reject: {official}"
    # and on the same property
    assert {v.path for v in official} <= {f.path for f in ours}


def test_where_we_deliberately_differ_a_link_to_another_records_resource(
    gate: ShaclValidator,
) -> None:
    """docs/validation.md: a link to a whole resource (a dataset, a series...) may be an IRI
    the record does not describe, another record's resource. The official range.ttl counts it
    for dct:source (its tool exempts only dcat:inSeries, dcat:servesDataset, dcat:seriesMember
    and dct:isPartOf); our gate passes it, and fails it as soon as the record describes the
    IRI without its class."""
    bare = broken(add="ex:air-quality dct:source ex:stations .")
    assert gate.validate_ntriples(bare).conforms
    assert {v.path for v in official_violations(bare)} == {"http://purl.org/dc/terms/source"}
    described = broken(add='ex:air-quality dct:source ex:stations . ex:stations rdfs:label "S" .')
    assert not gate.validate_ntriples(described).conforms
    series = broken(add="ex:air-quality dcat:inSeries ex:series .")
    assert gate.validate_ntriples(series).conforms and official_violations(series) == []


@pytest.mark.parametrize("name", ["licence-untyped", "contact-only-a-vcard-organization"])
def test_validate_agrees_with_the_official_shapes(tmp_path: Path, name: str) -> None:
    """``aggregator validate`` on RDF: exit 1 where the official shapes find a violation,
    exit 0 on the record they pass."""
    bad, good = tmp_path / "bad.nt", tmp_path / "good.nt"
    bad.write_bytes(BROKEN[name])
    good.write_bytes(GOOD)
    runner = CliRunner()
    assert official_violations(BROKEN[name]) and not official_violations(GOOD)
    failed = runner.invoke(main, ["validate", str(bad)])
    assert failed.exit_code == 1, failed.output
    assert "dcat-ap-3-ranges#" in failed.output
    passed = runner.invoke(main, ["validate", str(good)])
    assert passed.exit_code == 0, passed.output
