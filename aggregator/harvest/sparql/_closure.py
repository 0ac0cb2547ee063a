"""Dataset closures for a batch of dataset IRIs: one SPARQL query, split per dataset.

The closure of a dataset is its own triples plus the triples of every node reached from it by
up to ``depth`` links, where a link is followed unless its predicate is ``rdf:type``, it ends
at a literal, it leads back to the dataset, or it ends at a node typed with one of the stop
types. It is what one CONSTRUCT per dataset gave (see docs/protocols/sparql.md), fetched here
for a whole batch in one SELECT:

* the **root rows**: the distinct triples of the batch's datasets (``?s ?p ?o``);
* the **reached rows**: the distinct nodes ``F1 ∪ … ∪ Fdepth`` reachable from the batch
  (``Fk``: the non-literal objects of the non-``rdf:type`` triples of ``Fk-1``'s nodes that
  carry no stop type, ``F0`` the batch) with ``?reached`` bound, and their triples.

Every frontier ``Fk`` is a ``SELECT DISTINCT`` of the one before, so a resource shared by many
datasets (a publisher, a vocabulary term described in every record graph of a union default
graph) is expanded once per batch instead of once per path, and the stop-typed nodes are removed
from the distinct candidates by a left join (``OPTIONAL { ?n a ?t FILTER(?t IN (…)) }
FILTER(!BOUND(?t))``, which Oxigraph runs as one hash join per frontier) instead of a
``FILTER NOT EXISTS { ?n a ?s . VALUES ?s {…} }`` per row, which it evaluates by enumerating
every instance of every stop type for every row. The
frontiers do not know which dataset they came from, so they are a superset: each dataset's
closure is then computed here, by a breadth-first walk over the returned triples with the
exact rules (a node is followed when it is a reached node, i.e. not stop-typed; never back to
the dataset). Blank nodes keep their identity within one result, which is all the walk needs.
Rows are N-Triples term strings (:mod:`aggregator.harvest.sparql._results`), so a dataset's
closure is its payload's lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from aggregator.harvest.sparql._results import Row

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
_RDF_TYPE = f"<{RDF_TYPE}>"
#: the variable that marks a reached (followable) node in the closure query's answer
REACHED = "reached"


@dataclass(frozen=True, slots=True)
class ClosureShape:
    """What the closure query needs from the source options."""

    depth: int
    stop_types: tuple[str, ...]
    graph: str | None = None


def _pattern(shape: ClosureShape, triple: str) -> str:
    return f"GRAPH <{shape.graph}> {{ {triple} }}" if shape.graph else triple


def _frontier(shape: ClosureShape, k: int, values: str) -> str:
    """``SELECT DISTINCT ?nk``: the nodes ``k`` followable links away from the batch."""
    inner = values if k == 1 else "{ " + _frontier(shape, k - 1, values) + " }"
    step = (
        f"{inner} {_pattern(shape, f'?n{k - 1} ?l{k} ?n{k} .')}"
        f" FILTER(!isLiteral(?n{k}) && ?l{k} != <{RDF_TYPE}>)"
    )
    candidates = f"SELECT DISTINCT ?n{k} WHERE {{ {step} }}"
    if not shape.stop_types:
        return candidates
    stops = ", ".join(f"<{t}>" for t in shape.stop_types)
    typed = f"OPTIONAL {{ {_pattern(shape, f'?n{k} a ?t{k} .')} FILTER(?t{k} IN ({stops})) }}"
    return f"SELECT DISTINCT ?n{k} WHERE {{ {{ {candidates} }} {typed} FILTER(!BOUND(?t{k})) }}"


def closure_query(shape: ClosureShape, iris: Sequence[str]) -> str:
    """One SELECT answering the root rows and the reached rows of a batch (see the module)."""
    if not iris:
        raise ValueError("a closure query needs at least one dataset IRI")
    listed = " ".join(f"<{i}>" for i in iris)
    roots = (
        f"{{ SELECT DISTINCT ?s ?p ?o WHERE {{ VALUES ?s {{ {listed} }} "
        f"{_pattern(shape, '?s ?p ?o .')} }} }}"
    )
    select = f"SELECT ?s ?p ?o ?{REACHED} WHERE {{ "
    if shape.depth == 0:
        return select + roots + " }"
    values = f"VALUES ?n0 {{ {listed} }}"
    levels = " UNION ".join(
        "{ { " + _frontier(shape, k, values) + f" }} BIND(?n{k} AS ?s) }}"
        for k in range(1, shape.depth + 1)
    )
    reached = (
        f"{{ SELECT DISTINCT ?s ?p ?o ?{REACHED} WHERE {{ "
        f"{{ SELECT DISTINCT ?s WHERE {{ {levels} }} }} BIND(true AS ?{REACHED}) "
        f"OPTIONAL {{ {_pattern(shape, '?s ?p ?o .')} }} }} }}"
    )
    return select + roots + " UNION " + reached + " }"


@dataclass(slots=True)
class BatchGraph:
    """The answer of a closure query: every returned node's triples (N-Triples term strings)
    and the reached nodes."""

    triples: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    reached: set[str] = field(default_factory=set)

    @classmethod
    def from_rows(cls, rows: Iterable[Row]) -> BatchGraph:
        graph = cls()
        triples, reached = graph.triples, graph.reached
        seen: set[tuple[str, str, str]] = set()
        for s, p, o, is_reached in rows:
            if s[0] not in "<_":
                raise ValueError(f"the subject of a closure row is not a node: {s[:80]!r}")
            if is_reached:
                reached.add(s)
            if p is None or o is None:
                if p is not None or o is not None:
                    raise ValueError(f"a closure row with half a triple: {s[:80]!r}")
                continue  # a reached node without triples
            if p[0] != "<":
                raise ValueError(f"the predicate of a closure row is not an IRI: {p[:80]!r}")
            key = (s, p, o)
            if key not in seen:
                seen.add(key)
                triples.setdefault(s, []).append((p, o))
        return graph

    def closure(self, root: str, depth: int) -> list[str]:
        """The root's closure as N-Triples lines: breadth-first over followable links, at
        most ``depth`` deep (a link is followable when it is not ``rdf:type`` and ends at a
        reached node other than the root)."""
        own = self.triples.get(root)
        if not own:
            return []
        out = [f"{root} {p} {o} .\n" for p, o in own]
        visited = {root}
        level = [root]
        for _ in range(depth):
            following: list[str] = []
            for node in level:
                for p, o in self.triples.get(node, ()):
                    if o in visited or o not in self.reached or p == _RDF_TYPE:
                        continue
                    visited.add(o)
                    following.append(o)
                    out.extend(f"{o} {q} {v} .\n" for q, v in self.triples.get(o, ()))
            if not following:
                break
            level = following
        return out
