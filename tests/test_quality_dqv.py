"""DQV output of the MQA: it parses, has every measurement, and the metrics are defined."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pyoxigraph import Literal, NamedNode, Quad, RdfFormat, Store, parse, serialize

from aggregator.validate.quality import (
    INDICATORS,
    METRICS_PATH,
    DatasetQuality,
    assess,
    metrics_turtle,
)
from aggregator.validate.quality.dqv import DQV, MQA, dqv_ntriples

DATA = Path(__file__).parent / "data" / "quality"
WHEN = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
PREFIXES = f"PREFIX dqv: <{DQV}> PREFIX mqa: <{MQA}> PREFIX prov: <http://www.w3.org/ns/prov#>\n"


def quality(name: str, compliant: bool | None = True) -> DatasetQuality:
    turtle = (DATA / name).read_bytes()
    data = serialize(parse(turtle, format=RdfFormat.TURTLE), format=RdfFormat.N_TRIPLES)
    assert data is not None
    return assess(data, dcat_ap_compliant=compliant)


def load(store: Store, graph: str, data: bytes) -> None:
    g = NamedNode(graph)
    store.extend(
        Quad(t.subject, t.predicate, t.object, g) for t in parse(data, format=RdfFormat.N_TRIPLES)
    )


def test_measurements_parse_and_are_complete() -> None:
    q = quality("excellent.ttl")  # no link check: 320 points, 80 unchecked
    data = dqv_ntriples(q, generated_at=WHEN)
    triples = list(parse(data, format=RdfFormat.N_TRIPLES))
    assert data == b"\n".join(sorted(data.splitlines())) + b"\n"
    store = Store()
    store.extend(Quad(t.subject, t.predicate, t.object) for t in triples)  # default graph
    rows = list(
        store.query(
            PREFIXES
            + """SELECT ?metric ?value ?checked ?at WHERE {
              ?ds dqv:hasQualityMeasurement ?m .
              ?m a dqv:QualityMeasurement ; dqv:computedOn ?ds ; dqv:isMeasurementOf ?metric ;
                 dqv:value ?value ; mqa:checked ?checked ; prov:generatedAtTime ?at .
            }"""
        )
    )
    # 23 indicators + 5 dimensions + score + rating, seven triples each
    assert len(rows) == 30
    assert len(triples) == 30 * 7
    values = {str(r["metric"].value).removeprefix(MQA): r["value"] for r in rows}
    assert values["keyword"] == Literal(
        "30", datatype=NamedNode("http://www.w3.org/2001/XMLSchema#integer")
    )
    assert values["accessUrlReachable"].value == "0"
    assert values["accessibilityScore"].value == "20"
    assert values["score"].value == "320"
    assert values["rating"] == Literal("good")
    checked = {str(r["metric"].value).removeprefix(MQA): r["checked"].value for r in rows}
    assert checked["accessUrlReachable"] == "false"
    assert checked["accessibilityScore"] == "false"
    assert checked["score"] == "false"
    assert checked["keyword"] == "true"
    assert {r["at"] for r in rows} == {
        Literal(
            "2025-03-01T12:00:00Z",
            datatype=NamedNode("http://www.w3.org/2001/XMLSchema#dateTime"),
        )
    }
    ds = {
        r["ds"]
        for r in store.query(PREFIXES + "SELECT DISTINCT ?ds WHERE { ?m dqv:computedOn ?ds }")
    }
    assert len(ds) == 1


def test_two_datasets_in_one_store_do_not_share_measurements() -> None:
    store = Store()
    load(store, "urn:g:1", dqv_ntriples(quality("excellent.ttl"), generated_at=WHEN))
    load(store, "urn:g:2", dqv_ntriples(quality("bad.ttl", False), generated_at=WHEN))
    load(store, "urn:metrics", _nt(METRICS_PATH))
    # mean score per dimension over the catalogue, as an analyst would ask it
    rows = list(
        store.query(
            PREFIXES
            + """PREFIX skos: <http://www.w3.org/2004/02/skos/core#>
            SELECT ?label (AVG(?v) AS ?mean) (COUNT(?m) AS ?n) WHERE {
              GRAPH ?g { ?m dqv:isMeasurementOf ?metric ; dqv:value ?v }
              GRAPH <urn:metrics> { ?metric dqv:inDimension ?dim ; skos:prefLabel ?label .
                                    ?dim a dqv:Dimension .
                                    FILTER(STRENDS(STR(?metric), "Score")) }
            } GROUP BY ?label ORDER BY ?label"""
        )
    )
    assert len(rows) == 5
    assert all(r["n"].value == "2" for r in rows)
    means = {r["label"].value: float(r["mean"].value) for r in rows}
    assert means["Findability score"] == (100 + 30) / 2
    scores = list(
        store.query(PREFIXES + "SELECT ?m WHERE { GRAPH ?g { ?m dqv:isMeasurementOf mqa:score } }")
    )
    assert len({r["m"] for r in scores}) == 2


def _nt(path: Path) -> bytes:
    out = serialize(parse(path=str(path), format=RdfFormat.TURTLE), format=RdfFormat.N_TRIPLES)
    assert out is not None
    return out


def test_metrics_file_is_current_and_defines_every_metric() -> None:
    assert METRICS_PATH.read_text(encoding="utf-8") == metrics_turtle(), (
        "metrics.ttl is stale: run"
        " `python -c 'from aggregator.validate.quality.dqv import write_metrics; write_metrics()'`"
    )
    store = Store()
    load(store, "urn:metrics", _nt(METRICS_PATH))
    used = {
        t.object.value
        for t in parse(
            dqv_ntriples(quality("bad.ttl"), generated_at=WHEN), format=RdfFormat.N_TRIPLES
        )
        if t.predicate.value == DQV + "isMeasurementOf"
    }
    defined = {
        r["m"].value
        for r in store.query(
            PREFIXES
            + """PREFIX skos: <http://www.w3.org/2004/02/skos/core#>
            SELECT ?m WHERE { GRAPH ?g { ?m a dqv:Metric ; skos:prefLabel ?l ;
                                          dqv:expectedDataType ?t } }"""
        )
    }
    assert used == defined
    in_dimension = {
        r["m"].value
        for r in store.query(
            PREFIXES + "SELECT ?m WHERE { GRAPH ?g { ?m dqv:inDimension ?d . ?d a dqv:Dimension } }"
        )
    }
    assert in_dimension == defined - {MQA + "score", MQA + "rating"}
    points = {
        r["m"].value.removeprefix(MQA): int(r["p"].value)
        for r in store.query(PREFIXES + "SELECT ?m ?p WHERE { GRAPH ?g { ?m mqa:points ?p } }")
    }
    assert {i.key: i.points for i in INDICATORS}.items() <= points.items()
    assert points["score"] == 405
