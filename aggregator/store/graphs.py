"""The graph side of the record store: one named graph per record.

:class:`GraphBackend` is the interface a second backend (any SPARQL 1.1 server) implements;
:class:`OxigraphGraphs` is the embedded default. ``replace`` must be idempotent: the record
store replays it from its journal after a crash, so it brings each graph to exactly the given
content whatever state it was left in.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pyoxigraph import (
    BlankNode,
    NamedNode,
    QueryBoolean,
    QuerySolutions,
    QueryTriples,
    RdfFormat,
    Store,
    parse,
)

_LABEL = re.compile(rb"[A-Za-z0-9_.-]+")


def _scope_line(line: bytes, prefix: bytes) -> bytes:
    """One N-Triples statement without its " ." with its blank node labels prefixed. In a
    statement a label can only be the subject (the line's start) or the object (the last
    term, all label characters after " _:"); a "_:" anywhere else sits in a literal or an
    IRI and stays as it is."""
    if line.startswith(b"_:"):
        line = prefix + line[2:]
    pos = line.rfind(b" _:")
    if pos != -1 and _LABEL.fullmatch(line, pos + 3):
        line = line[: pos + 1] + prefix + line[pos + 3 :]
    return line


def statements(ntriples: bytes) -> list[bytes]:
    """The statements of N-Triples text, each without its " .\n". In N-Triples a raw line
    feed only ends a statement (one inside a literal is written ``\n``), so every statement
    ends with " .\n" and nothing else does."""
    if not ntriples.endswith(b"\n"):
        ntriples += b"\n"
    lines = ntriples.split(b" .\n")
    if lines and not lines[-1].strip():
        lines.pop()
    return lines


def _scoped(lines: list[bytes], scope: str) -> list[bytes]:
    prefix = b"_:" + scope.encode() + b"_"
    return [_scope_line(line, prefix) if b"_:" in line else line for line in lines]


@dataclass(frozen=True, slots=True)
class GraphContent:
    """The full content of one record's graph, as N-Triples parts.

    Each part has its own blank node scope: parts are serialised independently (the dataset
    graph and the catalogue facts are each canonicalised on their own), so the same label in
    two parts denotes two different nodes, and labels of different graphs must never meet.
    """

    graph_iri: str
    parts: tuple[tuple[bytes, str], ...]  # (N-Triples, blank node scope unique in the store)
    existed: bool  # the graph may hold older content that must go
    nquads: bytes = b""  # more content, already as N-Quads in this graph (prepared elsewhere)


def lines_to_nquads(lines: list[bytes], scope: str, graph_iri: str) -> bytes:
    """Statements (without " .") as N-Quads in ``graph_iri``, blank node labels scoped."""
    if not lines:
        return b""
    suffix = b" <" + graph_iri.encode() + b"> .\n"
    if any(b"_:" in line for line in lines):
        lines = _scoped(lines, scope)
    return suffix.join(lines) + suffix


def to_nquads(content: GraphContent) -> bytes:
    """N-Triples parts -> N-Quads in ``graph_iri`` with blank nodes scoped per part: the
    statements are split once, the few with a "_:" scoped, and all joined again with the
    graph name (cheaper than one ``bytes.replace`` for the graph name and a checked one for
    the labels: docs/benchmarks.md#record-store)."""
    suffix = b" <" + content.graph_iri.encode() + b"> .\n"
    out = []
    for ntriples, scope in content.parts:
        if not ntriples:
            continue
        lines = statements(ntriples)
        if b"_:" in ntriples:
            lines = _scoped(lines, scope)
        if lines:
            out.append(suffix.join(lines) + suffix)
    out.append(content.nquads)
    return b"".join(out)


def _statement(s: object, p: object, o: object) -> str:
    """A triple as text with every blank node written ``_:`` (labels are the store's own)."""
    return " ".join("_:" if isinstance(t, BlankNode) else str(t) for t in (s, p, o))


def stale_contents(
    graphs: GraphBackend, contents: Sequence[GraphContent], chunk: int = 100
) -> list[GraphContent]:
    """The contents the graph store does not hold exactly: a graph that is missing, older,
    half-loaded or has more in it. Asked through SPARQL only (any backend answers it); the
    expected side goes through an in-memory Oxigraph store first, so that literals are
    normalised as the store normalises them. Triples are compared as a multiset with blank
    nodes blinded: a graph whose triples match that way but whose blank nodes are wired
    otherwise is not something an interrupted write leaves behind."""
    probe = Store()
    data = b"".join(to_nquads(c) for c in contents)
    if data:
        probe.bulk_load(data, RdfFormat.N_QUADS, lenient=True)
    want: dict[str, Counter[str]] = {c.graph_iri: Counter() for c in contents}
    for q in probe:
        if isinstance(q.graph_name, NamedNode):
            want[q.graph_name.value][_statement(q.subject, q.predicate, q.object)] += 1
    held: dict[str, Counter[str]] = {c.graph_iri: Counter() for c in contents}
    iris = list(held)
    for start in range(0, len(iris), chunk):
        values = " ".join(str(NamedNode(iri)) for iri in iris[start : start + chunk])
        result = graphs.query(
            f"SELECT ?g ?s ?p ?o WHERE {{ VALUES ?g {{ {values} }} GRAPH ?g {{ ?s ?p ?o }} }}"
        )
        assert isinstance(result, QuerySolutions)
        for row in result:
            g = row["g"]
            assert isinstance(g, NamedNode)
            held[g.value][_statement(row["s"], row["p"], row["o"])] += 1
    return [c for c in contents if want[c.graph_iri] != held[c.graph_iri]]


class GraphBackend(Protocol):
    def replace(
        self, contents: Sequence[GraphContent], added: bytes = b"", removed: bytes = b""
    ) -> None:
        """Bring each graph of ``contents`` to its content, then load ``added`` and remove
        ``removed`` (N-Quads: the shared graph's changes, ``shared.py``)."""

    def remove(self, graph_iris: Sequence[str]) -> None: ...
    def query(self, sparql: str) -> QuerySolutions | QueryTriples | QueryBoolean: ...
    def graph_names(self) -> set[str]: ...
    def close(self) -> None: ...


class OxigraphGraphs:
    """Embedded pyoxigraph store on disk; the default graph is the union of the named graphs."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        try:
            self.store = Store(str(path))
        except OSError as err:
            from aggregator.core.errors import StoreError

            raise StoreError(
                f"cannot open the store at {path}: {err} (is another aggregator process using it?)"
            ) from err

    def replace(
        self, contents: Sequence[GraphContent], added: bytes = b"", removed: bytes = b""
    ) -> None:
        for c in contents:
            if c.existed:
                self.store.remove_graph(NamedNode(c.graph_iri))
        data = b"".join(to_nquads(c) for c in contents) + added
        if data:
            # lenient: every term was written by pyoxigraph or checked by it (records.py)
            self.store.bulk_load(data, RdfFormat.N_QUADS, lenient=True)
        if removed:
            for quad in parse(removed, format=RdfFormat.N_QUADS, lenient=True):
                self.store.remove(quad)
        self.store.flush()

    def remove(self, graph_iris: Sequence[str]) -> None:
        for iri in graph_iris:
            self.store.remove_graph(NamedNode(iri))
        self.store.flush()

    def query(self, sparql: str) -> QuerySolutions | QueryTriples | QueryBoolean:
        return self.store.query(sparql, use_default_graph_as_union=True)

    def graph_names(self) -> set[str]:
        return {g.value for g in self.store.named_graphs() if isinstance(g, NamedNode)}

    def close(self) -> None:
        self.store.flush()
        del self.store
