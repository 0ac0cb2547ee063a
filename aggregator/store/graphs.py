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

# A blank node label in subject position (line start) or object position (line end).
_BNODE = re.compile(rb"(?m)^_:|(?<= )_:(?=[A-Za-z0-9_.-]+ \.$)")
_LABEL_END = re.compile(rb"[A-Za-z0-9_.-]+ \.(?:\n|$)")


def _only_labels(ntriples: bytes) -> bool:
    """True when every "_:" in the text is a blank node label (line start, or the object at
    the end of a line), i.e. none sits inside a literal or an IRI."""
    pos = ntriples.find(b"_:")
    while pos != -1:
        at_line_start = pos == 0 or ntriples[pos - 1] == 0x0A
        # Otherwise it must be the object: a space, then the label, " ." and the line's end
        # (a literal or IRI holding " _:x ." would have to close after it).
        is_object = ntriples[pos - 1] == 0x20 and _LABEL_END.match(ntriples, pos + 2)
        if not at_line_start and not is_object:
            return False
        pos = ntriples.find(b"_:", pos + 2)
    return True


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


def scope_blank_nodes(ntriples: bytes, scope: str) -> bytes:
    """Prefix every blank node label with ``scope`` (labels inside literals untouched)."""
    if b"_:" not in ntriples:
        return ntriples
    prefix = b"_:" + scope.encode() + b"_"
    if _only_labels(ntriples):
        return ntriples.replace(b"_:", prefix)
    return _BNODE.sub(prefix, ntriples)


def to_nquads(content: GraphContent) -> bytes:
    """N-Triples parts -> N-Quads in ``graph_iri`` with blank nodes scoped per part.

    In N-Triples a raw line feed only ends a statement (one inside a literal is written
    ``\\n``), so every statement ends with ``" .\\n"`` and nothing else does: the graph name
    goes in with one ``replace`` per part instead of a loop over the lines."""
    suffix = b" <" + content.graph_iri.encode() + b"> .\n"
    out = []
    for ntriples, scope in content.parts:
        if not ntriples:
            continue
        data = scope_blank_nodes(ntriples, scope)
        if not data.endswith(b"\n"):
            data += b"\n"
        out.append(data.replace(b" .\n", suffix))
    out.append(content.nquads)
    return b"".join(out)


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
            # lenient: every term was written by pyoxigraph or checked by it (records.py)
            self.store.bulk_load(data, RdfFormat.N_QUADS, lenient=True)
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
