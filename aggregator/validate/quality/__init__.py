"""Metadata Quality Assessment (MQA) in the manner of data.europa.eu; see docs/quality.md.

The public surface::

    assess(ntriples, *, dataset_iri=None, reachability=None, dcat_ap_compliant=None)
        -> DatasetQuality                      pure: one dataset graph in, scores out
    link_urls(ntriples) -> set[str]            the access/download URLs a link check needs
    ReachabilityChecker(http_settings, ...).check(urls) -> {url: ReachabilityResult}
    aggregate(results) / aggregate_by_source(pairs) / CatalogueAccumulator
        -> QualityAggregate                    per source and for the whole catalogue
    dqv_ntriples(quality, generated_at=...) -> bytes   W3C DQV measurements of one dataset
    metrics_turtle() / METRICS_PATH            the dqv:Metric vocabulary (metrics.ttl)

:mod:`.reachability` imports the HTTP client; the rest is pure and cheap to import in
worker processes.
"""

from __future__ import annotations

from aggregator.validate.quality.aggregate import (
    CatalogueAccumulator,
    IndicatorShare,
    QualityAccumulator,
    QualityAggregate,
    Shortcoming,
    aggregate,
    aggregate_by_source,
)
from aggregator.validate.quality.dqv import (
    METRICS_PATH,
    MQA,
    dqv_ntriples,
    metric_iri,
    metrics_turtle,
)
from aggregator.validate.quality.indicators import (
    INDICATORS,
    MAX_POINTS,
    RATING_BANDS,
    Dimension,
    Indicator,
    Level,
    Rating,
    rating_for,
)
from aggregator.validate.quality.mqa import (
    DatasetQuality,
    DimensionScore,
    DistributionScore,
    IndicatorResult,
    LinkCheck,
    QualityError,
    assess,
    link_urls,
)
from aggregator.validate.quality.vocabularies import (
    Vocabularies,
    default_vocabularies,
    load_vocabularies,
)

__all__ = [
    "INDICATORS",
    "MAX_POINTS",
    "METRICS_PATH",
    "MQA",
    "RATING_BANDS",
    "CatalogueAccumulator",
    "DatasetQuality",
    "Dimension",
    "DimensionScore",
    "DistributionScore",
    "Indicator",
    "IndicatorResult",
    "IndicatorShare",
    "Level",
    "LinkCheck",
    "QualityAccumulator",
    "QualityAggregate",
    "QualityError",
    "Rating",
    "Shortcoming",
    "Vocabularies",
    "aggregate",
    "aggregate_by_source",
    "assess",
    "default_vocabularies",
    "dqv_ntriples",
    "link_urls",
    "load_vocabularies",
    "metric_iri",
    "metrics_turtle",
    "rating_for",
]
