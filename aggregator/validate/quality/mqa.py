"""Metadata Quality Assessment of one dataset, from its DCAT-AP 3 graph (pure: no I/O).

:func:`assess` takes the canonical N-Triples of one dataset graph (``records.ntriples``) and
the two inputs that need the outside world, both supplied by the caller:

* ``reachability``: URL -> result of a link check (anything with a ``reachable`` attribute,
  e.g. :class:`~aggregator.validate.quality.reachability.ReachabilityResult`, or a plain
  bool). A URL missing from the map is *not checked*: its indicator earns 0 points and says
  ``checked=False``. No map at all means no URL was checked.
* ``dcat_ap_compliant``: the record's SHACL verdict; ``None`` is *not checked* (0 points).

**Best distribution.** Distribution-level indicators (see :data:`INDICATORS`) are evaluated on
every distribution of the dataset; the dataset takes the results of its *best* distribution:
the one earning the most points on the distribution-level indicators together (reachability
included), ties going to the distribution whose IRI (or blank-node label) sorts first. The
indicators are not mixed across distributions: the score describes one distribution a user
can actually take. The dataset's total is its dataset-level points plus the best distribution's
distribution-level points; a dataset without distributions earns no distribution-level points.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pyoxigraph import BlankNode, Literal, NamedNode, RdfFormat, parse

from aggregator.core.errors import AggregatorError
from aggregator.core.vocab import DCAT, DCT
from aggregator.validate.quality.indicators import (
    DIMENSION_POINTS,
    DISTRIBUTION_POINTS,
    INDICATORS,
    INDICATORS_BY_KEY,
    MAX_POINTS,
    Dimension,
    Level,
    Rating,
    rating_for,
)
from aggregator.validate.quality.vocabularies import Vocabularies, Vocabulary, default_vocabularies

__all__ = [
    "DatasetQuality",
    "DimensionScore",
    "DistributionScore",
    "IndicatorResult",
    "LinkCheck",
    "QualityError",
    "assess",
    "link_urls",
]

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
SKOS_EXACT_MATCH = "http://www.w3.org/2004/02/skos/core#exactMatch"
OWL_SAME_AS = "http://www.w3.org/2002/07/owl#sameAs"
DATASET_TYPES = frozenset(DCAT + n for n in ("Dataset", "DatasetSeries", "DataService"))
ACCESS_URL = DCAT + "accessURL"
DOWNLOAD_URL = DCAT + "downloadURL"

Term = NamedNode | BlankNode | Literal
Index = dict[NamedNode | BlankNode, dict[str, list[Term]]]


class QualityError(AggregatorError):
    """The graph cannot be assessed at all (unparsable, no or several datasets)."""

    http_status = 422
    code = "qualityError"


class LinkCheck(Protocol):
    """What :func:`assess` reads from a reachability result."""

    @property
    def reachable(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class IndicatorResult:
    key: str
    dimension: Dimension
    earned: int
    possible: int
    met: bool
    checked: bool  # False: the input was not supplied (reachability, SHACL verdict)
    evidence: str

    @property
    def lost(self) -> int:
        return self.possible - self.earned


@dataclass(frozen=True, slots=True)
class DimensionScore:
    dimension: Dimension
    earned: int
    possible: int
    unchecked: int  # points of this dimension's indicators that were not checked


@dataclass(frozen=True, slots=True)
class DistributionScore:
    distribution: str  # IRI, or "_:label" for a blank node
    earned: int  # on the distribution-level indicators
    possible: int


@dataclass(frozen=True, slots=True)
class DatasetQuality:
    """The MQA of one dataset: every indicator, the dimensions, the total and the rating."""

    dataset: str
    indicators: tuple[IndicatorResult, ...]  # in the order of INDICATORS
    dimensions: tuple[DimensionScore, ...]  # in the order of Dimension
    total: int
    possible: int
    rating: Rating
    unchecked: int  # points of indicators that were not checked (part of possible - total)
    best_distribution: str | None
    distributions: tuple[DistributionScore, ...]  # sorted: best first

    def indicator(self, key: str) -> IndicatorResult:
        for result in self.indicators:
            if result.key == key:
                return result
        raise KeyError(key)

    def dimension(self, dimension: Dimension | str) -> DimensionScore:
        for score in self.dimensions:
            if score.dimension == dimension:
                return score
        raise KeyError(dimension)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (for reports and ``--json`` output)."""
        return {
            "dataset": self.dataset,
            "total": self.total,
            "possible": self.possible,
            "rating": self.rating.value,
            "unchecked": self.unchecked,
            "best_distribution": self.best_distribution,
            "dimensions": {
                d.dimension.value: {
                    "earned": d.earned,
                    "possible": d.possible,
                    "unchecked": d.unchecked,
                }
                for d in self.dimensions
            },
            "indicators": {
                r.key: {
                    "dimension": r.dimension.value,
                    "earned": r.earned,
                    "possible": r.possible,
                    "met": r.met,
                    "checked": r.checked,
                    "evidence": r.evidence,
                }
                for r in self.indicators
            },
            "distributions": [
                {"distribution": d.distribution, "earned": d.earned, "possible": d.possible}
                for d in self.distributions
            ],
        }


