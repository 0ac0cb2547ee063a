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

from pyoxigraph import NamedNode, Quad

from aggregator.mapping.dcat_rules import NOT_TYPED, RDF_TYPE, RangeClass, Rewrite
from aggregator.models import Severity


def add_range_types(
    quads: list[Quad],
    trace: list[Rewrite],
    typed: set[object],
    candidates: dict[object, tuple[Quad, RangeClass]],
) -> None:
    """Append the missing type triples to ``quads`` and record them in ``trace`` (in place).

    ``typed``: the subjects with an rdf:type in ``quads``; ``candidates``: each IRI or blank-node
    value of a range-class property, with its first link triple and rule.
    """
    pending = {node: c for node, c in candidates.items() if node not in typed}
    if not pending:
        return
    counts: dict[object, dict[NamedNode, int]] | None = None
    for node, (link, rng) in pending.items():
        if rng.requires or rng.at_most_one:
            if counts is None:
                counts = {}
                for quad in quads:
                    subject = quad.subject
                    if subject in pending:
                        per = counts.setdefault(subject, {})
                        per[quad.predicate] = per.get(quad.predicate, 0) + 1
            have = counts.get(node, {})
            missing = [p.value for p in rng.requires if not have.get(p)]
            repeated = [p.value for p in rng.at_most_one if have.get(p, 0) > 1]
            if missing or repeated:
                why = f"<{rng.cls.value}> needs {', '.join(f'<{m}>' for m in missing)}"
                if repeated:
                    why = f"<{rng.cls.value}> allows one {', '.join(f'<{r}>' for r in repeated)}"
                trace.append(Rewrite(NOT_TYPED, link, (link,), Severity.INFO, why))
                continue
        added = Quad(node, RDF_TYPE, rng.cls)  # type: ignore[arg-type]
        quads.append(added)
        trace.append(Rewrite(rng.rule, link, (link, added)))
