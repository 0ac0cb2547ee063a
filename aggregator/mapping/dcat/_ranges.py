"""The ``range-class`` pass of the rule table: type untyped values with their DCAT-AP 3 class.

DCAT-AP 3.0.1 states a class for the value of most object properties (``dct:license`` a
``dct:LicenseDocument``, ``dcat:theme`` a ``skos:Concept``...). Sources often leave them
untyped, especially vocabulary IRIs. After the per-triple rewrites, every IRI or blank-node value
of a property with a range-class rule that has no ``rdf:type`` in the description gets
``rdf:type <class>``.

A type brings the class's shapes into play, so it is only added when that cannot turn a valid
record invalid: the node must have every property in ``requires`` (``foaf:name`` for an agent,
``dcat:accessURL`` for a distribution) and at most one value of each property in
``at-most-one``. Otherwise the node is left untyped and the rule ``range-class-not-typed``
reports it (INFO) — typically an authority IRI (a publisher from a corporate-body list) that the
document does not describe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from pyoxigraph import Literal, NamedNode, Quad

from aggregator.core.models import Severity
from aggregator.core.vocab import RDF_TYPE as _RDF_TYPE

# The types the rule table (rules) and this pass share live here: the rule table imports
# this pass and its types, never the other way round.
RDF_TYPE = NamedNode(_RDF_TYPE)
NOT_TYPED = "range-class-not-typed"  # reported when a range-class rule may not type a node


class Rewrite(NamedTuple):
    """One applied rewrite: ``removed`` was replaced by ``added`` under rule ``rule``.

    (A tuple rather than a dataclass: several are made per record, and a tuple is much
    cheaper to make: docs/benchmarks.md#mapping.)
    """

    rule: str
    removed: Quad
    added: tuple[Quad, ...]
    severity: Severity = Severity.INFO
    note: str = ""
    triples: int = 1  # how many triples this entry stands for (range-class: one per rule)


@dataclass(frozen=True, slots=True)
class RangeClass:
    """A compiled range-class rule: values of ``property`` get ``rdf:type cls`` when untyped."""

    rule: str
    cls: NamedNode
    requires: frozenset[NamedNode]
    at_most_one: frozenset[NamedNode]
    suffix: str = ""  # ' <rdf:type> <class> .': the end of the N-Triples line that types a node
    checked: bool = False  # requires or at_most_one is not empty
    # a required label property and the labels of known vocabulary terms: a term that lacks
    # only that property is typed with its label from the table added
    label_property: NamedNode | None = None
    labels: Mapping[NamedNode, str] = field(default_factory=dict)


def add_range_types(
    quads: list[Quad],
    trace: list[Rewrite],
    typed: set[object],
    candidates: dict[object, tuple[Quad, RangeClass]],
    lines: list[str] | None = None,
    index: Index | None = None,
    renames: Mapping[NamedNode, tuple[NamedNode, str]] | None = None,
) -> None:
    """Add the missing type triples and record them in ``trace`` (in place).

    ``typed``: the subjects with an rdf:type in ``quads``; ``candidates``: each IRI or blank-node
    value of a range-class property, with its first link triple and rule. The type triple of an
    IRI goes to ``lines`` as an N-Triples line when ``lines`` is given, else to ``quads`` (a
    blank node's always goes to ``quads``). One trace entry per rule and call: the link triples
    are kept, so only the count matters for the findings.

    ``index``: the input quads by subject (the mapper's document index), to count a node's
    properties without scanning ``quads``; ``renames``: the property renames, applied to them.
    """
    counts: dict[object, dict[NamedNode, int]] | None = None
    done: dict[str, tuple[Quad, list[Quad], int]] = {}
    rule = ""  # the rule of the run being counted (one rule per table, in practice)
    first: Quad | None = None
    added: list[Quad] = []
    count = 0
    for node, (link, rng) in candidates.items():
        if node in typed:
            continue
        label: Quad | None = None
        if rng.checked:
            if index is not None:
                have = _count(index.get(node), renames or {})
            else:
                if counts is None:
                    counts = _counts(quads, candidates)
                have = counts.get(node, {})
            label = _vocabulary_label(rng, node, have)
            if label is not None:
                have = {**have, label.predicate: 1}
            why = _why_not(rng, have)
            if why:
                trace.append(Rewrite(NOT_TYPED, link, (link,), Severity.INFO, why))
                continue
        if rng.rule != rule:
            if first is not None:
                done[rule] = _merge(done.get(rule), first, added, count)
            rule, first, added, count = rng.rule, link, [], 0
        count += 1
        if lines is not None and isinstance(node, NamedNode):
            lines.append(f"<{node.value}>{rng.suffix}")
            if label is not None:  # no blank node either: a ground line too
                lines.append(f"<{node.value}> <{label.predicate.value}> {label.object} .")
        else:
            quad = Quad(node, RDF_TYPE, rng.cls)  # type: ignore[arg-type]
            quads.append(quad)
            added.append(quad)
            if label is not None:
                quads.append(label)
                added.append(label)
    if first is not None:
        done[rule] = _merge(done.get(rule), first, added, count)
    for rule_id, (link, typed_quads, n) in done.items():
        trace.append(Rewrite(rule_id, link, (link, *typed_quads), Severity.INFO, "", n))


def _merge(
    before: tuple[Quad, list[Quad], int] | None, first: Quad, added: list[Quad], count: int
) -> tuple[Quad, list[Quad], int]:
    if before is None:
        return first, added, count
    return before[0], before[1] + added, before[2] + count


def _counts(
    quads: list[Quad], candidates: dict[object, tuple[Quad, RangeClass]]
) -> dict[object, dict[NamedNode, int]]:
    counts: dict[object, dict[NamedNode, int]] = {}
    for quad in quads:
        subject = quad.subject
        if subject in candidates:
            per = counts.setdefault(subject, {})
            per[quad.predicate] = per.get(quad.predicate, 0) + 1
    return counts


class Index(Protocol):
    """The quads that describe a node in the description being typed (empty if none)."""

    def get(self, node: object) -> Sequence[Quad]: ...


def _count(
    quads: Sequence[Quad], renames: Mapping[NamedNode, tuple[NamedNode, str]]
) -> dict[NamedNode, int]:
    have: dict[NamedNode, int] = {}
    for quad in quads:
        predicate = quad.predicate
        renamed = renames.get(predicate)
        if renamed is not None:
            predicate = renamed[0]
        have[predicate] = have.get(predicate, 0) + 1
    return have


def _vocabulary_label(rng: RangeClass, node: object, have: dict[NamedNode, int]) -> Quad | None:
    """``node skos:prefLabel "label"@en`` when the node lacks its required label and is a term
    of a vocabulary table that gives one (a concept typed without it would not conform)."""
    prop = rng.label_property
    if prop is None or have.get(prop) or not isinstance(node, NamedNode):
        return None
    text = rng.labels.get(node)
    return None if text is None else Quad(node, prop, Literal(text, language="en"))


def _why_not(rng: RangeClass, have: dict[NamedNode, int]) -> str:
    """Why the node may not get the class (empty: it may)."""
    missing = [p.value for p in rng.requires if not have.get(p)]
    if missing:
        return f"<{rng.cls.value}> needs {', '.join(f'<{m}>' for m in missing)}"
    repeated = [p.value for p in rng.at_most_one if have.get(p, 0) > 1]
    if repeated:
        return f"<{rng.cls.value}> allows one {', '.join(f'<{r}>' for r in repeated)}"
    return ""


_TYPE_NT = f"<{RDF_TYPE.value}>"
