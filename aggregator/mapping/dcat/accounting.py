"""Where did each input triple go? The accounting of one ``dcat`` mapping (tests, benchmarks).

Every triple of a source document must end in exactly one of three places:

* **kept**: it is in the output (a dataset graph or the catalogue facts kept beside it);
  blank nodes match any node, since descriptions relabel them and blank-node datasets get
  minted IRIs;
* **rewritten**: a rule of the table replaced it (the rule's trace names the triple) and what
  the rule wrote instead is in the output;
* **reported**: it is about a resource that no dataset, catalogue or catalogue record refers
  to, or it is a catalogue's list entry naming a resource the document does not describe, and
  the mapper's ``unreachable-triples`` / ``catalogue-entries-not-described`` findings count it.

:func:`account` recomputes all three independently of the mapper's split (its own walk from
the datasets, the catalogues that list them and the records about them), checks the reported
count against the mapper's finding, and matches the rest against the output; ``unaccounted``
must be 0. Not on the mapping path: it parses the outputs again.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from pyoxigraph import BlankNode, NamedNode, Quad, RdfFormat, parse

from aggregator.core.models import MappedDataset, RawRecord
from aggregator.core.vocab import DCAT
from aggregator.mapping.dcat.input import parse_document
from aggregator.mapping.dcat.rules import RuleSet

_COUNT = re.compile(r"^(\d+) triples")
RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
PRIMARY_TOPIC = NamedNode("http://xmlns.com/foaf/0.1/primaryTopic")
CATALOG = NamedNode(DCAT + "Catalog")
RECORD = NamedNode(DCAT + "record")
LISTS = frozenset(NamedNode(DCAT + p) for p in ("dataset", "service", "record"))


@dataclass(frozen=True)
class Accounting:
    total: int
    kept: int
    rewritten: int
    reported: int
    by_rule: Counter[str] = field(default_factory=Counter)
    missing: tuple[Quad, ...] = ()  # reachable, but neither kept nor rewritten
    reported_by_mapper: int = 0  # the count of the mapper's unreachable-triples findings

    @property
    def unaccounted(self) -> int:
        return len(self.missing) + abs(self.reported - self.reported_by_mapper)


def _keys(triple_source: bytes, keys: set[tuple[object, object, object]]) -> None:
    if not triple_source:
        return
    for quad in parse(triple_source, format=RdfFormat.N_TRIPLES):
        s, p, o = quad.subject, quad.predicate, quad.object
        keys.add((s, p, o))
        keys.add((None, p, o))
        keys.add((s, p, None))
        keys.add((None, p, None))


def _key(quad: Quad) -> tuple[object, object, object]:
    s, o = quad.subject, quad.object
    return (
        None if isinstance(s, BlankNode) else s,
        quad.predicate,
        None if isinstance(o, BlankNode) else o,
    )


def account(raw: RawRecord, mapped: Sequence[MappedDataset], rules: RuleSet) -> Accounting:
    """The accounting of ``mapped`` (what the mapper returned for ``raw``)."""
    quads = parse_document(raw.payload, raw.media_type, raw.url).quads
    out: set[tuple[object, object, object]] = set()
    for record in mapped:
        _keys(record.ntriples, out)
        _keys(record.catalog_ntriples, out)
    reachable, members = _reachable(quads)
    catalogs = {q.subject for q in quads if q.predicate == RDF_TYPE and q.object == CATALOG}
    _, trace = rules.apply(quads)
    replaced = {r.removed: r for r in trace if r.removed not in r.added}
    kept = rewritten = 0
    by_rule: Counter[str] = Counter()
    missing: list[Quad] = []
    reported = 0
    for quad in quads:
        rewrite = replaced.get(quad)
        if quad.subject not in reachable:
            reported += 1
        elif quad.predicate in LISTS and quad.subject in catalogs:
            if quad.object in members[quad.predicate == RECORD]:
                kept += 1  # in the catalogue facts of that dataset
            else:
                reported += 1  # names what the document does not describe
        elif _key(quad) in out:
            kept += 1
        elif rewrite is not None and all(_key(q) in out for q in rewrite.added):
            rewritten += 1  # and what the rule wrote instead is in the output
            by_rule[rewrite.rule] += 1
        else:
            missing.append(quad)
    by_mapper = 0
    for record in mapped:
        for finding in record.findings:
            if finding.rule in ("unreachable-triples", "catalogue-entries-not-described"):
                match = _COUNT.match(finding.message)
                by_mapper += int(match.group(1)) if match else 0
    return Accounting(len(quads), kept, rewritten, reported, by_rule, tuple(missing), by_mapper)


def _reachable(quads: Sequence[Quad]) -> tuple[set[object], tuple[set[object], set[object]]]:
    """Subjects reachable from the datasets, their catalogues and the records about them; and
    the datasets and the records (about datasets) a catalogue's lists may name."""
    by_subject: dict[object, list[Quad]] = {}
    typed: dict[str, list[object]] = {}
    for quad in quads:
        by_subject.setdefault(quad.subject, []).append(quad)
        if quad.predicate == RDF_TYPE and isinstance(quad.object, NamedNode):
            typed.setdefault(quad.object.value, []).append(quad.subject)
    datasets = {
        s for c in ("Dataset", "DataService", "DatasetSeries") for s in typed.get(DCAT + c, [])
    }
    records = [
        r
        for r in typed.get(DCAT + "CatalogRecord", [])
        if any(q.predicate == PRIMARY_TOPIC and q.object in datasets for q in by_subject[r])
    ]
    catalogs = _listing_catalogs(by_subject, typed.get(DCAT + "Catalog", []), datasets, records)
    kinds = ("Dataset", "DataService", "DatasetSeries", "Catalog", "CatalogRecord")
    boundary = {s for c in kinds for s in typed.get(DCAT + c, [])}  # never entered
    all_catalogs = set(typed.get(DCAT + "Catalog", []))
    seen = _walk(by_subject, [*datasets, *records, *catalogs], all_catalogs, boundary)
    return seen, (datasets, set(records))


