"""Where did each input triple go? The accounting of one ``dcat`` mapping (tests, benchmarks).

Every triple of a source document must end in exactly one of three places:

* **kept**: it is in the output (a dataset graph or the catalogue facts kept beside it);
  blank nodes match any node, since descriptions relabel them and blank-node datasets get
  minted IRIs;
* **rewritten**: a rule of the table replaced it (the rule's trace names the triple);
* **reported**: the mapper's ``unreachable-triples`` finding counts it (it is about a resource
  that no dataset, catalogue or catalogue record refers to).

:func:`account` recomputes the first two independently of the mapper's split, and takes the
third from the finding; ``unaccounted`` must be 0. Not on the mapping path: it parses the
outputs again.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from pyoxigraph import BlankNode, Quad, RdfFormat, parse

from aggregator.mapping.dcat_input import parse_document
from aggregator.mapping.dcat_rules import RuleSet
from aggregator.models import MappedDataset, RawRecord

_COUNT = re.compile(r"^(\d+) triples")


@dataclass(frozen=True)
class Accounting:
    total: int
    kept: int
    rewritten: int
    reported: int
    by_rule: Counter[str] = field(default_factory=Counter)
    missing: tuple[Quad, ...] = ()  # neither kept nor rewritten (reported ones among them)

    @property
    def unaccounted(self) -> int:
        return self.total - self.kept - self.rewritten - self.reported

    @property
    def kept_or_rewritten_share(self) -> float:
        return (self.kept + self.rewritten) / self.total if self.total else 1.0


def _keys(triple_source: bytes, keys: set[tuple[object, object, object]]) -> None:
    if not triple_source:
        return
    for quad in parse(triple_source, format=RdfFormat.N_TRIPLES):
        s, p, o = quad.subject, quad.predicate, quad.object
        keys.add((s, p, o))
        keys.add((None, p, o))
        keys.add((s, p, None))
        keys.add((None, p, None))


def account(raw: RawRecord, mapped: Sequence[MappedDataset], rules: RuleSet) -> Accounting:
    """The accounting of ``mapped`` (what the mapper returned for ``raw``)."""
    quads = parse_document(raw.payload, raw.media_type, raw.url).quads
    out: set[tuple[object, object, object]] = set()
    for record in mapped:
        _keys(record.ntriples, out)
        _keys(record.catalog_ntriples, out)
    _, trace = rules.apply(quads)
    replaced = {r.removed: r.rule for r in trace if r.removed not in r.added}
    kept = rewritten = 0
    by_rule: Counter[str] = Counter()
    missing: list[Quad] = []
    for quad in quads:
        s, o = quad.subject, quad.object
        key = (
            None if isinstance(s, BlankNode) else s,
            quad.predicate,
            None if isinstance(o, BlankNode) else o,
        )
        if key in out:
            kept += 1
        elif quad in replaced:
            rewritten += 1
            by_rule[replaced[quad]] += 1
        else:
            missing.append(quad)
    reported = 0
    for record in mapped:
        for finding in record.findings:
            if finding.rule == "unreachable-triples":
                match = _COUNT.match(finding.message)
                reported += int(match.group(1)) if match else 0
    return Accounting(len(quads), kept, rewritten, reported, by_rule, tuple(missing))
