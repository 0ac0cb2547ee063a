"""MQA aggregates per source and for the whole catalogue.

:class:`QualityAccumulator` is fed one :class:`~aggregator.validate.quality.mqa.DatasetQuality` at a
time (constant memory: a million records need no list of results) and gives a frozen
:class:`QualityAggregate`; :class:`CatalogueAccumulator` keeps one per source plus the total.

* ``mean_score`` and ``mean_by_dimension``: arithmetic means of the datasets' points;
* ``ratings``: how many datasets got each rating;
* ``indicators``: per indicator, the share of datasets meeting it (``met / datasets``) and how
  many were not checked;
* ``shortcomings``: indicators that *checked* datasets failed, sorted by the points they lost
  in total (then by how many datasets failed, then by key). A reachability or compliance check
  that was not run is not a shortcoming of the publisher: it shows in ``unchecked`` instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aggregator.validate.quality.indicators import INDICATORS, Dimension, Rating, rating_for
from aggregator.validate.quality.mqa import DatasetQuality

__all__ = [
    "CatalogueAccumulator",
    "IndicatorShare",
    "QualityAccumulator",
    "QualityAggregate",
    "Shortcoming",
    "aggregate",
    "aggregate_by_source",
]

CATALOGUE = "*"  # the scope name of the whole-catalogue aggregate


@dataclass(frozen=True, slots=True)
class IndicatorShare:
    key: str
    met: int  # datasets meeting the indicator
    unchecked: int  # datasets where it was not checked
    share: float  # met / datasets (0.0 when there is no dataset)


@dataclass(frozen=True, slots=True)
class Shortcoming:
    key: str
    datasets: int  # checked datasets failing the indicator
    points_lost: int  # in total over those datasets


@dataclass(frozen=True, slots=True)
class QualityAggregate:
    scope: str  # a source name, or "*" for the whole catalogue
    datasets: int
    mean_score: float
    mean_by_dimension: Mapping[Dimension, float]
    ratings: Mapping[Rating, int]  # every rating present, 0 included
    indicators: tuple[IndicatorShare, ...]  # in the order of INDICATORS
    shortcomings: tuple[Shortcoming, ...]  # most points lost first

    @property
    def rating(self) -> Rating | None:
        """The rating of the mean score (None without datasets)."""
        return rating_for(round(self.mean_score)) if self.datasets else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (for reports and ``--json`` output)."""
        return {
            "scope": self.scope,
            "datasets": self.datasets,
            "mean_score": self.mean_score,
            "rating": None if self.rating is None else self.rating.value,
            "mean_by_dimension": {d.value: v for d, v in self.mean_by_dimension.items()},
            "ratings": {r.value: n for r, n in self.ratings.items()},
            "indicators": {
                s.key: {"met": s.met, "unchecked": s.unchecked, "share": s.share}
                for s in self.indicators
            },
            "shortcomings": [
                {"indicator": s.key, "datasets": s.datasets, "points_lost": s.points_lost}
                for s in self.shortcomings
            ],
        }

    def share(self, key: str) -> float:
        for share in self.indicators:
            if share.key == key:
                return share.share
        raise KeyError(key)


class QualityAccumulator:
    """Running sums for one scope; ``add`` results, then ``result()``."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.count = 0
        self._total = 0
        self._dimensions = dict.fromkeys(Dimension, 0)
        self._ratings = dict.fromkeys(Rating, 0)
        self._met = {i.key: 0 for i in INDICATORS}
        self._unchecked = {i.key: 0 for i in INDICATORS}
        self._failed = {i.key: 0 for i in INDICATORS}
        self._lost = {i.key: 0 for i in INDICATORS}

    def add(self, quality: DatasetQuality) -> None:
        self.count += 1
        self._total += quality.total
        self._ratings[quality.rating] += 1
        for dim in quality.dimensions:
            self._dimensions[dim.dimension] += dim.earned
        for ind in quality.indicators:
            if ind.met:
                self._met[ind.key] += 1
            elif not ind.checked:
                self._unchecked[ind.key] += 1
            else:
                self._failed[ind.key] += 1
                self._lost[ind.key] += ind.lost

    def result(self) -> QualityAggregate:
        n = self.count
        shortcomings = sorted(
            (
                Shortcoming(key=k, datasets=self._failed[k], points_lost=self._lost[k])
                for k in self._failed
                if self._failed[k]
            ),
            key=lambda s: (-s.points_lost, -s.datasets, s.key),
        )
        return QualityAggregate(
            scope=self.scope,
            datasets=n,
            mean_score=self._total / n if n else 0.0,
            mean_by_dimension={d: (v / n if n else 0.0) for d, v in self._dimensions.items()},
            ratings=dict(self._ratings),
            indicators=tuple(
                IndicatorShare(
                    key=i.key,
                    met=self._met[i.key],
                    unchecked=self._unchecked[i.key],
                    share=self._met[i.key] / n if n else 0.0,
                )
                for i in INDICATORS
            ),
            shortcomings=tuple(shortcomings),
        )


class CatalogueAccumulator:
    """One accumulator per source and one for the whole catalogue."""

    def __init__(self) -> None:
        self._sources: dict[str, QualityAccumulator] = {}
        self._all = QualityAccumulator(CATALOGUE)

    def add(self, source: str, quality: DatasetQuality) -> None:
        acc = self._sources.get(source)
        if acc is None:
            acc = self._sources[source] = QualityAccumulator(source)
        acc.add(quality)
        self._all.add(quality)

    def per_source(self) -> dict[str, QualityAggregate]:
        return {name: self._sources[name].result() for name in sorted(self._sources)}

    def catalogue(self) -> QualityAggregate:
        return self._all.result()


def aggregate(results: Iterable[DatasetQuality], scope: str = CATALOGUE) -> QualityAggregate:
    acc = QualityAccumulator(scope)
    for quality in results:
        acc.add(quality)
    return acc.result()


def aggregate_by_source(
    results: Iterable[tuple[str, DatasetQuality]],
) -> tuple[dict[str, QualityAggregate], QualityAggregate]:
    """(per-source aggregates by source name, the whole-catalogue aggregate)."""
    acc = CatalogueAccumulator()
    for source, quality in results:
        acc.add(source, quality)
    return acc.per_source(), acc.catalogue()
