"""SHACL validation of mapped DCAT-AP 3 records (aggregator.validate.shacl).

* every shape in shapes/dcat-ap-3.ttl has a violating example (``CASES``, checked for
  coverage) and the all-classes graph plus ``GOOD_VARIANTS`` are conforming examples;
* the fast engine agrees with pyshacl on a corpus of >= 50 valid and broken records;
* warnings and infos never make a record non-conforming; operator profiles are applied.
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyoxigraph import (
    BlankNode,
    CanonicalizationAlgorithm,
    Dataset,
    DefaultGraph,
    Literal,
    NamedNode,
    Quad,
    RdfFormat,
    Triple,
    parse,
    serialize,
)

from aggregator.core.errors import ConfigError, ParseError
from aggregator.core.models import Finding, MappedDataset, Severity, Stage
from aggregator.validate.shacl import (
    ShaclValidator,
    default_shapes,
    ranges_shapes,
    shapes_dir,
)
from aggregator.validate.shacl_engines import BLANK_NODE

DATA = Path(__file__).parent / "data" / "shacl"
S = "https://w3id.org/ld-aggregator/shapes/dcat-ap-3#"
EX = "https://example.org/"
RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
XSD = "http://www.w3.org/2001/XMLSchema#"

PREFIXES = """
@prefix rdf:    <http://www.w3.org/1999/02/22-rdf-syntax-ns#> .
@prefix dcat:   <http://www.w3.org/ns/dcat#> .
@prefix dct:    <http://purl.org/dc/terms/> .
@prefix foaf:   <http://xmlns.com/foaf/0.1/> .
@prefix vcard:  <http://www.w3.org/2006/vcard/ns#> .
@prefix adms:   <http://www.w3.org/ns/adms#> .
@prefix spdx:   <http://spdx.org/rdf/terms#> .
@prefix skos:   <http://www.w3.org/2004/02/skos/core#> .
@prefix locn:   <http://www.w3.org/ns/locn#> .
@prefix time:   <http://www.w3.org/2006/time#> .
@prefix odrl:   <http://www.w3.org/ns/odrl/2/> .
@prefix dcatap: <http://data.europa.eu/r5r/> .
@prefix xsd:    <http://www.w3.org/2001/XMLSchema#> .
@prefix ex:     <https://example.org/> .
"""

NS = {
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "dcat": "http://www.w3.org/ns/dcat#",
    "dct": "http://purl.org/dc/terms/",
    "foaf": "http://xmlns.com/foaf/0.1/",
    "vcard": "http://www.w3.org/2006/vcard/ns#",
    "adms": "http://www.w3.org/ns/adms#",
    "spdx": "http://spdx.org/rdf/terms#",
    "skos": "http://www.w3.org/2004/02/skos/core#",
    "locn": "http://www.w3.org/ns/locn#",
    "time": "http://www.w3.org/2006/time#",
    "odrl": "http://www.w3.org/ns/odrl/2/",
    "dcatap": "http://data.europa.eu/r5r/",
}


# --- building records -------------------------------------------------------------------------


def canonical(triples: Iterable[Triple]) -> bytes:
    """Canonical N-Triples as the mappers produce them (RDFC-1.0 labels, sorted lines)."""
    ds = Dataset(Quad(t.subject, t.predicate, t.object, DefaultGraph()) for t in triples)
    ds.canonicalize(CanonicalizationAlgorithm.RDFC_1_0)
    text = serialize((q.triple for q in ds), format=RdfFormat.N_TRIPLES)
    assert isinstance(text, bytes)
    lines = sorted(set(text.decode().splitlines()))
    return ("\n".join(lines) + "\n").encode()


def load(path: Path) -> list[Triple]:
    return [q.triple for q in parse(path=path)]


def turtle(text: str) -> list[Triple]:
    return [q.triple for q in parse((PREFIXES + text).encode(), format=RdfFormat.TURTLE)]


def record(triples: Iterable[Triple], iri: str = EX + "dataset") -> MappedDataset:
    nt = canonical(triples)
    return MappedDataset(local_id=iri, dataset_iri=iri, ntriples=nt, content_hash="")


def qname(name: str) -> NamedNode:
    prefix, _, local = name.partition(":")
    return NamedNode(NS[prefix] + local)


ALL_CLASSES = load(DATA / "all-classes.ttl")
REALISTIC = load(DATA / "dataset.ttl")
REALISTIC_IRI = "https://data.example.eu/id/dataset/env-agency/air-quality-2024"


@dataclass(frozen=True)
class Case:
    """One violating example: remove some properties of ``focus`` and add some triples."""

    shape: str  # local name under S
    focus: str  # local name under EX
    remove: tuple[str, ...] = ()  # qnames of predicates removed from the focus node
    add: str = ""  # Turtle (PREFIXES implied)
    severity: Severity = Severity.VIOLATION
    note: str = ""

    @property
    def id(self) -> str:
        return f"{self.shape}{'-' + self.note if self.note else ''}"

    def triples(self) -> list[Triple]:
        focus = NamedNode(EX + self.focus)
        removed = {qname(p) for p in self.remove}
        kept = [t for t in ALL_CLASSES if not (t.subject == focus and t.predicate in removed)]
        return kept + (turtle(self.add) if self.add else [])


W = Severity.WARNING


def missing(shape: str, focus: str, *preds: str, severity: Severity = Severity.VIOLATION) -> Case:
    return Case(shape, focus, remove=preds, severity=severity)


def extra(
    shape: str, focus: str, ttl: str, severity: Severity = Severity.VIOLATION, note: str = ""
) -> Case:
    return Case(shape, focus, add=ttl, severity=severity, note=note)


def wrong(shape: str, focus: str, pred: str, obj: str, note: str = "") -> Case:
    return Case(shape, focus, remove=(pred,), add=f"ex:{focus} {pred} {obj} .", note=note)


CASES: list[Case] = [
    # Dataset
    missing("Dataset-title", "dataset", "dct:title"),
    wrong("Dataset-title", "dataset", "dct:title", "ex:a-title", note="iri"),
    missing("Dataset-description", "dataset", "dct:description"),
    wrong("Dataset-description", "dataset", "dct:description", "ex:text", note="iri"),
    missing("Dataset-contactPoint", "dataset", "dcat:contactPoint", severity=W),
    missing("Dataset-distribution", "dataset", "dcat:distribution", severity=W),
    missing("Dataset-keyword", "dataset", "dcat:keyword", severity=W),
    missing("Dataset-publisher", "dataset", "dct:publisher", severity=W),
    missing("Dataset-spatial", "dataset", "dct:spatial", severity=W),
    missing("Dataset-temporal", "dataset", "dct:temporal", severity=W),
    missing("Dataset-theme", "dataset", "dcat:theme", severity=W),
    extra(
        "Dataset-publisher-max",
        "dataset",
        'ex:dataset dct:publisher ex:agent2 . ex:agent2 a foaf:Agent ; foaf:name "B" .',
    ),
    wrong("Dataset-publisher-max", "dataset", "dct:publisher", '"Water Agency"', note="text"),
    wrong("Dataset-contactPoint-node", "dataset", "dcat:contactPoint", '"desk@example.org"'),
    wrong("Dataset-theme-node", "dataset", "dcat:theme", '"Environment"'),
    wrong("Dataset-spatial-node", "dataset", "dct:spatial", '"Belgium"'),
    extra("Dataset-creator-max", "dataset", "ex:dataset dct:creator ex:c1, ex:c2 ."),
    extra("Dataset-accessRights-max", "dataset", "ex:dataset dct:accessRights ex:r1, ex:r2 ."),
    extra(
        "Dataset-accrualPeriodicity-max",
        "dataset",
        "ex:dataset dct:accrualPeriodicity ex:f1, ex:f2 .",
    ),
    extra("Dataset-type-max", "dataset", "ex:dataset dct:type ex:t1, ex:t2 ."),
    extra("Dataset-version-max", "dataset", 'ex:dataset dcat:version "3" .'),
    wrong("Dataset-issued", "dataset", "dct:issued", '"1 May 2024"'),
    wrong("Dataset-issued", "dataset", "dct:issued", '"2024-13-45"^^xsd:date', note="illtyped"),
    extra("Dataset-modified", "dataset", 'ex:dataset dct:modified "2024-07-01"^^xsd:date .'),
    wrong("Dataset-modified", "dataset", "dct:modified", '"2024-06-01"^^xsd:string', note="str"),
    extra("Dataset-keyword-literal", "dataset", "ex:dataset dcat:keyword ex:water ."),
    extra("Dataset-identifier-literal", "dataset", "ex:dataset dct:identifier ex:id ."),
    extra(
        "Dataset-distribution-class",
        "dataset",
        "ex:dataset dcat:distribution ex:dist2 . ex:dist2 dcat:accessURL ex:a2 .",
    ),
    extra(
        "Dataset-temporal-class",
        "dataset",
        'ex:dataset dct:temporal [ dcat:startDate "2020"^^xsd:gYear ] .',
    ),
    extra(
        "Dataset-otherIdentifier-class",
        "dataset",
        'ex:dataset adms:identifier [ skos:notation "x-1" ] .',
    ),
    extra(
        "Dataset-qualifiedRelation-class",
        "dataset",
        "ex:dataset dcat:qualifiedRelation [ dct:relation ex:o ; dcat:hadRole ex:r ] .",
    ),
    wrong("Dataset-spatialResolution", "dataset", "dcat:spatialResolutionInMeters", '"ten"'),
    wrong("Dataset-temporalResolution", "dataset", "dcat:temporalResolution", '"daily"'),
    wrong("Dataset-landingPage", "dataset", "dcat:landingPage", '"https://example.org/page"'),
    # Distribution
    missing("Distribution-accessURL", "dist", "dcat:accessURL"),
    wrong("Distribution-accessURL", "dist", "dcat:accessURL", '"https://x.org/a"', note="text"),
    missing("Distribution-availability", "dist", "dcatap:availability", severity=W),
    missing("Distribution-description", "dist", "dct:description", severity=W),
    missing("Distribution-format", "dist", "dct:format", severity=W),
    missing("Distribution-license", "dist", "dct:license", severity=W),
    wrong("Distribution-downloadURL", "dist", "dcat:downloadURL", '"https://x.org/f.csv"'),
    wrong("Distribution-byteSize", "dist", "dcat:byteSize", '"1 KB"'),
    wrong("Distribution-byteSize", "dist", "dcat:byteSize", '"1024"^^xsd:integer', note="int"),
    extra(
        "Distribution-byteSize",
        "dist",
        'ex:dist dcat:byteSize "9"^^xsd:nonNegativeInteger .',
        note="two",
    ),
    extra(
        "Distribution-checksum-max",
        "dist",
        "ex:dist spdx:checksum ex:checksum2 . ex:checksum2 a spdx:Checksum ; "
        'spdx:algorithm spdx:checksumAlgorithm_md5 ; spdx:checksumValue "00ff"^^xsd:hexBinary .',
    ),
    Case("Distribution-checksum-class", "checksum", remove=("rdf:type",)),
    wrong("Distribution-issued", "dist", "dct:issued", '"2024-05-01"'),
    extra("Distribution-modified", "dist", 'ex:dist dct:modified "2024-07"^^xsd:gYearMonth .'),
    extra("Distribution-availability-max", "dist", "ex:dist dcatap:availability ex:av2 ."),
    extra("Distribution-format-max", "dist", "ex:dist dct:format ex:format-json ."),
    wrong("Distribution-format-max", "dist", "dct:format", '"CSV"', note="text"),
    extra("Distribution-license-max", "dist", "ex:dist dct:license ex:licence2 ."),
    wrong("Distribution-license-max", "dist", "dct:license", '"CC-BY 4.0"', note="text"),
    extra("Distribution-mediaType-max", "dist", "ex:dist dcat:mediaType ex:media-json ."),
    extra("Distribution-compressFormat-max", "dist", "ex:dist dcat:compressFormat ex:z1, ex:z2 ."),
    extra("Distribution-packageFormat-max", "dist", "ex:dist dcat:packageFormat ex:p1, ex:p2 ."),
    extra("Distribution-rights-max", "dist", "ex:dist dct:rights ex:r1, ex:r2 ."),
    extra("Distribution-status-max", "dist", "ex:dist adms:status ex:s1, ex:s2 ."),
    extra("Distribution-hasPolicy-max", "dist", "ex:dist odrl:hasPolicy ex:p1, ex:p2 ."),
    extra("Distribution-title-literal", "dist", "ex:dist dct:title ex:title ."),
    extra("Distribution-description-literal", "dist", "ex:dist dct:description ex:desc ."),
    extra("Distribution-spatialResolution", "dist", 'ex:dist dcat:spatialResolutionInMeters "x" .'),
    extra("Distribution-temporalResolution", "dist", 'ex:dist dcat:temporalResolution "1 day" .'),
    # Agent
    missing("Agent-name", "agent", "foaf:name"),
    wrong("Agent-name", "agent", "foaf:name", "ex:name", note="iri"),
    missing("Agent-type", "agent", "dct:type", severity=W),
    extra("Agent-type-max", "agent", "ex:agent dct:type ex:other-type ."),
    # Kind
    missing("Kind-contactDetails", "contact", "vcard:hasEmail", severity=W),
    Case(
        "Kind-email",
        "contact",
        remove=("vcard:hasEmail",),
        add='ex:contact vcard:hasEmail "desk@example.org" .',
        severity=W,
    ),
    # Location
    extra("Location-bbox", "place", 'ex:place dcat:bbox "POLYGON((0 0, 1 0, 1 1, 0 0))" .'),
    extra("Location-centroid", "place", 'ex:place dcat:centroid "POINT(1 1)" .'),
    extra("Location-geometry", "place", "ex:place locn:geometry ex:g1, ex:g2 ."),
    # Period of time
    wrong("PeriodOfTime-startDate", "period", "dcat:startDate", '"May 2024"'),
    extra("PeriodOfTime-endDate", "period", 'ex:period dcat:endDate "2024-10-01"^^xsd:date .'),
    extra("PeriodOfTime-beginning", "period", "ex:period time:hasBeginning ex:i1, ex:i2 ."),
    extra("PeriodOfTime-end", "period", "ex:period time:hasEnd ex:i1, ex:i2 ."),
    missing("PeriodOfTime-bounded", "period", "dcat:startDate", "dcat:endDate", severity=W),
    # Licence document
    missing("LicenseDocument-type", "licence", "dct:type", severity=W),
    extra("LicenseDocument-type-max", "licence", "ex:licence dct:type ex:other-type ."),
    # Concept, concept scheme (mandatory labels, DCAT-AP 3.0.1)
    extra("Concept-prefLabel", "dataset", "ex:dataset dcat:theme ex:c . ex:c a skos:Concept ."),
    extra("ConceptScheme-title", "dataset", 'ex:c a skos:ConceptScheme ; skos:prefLabel "x" .'),
    # Checksum
    missing("Checksum-algorithm", "checksum", "spdx:algorithm"),
    extra("Checksum-algorithm", "checksum", "ex:checksum spdx:algorithm ex:alg2 .", note="two"),
    missing("Checksum-checksumValue", "checksum", "spdx:checksumValue"),
    wrong("Checksum-checksumValue", "checksum", "spdx:checksumValue", '"2fd4e1c6"', note="str"),
    # Identifier
    missing("Identifier-notation", "identifier", "skos:notation"),
    # Data service
    missing("DataService-endpointURL", "service", "dcat:endpointURL"),
    wrong("DataService-endpointURL", "service", "dcat:endpointURL", '"https://x"', note="text"),
    missing("DataService-title", "service", "dct:title"),
    missing("DataService-endpointDescription", "service", "dcat:endpointDescription", severity=W),
    missing("DataService-servesDataset", "service", "dcat:servesDataset", severity=W),
    extra("DataService-accessRights-max", "service", "ex:service dct:accessRights ex:a, ex:b ."),
    extra("DataService-license-max", "service", "ex:service dct:license ex:l1, ex:l2 ."),
    extra("DataService-description-literal", "service", "ex:service dct:description ex:d ."),
    wrong("DataService-issued", "service", "dct:issued", '"yesterday"'),
    extra("DataService-modified", "service", 'ex:service dct:modified "x"^^xsd:string .'),
    # Dataset series
    missing("DatasetSeries-title", "series", "dct:title"),
    missing("DatasetSeries-description", "series", "dct:description"),
    missing("DatasetSeries-contactPoint", "series", "dcat:contactPoint", severity=W),
    missing("DatasetSeries-publisher", "series", "dct:publisher", severity=W),
    missing("DatasetSeries-spatial", "series", "dct:spatial", severity=W),
    missing("DatasetSeries-temporal", "series", "dct:temporal", severity=W),
    extra(
        "DatasetSeries-publisher-max",
        "series",
        'ex:series dct:publisher ex:agent2 . ex:agent2 a foaf:Agent ; foaf:name "B" .',
    ),
    extra(
        "DatasetSeries-accrualPeriodicity-max",
        "series",
        "ex:series dct:accrualPeriodicity ex:f1, ex:f2 .",
    ),
    extra("DatasetSeries-issued", "series", 'ex:series dct:issued "soon" .'),
    extra("DatasetSeries-modified", "series", 'ex:series dct:modified "2024-07-01"^^xsd:date .'),
    # Catalogue
    missing("Catalogue-title", "catalogue", "dct:title"),
    missing("Catalogue-description", "catalogue", "dct:description"),
    missing("Catalogue-publisher", "catalogue", "dct:publisher"),
    extra("Catalogue-publisher", "catalogue", "ex:catalogue dct:publisher ex:ag2 .", note="two"),
    missing("Catalogue-homepage", "catalogue", "foaf:homepage", severity=W),
    missing("Catalogue-language", "catalogue", "dct:language", severity=W),
    missing("Catalogue-license", "catalogue", "dct:license", severity=W),
    missing("Catalogue-issued", "catalogue", "dct:issued", severity=W),
    missing("Catalogue-modified", "catalogue", "dct:modified", severity=W),
    missing("Catalogue-spatial", "catalogue", "dct:spatial", severity=W),
    missing("Catalogue-themeTaxonomy", "catalogue", "dcat:themeTaxonomy", severity=W),
    extra("Catalogue-homepage-max", "catalogue", "ex:catalogue foaf:homepage ex:home2 ."),
    extra("Catalogue-license-max", "catalogue", "ex:catalogue dct:license ex:licence2 ."),
    extra("Catalogue-creator-max", "catalogue", "ex:catalogue dct:creator ex:c1, ex:c2 ."),
    wrong("Catalogue-issued-type", "catalogue", "dct:issued", '"2020"'),
    wrong("Catalogue-modified-type", "catalogue", "dct:modified", "ex:date"),
    # Catalogue record
    missing("CatalogueRecord-modified", "record", "dct:modified"),
    missing("CatalogueRecord-primaryTopic", "record", "foaf:primaryTopic"),
    missing("CatalogueRecord-conformsTo", "record", "dct:conformsTo", severity=W),
    missing("CatalogueRecord-status", "record", "adms:status", severity=W),
    missing("CatalogueRecord-issued", "record", "dct:issued", severity=W),
    extra("CatalogueRecord-conformsTo-max", "record", "ex:record dct:conformsTo ex:other-ap ."),
    extra("CatalogueRecord-status-max", "record", "ex:record adms:status ex:status-updated ."),
    wrong("CatalogueRecord-issued-type", "record", "dct:issued", '"2024-05-01T00:00"'),
    extra("CatalogueRecord-source-max", "record", "ex:record dct:source ex:s1, ex:s2 ."),
    # Relationship
    missing("Relationship-hadRole", "relationship", "dcat:hadRole"),
    missing("Relationship-relation", "relationship", "dct:relation"),
]


@dataclass(frozen=True)
class Variant:
    """A conforming example: must give no finding at all."""

    id: str
    remove: tuple[tuple[str, str], ...] = ()  # (focus local name, predicate qname)
    add: str = ""

    def triples(self) -> list[Triple]:
        removed = {(NamedNode(EX + f), qname(p)) for f, p in self.remove}
        kept = [t for t in ALL_CLASSES if (t.subject, t.predicate) not in removed]
        return kept + (turtle(self.add) if self.add else [])


GOOD_VARIANTS: list[Variant] = [
    Variant("all-classes"),
    Variant(
        "dates-as-gYear-gYearMonth-dateTime",
        remove=(("dataset", "dct:issued"), ("dataset", "dct:modified")),
        add='ex:dataset dct:issued "2024"^^xsd:gYear ; '
        'dct:modified "2024-06-01T00:00:00"^^xsd:dateTime .',
    ),
    Variant(
        "dataset-without-optional-properties",
        remove=tuple(
            ("dataset", p)
            for p in (
                "dct:issued",
                "dct:modified",
                "dct:identifier",
                "adms:identifier",
                "dcat:qualifiedRelation",
                "dcat:spatialResolutionInMeters",
                "dcat:temporalResolution",
                "dcat:landingPage",
                "dcat:version",
            )
        ),
    ),
    Variant(
        "contact-with-url-only",
        remove=(("contact", "vcard:hasEmail"),),
        add="ex:contact vcard:hasURL ex:form .",
    ),
    Variant(
        "contact-typed-vcard-organization",
        remove=(("contact", "rdf:type"),),
        add="ex:contact a vcard:Organization , vcard:Kind .",  # Kind: the range, stated
    ),
    Variant(
        "agent-typed-foaf-organization",
        remove=(("agent", "rdf:type"),),
        add="ex:agent a foaf:Organization , foaf:Agent .",  # Agent: the range, stated
    ),
    Variant("period-with-end-only", remove=(("period", "dcat:startDate"),)),
    Variant(
        "period-as-time-instants",
        remove=(("period", "dcat:startDate"), ("period", "dcat:endDate")),
        add="ex:period time:hasBeginning ex:i1 ; time:hasEnd ex:i2 . "
        "ex:i1 a time:Instant . ex:i2 a time:Instant .",
    ),
    Variant(
        "typed-vocabulary-references",  # as the range step after every mapper types them
        add="ex:dataset dct:language ex:lang-fr ; dct:accessRights ex:public ; "
        "dct:accrualPeriodicity ex:annual ; dcat:theme ex:theme-heal . "
        "ex:lang-fr a dct:LinguisticSystem . ex:public a dct:RightsStatement . "
        'ex:annual a dct:Frequency . ex:theme-heal a skos:Concept ; skos:prefLabel "Health"@en .',
    ),
    Variant(
        "blank-node-distribution",
        remove=(("dataset", "dcat:distribution"),),
        add="ex:dataset dcat:distribution [ a dcat:Distribution ; dcat:accessURL ex:a ; "
        'dcatap:availability ex:av ; dct:description "d"@en ; dct:format ex:f ; '
        "dct:license ex:licence ] . "
        'ex:av a skos:Concept ; skos:prefLabel "stable"@en . ex:f a dct:MediaTypeOrExtent .',
    ),
    Variant("multilingual-titles", add='ex:dataset dct:title "Badegewässer"@de .'),
]


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fast() -> ShaclValidator:
    return ShaclValidator()


@pytest.fixture(scope="module")
def reference() -> ShaclValidator:
    return ShaclValidator(engine="pyshacl")


def rules(findings: Iterable[Finding]) -> set[tuple[str, Severity]]:
    return {(f.rule.partition("|")[0], f.severity) for f in findings}


# --- the shapes -------------------------------------------------------------------------------


def test_bundled_shapes_are_found() -> None:
    assert default_shapes().is_file()
    assert ranges_shapes().is_file()
    assert default_shapes().parent == shapes_dir()


@pytest.mark.parametrize("variant", GOOD_VARIANTS, ids=lambda v: v.id)
def test_conforming_examples_have_no_finding(fast: ShaclValidator, variant: Variant) -> None:
    report = fast.validate_graph(record(variant.triples()))
    assert report.findings == ()
    assert report.conforms


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_violating_example_is_reported_by_its_shape(fast: ShaclValidator, case: Case) -> None:
    report = fast.validate_graph(record(case.triples()))
    assert (S + case.shape, case.severity) in rules(report.findings), report.findings
    ours = [f for f in report.findings if f.rule.startswith(S + case.shape + "|")]
    for f in ours:
        assert f.stage is Stage.SHACL
        assert f.location is not None
        assert f.location in (EX + case.focus, BLANK_NODE) or f.location.startswith(EX)
        assert f.message
        assert "Constraint" not in f.message
    assert report.conforms is (case.severity is not Severity.VIOLATION)


def test_every_shape_has_a_violating_example() -> None:
    """Each named shape that holds a constraint (and is not a helper) is exercised by CASES."""
    sh = "http://www.w3.org/ns/shacl#"
    triples = load(default_shapes())
    constraint_preds = {
        sh + p
        for p in (
            "minCount",
            "maxCount",
            "datatype",
            "nodeKind",
            "class",
            "or",
            "in",
            "pattern",
            "languageIn",
        )
    }
    constrained = {
        t.subject.value
        for t in triples
        if isinstance(t.subject, NamedNode) and t.predicate.value in constraint_preds
    }
    helpers = {
        t.subject.value
        for t in triples
        if isinstance(t.subject, NamedNode)
        and t.subject.value.removeprefix(S).startswith(("Is", "Has"))
    }
    covered = {S + c.shape for c in CASES}
    assert constrained - helpers - covered == set()


def test_shape_iris_are_stable_and_have_messages() -> None:
    sh = "http://www.w3.org/ns/shacl#"
    triples = load(default_shapes())
    property_shapes = {
        str(t.subject)[1:-1]
        for t in triples
        if t.predicate == RDF_TYPE and t.object == NamedNode(sh + "PropertyShape")
    }
    with_message = {str(t.subject)[1:-1] for t in triples if t.predicate.value == sh + "message"}
    assert len(property_shapes) > 100
    assert all(s.startswith(S) for s in property_shapes)
    assert property_shapes <= with_message


# --- the validator ----------------------------------------------------------------------------


def test_realistic_record_conforms_with_no_finding(fast: ShaclValidator) -> None:
    report = fast.validate_graph(record(REALISTIC, REALISTIC_IRI))
    assert report.validator == "shacl"
    assert report.findings == ()
    assert report.conforms


def test_finding_fields(fast: ShaclValidator) -> None:
    broken = [t for t in ALL_CLASSES if t.predicate != qname("dct:title")]
    report = fast.validate_graph(record(broken))
    title = [
        f for f in report.findings if f.rule == S + "Dataset-title|sh:MinCountConstraintComponent"
    ]
    assert title == [
        Finding(
            stage=Stage.SHACL,
            severity=Severity.VIOLATION,
            rule=S + "Dataset-title|sh:MinCountConstraintComponent",
            message="Every dataset needs at least one title (dct:title), given as text.",
            location=EX + "dataset",
            path="http://purl.org/dc/terms/title",
        )
    ]
    # violations sort first
    assert report.findings[0].severity is Severity.VIOLATION


def test_offending_value_is_in_the_message(fast: ShaclValidator) -> None:
    case = wrong("Distribution-byteSize", "dist", "dcat:byteSize", '"1 KB"')
    report = fast.validate_graph(record(case.triples()))
    (f,) = [f for f in report.findings if f.rule.startswith(S + "Distribution-byteSize|")]
    assert f.message.endswith("(value: 1 KB)")


def test_warnings_alone_keep_a_record_conforming(fast: ShaclValidator) -> None:
    recommended = {qname(p) for p in ("dcat:keyword", "dcat:theme", "dct:spatial", "dct:publisher")}
    triples = [
        t
        for t in ALL_CLASSES
        if not (t.subject == NamedNode(EX + "dataset") and t.predicate in recommended)
    ]
    report = fast.validate_graph(record(triples))
    assert len(report.findings) == 4
    assert {f.severity for f in report.findings} == {Severity.WARNING}
    assert report.conforms


def test_operator_profile_is_applied() -> None:
    profile = DATA / "national-profile.ttl"
    plain = ShaclValidator()
    national = ShaclValidator(extra_shapes=[profile])
    triples = [t for t in REALISTIC if t.predicate != qname("dct:accessRights")]
    dataset = record(triples, REALISTIC_IRI)
    assert plain.validate_graph(dataset).conforms
    report = national.validate_graph(dataset)
    assert not report.conforms
    xx = "https://example.org/shapes/dcat-ap-xx#"
    assert rules(report.findings) == {
        (xx + "Dataset-accessRights", Severity.VIOLATION),
        # the anonymous sh:property reports as the named shape that holds it; Info only
        (xx + "Dataset", Severity.INFO),
    }


def test_operator_profile_info_does_not_reject() -> None:
    national = ShaclValidator(extra_shapes=[DATA / "national-profile.ttl"])
    report = national.validate_graph(record(REALISTIC, REALISTIC_IRI))
    assert [f.severity for f in report.findings] == [Severity.INFO]  # the German title
    assert report.conforms


def test_default_profile_rejects_untyped_vocabulary_references(fast: ShaclValidator) -> None:
    """The class ranges are part of the default profile, as range.ttl is of the official
    shapes: a value whose class the range demands must carry it in the record."""
    untyped = turtle(
        "ex:dataset dct:language ex:lang-fr ; dct:accessRights ex:public ; "
        "dct:accrualPeriodicity ex:annual ; dcat:theme ex:theme-heal ."
    )
    report = fast.validate_graph(record(ALL_CLASSES + untyped))
    assert not report.conforms
    r = "https://w3id.org/ld-aggregator/shapes/dcat-ap-3-ranges#"
    assert {
        (f.rule, f.message.rpartition("(value: ")[2].rstrip(")"))
        for f in report.findings
        if f.rule.startswith(r)
    } == {
        (r + "Dataset-language|sh:ClassConstraintComponent", EX + "lang-fr"),
        (r + "Dataset-accessRights|sh:ClassConstraintComponent", EX + "public"),
        (r + "Dataset-accrualPeriodicity|sh:ClassConstraintComponent", EX + "annual"),
        (r + "Dataset-theme|sh:ClassConstraintComponent", EX + "theme-heal"),
    }


def test_each_record_is_validated_on_its_own_graph(fast: ShaclValidator) -> None:
    typed = turtle("ex:theme-envi a skos:Concept . ex:a a foaf:Agent .")
    strict = ShaclValidator(extra_shapes=[ranges_shapes()])
    good = record(ALL_CLASSES + typed)
    alone = strict.validate_graph(good)
    assert (
        "https://w3id.org/ld-aggregator/shapes/dcat-ap-3-ranges#Dataset-theme",
        Severity.VIOLATION,
    ) not in rules(alone.findings)


def test_unparseable_graph_raises_parse_error(fast: ShaclValidator) -> None:
    bad = MappedDataset(
        local_id="x", dataset_iri=EX + "x", ntriples=b"<a> <b> .\n", content_hash=""
    )
    with pytest.raises(ParseError):
        fast.validate_graph(bad)


def test_empty_graph_conforms(fast: ShaclValidator) -> None:
    empty = MappedDataset(local_id="x", dataset_iri=EX + "x", ntriples=b"", content_hash="")
    assert fast.validate_graph(empty).findings == ()


def test_unknown_engine_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown SHACL engine"):
        ShaclValidator(engine="jena")


def test_missing_shapes_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        ShaclValidator(extra_shapes=[tmp_path / "nope.ttl"])


def test_file_without_shapes_is_a_config_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.ttl"
    empty.write_text("<https://example.org/a> <https://example.org/b> <https://example.org/c> .")
    with pytest.raises(ConfigError, match="cannot be compiled"):
        ShaclValidator(shapes=[empty])


def test_broken_shapes_file_is_a_config_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.ttl"
    broken.write_text("@prefix sh: <http://www.w3.org/ns/shacl#> . sh:x sh:y")
    with pytest.raises(ConfigError, match="cannot be read"):
        ShaclValidator(extra_shapes=[broken])


def test_validator_pickles_as_its_arguments(fast: ShaclValidator) -> None:
    national = ShaclValidator(extra_shapes=[DATA / "national-profile.ttl"])
    clone = pickle.loads(pickle.dumps(national))
    assert clone.shape_files == national.shape_files
    assert clone._compiled is national._compiled  # compiled once per process
    dataset = record(REALISTIC, REALISTIC_IRI)
    assert clone.validate_graph(dataset) == national.validate_graph(dataset)
    assert len(pickle.dumps(fast)) < 1_000


def _validate_in_worker(validator: ShaclValidator, dataset: MappedDataset) -> bool:
    return validator.validate_graph(dataset).conforms


def test_validator_runs_in_a_worker_process(fast: ShaclValidator) -> None:
    broken = record([t for t in ALL_CLASSES if t.predicate != qname("dcat:accessURL")])
    with ProcessPoolExecutor(max_workers=1) as pool:
        results = list(
            pool.map(_validate_in_worker, [fast, fast], [record(REALISTIC, REALISTIC_IRI), broken])
        )
    assert results == [True, False]


def test_registered_as_the_shacl_validator() -> None:
    from aggregator.plugin import validators

    assert validators.get("shacl") is ShaclValidator
    assert ShaclValidator.target == "graph"


# --- agreement with the reference engine ------------------------------------------------------


def realistic_variants() -> list[tuple[str, list[Triple]]]:
    """Delete each property of each node, and corrupt every object, of the realistic record."""
    variants: list[tuple[str, list[Triple]]] = [("realistic", list(REALISTIC))]
    groups = sorted({(str(t.subject), str(t.predicate)) for t in REALISTIC})
    for subject, predicate in groups:
        if subject.startswith("_:"):
            continue  # blank-node labels differ per parse; covered by the corruptions below
        kept = [t for t in REALISTIC if (str(t.subject), str(t.predicate)) != (subject, predicate)]
        variants.append((f"del {subject} {predicate}", kept))
    for i, t in enumerate(REALISTIC):
        if t.predicate == RDF_TYPE or i % 2:
            continue
        corrupted: NamedNode | Literal
        if isinstance(t.object, Literal):
            corrupted = NamedNode("https://example.org/not-a-literal")
        elif isinstance(t.object, BlankNode | NamedNode):
            corrupted = Literal("not an IRI")
        else:
            continue
        others = [u for u in REALISTIC if u != t]
        variants.append((f"corrupt {t}", [*others, Triple(t.subject, t.predicate, corrupted)]))
    return variants


def agreement_corpus() -> list[tuple[str, MappedDataset]]:
    corpus = [(name, record(ts, REALISTIC_IRI)) for name, ts in realistic_variants()]
    corpus += [(c.id, record(c.triples())) for c in CASES]
    corpus += [(v.id, record(v.triples())) for v in GOOD_VARIANTS]
    return corpus


def key(findings: Iterable[Finding]) -> Counter[tuple[str | None, str | None, str, Severity]]:
    return Counter((f.location, f.path, f.rule, f.severity) for f in findings)


def test_fast_engine_agrees_with_pyshacl(fast: ShaclValidator, reference: ShaclValidator) -> None:
    corpus = agreement_corpus()
    assert len(corpus) >= 50
    verdicts: Counter[bool] = Counter()
    disagreements = []
    for name, dataset in corpus:
        a = fast.validate_graph(dataset)
        b = reference.validate_graph(dataset)
        verdicts[a.conforms] += 1
        if a.conforms != b.conforms or key(a.findings) != key(b.findings):
            disagreements.append(
                (name, key(a.findings) - key(b.findings), key(b.findings) - key(a.findings))
            )
    assert disagreements == []
    assert verdicts[True] >= 10
    assert verdicts[False] >= 40


def test_engines_agree_with_an_operator_profile() -> None:
    extra = [DATA / "national-profile.ttl", ranges_shapes()]
    a = ShaclValidator(extra_shapes=extra)
    b = ShaclValidator(extra_shapes=extra, engine="pyshacl")
    for _name, dataset in agreement_corpus()[:20]:
        ra, rb = a.validate_graph(dataset), b.validate_graph(dataset)
        assert ra.conforms == rb.conforms
        assert key(ra.findings) == key(rb.findings)