# --- the graph --------------------------------------------------------------------------------


def _index(ntriples: bytes) -> Index:
    index: Index = {}
    try:
        for triple in parse(ntriples, format=RdfFormat.N_TRIPLES):
            subject = triple.subject
            if not isinstance(subject, NamedNode | BlankNode):
                continue  # RDF-star quoted triples: not DCAT-AP
            props = index.get(subject)
            if props is None:
                props = index[subject] = {}
            obj = triple.object
            if isinstance(obj, NamedNode | BlankNode | Literal):
                props.setdefault(triple.predicate.value, []).append(obj)
    except (SyntaxError, ValueError) as err:
        raise QualityError(f"the dataset graph is not valid N-Triples: {err}") from err
    return index


def _show(term: Term) -> str:
    if isinstance(term, NamedNode):
        return term.value
    if isinstance(term, BlankNode):
        return f"_:{term.value}"
    return repr(term.value)


def _dataset_node(index: Index, dataset_iri: str | None) -> NamedNode | BlankNode:
    if dataset_iri is not None:
        node = NamedNode(dataset_iri)
        if node not in index:
            raise QualityError(f"<{dataset_iri}> is not described in the graph")
        return node
    found = [
        s
        for s, props in index.items()
        if any(
            isinstance(t, NamedNode) and t.value in DATASET_TYPES for t in props.get(RDF_TYPE, ())
        )
    ]
    if len(found) != 1:
        raise QualityError(
            f"expected one dcat:Dataset, DataService or DatasetSeries in the graph, found "
            f"{len(found)}; pass dataset_iri"
        )
    return found[0]


def link_urls(ntriples: bytes) -> set[str]:
    """Every dcat:accessURL and dcat:downloadURL IRI of a graph: the input of a link check."""
    urls: set[str] = set()
    for props in _index(ntriples).values():
        for prop in (ACCESS_URL, DOWNLOAD_URL):
            urls.update(t.value for t in props.get(prop, ()) if isinstance(t, NamedNode))
    return urls


# --- evaluation -------------------------------------------------------------------------------


def _result(key: str, met: bool, evidence: str, checked: bool = True) -> IndicatorResult:
    ind = INDICATORS_BY_KEY[key]
    return IndicatorResult(
        key=key,
        dimension=ind.dimension,
        earned=ind.points if met else 0,
        possible=ind.points,
        met=met,
        checked=checked,
        evidence=evidence,
    )


def _presence(key: str, values: list[Term], what: str) -> IndicatorResult:
    if not values:
        return _result(key, False, f"no {what}")
    shown = ", ".join(_show(v) for v in values[:3])
    more = f" (+{len(values) - 3} more)" if len(values) > 3 else ""
    return _result(key, True, f"{what} {shown}{more}")


def _status_text(check: LinkCheck | bool) -> str:
    if isinstance(check, bool):
        return "reachable" if check else "not reachable"
    status = getattr(check, "status", None)
    kind = getattr(check, "outcome", None)
    details = [f"HTTP {status}" if status is not None else "", str(kind) if kind else ""]
    text = ", ".join(d for d in details if d)
    state = "reachable" if check.reachable else "not reachable"
    return f"{state} ({text})" if text else state


def _links(
    key: str,
    values: list[Term],
    what: str,
    reachability: Mapping[str, LinkCheck | bool] | None,
) -> IndicatorResult:
    urls = sorted({v.value for v in values if isinstance(v, NamedNode)})
    if not urls:
        return _result(key, False, f"no {what}")
    if reachability is None:
        return _result(key, False, f"{what} {urls[0]} not checked (no link check)", False)
    unchecked: list[str] = []
    for url in urls:
        check = reachability.get(url)
        if check is None:
            unchecked.append(url)
        elif not (check if isinstance(check, bool) else check.reachable):
            return _result(key, False, f"{what} {url} {_status_text(check)}")
    if unchecked:
        return _result(key, False, f"{what} {unchecked[0]} not checked", False)
    check = reachability[urls[0]]
    more = f" (and {len(urls) - 1} more)" if len(urls) > 1 else ""
    return _result(key, True, f"{what} {urls[0]} {_status_text(check)}{more}")


