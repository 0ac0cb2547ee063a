"""The declarative DCAT-AP 2 -> 3 rewrite rules (``mappings/dcat-ap-3.toml``) and their engine.

The TOML file is the single place where a rewrite is defined: a metadata specialist reads and
edits it; ``load_rules`` compiles it into lookup tables keyed by pyoxigraph terms and
:meth:`RuleSet.apply` rewrites a list of quads with them. Each applied rewrite is recorded as
a :class:`Rewrite` (rule id, the quad it replaced, the quads it produced) so that findings,
documentation and the "no triple lost" accounting test all come from the same trace.

The file is read and compiled by :mod:`.rule_table` (:func:`load_rules`); the lexical
checks live in :mod:`._checks`. Vocabulary tables
(``mappings/dcat-ap-3-vocabularies.toml``, :mod:`.vocab`) give the IRIs
``literal-to-term`` rules look literals up in; the ``[[format]]`` table of the rule file gives
the two built-in tables ``file-type`` and ``media-type``. ``range-class`` rules run after the
per-triple rewrites, on the whole description (:mod:`._ranges`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pyoxigraph import BlankNode, Literal, NamedNode, Quad

from aggregator.core.models import Finding, Severity, Stage
from aggregator.mapping.dcat._checks import Check, as_iri
from aggregator.mapping.dcat._ranges import (
    NOT_TYPED,
    RDF_TYPE,
    Index,
    RangeClass,
    Rewrite,
    add_range_types,
)
from aggregator.mapping.dcat.vocab import Vocabulary, lookup_key

XSD = "http://www.w3.org/2001/XMLSchema#"
RDFS_LABEL = NamedNode("http://www.w3.org/2000/01/rdf-schema#label")
XSD_STRING = NamedNode(XSD + "string")

KINDS = (
    "rename-property",
    "rename-class",
    "map-value",
    "literal-datatype",
    "literal-to-term",
    "literal-url",
    "range-class",
)


@dataclass(frozen=True, slots=True)
class RangeRow:
    """One row of a range-class rule, as written (full IRIs)."""

    properties: tuple[str, ...]
    cls: str
    requires: tuple[str, ...]
    at_most_one: tuple[str, ...]
    spec: str


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the rule table, with CURIEs expanded to full IRIs."""

    id: str
    kind: str
    spec: str
    source: str = ""  # the term rewritten: property, class or value IRI
    target: str = ""  # the term written instead (a datatype for literal-datatype)
    property: str = ""  # the first (often only) property of the rule
    check: str = ""  # literal-datatype: name of the lexical test
    lookup: str = ""  # literal-to-term: name of a vocabulary table ("" = none)
    fallback_class: str = ""  # literal-to-term: class of the node kept for an unknown literal
    fallback_id: str = ""
    fallback_label: str = ""  # literal-to-term: property carrying the original literal
    properties: tuple[str, ...] = ()  # every property the rule applies to
    ranges: tuple[RangeRow, ...] = ()  # range-class: one row per range
    email: bool = False  # literal-url: bare e-mail addresses become mailto: IRIs
    media_type_as: str = ""  # literal-to-term: property keeping a media-type literal's IANA IRI


# flags of RuleSet._dispatch: what to do with a triple, by its predicate
_ANY = 1  # some rule may rewrite it, whatever its object
_LITERAL = 2  # some rule may rewrite it when its object is a literal
_RANGE = 4  # its IRI / blank-node object may need the class of its range
_TYPE = 8  # rdf:type
_DATATYPE = 16  # a literal-datatype rule; literals of an accepted datatype need no rewrite


__all__ = ["KINDS", "RangeClass", "Rewrite", "Rule", "RuleSet", "findings_from"]


