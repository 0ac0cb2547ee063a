"""What the dataset page shows, as plain values for its template: every language of the titles
and descriptions, facts and distributions with labels in words (vocabulary terms, agents'
names) instead of IRIs, provenance, the MQA of the dataset and its spatial extents.

Values are :class:`Value` (text, optional link, optional language); the template escapes them.
Links are only made of http(s), ftp and mailto IRIs (:func:`aggregator.serve.pages.safe_href`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyoxigraph import BlankNode, Literal, NamedNode, Triple

from aggregator.core.vocab import DCAT, DCT, FOAF, RDF_TYPE, VCARD
from aggregator.serve.dashboard.geometry import Geometry, parse_geometry
from aggregator.serve.dashboard.labels import property_label, term_label
from aggregator.serve.dashboard.quality_view import NOT_CHECKED_HERE
from aggregator.serve.pages import _LANG, Graph, Term, safe_href
from aggregator.store.state import RecordRow
from aggregator.validate.quality.indicators import INDICATORS_BY_KEY
from aggregator.validate.quality.mqa import QualityError, assess

LOCN = "http://www.w3.org/ns/locn#"
_GEO_PROPS = (DCAT + "bbox", LOCN + "geometry", DCAT + "centroid")
_NOT_CHECKED = frozenset(i.key for i in NOT_CHECKED_HERE)


@dataclass(frozen=True, slots=True)
class Value:
    text: str
    href: str | None = None
    lang: str | None = None  # a well-formed tag, else None
    moment: bool = False  # a timestamp: shown for people, the full value in a <time> element

    @classmethod
    def literal(cls, lit: Literal) -> Value:
        lang = lit.language if lit.language and _LANG.match(lit.language) else None
        return cls(lit.value, None, lang)


@dataclass(frozen=True, slots=True)
class Fact:
    label: str
    values: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class Distribution:
    title: str
    facts: tuple[Fact, ...]


@dataclass(frozen=True, slots=True)
class QualityView:
    total: int
    possible: int
    rating: str
    dimensions: tuple[tuple[str, int, int], ...]  # (dimension, earned, possible)
    missing: tuple[tuple[str, int], ...]  # (indicator label, points lost), checked and failed
    not_checked: tuple[tuple[str, int], ...]  # (indicator label, points): need link checks


@dataclass
class DatasetView:
    iri: str
    title: str
    titles: list[Value]
    descriptions: list[Value]
    facts: list[Fact]
    distributions: list[Distribution]
    others: list[Fact]
    provenance: list[Fact]
    extents: list[Geometry] = field(default_factory=list)
    extent_texts: list[str] = field(default_factory=list)
    quality: QualityView | None = None
    #: stored with violations its source must fix (validate/policy.py): (step, message, path)
    flagged: bool = False
    violations: tuple[tuple[str, str, str], ...] = ()

    @property
    def main_title(self) -> Value:
        """The page's one heading: the preferred title (English, else without a language,
        else the first), in its language."""
        found = next((t for t in self.titles if t.text == self.title), None)
        return found or Value(self.title)

    @property
    def other_titles(self) -> list[Value]:
        main = self.main_title
        return [t for t in self.titles if t is not main]

    @property
    def extents_json(self) -> str:
        return json.dumps({"type": "GeometryCollection", "geometries": self.extents})


class _Labeller:
    def __init__(self, g: Graph) -> None:
        self.g = g

    def value(self, node: object) -> Value:
        g = self.g
        if isinstance(node, Literal):
            return Value.literal(node)
        if isinstance(node, NamedNode):
            own = g.label(node)
            tail_only = own == node.value.rstrip("/#").rsplit("/", 1)[-1].rsplit("#", 1)[-1]
            text = term_label(node.value) if tail_only else own
            return Value(text or node.value, safe_href(node.value))
        if isinstance(node, BlankNode):
            return Value(self.blank(node))
        return Value(str(node))

    def blank(self, node: BlankNode) -> str:
        g = self.g
        label = g.label(node)
        if label != "(unnamed)":
            return label
        parts = []
        for pred, objs in g.index.get(node, {}).items():
            if pred == RDF_TYPE:
                continue
            shown = ", ".join(self.value(o).text for o in objs)
            parts.append(f"{property_label(pred)}: {shown}")
        return "; ".join(parts) or "(no details)"

    def values(self, subject: object, prop: str) -> tuple[Value, ...]:
        return tuple(self.value(o) for o in self.g.objects(subject, prop))  # type: ignore[arg-type]

    def agent(self, node: object) -> Value:
        g = self.g
        if isinstance(node, NamedNode | BlankNode):
            names = g.literals(node, FOAF + "name") or g.literals(node, VCARD + "fn")
            if names:
                href = safe_href(node.value) if isinstance(node, NamedNode) else None
                return Value(_preferred(names), href)
        return self.value(node)

    def contact(self, node: object) -> Value:
        g = self.g
        if not isinstance(node, NamedNode | BlankNode):
            return self.value(node)
        parts = [lit.value for lit in g.literals(node, VCARD + "fn")]
        parts += [lit.value for lit in g.literals(node, VCARD + "organization-name")]
        href = None
        for o in g.objects(node, VCARD + "hasEmail"):
            text = o.value.removeprefix("mailto:")
            parts.append(text)
            href = href or safe_href(o.value if o.value.startswith("mailto:") else f"mailto:{text}")
        for o in g.objects(node, VCARD + "hasURL"):
            parts.append(o.value)
        return Value(", ".join(parts) or self.value(node).text, href)


def _preferred(lits: Sequence[Literal]) -> str:
    for lang in ("en", ""):
        for lit in lits:
            if (lit.language or "") == lang:
                return lit.value
    return lits[0].value


_SHOWN = (
    {DCT + p for p in ("title", "description", "publisher", "issued", "modified", "identifier")}
    | {DCT + p for p in ("license", "spatial", "language", "accrualPeriodicity", "accessRights")}
    | {DCAT + p for p in ("keyword", "theme", "contactPoint", "distribution", "landingPage")}
    | {RDF_TYPE}
)


def _quality(ntriples: bytes, iri: str, findings: str) -> QualityView | None:
    violations = any(f.get("severity") == "violation" for f in json.loads(findings or "[]"))
    try:
        q = assess(ntriples, dataset_iri=iri, dcat_ap_compliant=not violations)
    except QualityError:
        return None
    missing = tuple(
        (INDICATORS_BY_KEY[r.key].label, r.lost)
        for r in sorted(q.indicators, key=lambda r: -r.lost)
        if r.checked and not r.met and r.lost and r.key not in _NOT_CHECKED
    )
    dims = tuple((str(d.dimension).capitalize(), d.earned, d.possible) for d in q.dimensions)
    not_checked = tuple((i.label, i.points) for i in NOT_CHECKED_HERE)
    return QualityView(q.total, q.possible, str(q.rating), dims, missing, not_checked)


def build(
    iri: str,
    row: RecordRow,
    ntriples: bytes,
    triples: Sequence[Triple],
    local: Callable[[str, str], str],
    payload_url: Callable[[str], str],
) -> DatasetView:
    g = Graph(triples)
    lab = _Labeller(g)
    ds = NamedNode(iri)
    titles = [Value.literal(t) for t in g.literals(ds, DCT + "title")]
    descriptions = [Value.literal(d) for d in g.literals(ds, DCT + "description")]
    keywords = tuple(Value.literal(k) for k in g.literals(ds, DCAT + "keyword"))

    spatial = g.objects(ds, DCT + "spatial")
    extents, extent_texts = _extents(g, spatial)
    facts = [
        _fact("Keywords", keywords),
        _fact("Themes", lab.values(ds, DCAT + "theme")),
        _fact("Publisher", [lab.agent(p) for p in g.objects(ds, DCT + "publisher")]),
        _fact("Contact", [lab.contact(c) for c in g.objects(ds, DCAT + "contactPoint")]),
        _fact("Licence", lab.values(ds, DCT + "license")),
        _fact("Access rights", lab.values(ds, DCT + "accessRights")),
        _fact("Language", lab.values(ds, DCT + "language")),
        _fact("Update frequency", lab.values(ds, DCT + "accrualPeriodicity")),
        _fact(
            "Spatial coverage",
            [Value(lab.blank(s)) if isinstance(s, BlankNode) else lab.value(s) for s in spatial],
        ),
        _fact("Landing page", lab.values(ds, DCAT + "landingPage")),
        _fact("Identifier", lab.values(ds, DCT + "identifier")),
        _fact("Issued", lab.values(ds, DCT + "issued")),
        _fact("Modified", lab.values(ds, DCT + "modified")),
        _fact("Type", [Value(property_label(t.value)) for t in g.objects(ds, RDF_TYPE)]),
        _fact("IRI", [Value(iri, safe_href(iri))]),
    ]
    dists = _distributions(g, lab, ds)
    others = [
        _fact(property_label(prop), [lab.value(o) for o in objs])
        for prop, objs in sorted(g.index.get(ds, {}).items())
        if prop not in _SHOWN
    ]
    provenance = _provenance(row, local, payload_url)
    return DatasetView(
        iri=iri,
        title=_preferred(g.literals(ds, DCT + "title")) if titles else g.label(ds),
        titles=titles,
        descriptions=descriptions,
        facts=[f for f in facts if f.values],
        distributions=dists,
        others=[f for f in others if f.values],
        provenance=[f for f in provenance if f.values],
        extents=extents,
        extent_texts=extent_texts,
        quality=_quality(ntriples, iri, row.findings),
        flagged=bool(row.flagged),
        violations=_violations(row.findings) if row.flagged else (),
    )


def _violations(findings: str) -> tuple[tuple[str, str, str], ...]:
    """The violations a flagged record was stored with: (step, message, path)."""
    return tuple(
        (
            str(f.get("step") or f.get("stage") or ""),
            str(f.get("message") or ""),
            str(f.get("path") or ""),
        )
        for f in json.loads(findings or "[]")
        if f.get("severity") == "violation"
    )


def _fact(label: str, values: Sequence[Value]) -> Fact:
    return Fact(label, tuple(values))


def _extents(g: Graph, spatial: Sequence[Term]) -> tuple[list[Geometry], list[str]]:
    """The geometries of the spatial coverage that can be drawn, and every geometry's text."""
    extents: list[Geometry] = []
    extent_texts: list[str] = []
    for node in spatial:
        for prop in _GEO_PROPS:
            for lit in g.objects(node, prop):
                if isinstance(lit, Literal):
                    geom = parse_geometry(lit.value, lit.datatype.value)
                    if geom is not None:
                        extents.append(geom)
                    extent_texts.append(lit.value)
    return extents, extent_texts