def _in_vocabulary(values: list[Term], vocabulary: Vocabulary) -> list[str]:
    return [v.value for v in values if isinstance(v, NamedNode) and v.value in vocabulary]


def _distribution(
    index: Index,
    node: NamedNode | BlankNode,
    reachability: Mapping[str, LinkCheck | bool] | None,
    vocabs: Vocabularies,
) -> list[IndicatorResult]:
    props = index.get(node, {})
    formats = props.get(DCT + "format", [])
    media = props.get(DCAT + "mediaType", [])
    licences = props.get(DCT + "license", [])
    nonprop, machine = _format_openness(formats, media, vocabs)
    return [
        _links("accessUrlReachable", props.get(ACCESS_URL, []), "dcat:accessURL", reachability),
        _presence("downloadUrl", props.get(DOWNLOAD_URL, []), "dcat:downloadURL"),
        _links(
            "downloadUrlReachable", props.get(DOWNLOAD_URL, []), "dcat:downloadURL", reachability
        ),
        _presence("format", formats, "dct:format"),
        _presence("mediaType", media, "dcat:mediaType"),
        _format_vocabulary(formats, media, vocabs),
        nonprop,
        machine,
        _presence("licence", licences, "dct:license"),
        _licence_vocabulary(index, licences, vocabs),
        _presence("rights", props.get(DCT + "rights", []), "dct:rights"),
        _presence("byteSize", props.get(DCAT + "byteSize", []), "dcat:byteSize"),
    ]


def _format_vocabulary(
    formats: list[Term], media: list[Term], vocabs: Vocabularies
) -> IndicatorResult:
    stated = [*formats, *media]
    off_vocabulary = [
        _show(v) for v in formats if not (isinstance(v, NamedNode) and v.value in vocabs.file_type)
    ] + [_show(v) for v in media if not (isinstance(v, NamedNode) and v.value in vocabs.media_type)]
    if not stated:
        return _result("formatMediaTypeVocabulary", False, "no format or media type")
    if off_vocabulary:
        return _result(
            "formatMediaTypeVocabulary", False, f"not from a vocabulary: {off_vocabulary[0]}"
        )
    return _result(
        "formatMediaTypeVocabulary", True, f"from vocabularies: {', '.join(map(_show, stated))}"
    )


def _format_openness(
    formats: list[Term], media: list[Term], vocabs: Vocabularies
) -> tuple[IndicatorResult, IndicatorResult]:
    """The nonProprietary and machineReadable results, from the format table."""
    rows = [
        row
        for row in (vocabs.format_of(v.value, None) for v in formats if isinstance(v, NamedNode))
        if row is not None
    ]
    if not rows:  # no usable dct:format: the media types stand for it
        rows = [
            row
            for row in (vocabs.format_of(None, v.value) for v in media if isinstance(v, NamedNode))
            if row is not None
        ]
    if not rows:
        return (
            _result("nonProprietary", False, "format not in the format table"),
            _result("machineReadable", False, "format not in the format table"),
        )
    codes = ", ".join(r.code for r in rows)
    open_rows = [r.code for r in rows if r.non_proprietary]
    nonprop = _result(
        "nonProprietary",
        bool(open_rows),
        f"{open_rows[0]} is non-proprietary" if open_rows else f"{codes}: proprietary",
    )
    readable = [r.code for r in rows if r.machine_readable]
    machine = _result(
        "machineReadable",
        bool(readable),
        f"{readable[0]} is machine-readable" if readable else f"{codes}: not machine-readable",
    )
    return nonprop, machine


def _licence_vocabulary(
    index: Index, licences: list[Term], vocabs: Vocabularies
) -> IndicatorResult:
    """A licence of the vocabulary, named or aligned to (skos:exactMatch, owl:sameAs)."""
    known = _in_vocabulary(licences, vocabs.licence)
    if not known:
        for lic in licences:
            if isinstance(lic, NamedNode | BlankNode):
                lic_props = index.get(lic, {})
                aligned = lic_props.get(SKOS_EXACT_MATCH, []) + lic_props.get(OWL_SAME_AS, [])
                known.extend(f"{_show(lic)} = {v}" for v in _in_vocabulary(aligned, vocabs.licence))
    if known:
        return _result("licenceVocabulary", True, f"known licence {known[0]}")
    if licences:
        return _result(
            "licenceVocabulary", False, f"licence {_show(licences[0])} is not a known licence"
        )
    return _result("licenceVocabulary", False, "no dct:license")