@dataclass(frozen=True, slots=True)
class _LiteralTerm:
    rule: str
    fallback_rule: str
    table: Mapping[str, NamedNode] | Vocabulary | None
    fallback_class: NamedNode
    fallback_label: NamedNode
    #: ``media-type-as``: the property that keeps a literal that is itself a media type
    #: (``dct:format "text/csv"``) as its IANA IRI beside the looked-up term; with the table
    media_type_as: tuple[NamedNode, Mapping[str, NamedNode]] | None = None


@dataclass(frozen=True)
class RuleSet:
    """The compiled rule table. Immutable; safe to share between threads."""

    rules: tuple[Rule, ...]
    meta: Mapping[str, str]
    property_renames: Mapping[NamedNode, tuple[NamedNode, str]] = field(default_factory=dict)
    class_renames: Mapping[NamedNode, tuple[NamedNode, str]] = field(default_factory=dict)
    value_maps: Mapping[NamedNode, Mapping[NamedNode, tuple[NamedNode, str]]] = field(
        default_factory=dict
    )
    literal_datatypes: Mapping[
        NamedNode, tuple[NamedNode, Check, str, frozenset[str], frozenset[str]]
    ] = field(default_factory=dict)
    literal_terms: Mapping[NamedNode, _LiteralTerm] = field(default_factory=dict)
    literal_urls: Mapping[NamedNode, tuple[str, bool]] = field(default_factory=dict)
    ranges: Mapping[NamedNode, RangeClass] = field(default_factory=dict)
    file_types: Mapping[str, NamedNode] = field(default_factory=dict)
    media_types: Mapping[str, NamedNode] = field(default_factory=dict)
    vocabularies: Mapping[str, Vocabulary] = field(default_factory=dict)
    _watched: frozenset[NamedNode] = frozenset()
    _literal_only: frozenset[NamedNode] = frozenset()  # watched only for literal values
    _dispatch: Mapping[NamedNode, int] = field(default_factory=dict)  # predicate -> flags
    # literal-datatype predicate -> datatypes its literals may keep (only if no other rule)
    _accepted: Mapping[NamedNode, frozenset[NamedNode]] = field(default_factory=dict)

    @cached_property
    def by_id(self) -> Mapping[str, Rule]:
        """Rule by id, fallback ids included."""
        out = {rule.id: rule for rule in self.rules}
        out.update({rule.fallback_id: rule for rule in self.rules if rule.fallback_id})
        return out

    @property
    def rule_ids(self) -> tuple[str, ...]:
        ids: list[str] = []
        for rule in self.rules:
            ids.append(rule.id)
            if rule.fallback_id and rule.fallback_id != rule.id:
                ids.append(rule.fallback_id)
        if self.ranges:
            ids.append(NOT_TYPED)
        return tuple(ids)

    def apply(self, quads: Iterable[Quad]) -> tuple[list[Quad], list[Rewrite]]:
        """Rewrite quads (all in the default graph); untouched quads are passed through as is.

        Then give untyped values of range-class properties their class (:mod:`._ranges`).
        """
        out, trace, _ = self.apply_split(quads, ground=False)
        return out, trace

    def apply_split(
        self,
        quads: Iterable[Quad],
        ground: bool = True,
        index: Index | None = None,
    ) -> tuple[list[Quad], list[Rewrite], list[str]]:
        """:meth:`apply`, with the ``rdf:type`` triples added to IRI values given apart.

        With ``ground``, those triples are returned as N-Triples lines (``<iri> <rdf:type>
        <class> .``) instead of quads: they hold no blank node, so they do not change the
        canonical blank node labels, and the mapper adds them to the canonical lines directly
        (building and canonicalising them as quads was a large share of the mapping:
        docs/benchmarks.md#mapping).
        ``index``: the quads describing a node in this description, if the caller has them
        indexed (the range checks then count a node's properties there instead of scanning).

        One loop does both the per-triple rewrites and the collection of typed nodes and range
        candidates: pyoxigraph builds a new Python object on every term access, so each quad's
        terms are read once.
        """
        out: list[Quad] = []
        trace: list[Rewrite] = []
        dispatch = self._dispatch.get
        class_renames = self.class_renames
        ranges = self.ranges
        typed: set[object] = set()
        candidates: dict[object, tuple[Quad, RangeClass]] = {}
        append = out.append
        for quad in quads:
            predicate = quad.predicate
            flags = dispatch(predicate)
            if flags is None:
                append(quad)
                continue
            if flags & _TYPE:
                if flags & _ANY and quad.object in class_renames:
                    new = self._rewrite(quad, predicate, trace)
                    if new is not None:
                        out.extend(new)
                        for q in new:
                            _note(q, typed, candidates, ranges)
                        continue
                append(quad)
                typed.add(quad.subject)
                continue
            obj = quad.object
            if flags & _ANY or (
                flags & _LITERAL
                and isinstance(obj, Literal)
                and not (flags & _DATATYPE and obj.datatype in self._accepted[predicate])
            ):
                new = self._rewrite(quad, predicate, trace)
                if new is not None:
                    out.extend(new)
                    for q in new:
                        _note(q, typed, candidates, ranges)
                    continue
            append(quad)
            if flags & _RANGE and not isinstance(obj, Literal) and obj not in candidates:
                candidates[obj] = (quad, ranges[predicate])
        lines: list[str] = []
        if candidates:
            add_range_types(
                out,
                trace,
                typed,
                candidates,
                lines if ground else None,
                index,
                self.property_renames,
            )
        return out, trace, lines

    def _rewrite(self, quad: Quad, predicate: NamedNode, trace: list[Rewrite]) -> list[Quad] | None:
        subject, obj = quad.subject, quad.object
        changed = False
        renamed = self.property_renames.get(predicate)
        if renamed is not None:
            predicate, rule_id = renamed
            changed = True
            trace.append(Rewrite(rule_id, quad, (Quad(subject, predicate, obj),)))
        if predicate == RDF_TYPE and isinstance(obj, NamedNode):
            target = self.class_renames.get(obj)
            if target is not None:
                obj = target[0]
                changed = True
                trace.append(Rewrite(target[1], quad, (Quad(subject, predicate, obj),)))
        elif isinstance(obj, NamedNode):
            mapped = self.value_maps.get(predicate, {}).get(obj)
            if mapped is not None:
                obj = mapped[0]
                changed = True
                trace.append(Rewrite(mapped[1], quad, (Quad(subject, predicate, obj),)))
        elif isinstance(obj, Literal):
            typed = self.literal_datatypes.get(predicate)
            if typed is not None and obj.language is None:
                datatype, check, rule_id, convertible, accepted = typed
                if obj.datatype != datatype and obj.datatype.value not in accepted:
                    result = check(obj.value) if obj.datatype.value in convertible else None
                    if result is None:
                        note = f"{obj.value!r} kept"
                        trace.append(Rewrite(rule_id, quad, (quad,), Severity.WARNING, note))
                    elif result[1] != obj.datatype.value or result[0] != obj.value:
                        obj = Literal(
                            result[0], datatype=NamedNode(result[1]) if result[1] else datatype
                        )
                        changed = True
                        trace.append(Rewrite(rule_id, quad, (Quad(subject, predicate, obj),)))
            term = self.literal_terms.get(predicate)
            url = self.literal_urls.get(predicate)
            if (term is not None or url is not None) and isinstance(obj, Literal):
                return self._literal_to_term(quad, subject, predicate, obj, term, url, trace)
        if not changed:
            return None
        return [Quad(subject, predicate, obj)]

    @staticmethod
    def _literal_to_term(
        quad: Quad,
        subject: NamedNode | BlankNode | Any,
        predicate: NamedNode,
        obj: Literal,
        term: _LiteralTerm | None,
        url: tuple[str, bool] | None,
        trace: list[Rewrite],
    ) -> list[Quad]:
        """A literal where a resource is due: vocabulary IRI, else URL as IRI, else typed node."""
        if term is not None and term.table is not None:
            table = term.table
            iri = (
                table.lookup(obj.value)
                if isinstance(table, Vocabulary)
                else table.get(lookup_key(obj.value))
            )
            if iri is not None:
                out = [Quad(subject, predicate, iri)]
                if term.media_type_as is not None:  # the media type itself is kept too
                    key = lookup_key(obj.value)
                    media = term.media_type_as[1].get(key) if "/" in key else None
                    if media is not None:
                        out.append(Quad(subject, term.media_type_as[0], media))
                trace.append(Rewrite(term.rule, quad, tuple(out)))
                return out
        if url is not None:
            iri = as_iri(obj.value, url[1])
            if iri is not None:
                trace.append(Rewrite(url[0], quad, (Quad(subject, predicate, iri),)))
                return [Quad(subject, predicate, iri)]
        if term is None:
            return [quad]
        node = BlankNode()
        added = (
            Quad(subject, predicate, node),
            Quad(node, RDF_TYPE, term.fallback_class),
            Quad(node, term.fallback_label, obj),
        )
        trace.append(Rewrite(term.fallback_rule, quad, added))
        return list(added)