def _distributions(g: Graph, lab: _Labeller, ds: NamedNode) -> list[Distribution]:
    dists = []
    for n, node in enumerate(g.objects(ds, DCAT + "distribution"), 1):
        dt = g.literals(node, DCT + "title")
        title = _preferred(dt) if dt else f"Distribution {n}"
        dfacts = [
            _fact(label, lab.values(node, prop))
            for label, prop in (
                ("Description", DCT + "description"),
                ("Access URL", DCAT + "accessURL"),
                ("Download URL", DCAT + "downloadURL"),
                ("Format", DCT + "format"),
                ("Media type", DCAT + "mediaType"),
                ("Size (bytes)", DCAT + "byteSize"),
                ("Licence", DCT + "license"),
                ("Access service", DCAT + "accessService"),
            )
        ]
        dists.append(Distribution(title, tuple(f for f in dfacts if f.values)))
    return dists


def _provenance(
    row: RecordRow,
    local: Callable[[str, str], str],
    payload_url: Callable[[str], str],
) -> list[Fact]:
    record_url = local(row.record_iri, "record")
    return [
        _fact("Harvested from source", [Value(row.source)]),
        _fact("Fetched from", [Value(row.url, safe_href(row.url))] if row.url else []),
        _fact(
            "Source datestamp",
            [Value(row.source_datestamp, moment=True)] if row.source_datestamp else [],
        ),
        _fact("In this catalogue since", [Value(row.first_seen, moment=True)]),
        _fact("Last changed here", [Value(row.modified, moment=True)]),
        _fact("Harvest job", [Value(str(row.job_id))] if row.job_id is not None else []),
        _fact("Catalogue record", [Value(row.record_iri, record_url)]),
        _fact(
            "Original payload",
            [Value(row.payload_sha, payload_url(row.payload_sha))] if row.payload_sha else [],
        ),
    ]