def _dataset_level(
    props: dict[str, list[Term]], vocabs: Vocabularies, compliant: bool | None
) -> list[IndicatorResult]:
    keywords: list[Term] = [
        k for k in props.get(DCAT + "keyword", []) if isinstance(k, Literal) and k.value.strip()
    ]
    rights = props.get(DCT + "accessRights", [])
    known_rights = _in_vocabulary(rights, vocabs.access_right)
    if known_rights:
        rights_vocab = _result("accessRightsVocabulary", True, f"access right {known_rights[0]}")
    elif rights:
        rights_vocab = _result(
            "accessRightsVocabulary", False, f"{_show(rights[0])} is not an EU access right"
        )
    else:
        rights_vocab = _result("accessRightsVocabulary", False, "no dct:accessRights")
    if compliant is None:
        compliance = _result("dcatApCompliance", False, "SHACL verdict not supplied", False)
    else:
        compliance = _result(
            "dcatApCompliance",
            compliant,
            "conforms to DCAT-AP 3" if compliant else "does not conform to DCAT-AP 3",
        )
    return [
        _presence("keyword", keywords, "dcat:keyword"),
        _presence("theme", props.get(DCAT + "theme", []), "dcat:theme"),
        _presence("spatial", props.get(DCT + "spatial", []), "dct:spatial"),
        _presence("temporal", props.get(DCT + "temporal", []), "dct:temporal"),
        compliance,
        _presence("accessRights", rights, "dct:accessRights"),
        rights_vocab,
        _presence("contactPoint", props.get(DCAT + "contactPoint", []), "dcat:contactPoint"),
        _presence("publisher", props.get(DCT + "publisher", []), "dct:publisher"),
        _presence("issued", props.get(DCT + "issued", []), "dct:issued"),
        _presence("modified", props.get(DCT + "modified", []), "dct:modified"),
    ]


_DISTRIBUTION_KEYS = tuple(i.key for i in INDICATORS if i.level is Level.DISTRIBUTION)


def _no_distribution() -> list[IndicatorResult]:
    return [
        _result(key, False, "the dataset has no dcat:distribution") for key in _DISTRIBUTION_KEYS
    ]


def assess(
    ntriples: bytes,
    *,
    dataset_iri: str | None = None,
    reachability: Mapping[str, LinkCheck | bool] | None = None,
    dcat_ap_compliant: bool | None = None,
    vocabularies: Vocabularies | None = None,
) -> DatasetQuality:
    """The MQA of the dataset described by ``ntriples`` (see the module docstring).

    ``dataset_iri`` picks the dataset; without it the graph must type exactly one node as
    dcat:Dataset, DatasetSeries or DataService. Raises :class:`QualityError` only when the
    graph cannot be assessed at all.
    """
    vocabs = vocabularies or default_vocabularies()
    index = _index(ntriples)
    node = _dataset_node(index, dataset_iri)
    props = index.get(node, {})
    by_key: dict[str, IndicatorResult] = {
        r.key: r for r in _dataset_level(props, vocabs, dcat_ap_compliant)
    }

    scored: list[tuple[int, str, list[IndicatorResult]]] = []
    for dist in props.get(DCAT + "distribution", []):
        if isinstance(dist, NamedNode | BlankNode):
            results = _distribution(index, dist, reachability, vocabs)
            scored.append((sum(r.earned for r in results), _show(dist), results))
    scored.sort(key=lambda s: (-s[0], s[1]))
    if scored:
        by_key.update((r.key, r) for r in scored[0][2])
    else:
        by_key.update((r.key, r) for r in _no_distribution())

    indicators = tuple(by_key[i.key] for i in INDICATORS)
    dimensions = tuple(
        DimensionScore(
            dimension=d,
            earned=sum(r.earned for r in indicators if r.dimension is d),
            possible=DIMENSION_POINTS[d],
            unchecked=sum(r.possible for r in indicators if r.dimension is d and not r.checked),
        )
        for d in Dimension
    )
    total = sum(r.earned for r in indicators)
    return DatasetQuality(
        dataset=_show(node),
        indicators=indicators,
        dimensions=dimensions,
        total=total,
        possible=MAX_POINTS,
        rating=rating_for(total),
        unchecked=sum(r.possible for r in indicators if not r.checked),
        best_distribution=scored[0][1] if scored else None,
        distributions=tuple(
            DistributionScore(distribution=name, earned=earned, possible=DISTRIBUTION_POINTS)
            for earned, name, _ in scored
        ),
    )