def _note(
    quad: Quad,
    typed: set[object],
    candidates: dict[object, tuple[Quad, RangeClass]],
    ranges: Mapping[NamedNode, RangeClass],
) -> None:
    """Note the typed subject / range candidate of a triple produced by a rewrite."""
    predicate = quad.predicate
    if predicate == RDF_TYPE:
        typed.add(quad.subject)
        return
    rng = ranges.get(predicate)
    if rng is not None:
        obj = quad.object
        if not isinstance(obj, Literal) and obj not in candidates:
            candidates[obj] = (quad, rng)


def findings_from(trace: Iterable[Rewrite], rules: RuleSet) -> list[Finding]:
    """One finding per (rule, severity): what was rewritten, how often, where first."""
    by_id = rules.by_id
    grouped: dict[tuple[str, Severity], list[Rewrite]] = {}
    for rewrite in trace:
        grouped.setdefault((rewrite.rule, rewrite.severity), []).append(rewrite)
    findings = []
    for (rule_id, severity), rewrites in grouped.items():
        first = rewrites[0].removed
        rule = by_id.get(rule_id)
        what = _describe(rule, rule_id, rewrites[0])
        total = sum(r.triples for r in rewrites)
        count = f"{total} triple" + ("s" if total > 1 else "")
        subject = first.subject
        findings.append(
            Finding(
                stage=Stage.MAP,
                severity=severity,
                rule=rule_id,
                message=f"{what} ({count})",
                location=subject.value if isinstance(subject, NamedNode) else None,
                path=first.predicate.value,
            )
        )
    return findings


def _describe(rule: Rule | None, rule_id: str, example: Rewrite) -> str:
    if rule_id == NOT_TYPED:
        return f"value not given the class its DCAT-AP 3 range requires: {example.note}"
    if rule is None:
        return rule_id
    prop = example.removed.predicate.value
    if example.severity is not Severity.INFO:
        return f"<{prop}> value not converted to <{rule.target}>: {example.note}"
    if rule.kind in ("rename-property", "rename-class"):
        return f"<{rule.source}> rewritten to <{rule.target}>"
    if rule.kind == "map-value":
        return f"<{rule.property}> value <{rule.source}> rewritten to <{rule.target}>"
    if rule.kind == "literal-datatype":
        return f"<{prop}> literal given the datatype DCAT-AP 3 requires"
    if rule.kind == "literal-url":
        return f"<{prop}> literal holding a URL or e-mail address replaced by the IRI"
    if rule.kind == "range-class":
        return "untyped values given the class their DCAT-AP 3 range requires"
    if rule_id == rule.fallback_id:
        return f"unrecognised <{prop}> literal kept as a <{rule.fallback_class}> node"
    return f"<{prop}> literal replaced by a {rule.lookup} IRI"
