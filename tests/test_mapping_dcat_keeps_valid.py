"""Normalisation never makes a valid document invalid (DCAT-AP 3.0.1 shapes, shapes/).

The ``range-class`` rule types the values of object properties with their DCAT-AP 3.0.1 range
class; a type brings that class's shapes into play (a ``skos:Concept`` needs a
``skos:prefLabel``, a ``foaf:Agent`` a ``foaf:name``...). For every property whose object the
mapper may type, a conforming document with such a value (an IRI the document does not
describe, a term of a bundled vocabulary table, a blank node) must still conform once mapped.
"""

from __future__ import annotations

import pytest
from pyoxigraph import RdfFormat, parse, serialize

from aggregator.core.models import RawRecord, Severity
from aggregator.mapping.base import MappingContext
from aggregator.mapping.dcat import DcatMapper
from aggregator.mapping.ranges import complete_ranges
from aggregator.validate.shacl import ShaclValidator

PREFIXES = """@prefix dcat: <http://www.w3.org/ns/dcat#> .
@prefix dct: <http://purl.org/dc/terms/> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
"""
EU = "http://publications.europa.eu/resource/authority/"
# where each property is used (default: on the dataset)
ON_DISTRIBUTION = {
    "http://purl.org/dc/terms/format",
    "http://www.w3.org/ns/dcat#mediaType",
    "http://www.w3.org/ns/dcat#compressFormat",
    "http://www.w3.org/ns/dcat#packageFormat",
    "http://www.w3.org/ns/adms#status",
    "http://data.europa.eu/r5r/availability",
    "http://www.w3.org/ns/dcat#accessService",
    "http://purl.org/dc/terms/rights",
}
ON_CATALOG = {"http://www.w3.org/ns/dcat#themeTaxonomy", "http://xmlns.com/foaf/0.1/homepage"}
ON_RELATIONSHIP = {"http://www.w3.org/ns/dcat#hadRole"}
ON_CHECKSUM = {"http://spdx.org/rdf/terms#algorithm"}
# terms of the bundled vocabulary tables (mappings/dcat-ap-3-vocabularies.toml)
KNOWN_TERMS = {
    "http://www.w3.org/ns/dcat#theme": EU + "data-theme/ECON",
    "http://www.w3.org/ns/adms#status": EU + "distribution-status/COMPLETED",
    "http://data.europa.eu/r5r/availability": EU + "planned-availability/STABLE",
    "http://purl.org/dc/terms/language": EU + "language/DEU",
    "http://purl.org/dc/terms/license": EU + "licence/CC_BY_4_0",
    "http://purl.org/dc/terms/accrualPeriodicity": EU + "frequency/MONTHLY",
    "http://purl.org/dc/terms/accessRights": EU + "access-right/PUBLIC",
    "http://purl.org/dc/terms/format": EU + "file-type/CSV",
}

# properties whose value must be described to conform: a description the mapper may type
SPDX = "http://spdx.org/rdf/terms#"
DESCRIBED = {
    "http://www.w3.org/ns/dcat#distribution": [
        "[ dcat:accessURL <http://ex.org/g> ]",
        "[ a dcat:Distribution ; dcat:accessURL <http://ex.org/g> ]",
    ],
    "http://www.w3.org/ns/dcat#qualifiedRelation": [
        "[ dct:relation <http://ex.org/o> ; dcat:hadRole <http://ex.org/role> ]",
        "[ a dcat:Relationship ; dct:relation <http://ex.org/o> ; dcat:hadRole <http://ex.org/r> ]",
        "[ a dcat:Relationship ; dct:relation <http://ex.org/o> ; dcat:hadRole [ a dcat:Role ] ]",
    ],
    "http://www.w3.org/ns/dcat#themeTaxonomy": [
        '[ a <http://www.w3.org/2004/02/skos/core#ConceptScheme> ; dct:title "Themes"@en ]',
        '[ dct:title "Themes"@en ]',
    ],
    "http://www.w3.org/ns/adms#identifier": [
        '[ <http://www.w3.org/2004/02/skos/core#notation> "X-1" ]',
        "[ a <http://www.w3.org/ns/adms#Identifier> ;"
        ' <http://www.w3.org/2004/02/skos/core#notation> "X-1" ]',
    ],
    "http://purl.org/dc/terms/temporal": [
        '[ dcat:startDate "2020-01-01"^^xsd:date ]',
        '[ a dct:PeriodOfTime ; dcat:startDate "2020-01-01"^^xsd:date ]',
    ],
    "http://spdx.org/rdf/terms#checksum": [
        f"[ <{SPDX}algorithm> <{SPDX}checksumAlgorithm_sha1> ; <{SPDX}checksumValue>"
        ' "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12"^^xsd:hexBinary ]',
    ],
}


