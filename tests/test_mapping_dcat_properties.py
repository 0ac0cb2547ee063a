"""Property-based tests of the dcat mapper on generated DCAT graphs (hypothesis).

The graphs mix datasets (IRIs and blank nodes), distributions, agents and arbitrary nodes,
cycles, nodes nothing links to, properties the rules rewrite (with literal and resource values,
valid and invalid), and properties no rule knows. For every graph:

* mapping never crashes (a dataset without a title is a finding, not an exception);
* every input triple is kept, rewritten by a named rule or reported (the accounting);
* the output is deterministic;
* an input that meets DCAT-AP 2.1.1 gives records that meet DCAT-AP 3.0.1.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pyoxigraph as ox
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aggregator.core.models import MappedDataset, RawRecord
from aggregator.mapping.base import MappingContext
from aggregator.mapping.dcat import DcatMapper, canonical_quads
from aggregator.mapping.dcat.accounting import account
from aggregator.validate.shacl import ShaclValidator

CTX = MappingContext(base_iri="https://agg.example.org/", source="prop")
DCAT = "http://www.w3.org/ns/dcat#"
DCT = "http://purl.org/dc/terms/"
XSD = "http://www.w3.org/2001/XMLSchema#"
EU = "http://publications.europa.eu/resource/authority/"
RDF_TYPE = ox.NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
SHAPES_211 = Path(__file__).parent / "data" / "dcat" / "dcat-ap-2.1.1.ttl"


def n(iri: str) -> ox.NamedNode:
    return ox.NamedNode(iri)


PREDICATES = [
    n(DCT + p)
    for p in (
        "title", "description", "format", "language", "license", "accrualPeriodicity",
        "spatial", "temporal", "publisher", "issued", "modified", "relation", "type",
        "conformsTo", "rights", "accessRights", "isVersionOf",
    )
] + [
    n(DCAT + p)
    for p in (
        "mediaType", "byteSize", "theme", "keyword", "landingPage", "accessURL", "version",
        "dataset", "record", "distribution",
    )
] + [
    n("http://xmlns.com/foaf/0.1/primaryTopic"),
    n("http://www.w3.org/2002/07/owl#versionInfo"),
    n("http://schema.org/startDate"),
    n("http://www.w3.org/ns/adms#status"),
    n("http://www.w3.org/2006/vcard/ns#hasEmail"),
    n("http://xmlns.com/foaf/0.1/name"),
    n("https://national.example.org/ns#extra"),
    n("https://national.example.org/ns#note"),
]  # fmt: skip
IRI_VALUES = [
    n(EU + "file-type/CSV"),
    n(EU + "language/DEU"),
    n(EU + "licence/CC_BY_4_0"),
    n(EU + "data-theme/ENVI"),
    n("http://purl.org/cld/freq/monthly"),
    n("http://purl.org/adms/status/Completed"),
    n("https://www.iana.org/assignments/media-types/text/csv"),
    n("mailto:someone@example.org"),
    n("https://elsewhere.example.org/thing"),
]
LITERALS = [
    ox.Literal("CSV"),
    ox.Literal("de"),
    ox.Literal("CC-BY 4.0"),
    ox.Literal("monthly"),
    ox.Literal("Berlin", language="de"),
    ox.Literal("Titre", language="fr"),
    ox.Literal("Title", language="en-gb"),
    ox.Literal("2021-03-04"),
    ox.Literal("2021-03-04", datatype=n(XSD + "date")),
    ox.Literal("12.0", datatype=n(XSD + "decimal")),
    ox.Literal("412 kB"),
    ox.Literal("someone@example.org"),
    ox.Literal("https://example.org/page"),
    ox.Literal("unknown thing"),
    ox.Literal("7", datatype=n(XSD + "integer")),
]


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    n_datasets = draw(st.integers(1, 3))
    n_nodes = draw(st.integers(0, 5))
    datasets: list[ox.NamedNode | ox.BlankNode] = [
        ox.BlankNode(f"d{i}") if draw(st.booleans()) else n(f"https://src.example.org/d{i}")
        for i in range(n_datasets)
    ]
    nodes: list[ox.NamedNode | ox.BlankNode] = [
        ox.BlankNode(f"n{i}") if draw(st.booleans()) else n(f"https://src.example.org/n{i}")
        for i in range(n_nodes)
    ]
    quads: list[ox.Quad] = []
    for d in datasets:
        quads.append(ox.Quad(d, RDF_TYPE, n(DCAT + "Dataset")))
        if draw(st.integers(0, 9)) > 0:
            quads.append(ox.Quad(d, n(DCT + "title"), draw(st.sampled_from(LITERALS[4:7]))))
    subjects = datasets + nodes
    for _ in range(draw(st.integers(0, 25))):
        s = draw(st.sampled_from(subjects))
        p = draw(st.sampled_from(PREDICATES))
        kind = draw(st.integers(0, 2))
        o: ox.NamedNode | ox.BlankNode | ox.Literal
        if kind == 0:
            o = draw(st.sampled_from(LITERALS))
        elif kind == 1:
            o = draw(st.sampled_from(IRI_VALUES))
        else:
            o = draw(st.sampled_from(subjects))
        quads.append(ox.Quad(s, p, o))
    for node in nodes:
        if draw(st.booleans()):
            cls = draw(st.sampled_from(["Distribution", "Catalog", "CatalogRecord"]))
            quads.append(ox.Quad(node, RDF_TYPE, n(DCAT + cls)))
    data = ox.serialize((q.triple for q in quads), format=ox.RdfFormat.N_TRIPLES)
    assert data is not None
    return data


@cache
def mapper() -> DcatMapper:
    return DcatMapper()


@cache
def validators() -> tuple[ShaclValidator, ShaclValidator]:
    return ShaclValidator(shapes=[SHAPES_211]), ShaclValidator()


def raw(payload: bytes) -> RawRecord:
    return RawRecord("prop", "doc", "dcat", payload, "application/n-triples", is_collection=True)


# found by Hypothesis: a dcat:record naming the dataset itself lists nothing, so every
# catalogue's facts go with the dataset (the accounting used to count it as listing)
_RECORD_NAMES_DATASET = (
    b"<https://src.example.org/d0> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
    b" <http://www.w3.org/ns/dcat#Dataset> .\n"
    b'<https://src.example.org/d0> <http://purl.org/dc/terms/title> "CSV" .\n'
    b"<https://src.example.org/n0> <http://www.w3.org/ns/dcat#record>"
    b" <https://src.example.org/d0> .\n"
    b"<https://src.example.org/n0> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
    b" <http://www.w3.org/ns/dcat#Catalog> .\n"
    b"<https://src.example.org/n2> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
    b" <http://www.w3.org/ns/dcat#Catalog> .\n"
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
@example(payload=_RECORD_NAMES_DATASET)
def test_every_triple_accounted_and_output_deterministic(payload: bytes) -> None:
    record = raw(payload)
    first = mapper().map(record, CTX)
    result = account(record, first, mapper().rules)
    assert result.unaccounted == 0, result.missing
    again = DcatMapper().map(record, CTX)
    assert [(m.dataset_iri, m.ntriples, m.catalog_ntriples) for m in first] == [
        (m.dataset_iri, m.ntriples, m.catalog_ntriples) for m in again
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_valid_input_never_comes_out_invalid(payload: bytes) -> None:
    record = raw(payload)
    quads = list(ox.parse(payload, format=ox.RdfFormat.N_TRIPLES))
    before = validators()[0].validate_graph(MappedDataset("doc", "doc", canonical_quads(quads), ""))
    out = mapper().map(record, CTX)
    if before.conforms:
        for m in out:
            report = validators()[1].validate_graph(m)
            assert report.conforms, [f.message for f in report.findings]
