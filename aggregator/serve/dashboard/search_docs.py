"""What the search index (``search.py``) keeps of one dataset graph: its title shown, every
title, descriptions and keywords in words, and its facets (source, theme, format, licence),
each with its label. The stored N-Triples are parsed leniently: pyoxigraph wrote them from
terms it had checked (``serve/oai_formats.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pyoxigraph import Literal, NamedNode, RdfFormat, parse

from aggregator.core.vocab import DCAT, DCT
from aggregator.serve.dashboard.labels import term_label


@dataclass(frozen=True, slots=True)
class Doc:
    label: str  # the title shown (English or untagged first)
    title: str  # every title, for the index
    description: str
    keywords: str
    facets: tuple[tuple[str, str, str], ...]  # (kind, value, label)


def extract(ntriples: bytes, dataset_iri: str, source: str) -> Doc:
    """What is indexed of one dataset graph (its stored N-Triples)."""
    by_subject: _BySubject = {}
    for q in parse(ntriples, format=RdfFormat.N_TRIPLES, lenient=True):
        by_subject.setdefault(q.subject, []).append((q.predicate.value, q.object))
    facets: set[tuple[str, str, str]] = {("source", source, source)}
    texts = _Texts(by_subject.get(NamedNode(dataset_iri), ()), facets)
    for dist in texts.dists:
        _distribution_facets(by_subject.get(dist, ()), facets)
    label = _preferred(texts.titles) or dataset_iri
    all_titles = "\n".join(t.value for t in texts.titles)
    return Doc(
        label,
        all_titles or label,
        "\n".join(texts.descs),
        " ".join(texts.keywords),
        tuple(sorted(facets)),
    )


_BySubject = dict[object, list[tuple[str, object]]]


def _facet(kind: str, iri: str) -> tuple[str, str, str]:
    return kind, iri, term_label(iri) or _tail(iri)


class _Texts:
    """The dataset's titles, descriptions and keywords; its theme and licence facets."""

    def __init__(
        self, statements: Iterable[tuple[str, object]], facets: set[tuple[str, str, str]]
    ) -> None:
        self.titles: list[Literal] = []
        self.descs: list[str] = []
        self.keywords: list[str] = []
        self.dists: set[object] = set()
        for pred, obj in statements:
            if pred == DCT + "title" and isinstance(obj, Literal):
                self.titles.append(obj)
            elif pred == DCT + "description" and isinstance(obj, Literal):
                self.descs.append(obj.value)
            elif pred == DCAT + "keyword" and isinstance(obj, Literal):
                self.keywords.append(obj.value)
            elif pred == DCAT + "theme" and isinstance(obj, NamedNode):
                facets.add(_facet("theme", obj.value))
            elif pred == DCT + "license" and isinstance(obj, NamedNode):
                facets.add(_facet("licence", obj.value))
            elif pred == DCAT + "distribution":
                self.dists.add(obj)


def _distribution_facets(
    statements: Iterable[tuple[str, object]], facets: set[tuple[str, str, str]]
) -> None:
    """A distribution's format (dct:format, else dcat:mediaType) and licence facets."""
    formats, media = [], []
    for pred, obj in statements:
        if pred == DCT + "format":
            formats.append(obj)
        elif pred == DCAT + "mediaType":
            media.append(obj)
        elif pred == DCT + "license" and isinstance(obj, NamedNode):
            facets.add(_facet("licence", obj.value))
    for fmt in formats or media:
        if isinstance(fmt, NamedNode):
            facets.add(_facet("format", fmt.value))
        elif isinstance(fmt, Literal):
            facets.add(("format", fmt.value, fmt.value))


def _preferred(titles: Sequence[Literal]) -> str:
    for lang in ("en", ""):
        for t in titles:
            if (t.language or "") == lang:
                return t.value
    return titles[0].value if titles else ""


def _tail(iri: str) -> str:
    return re.split(r"[/#]", iri.rstrip("/#"))[-1] or iri
