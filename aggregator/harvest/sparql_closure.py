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
graph) is expanded once per batch instead of once per path, and the stop types are removed
with one ``MINUS`` per level (a hash anti-join) instead of a ``FILTER NOT EXISTS`` per row. The
frontiers do not know which dataset they came from, so they are a superset: each dataset's
closure is then computed here, by a breadth-first walk over the returned triples with the
exact rules (a node is followed when it is a reached node, i.e. not stop-typed; never back to
the dataset). Blank nodes keep their identity within one result, which is all the walk needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyoxigraph import BlankNode, Literal, NamedNode, QuerySolutions, Triple

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
#: the variable that marks a reached (followable) node in the closure query's answer
REACHED = "reached"

Node = NamedNode | BlankNode
Term = NamedNode | BlankNode | Literal


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
    stops = " ".join(f"<{t}>" for t in shape.stop_types)
    minus = f"MINUS {{ {_pattern(shape, f'?n{k} a ?t{k} .')} VALUES ?t{k} {{ {stops} }} }}"
    return f"SELECT DISTINCT ?n{k} WHERE {{ {{ {candidates} }} {minus} }}"


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
    """The answer of a closure query: every returned node's triples and the reached nodes."""

    triples: dict[Node, list[tuple[NamedNode, Term]]] = field(default_factory=dict)
    reached: set[Node] = field(default_factory=set)

    @classmethod
    def from_solutions(cls, solutions: QuerySolutions) -> BatchGraph:
        graph = cls()
        seen: set[tuple[Node, NamedNode, Term]] = set()
        for row in solutions:
            s, p, o = row["s"], row["p"], row["o"]
            if not isinstance(s, NamedNode | BlankNode):
                raise ValueError(f"the subject of a closure row is not a node: {s!r}")
            if row[REACHED] is not None:
                graph.reached.add(s)
            if p is None and o is None:
                continue  # a reached node without triples
            if not isinstance(p, NamedNode) or not isinstance(o, NamedNode | BlankNode | Literal):
                raise ValueError(f"malformed closure row: {s!r} {p!r} {o!r}")
            if (s, p, o) not in seen:
                seen.add((s, p, o))
                graph.triples.setdefault(s, []).append((p, o))
        return graph

    def closure(self, root: NamedNode, depth: int) -> list[Triple]:
        """The root's closure: breadth-first over followable links, at most ``depth`` deep."""
        own = self.triples.get(root)
        if not own:
            return []
        out = [Triple(root, p, o) for p, o in own]
        visited: set[Node] = {root}
        level: list[Node] = [root]
        for _ in range(depth):
            following: list[Node] = []
            for node in level:
                for p, o in self.triples.get(node, ()):
                    if (
                        isinstance(o, Literal)
                        or o in visited
                        or o not in self.reached
                        or p.value == RDF_TYPE
                    ):
                        continue
                    visited.add(o)
                    following.append(o)
                    out.extend(Triple(o, q, v) for q, v in self.triples.get(o, ()))
            if not following:
                break
            level = following
        return out