def _listing_catalogs(
    by_subject: dict[object, list[Quad]],
    all_catalogs: list[object],
    datasets: set[object],
    records: list[object],
) -> list[object]:
    """The catalogues that list the datasets; all of them when some dataset is in none."""
    listed: set[object] = set()
    catalogs = []
    for c in all_catalogs:
        # a catalogue lists a dataset by dcat:dataset / dcat:service, or by dcat:record naming
        # a catalogue record about it (a dcat:record naming the dataset itself lists nothing)
        members = {
            q.object
            for q in by_subject[c]
            if q.predicate.value in (DCAT + "dataset", DCAT + "service")
        }
        entries = {q.object for q in by_subject[c] if q.predicate.value == DCAT + "record"}
        topics = {
            q.object
            for r in records
            if r in entries
            for q in by_subject[r]
            if q.predicate == PRIMARY_TOPIC
        }
        if (members | topics) & datasets:
            catalogs.append(c)
            listed |= (members | topics) & datasets
    return all_catalogs if datasets - listed else catalogs


def _walk(
    by_subject: dict[object, list[Quad]],
    stack: list[object],
    all_catalogs: set[object],
    boundary: set[object],
) -> set[object]:
    """The subjects reachable from those of ``stack``, not entering the ``boundary`` nor
    following a catalogue's lists."""
    seen: set[object] = set(stack)
    while stack:
        for quad in by_subject.get(stack.pop(), ()):
            obj = quad.object
            if (
                quad.predicate != RDF_TYPE
                and not (quad.predicate in LISTS and quad.subject in all_catalogs)
                and obj in by_subject
                and obj not in seen
                and obj not in boundary
            ):
                seen.add(obj)
                stack.append(obj)
    return seen
