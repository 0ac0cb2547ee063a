"""The GeoDCAT-AP operator profile, shapes/geodcat-ap.ttl, on top of the DCAT-AP 3 shapes.

* the realistic GeoDCAT-AP record (tests/data/shacl/geodcat-dataset.ttl) and ``GOOD_VARIANTS``
  conform with no finding at all;
* every shape of the profile has a violating example (``CASES``, checked for coverage) that
  is reported under that shape's IRI with the shape's severity;
* plain DCAT-AP records (generated sample datasets mapped by the dcat mapper) still conform
  and get no GeoDCAT-AP finding unless they are geospatial (a dct:spatial with a geometry);
* the fast engine agrees with pyshacl on all of these records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyoxigraph import (
    CanonicalizationAlgorithm,
    Dataset,
    DefaultGraph,
    NamedNode,
    Quad,
    RdfFormat,
    Triple,
    parse,
    serialize,
)

from aggregator.core.models import Finding, MappedDataset, RawRecord, Severity
from aggregator.demo.peers.sample_data import generate_dataset
from aggregator.mapping.base import MappingContext
from aggregator.mapping.dcat import DcatMapper
from aggregator.mapping.finish import finish_mapped
from aggregator.validate.shacl import ShaclValidator, shapes_dir

DATA = Path(__file__).parent / "data" / "shacl"
PROFILE = shapes_dir() / "geodcat-ap.ttl"
G = "https://w3id.org/ld-aggregator/shapes/geodcat-ap#"
S = "https://w3id.org/ld-aggregator/shapes/dcat-ap-3#"
EX = "https://data.example.gov.uk/id/"
SH = "http://www.w3.org/ns/shacl#"
RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")

NS = {
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "owl": "http://www.w3.org/2002/07/owl#",
    "xsd": "http://www.w3.org/2001/XMLSchema#",
    "dcat": "http://www.w3.org/ns/dcat#",
    "dct": "http://purl.org/dc/terms/",
    "foaf": "http://xmlns.com/foaf/0.1/",
    "vcard": "http://www.w3.org/2006/vcard/ns#",
    "adms": "http://www.w3.org/ns/adms#",
    "skos": "http://www.w3.org/2004/02/skos/core#",
    "locn": "http://www.w3.org/ns/locn#",
    "prov": "http://www.w3.org/ns/prov#",
    "dqv": "http://www.w3.org/ns/dqv#",
    "gsp": "http://www.opengis.net/ont/geosparql#",
    "geodcat": "http://data.europa.eu/930/",
    "inspire": "http://inspire.ec.europa.eu/metadata-codelist/",
    "ex": EX,
}
PREFIXES = "".join(f"@prefix {p}: <{iri}> .\n" for p, iri in NS.items())


# --- building records -------------------------------------------------------------------------


def canonical(triples: Iterable[Triple]) -> bytes:
    """Canonical N-Triples as the mappers produce them (RDFC-1.0 labels, sorted lines)."""
    ds = Dataset(Quad(t.subject, t.predicate, t.object, DefaultGraph()) for t in triples)
    ds.canonicalize(CanonicalizationAlgorithm.RDFC_1_0)
    text = serialize((q.triple for q in ds), format=RdfFormat.N_TRIPLES)
    assert isinstance(text, bytes)
    return ("\n".join(sorted(set(text.decode().splitlines()))) + "\n").encode()


def record(triples: Iterable[Triple], iri: str = EX + "dataset") -> MappedDataset:
    return MappedDataset(
        local_id=iri, dataset_iri=iri, ntriples=canonical(triples), content_hash=""
    )


def turtle(text: str) -> list[Triple]:
    return [q.triple for q in parse((PREFIXES + text).encode(), format=RdfFormat.TURTLE)]


def qname(name: str) -> NamedNode:
    prefix, _, local = name.partition(":")
    return NamedNode(NS[prefix] + local)


GEO = [q.triple for q in parse(path=DATA / "geodcat-dataset.ttl")]


def edit(remove: Iterable[tuple[str, str]] = (), add: str = "") -> list[Triple]:
    """GEO without the (subject, predicate) pairs in ``remove`` (subject "*": any), plus ``add``.

    A subject is a local name under EX; blank nodes are reached with "*".
    """
    rules = [(None if s == "*" else NamedNode(EX + s), qname(p)) for s, p in remove]
    kept = [
        t
        for t in GEO
        if not any(t.predicate == p and (s is None or t.subject == s) for s, p in rules)
    ]
    return kept + (turtle(add) if add else [])


@dataclass(frozen=True)
class Case:
    """One violating example of the GeoDCAT-AP shape ``shape`` (a local name under G)."""

    shape: str
    remove: tuple[tuple[str, str], ...] = ()
    add: str = ""
    severity: Severity = Severity.VIOLATION
    note: str = ""

    @property
    def id(self) -> str:
        return f"{self.shape}{'-' + self.note if self.note else ''}"

    def triples(self) -> list[Triple]:
        return edit(self.remove, self.add)


W = Severity.WARNING


def wrong(shape: str, subject: str, pred: str, obj: str, note: str = "") -> Case:
    """Replace every value of ``pred`` on ``subject`` with ``obj``."""
    return Case(shape, remove=((subject, pred),), add=f"ex:{subject} {pred} {obj} .", note=note)


def extra(shape: str, ttl: str, severity: Severity = Severity.VIOLATION, note: str = "") -> Case:
    return Case(shape, add=ttl, severity=severity, note=note)


def missing(
    shape: str, *pairs: tuple[str, str], severity: Severity = Severity.VIOLATION, note: str = ""
) -> Case:
    return Case(shape, remove=pairs, severity=severity, note=note)


WKT_AS_TEXT = '"POLYGON((-6.4 49.8,1.8 49.8,1.8 55.9,-6.4 55.9,-6.4 49.8))"'

CASES: list[Case] = [
    # Location: geometry literals
    wrong("Location-bbox", "extent", "dcat:bbox", WKT_AS_TEXT),
    wrong("Location-bbox", "extent-gml", "dcat:bbox", WKT_AS_TEXT + "^^xsd:string", note="str"),
    wrong("Location-centroid", "extent", "dcat:centroid", '"POINT(-2.3 52.85)"'),
    wrong("Location-geometry", "extent", "locn:geometry", '"{\\"type\\":\\"Point\\"}"'),
    wrong(
        "Location-geometry",
        "extent-gml",
        "locn:geometry",
        '"{}"^^<https://example.org/json>',
        note="other-datatype",
    ),
    # Catalogued resources: agent roles, attributions, reference system, topic category
    wrong("CataloguedResource-custodian", "dataset", "geodcat:custodian", '"Environment Agency"'),
    extra("CataloguedResource-distributor", 'ex:dataset geodcat:distributor "EA" .'),
    extra("CataloguedResource-originator", 'ex:dataset geodcat:originator "EA" .'),
    extra("CataloguedResource-principalInvestigator", 'ex:wms geodcat:principalInvestigator "X" .'),
    extra("CataloguedResource-processor", 'ex:dataset geodcat:processor "GIS team" .'),
    extra("CataloguedResource-resourceProvider", 'ex:dataset geodcat:resourceProvider "NSO" .'),
    extra("CataloguedResource-user", 'ex:dataset geodcat:user "Planning authorities" .'),
    extra(
        "CataloguedResource-pointOfContact",
        "ex:dataset geodcat:pointOfContact ex:agency .",
        severity=W,
    ),
    missing("CataloguedResource-qualifiedAttribution", ("attribution-custodian", "rdf:type")),
    wrong("CataloguedResource-referenceSystem", "dataset", "geodcat:referenceSystem", '"27700"'),
    wrong("CataloguedResource-topicCategory", "dataset", "geodcat:topicCategory", '"water"'),
    # Dataset: GeoDCAT-AP ranges
    extra("Dataset-conformsTo", 'ex:dataset dct:conformsTo "EPSG:4326" .'),
    extra(
        "Dataset-conformsTo",
        'ex:dataset dct:conformsTo [ dct:identifier "EPSG:4326" ] .',
        note="untyped-node",
    ),
    Case(
        "Dataset-provenance",
        remove=(("dataset", "dct:provenance"),),
        add='ex:dataset dct:provenance [ rdfs:label "Digitised from 1:10 000 maps."@en ] .',
    ),
    extra(
        "Dataset-resourceType", "ex:dataset geodcat:resourceType inspire:ResourceType\\/series ."
    ),
    wrong("Dataset-resourceType", "dataset", "geodcat:resourceType", '"dataset"', note="text"),
    wrong("Dataset-type-node", "dataset", "dct:type", '"dataset"'),
    extra("Dataset-subject", 'ex:dataset dct:subject "flooding" .'),
    extra("Dataset-representationTechnique", 'ex:dataset adms:representationTechnique "vector" .'),
    wrong(
        "Dataset-spatialResolutionInMeters",
        "dataset",
        "dcat:spatialResolutionInMeters",
        '"0.0"^^xsd:decimal',
    ),
    wrong(
        "Dataset-spatialResolutionInMeters",
        "dataset",
        "dcat:spatialResolutionInMeters",
        '"-25"^^xsd:decimal',
        note="negative",
    ),
    wrong(
        "Dataset-spatialResolutionInMeters",
        "dataset",
        "dcat:spatialResolutionInMeters",
        '"ten metres"',
        note="text",
    ),
    Case(
        "DatasetSeries-temporalResolution",
        remove=(("dataset", "dcat:temporalResolution"),),
        add='ex:dataset a dcat:DatasetSeries ; dcat:temporalResolution "daily" .',
    ),
    wrong("Dataset-spatialResolutionAsText", "dataset", "geodcat:spatialResolutionAsText", "ex:r"),
    missing("Dataset-qualityMeasurement", ("resolution-scale", "rdf:type")),
    missing("Dataset-wasUsedBy", ("conformity-test", "rdf:type")),
    # Geospatial datasets: recommendations
    missing(
        "GeoDataset-referenceSystem",
        ("dataset", "dct:conformsTo"),
        ("dataset", "geodcat:referenceSystem"),
        severity=W,
    ),
    missing("GeoDataset-provenance", ("dataset", "dct:provenance"), severity=W),
    missing(
        "GeoDataset-conformity",
        ("dataset", "prov:wasUsedBy"),
        ("dataset", "dct:conformsTo"),
        severity=W,
    ),
    missing(
        "GeoDataset-spatialResolution",
        ("dataset", "dcat:spatialResolutionInMeters"),
        ("dataset", "dqv:hasQualityMeasurement"),
        ("dataset", "geodcat:spatialResolutionAsText"),
        severity=W,
    ),
    missing(
        "GeoDataset-topicCategory",
        ("dataset", "geodcat:topicCategory"),
        ("dataset", "dct:subject"),
        severity=W,
    ),
    missing(
        "GeoDataset-resourceType",
        ("dataset", "geodcat:resourceType"),
        ("dataset", "dct:type"),
        severity=W,
    ),
    missing(
        "GeoDataset-representationTechnique", ("*", "adms:representationTechnique"), severity=W
    ),
    Case(
        "GeoDataset-referenceSystem",
        remove=(("dataset", "dct:conformsTo"), ("dataset", "geodcat:referenceSystem")),
        add="ex:dataset a dcat:DatasetSeries .",
        severity=W,
        note="series",
    ),
    # Distribution
    wrong(
        "Distribution-representationTechnique",
        "dist-gml",
        "adms:representationTechnique",
        '"vector"',
    ),
    extra("Distribution-conformsTo", 'ex:dist-gml dct:conformsTo "INSPIRE GML" .'),
    wrong("Distribution-referenceSystem", "dist-gml", "geodcat:referenceSystem", '"EPSG:27700"'),
    # Data service
    wrong("DataService-serviceType", "wms", "geodcat:serviceType", '"view"'),
    wrong("DataService-serviceCategory", "wms", "geodcat:serviceCategory", '"viewer"'),
    wrong("DataService-serviceProtocol", "wms", "geodcat:serviceProtocol", '"WMS"'),
    wrong("DataService-type-node", "wms", "dct:type", '"view"'),
    extra("DataService-conformsTo", 'ex:wms dct:conformsTo [ dct:title "OGC WMS 1.3.0" ] .'),
    missing(
        "GeoDataService-serviceType",
        ("wms", "geodcat:serviceType"),
        ("wms", "dct:type"),
        severity=W,
    ),
    # Standard (reference systems, specifications)
    wrong("Standard-identifier", "crs-etrs89", "dct:identifier", "ex:epsg-4258"),
    wrong("Standard-title", "wms-1-3-0", "dct:title", "ex:wms-title"),
    extra("Standard-versionInfo", 'ex:wms-1-3-0 owl:versionInfo "1.1.1" .'),
    extra(
        "Standard-identified",
        'ex:dist-gml dct:conformsTo [ a dct:Standard ; owl:versionInfo "4.0" ] .',
        severity=W,
    ),
    # Lineage
    missing("ProvenanceStatement-label", ("*", "rdfs:label")),
    Case(
        "ProvenanceStatement-label",
        remove=(("*", "rdfs:label"),),
        add="ex:dataset dct:provenance [ a dct:ProvenanceStatement ; rdfs:label ex:text ] .",
        note="iri",
    ),
    # Qualified attribution
    missing("Attribution-agent", ("attribution-custodian", "prov:agent")),
    extra("Attribution-agent", "ex:attribution-custodian prov:agent ex:survey .", note="two"),
    missing("Attribution-hadRole", ("attribution-custodian", "dcat:hadRole")),
    extra(
        "Attribution-hadRole",
        "ex:attribution-custodian dcat:hadRole inspire:ResponsiblePartyRole\\/owner .",
        note="two",
    ),
    # Conformity
    missing("Activity-qualifiedAssociation", ("conformity-test", "prov:qualifiedAssociation")),
    missing(
        "Activity-qualifiedAssociation", ("conformity-association", "rdf:type"), note="untyped"
    ),
    missing("Activity-generated", ("conformity-test", "prov:generated")),
    missing("Activity-generated", ("conformity-result", "rdf:type"), note="untyped"),
    missing(
        "Activity-qualifiedAssociation", ("conformity-association", "prov:hadPlan"), note="plan"
    ),
    missing(
        "Activity-qualifiedAssociation", ("conformity-plan", "prov:wasDerivedFrom"), note="spec"
    ),
    missing("Activity-generated", ("conformity-result", "dct:type"), note="no-degree"),
    extra(
        "Activity-generated",
        "ex:conformity-result dct:type inspire:DegreeOfConformity\\/notConformant .",
        note="two-degrees",
    ),
    wrong(
        "Activity-generated",
        "conformity-result",
        "dct:description",
        "ex:report",
        note="description-iri",
    ),
    # Spatial resolution as a quality measurement
    missing("QualityMeasurement-isMeasurementOf", ("resolution-scale", "dqv:isMeasurementOf")),
    missing("QualityMeasurement-value", ("resolution-scale", "dqv:value")),
    extra(
        "QualityMeasurement-value",
        'ex:resolution-scale dqv:value "0.0002"^^xsd:decimal .',
        note="two",
    ),
    # Catalogue record
    wrong("CatalogueRecord-contactPoint", "record", "dcat:contactPoint", '"geodata@example"'),
    wrong("CatalogueRecord-identifier", "record", "dct:identifier", "ex:file-id"),
    wrong("CatalogueRecord-language", "record", "dct:language", '"en"'),
    extra(
        "CatalogueRecord-qualifiedAttribution",
        "ex:record prov:qualifiedAttribution ex:untyped . ex:untyped prov:agent ex:agency ; "
        "dcat:hadRole inspire:ResponsiblePartyRole\\/pointOfContact .",
    ),
    missing("GeoCatalogueRecord-contactPoint", ("record", "dcat:contactPoint"), severity=W),
]


@dataclass(frozen=True)
class Variant:
    """A conforming example: no finding at all with the profile added."""

    id: str
    remove: tuple[tuple[str, str], ...] = ()
    add: str = ""

    def triples(self) -> list[Triple]:
        return edit(self.remove, self.add)


GOOD_VARIANTS: list[Variant] = [
    Variant("geodcat-dataset"),
    Variant(
        "geometry-as-node-centroid-as-gml",
        remove=(("extent", "locn:geometry"), ("extent", "dcat:centroid")),
        add="ex:extent locn:geometry ex:geometry ; dcat:centroid "
        '"<gml:Point><gml:pos>-2.3 52.85</gml:pos></gml:Point>"^^gsp:gmlLiteral .',
    ),
    Variant(
        "geojson-bbox-media-type",
        remove=(("extent", "dcat:bbox"),),
        add='ex:extent dcat:bbox "{\\"type\\":\\"Polygon\\",\\"coordinates\\":[]}"'
        "^^<https://www.iana.org/assignments/media-types/application/vnd.geo+json> .",
    ),
    Variant(
        "representation-type-on-the-dataset",
        remove=(("*", "adms:representationTechnique"),),
        add="ex:dataset adms:representationTechnique inspire:SpatialRepresentationType\\/grid .",
    ),
    Variant(
        "geodcat-ap-2-terms-only",
        remove=(
            ("*", "geodcat:topicCategory"),
            ("*", "geodcat:resourceType"),
            ("*", "geodcat:referenceSystem"),
            ("*", "geodcat:serviceType"),
            ("*", "geodcat:spatialResolutionAsText"),
        ),
    ),
    Variant(
        "geodcat-ap-3-terms-only",
        remove=(("dataset", "dct:subject"), ("dataset", "dct:type"), ("wms", "dct:type")),
    ),
    Variant(
        "resolution-as-distance-only",
        remove=(
            ("dataset", "dcat:spatialResolutionInMeters"),
            ("dataset", "geodcat:spatialResolutionAsText"),
            ("resolution-scale", "dqv:isMeasurementOf"),
            ("resolution-scale", "dqv:value"),
        ),
        add="ex:resolution-scale dqv:isMeasurementOf geodcat:spatialResolutionAsDistance ; "
        'dqv:value "10.0"^^xsd:decimal .',
    ),
    Variant(
        "conformity-as-conformsTo-only",
        remove=(("dataset", "prov:wasUsedBy"),),
    ),
    Variant(
        "other-prov-activities-are-not-conformity-tests",
        add="ex:dataset prov:wasGeneratedBy ex:survey-campaign . "
        "ex:survey-campaign a prov:Activity ; prov:generated ex:dataset ; "
        "prov:qualifiedAssociation [ a prov:Association ; prov:agent ex:survey ] .",
    ),
    Variant(
        "dataset-series",
        add="ex:dataset a dcat:DatasetSeries .",
    ),
]


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def geo() -> ShaclValidator:
    return ShaclValidator(extra_shapes=[PROFILE])


@pytest.fixture(scope="module")
def geo_reference() -> ShaclValidator:
    return ShaclValidator(extra_shapes=[PROFILE], engine="pyshacl")


def rules(findings: Iterable[Finding]) -> set[tuple[str, Severity]]:
    return {(f.rule.partition("|")[0], f.severity) for f in findings}


def ours(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.rule.startswith(G)]


def mapped_sample(index: int) -> MappedDataset:
    raw = RawRecord("sample", f"id{index}", "dcat", generate_dataset(index), "application/rdf+xml")
    ctx = MappingContext("https://agg.example.org/", "sample")
    [dataset] = finish_mapped(DcatMapper().map(raw, ctx), ctx)  # as a harvest stores it
    return dataset


def with_geometry(dataset: MappedDataset) -> MappedDataset:
    """The mapped record plus a dct:spatial bounding box: it becomes geospatial."""
    triples = [q.triple for q in parse(dataset.ntriples, format=RdfFormat.N_TRIPLES)]
    extent = turtle(
        f"<{dataset.dataset_iri}> dct:spatial [ a dct:Location ; "
        'dcat:bbox "POLYGON((4 50,5 50,5 51,4 51,4 50))"^^gsp:wktLiteral ] .'
    )
    return record(triples + extent, dataset.dataset_iri)


# --- the shapes -------------------------------------------------------------------------------


def subj(t: Triple) -> str:
    return t.subject.value if isinstance(t.subject, NamedNode) else ""


def shape_triples() -> list[Triple]:
    return [q.triple for q in parse(path=PROFILE)]


def test_profile_loads_as_extra_shapes(geo: ShaclValidator) -> None:
    assert PROFILE.is_file()
    assert [p.name for p in geo.shape_files] == [
        "dcat-ap-3.ttl",
        "dcat-ap-3-ranges.ttl",
        "geodcat-ap.ttl",
    ]


def test_profile_loads_from_the_configuration(tmp_path: Path) -> None:
    """The documented setting: [validation.shacl] extra_shapes = [".../geodcat-ap.ttl"]."""
    from aggregator.config import load_settings

    config = tmp_path / "aggregator.toml"
    config.write_text(f"[validation.shacl]\nextra_shapes = [{str(PROFILE)!r}]\n")
    settings = load_settings(config)
    options = dict(settings.validation.step("shacl").options)
    assert options["extra_shapes"] == (str(PROFILE),)
    validator = ShaclValidator(**options)
    assert validator.validate_graph(record(GEO)).findings == ()


@pytest.mark.parametrize("variant", GOOD_VARIANTS, ids=lambda v: v.id)
def test_conforming_examples_have_no_finding(geo: ShaclValidator, variant: Variant) -> None:
    report = geo.validate_graph(record(variant.triples()))
    assert report.findings == ()
    assert report.conforms


def test_realistic_record_conforms_without_the_profile_too() -> None:
    report = ShaclValidator().validate_graph(record(GEO))
    assert report.findings == ()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_violating_example_is_reported_by_its_shape(geo: ShaclValidator, case: Case) -> None:
    report = geo.validate_graph(record(case.triples()))
    assert (G + case.shape, case.severity) in rules(report.findings), report.findings
    for f in ours(report.findings):
        if f.rule.startswith(G + case.shape + "|"):
            assert f.message
            assert "Constraint" not in f.message
            assert not f.message.startswith("(helper)")
    # no other GeoDCAT-AP shape fires: the example exercises its shape only
    assert {r for r, _ in rules(ours(report.findings))} == {G + case.shape}, report.findings
    assert report.conforms is (case.severity is not Severity.VIOLATION)


def test_every_shape_has_a_violating_example() -> None:
    """Each named shape holding a constraint (helpers "Is..."/"Has..." aside) is in CASES."""
    constraint_preds = {
        SH + p
        for p in (
            "minCount",
            "maxCount",
            "datatype",
            "nodeKind",
            "class",
            "or",
            "in",
            "pattern",
            "node",
            "qualifiedValueShape",
            "minExclusive",
        )
    }
    triples = shape_triples()
    constrained = {
        t.subject.value
        for t in triples
        if isinstance(t.subject, NamedNode) and t.predicate.value in constraint_preds
    }
    helpers = {s for s in constrained if s.removeprefix(G).startswith(("Is", "Has"))}
    covered = {G + c.shape for c in CASES}
    assert constrained - helpers - covered == set()
    assert covered <= constrained - helpers  # no case names a shape that does not exist


def test_shape_iris_are_stable_and_have_messages() -> None:
    triples = shape_triples()
    shapes = {
        subj(t)
        for t in triples
        if t.predicate == RDF_TYPE
        and t.object in (NamedNode(SH + "PropertyShape"), NamedNode(SH + "NodeShape"))
    }
    with_message = {subj(t) for t in triples if t.predicate.value == SH + "message"}
    targeted = {subj(t) for t in triples if t.predicate.value.startswith(SH + "target")}
    assert len(shapes) > 60
    assert all(s.startswith(G) for s in shapes)
    property_shapes = {
        subj(t)
        for t in triples
        if t.predicate == RDF_TYPE and t.object == NamedNode(SH + "PropertyShape")
    }
    assert property_shapes <= with_message
    # a node shape that raises findings itself (targets + a constraint of its own) has a message
    own_constraint = {
        subj(t) for t in triples if t.predicate.value in (SH + "or", SH + "class", SH + "nodeKind")
    }
    assert (targeted & own_constraint) <= with_message


def test_warnings_name_geospatial_recommendations(geo: ShaclValidator) -> None:
    bare = edit(
        remove=(
            ("dataset", "dct:conformsTo"),
            ("dataset", "geodcat:referenceSystem"),
            ("dataset", "dct:provenance"),
            ("dataset", "prov:wasUsedBy"),
            ("dataset", "dcat:spatialResolutionInMeters"),
            ("dataset", "dqv:hasQualityMeasurement"),
            ("dataset", "geodcat:spatialResolutionAsText"),
            ("dataset", "geodcat:topicCategory"),
            ("dataset", "dct:subject"),
            ("dataset", "geodcat:resourceType"),
            ("dataset", "dct:type"),
            ("*", "adms:representationTechnique"),
        )
    )
    report = geo.validate_graph(record(bare))
    assert report.conforms
    expected = {
        "GeoDataset-referenceSystem",
        "GeoDataset-provenance",
        "GeoDataset-conformity",
        "GeoDataset-spatialResolution",
        "GeoDataset-topicCategory",
        "GeoDataset-resourceType",
        "GeoDataset-representationTechnique",
    }
    assert rules(report.findings) == {(G + name, Severity.WARNING) for name in expected}
    assert {f.location for f in report.findings} == {EX + "dataset"}
    # without a geometry on its dct:spatial the same dataset is not geospatial: no warning
    extents = (qname("ex:extent"), qname("ex:extent-gml"))
    plain = [t for t in bare if t.subject not in extents and t.object not in extents]
    assert geo.validate_graph(record(plain)).findings == ()


# --- plain DCAT-AP records ----------------------------------------------------------------------


@pytest.mark.parametrize("index", range(8))
def test_plain_dcat_ap_record_gets_no_geodcat_finding(geo: ShaclValidator, index: int) -> None:
    dataset = mapped_sample(index)
    plain = ShaclValidator().validate_graph(dataset)
    report = geo.validate_graph(dataset)
    assert report.conforms
    assert ours(report.findings) == []
    assert report.findings == plain.findings


def test_plain_record_with_a_bounding_box_gets_the_recommendations(geo: ShaclValidator) -> None:
    report = geo.validate_graph(with_geometry(mapped_sample(3)))
    assert report.conforms
    found = {r.removeprefix(G) for r, _ in rules(ours(report.findings))}
    # the sample data has no topic category, resource type or representation type (it may
    # have a reference system and a lineage, depending on the generated record)
    assert {
        "GeoDataset-topicCategory",
        "GeoDataset-resourceType",
        "GeoDataset-representationTechnique",
    } <= found
    assert all(name.startswith("GeoDataset-") for name in found)
    assert {f.severity for f in ours(report.findings)} == {Severity.WARNING}


# --- agreement with the reference engine ------------------------------------------------------


def key(findings: Iterable[Finding]) -> Counter[tuple[str | None, str | None, str, Severity]]:
    return Counter((f.location, f.path, f.rule, f.severity) for f in findings)


def agreement_corpus() -> list[tuple[str, MappedDataset]]:
    corpus = [(c.id, record(c.triples())) for c in CASES]
    corpus += [(v.id, record(v.triples())) for v in GOOD_VARIANTS]
    corpus += [(f"sample-{i}", mapped_sample(i)) for i in range(4)]
    corpus += [("sample-3-with-bbox", with_geometry(mapped_sample(3)))]
    # each property of each named node of the realistic record deleted in turn
    groups = sorted(
        {(t.subject.value, t.predicate.value) for t in GEO if isinstance(t.subject, NamedNode)}
    )
    for subject, predicate in groups:
        kept = [
            t
            for t in GEO
            if not (
                isinstance(t.subject, NamedNode)
                and (t.subject.value, t.predicate.value) == (subject, predicate)
            )
        ]
        corpus.append((f"del {subject} {predicate}", record(kept)))
    return corpus


def test_fast_engine_agrees_with_pyshacl(
    geo: ShaclValidator, geo_reference: ShaclValidator
) -> None:
    corpus = agreement_corpus()
    assert len(corpus) >= 150
    verdicts: Counter[bool] = Counter()
    disagreements = []
    for name, dataset in corpus:
        a = geo.validate_graph(dataset)
        b = geo_reference.validate_graph(dataset)
        verdicts[a.conforms] += 1
        if a.conforms != b.conforms or key(a.findings) != key(b.findings):
            disagreements.append(
                (name, key(a.findings) - key(b.findings), key(b.findings) - key(a.findings))
            )
    assert disagreements == []
    assert verdicts[True] >= 40
    assert verdicts[False] >= 50
