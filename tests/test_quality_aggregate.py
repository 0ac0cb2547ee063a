"""MQA aggregates per source and for the whole catalogue."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyoxigraph import RdfFormat, parse, serialize

from aggregator.validate.quality import (
    CatalogueAccumulator,
    DatasetQuality,
    Dimension,
    Rating,
    aggregate,
    aggregate_by_source,
    assess,
    link_urls,
)

DATA = Path(__file__).parent / "data" / "quality"


def scored(name: str, *, reachable: bool, compliant: bool | None) -> DatasetQuality:
    turtle = (DATA / name).read_bytes()
    data = serialize(parse(turtle, format=RdfFormat.TURTLE), format=RdfFormat.N_TRIPLES)
    assert data is not None
    return assess(
        data, reachability=dict.fromkeys(link_urls(data), reachable), dcat_ap_compliant=compliant
    )


@pytest.fixture(scope="module")
def three() -> tuple[DatasetQuality, DatasetQuality, DatasetQuality]:
    excellent = scored("excellent.ttl", reachable=True, compliant=True)  # 400
    middling = scored("middling.ttl", reachable=True, compliant=None)  # 215 + 30 reachable
    bad = scored("bad.ttl", reachable=False, compliant=False)  # 70
    assert (excellent.total, middling.total, bad.total) == (400, 245, 70)
    return excellent, middling, bad


def test_per_source_and_catalogue(
    three: tuple[DatasetQuality, DatasetQuality, DatasetQuality],
) -> None:
    excellent, middling, bad = three
    per_source, catalogue = aggregate_by_source(
        [("city", excellent), ("city", middling), ("legacy", bad)]
    )
    assert list(per_source) == ["city", "legacy"]
    city = per_source["city"]
    assert city.datasets == 2
    assert city.mean_score == pytest.approx((400 + 245) / 2)
    assert city.rating is Rating.GOOD  # 322.5 -> 322
    assert city.ratings == {
        Rating.EXCELLENT: 1,
        Rating.GOOD: 1,
        Rating.SUFFICIENT: 0,
        Rating.BAD: 0,
    }
    assert city.mean_by_dimension[Dimension.FINDABILITY] == pytest.approx((100 + 60) / 2)
    assert city.share("keyword") == 1.0
    assert city.share("spatial") == 0.5
    assert city.share("rights") == 0.0

    assert catalogue.scope == "*"
    assert catalogue.datasets == 3
    assert catalogue.mean_score == pytest.approx((400 + 245 + 70) / 3)
    assert catalogue.ratings[Rating.BAD] == 1
    assert catalogue.share("publisher") == pytest.approx(2 / 3)
    compliance = next(s for s in catalogue.indicators if s.key == "dcatApCompliance")
    assert (compliance.met, compliance.unchecked) == (1, 1)


def test_shortcomings_are_sorted_by_points_lost_and_skip_unchecked(
    three: tuple[DatasetQuality, DatasetQuality, DatasetQuality],
) -> None:
    catalogue = aggregate(three)
    lost = {s.key: (s.datasets, s.points_lost) for s in catalogue.shortcomings}
    # bad: unreachable access URL (50) and no download URL (20 + 30 checked: no URL at all)
    assert lost["accessUrlReachable"] == (1, 50)
    assert lost["downloadUrlReachable"] == (1, 30)
    assert lost["rights"] == (3, 15)  # nobody's best distribution has dct:rights
    assert lost["spatial"] == (2, 40)
    assert lost["contactPoint"] == (2, 40)
    # the middling dataset's missing SHACL verdict is not a shortcoming; the bad one's is
    assert lost["dcatApCompliance"] == (1, 30)
    points = [s.points_lost for s in catalogue.shortcomings]
    assert points == sorted(points, reverse=True)
    first = catalogue.shortcomings[0]
    assert first.key == "accessUrlReachable"
    # equal points lost: more datasets first, then by key
    ties = [s for s in catalogue.shortcomings if s.points_lost == 40]
    assert [s.key for s in ties] == sorted(s.key for s in ties)


def test_empty_aggregate() -> None:
    empty = aggregate([])
    assert empty.datasets == 0
    assert empty.mean_score == 0.0
    assert empty.rating is None
    assert empty.shortcomings == ()
    acc = CatalogueAccumulator()
    assert acc.per_source() == {}
    assert acc.catalogue().datasets == 0


def test_json_forms(three: tuple[DatasetQuality, DatasetQuality, DatasetQuality]) -> None:
    import json

    middling = three[1]
    one = json.loads(json.dumps(middling.as_dict()))
    assert one["total"] == 245 and one["rating"] == "good"
    assert one["indicators"]["dcatApCompliance"]["checked"] is False
    assert one["dimensions"]["findability"] == {"earned": 60, "possible": 100, "unchecked": 0}
    many = json.loads(json.dumps(aggregate(three).as_dict()))
    assert many["datasets"] == 3
    assert many["ratings"] == {"excellent": 1, "good": 1, "sufficient": 0, "bad": 1}
    assert many["shortcomings"][0] == {
        "indicator": "accessUrlReachable",
        "datasets": 1,
        "points_lost": 50,
    }
