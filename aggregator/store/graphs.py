"""The graph side of the record store: one named graph per record.

:class:`GraphBackend` is the interface a second backend (any SPARQL 1.1 server) implements;
:class:`OxigraphGraphs` is the embedded default. ``replace`` must be idempotent: the record
store replays it from its journal after a crash, so it brings each graph to exactly the given
content whatever state it was left in.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pyoxigraph import NamedNode, QueryBoolean, QuerySolutions, QueryTriples, RdfFormat, Store

_BNODE = re.compile(rb"(?m)^_:|(?<= )_:(?=[A-Za-z0-9_]+ \.$)")


@dataclass(frozen=True, slots=True)
class GraphContent:
    graph_iri: str
    ntriples: bytes  # the full content of the graph, N-Triples
    bnode_scope: str  # unique per graph: keeps blank nodes of different graphs apart
    existed: bool  # the graph may hold older content that must go


def to_nquads(content: GraphContent) -> bytes:
    """N-Triples -> N-Quads in ``graph_iri`` with blank node labels scoped to the graph."""
    if not content.ntriples:
        return b""
    scoped = _BNODE.sub(b"_:" + content.bnode_scope.encode() + b"_", content.ntriples)
    suffix = b" <" + content.graph_iri.encode() + b"> .\n"
    out = bytearray()
    for line in scoped.splitlines():
        if line.endswith(b" ."):
            out += line[:-2]
            out += suffix
    return bytes(out)


class GraphBackend(Protocol):
    def replace(self, contents: Sequence[GraphContent]) -> None: ...
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
            from aggregator.errors import StoreError

            raise StoreError(
                f"cannot open the store at {path}: {err} (is another aggregator process using it?)"
            ) from err

    def replace(self, contents: Sequence[GraphContent]) -> None:
        for c in contents:
            if c.existed:
                self.store.remove_graph(NamedNode(c.graph_iri))
        data = b"".join(to_nquads(c) for c in contents)
        if data:
            self.store.bulk_load(data, RdfFormat.N_QUADS)
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