def document(prop: str, value: str) -> str:
    """A conforming catalogue whose ``prop`` (on the right node) has the object ``value``."""
    dataset = [
        '<http://ex.org/d> a dcat:Dataset ; dct:title "T"@en ; dct:description "D"@en ;',
        "  dcat:distribution <http://ex.org/d/dist> .",
    ]
    dist = ["<http://ex.org/d/dist> a dcat:Distribution ; dcat:accessURL <http://ex.org/f> ."]
    catalog = [
        '<http://ex.org/c> a dcat:Catalog ; dct:title "C"@en ; dct:description "C"@en ;',
        "  dct:publisher <http://ex.org/p> ; dcat:dataset <http://ex.org/d> .",
        "<http://ex.org/p> a <http://xmlns.com/foaf/0.1/Agent> ;",
        '  <http://xmlns.com/foaf/0.1/name> "P" .',
    ]
    extra = []
    if prop in ON_DISTRIBUTION:
        extra.append(f"<http://ex.org/d/dist> <{prop}> {value} .")
    elif prop in ON_CATALOG:
        extra.append(f"<http://ex.org/c> <{prop}> {value} .")
    elif prop in ON_RELATIONSHIP:
        extra.append(
            "<http://ex.org/d> dcat:qualifiedRelation [ a dcat:Relationship ;"
            f" dct:relation <http://ex.org/other> ; <{prop}> {value} ] ."
        )
    elif prop in ON_CHECKSUM:
        extra.append(
            "<http://ex.org/d/dist> <http://spdx.org/rdf/terms#checksum> [ a"
            " <http://spdx.org/rdf/terms#Checksum> ; <http://spdx.org/rdf/terms#checksumValue>"
            f' "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12"^^xsd:hexBinary ; <{prop}> {value} ] .'
        )
    else:
        extra.append(f"<http://ex.org/d> <{prop}> {value} .")
    return PREFIXES + "\n".join(dataset + dist + catalog + extra) + "\n"


SHAPES = ShaclValidator()
LABEL = "<http://www.w3.org/2004/02/skos/core#prefLabel>"


def violations(validator: ShaclValidator, ntriples: bytes) -> list[str]:
    report = validator.validate_ntriples(ntriples)
    return [
        f"{f.location} {f.path}: {f.message}"
        for f in report.findings
        if f.severity is Severity.VIOLATION
    ]


def as_ntriples(turtle: str) -> bytes:
    data = serialize(
        (q.triple for q in parse(turtle.encode(), format=RdfFormat.TURTLE)),
        format=RdfFormat.N_TRIPLES,
    )
    assert data is not None
    return data


def typed_properties() -> tuple[set[str], list[tuple[str, str]]]:
    """(every property the mapper types, the (property, value) cases whose document conforms).

    An undescribed IRI or a bare blank node is not a conforming value of every property (a
    distribution, a checksum, an identifier must be described): those inputs are left out,
    since the promise is about conforming documents.
    """
    props: set[str] = set()
    cases = []
    for rule in DcatMapper().rules.rules:
        if rule.kind != "range-class":
            continue
        for row in rule.ranges:
            for prop in row.properties:
                props.add(prop)
                values = ["<http://ex.org/undescribed-term>", '[ rdfs:label "a label" ]']
                # the class ranges are part of the default shapes (as range.ttl is of the
                # official ones): a conforming document states its values' classes
                cls = row.cls
                values += [
                    f"[ a <{cls}> ]",
                    f'[ a <{cls}> ; {LABEL} "a label" ; <http://xmlns.com/foaf/0.1/name> "n" ]',
                ]
                if prop not in ON_RELATIONSHIP | ON_CHECKSUM:  # not inside a [ ... ]
                    term = "<http://ex.org/term> . <http://ex.org/term>"
                    values += [f"{term} a <{cls}>", f'{term} a <{cls}> ; {LABEL} "a label"']
                if prop in KNOWN_TERMS:
                    values.append(f"<{KNOWN_TERMS[prop]}>")
                values.extend(DESCRIBED.get(prop, ()))
                for value in values:
                    if not violations(SHAPES, as_ntriples(document(prop, value))):
                        cases.append((prop, value))
    return props, cases


PROPERTIES, CASES = typed_properties()


def test_every_range_class_property_is_covered() -> None:
    """Each property the mapper may type has a conforming case (leaving out the inputs that
    do not conform cannot make the test vacuous)."""
    assert len(PROPERTIES) >= 30
    assert {p for p, _ in CASES} == PROPERTIES
    assert len(CASES) >= 55


@pytest.mark.parametrize(("prop", "value"), CASES, ids=[f"{p} {v}" for p, v in CASES])
def test_a_valid_document_stays_valid_after_mapping(prop: str, value: str) -> None:
    text = document(prop, value)
    assert violations(SHAPES, as_ntriples(text)) == []
    raw = RawRecord(
        source="s",
        local_id="doc",
        format="dcat",
        payload=text.encode(),
        media_type="text/turtle",
        url="http://ex.org/doc.ttl",
        is_collection=True,
    )
    (mapped,) = DcatMapper().map(raw, MappingContext("https://agg.example.org/", "s"))
    mapped = complete_ranges(mapped)  # the range step after every mapper
    after = violations(SHAPES, mapped.ntriples + mapped.catalog_ntriples)
    assert after == [], mapped.ntriples.decode()


def test_a_known_concept_gets_its_label_and_an_unknown_one_stays_untyped() -> None:
    text = document("http://www.w3.org/ns/dcat#theme", f"<{EU}data-theme/ECON>")
    text += "<http://ex.org/d> dcat:theme <http://ex.org/own-theme> .\n"
    raw = RawRecord("s", "doc", "dcat", text.encode(), "text/turtle", "http://ex.org/doc.ttl")
    (mapped,) = DcatMapper().map(raw, MappingContext("https://agg.example.org/", "s"))
    nt = mapped.ntriples.decode()
    skos = "http://www.w3.org/2004/02/skos/core#"
    assert f'<{EU}data-theme/ECON> <{skos}prefLabel> "Economy and finance"@en .' in nt
    assert f"<{EU}data-theme/ECON> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type>" in nt
    assert "<http://ex.org/own-theme> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type>" not in nt
    assert any(f.rule == "range-class-not-typed" for f in mapped.findings)
