"""The MQA method as data: dimensions, indicators with their points, rating bands.

The table follows the data.europa.eu Metadata Quality Assessment (405 points in five
dimensions). ``docs/quality.md`` shows the same table and says how each indicator is evaluated;
the DQV metrics vocabulary (:mod:`aggregator.validate.quality.dqv`) is generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "INDICATORS",
    "INDICATORS_BY_KEY",
    "MAX_POINTS",
    "RATING_BANDS",
    "Dimension",
    "Indicator",
    "Level",
    "Rating",
    "rating_for",
]


class Dimension(StrEnum):
    FINDABILITY = "findability"
    ACCESSIBILITY = "accessibility"
    INTEROPERABILITY = "interoperability"
    REUSABILITY = "reusability"
    CONTEXTUALITY = "contextuality"


class Level(StrEnum):
    """Where an indicator is evaluated: on the dataset, or on its best distribution."""

    DATASET = "dataset"
    DISTRIBUTION = "distribution"


class Rating(StrEnum):
    EXCELLENT = "excellent"
    GOOD = "good"
    SUFFICIENT = "sufficient"
    BAD = "bad"


@dataclass(frozen=True, slots=True)
class Indicator:
    key: str  # also the local name of its dqv:Metric
    label: str
    dimension: Dimension
    points: int
    level: Level
    properties: str  # the DCAT-AP properties it reads, as CURIEs
    definition: str  # how it is evaluated, one sentence


_F, _A, _I, _R, _C = (
    Dimension.FINDABILITY,
    Dimension.ACCESSIBILITY,
    Dimension.INTEROPERABILITY,
    Dimension.REUSABILITY,
    Dimension.CONTEXTUALITY,
)
_DS, _DI = Level.DATASET, Level.DISTRIBUTION

# fmt: off
INDICATORS: tuple[Indicator, ...] = (
    Indicator("keyword", "Keywords", _F, 30, _DS, "dcat:keyword",
              "The dataset has at least one non-empty dcat:keyword."),
    Indicator("theme", "Categories", _F, 30, _DS, "dcat:theme",
              "The dataset has at least one dcat:theme."),
    Indicator("spatial", "Geo search", _F, 20, _DS, "dct:spatial",
              "The dataset has a dct:spatial coverage."),
    Indicator("temporal", "Time-based search", _F, 20, _DS, "dct:temporal",
              "The dataset has a dct:temporal coverage."),
    Indicator("accessUrlReachable", "Access URL reachable", _A, 50, _DI, "dcat:accessURL",
              "Every dcat:accessURL of the distribution was found reachable (HTTP status below "
              "400) by the reachability check supplied by the caller."),
    Indicator("downloadUrl", "Download URL", _A, 20, _DI, "dcat:downloadURL",
              "The distribution has a dcat:downloadURL."),
    Indicator("downloadUrlReachable", "Download URL reachable", _A, 30, _DI, "dcat:downloadURL",
              "Every dcat:downloadURL of the distribution was found reachable by the "
              "reachability check supplied by the caller."),
    Indicator("format", "Format", _I, 20, _DI, "dct:format",
              "The distribution has a dct:format."),
    Indicator("mediaType", "Media type", _I, 10, _DI, "dcat:mediaType",
              "The distribution has a dcat:mediaType."),
    Indicator("formatMediaTypeVocabulary", "Format / media type from vocabulary", _I, 10, _DI,
              "dct:format, dcat:mediaType",
              "The distribution states a format or media type, and every dct:format is an EU "
              "file-type IRI and every dcat:mediaType an IANA media-type IRI."),
    Indicator("nonProprietary", "Non-proprietary format", _I, 20, _DI,
              "dct:format, dcat:mediaType",
              "A format of the distribution is non-proprietary in mappings/mqa-formats.toml."),
    Indicator("machineReadable", "Machine-readable format", _I, 20, _DI,
              "dct:format, dcat:mediaType",
              "A format of the distribution is machine-readable in mappings/mqa-formats.toml."),
    Indicator("dcatApCompliance", "DCAT-AP compliance", _I, 30, _DS, "(whole record)",
              "The record conforms to the DCAT-AP 3 SHACL shapes (verdict supplied by the "
              "caller)."),
    Indicator("licence", "Licence information", _R, 20, _DI, "dct:license",
              "The distribution has a dct:license."),
    Indicator("licenceVocabulary", "Licence from vocabulary", _R, 10, _DI, "dct:license",
              "A dct:license of the distribution is a known licence IRI (EU licence authority, "
              "SPDX, Creative Commons, Open Data Commons) or skos:exactMatch/owl:sameAs one."),
    Indicator("accessRights", "Access restrictions", _R, 10, _DS, "dct:accessRights",
              "The dataset has dct:accessRights."),
    Indicator("accessRightsVocabulary", "Access restrictions from vocabulary", _R, 5, _DS,
              "dct:accessRights",
              "A dct:accessRights of the dataset is an IRI of the EU access-right authority."),
    Indicator("contactPoint", "Contact point", _R, 20, _DS, "dcat:contactPoint",
              "The dataset has a dcat:contactPoint."),
    Indicator("publisher", "Publisher", _R, 10, _DS, "dct:publisher",
              "The dataset has a dct:publisher."),
    Indicator("rights", "Rights", _C, 5, _DI, "dct:rights",
              "The distribution has dct:rights."),
    Indicator("byteSize", "File size", _C, 5, _DI, "dcat:byteSize",
              "The distribution has a dcat:byteSize."),
    Indicator("issued", "Date of issue", _C, 5, _DS, "dct:issued",
              "The dataset has dct:issued."),
    Indicator("modified", "Modification date", _C, 5, _DS, "dct:modified",
              "The dataset has dct:modified."),
)
# fmt: on
INDICATORS_BY_KEY = {i.key: i for i in INDICATORS}
DIMENSION_POINTS = {d: sum(i.points for i in INDICATORS if i.dimension is d) for d in Dimension}
MAX_POINTS = sum(i.points for i in INDICATORS)
DISTRIBUTION_POINTS = sum(i.points for i in INDICATORS if i.level is Level.DISTRIBUTION)

# Lowest score of each rating, best first.
RATING_BANDS: tuple[tuple[int, Rating], ...] = (
    (351, Rating.EXCELLENT),
    (221, Rating.GOOD),
    (121, Rating.SUFFICIENT),
    (0, Rating.BAD),
)

assert MAX_POINTS == 405, MAX_POINTS


def rating_for(points: int) -> Rating:
    """Excellent 351-405, Good 221-350, Sufficient 121-220, Bad 0-120."""
    for lowest, rating in RATING_BANDS:
        if points >= lowest:
            return rating
    return Rating.BAD
