"""Statements about shared resources: kept once, counted, in one graph of their own.

The SPARQL default graph is the union of the named graphs, and Oxigraph's union is a
multiset: a statement held by two graphs is seen twice. Records repeat statements about the
resources they point to (a theme concept with its label, a licence typed
``dct:LicenseDocument``, a publisher with its name): with each record's graph holding them,
``COUNT(*)`` and every group-by without ``DISTINCT`` counted each such statement once per record
that states it. So a record's graph holds what the record *owns*, and a statement about a
resource it only refers to goes to the one *shared graph*, once, with a reference count in the
state database (the ``shared_triples`` table):

- **owned** by a record: statements whose subject is its catalogue record, its dataset (the
  primary topic) or one of that dataset's distributions, or a blank node (blank nodes are
  the record's own: two records' blank nodes are never the same node, so their statements
  are never the same statement); statements whose object is a blank node.
- **shared**: every other statement, i.e. about an IRI the record does not own, with an IRI
  or a literal as its object. A typed literal is counted in the form Oxigraph stores it
  (:func:`as_stored`: it normalises some datatypes on insert, ``../shared/stack-facts.md``,
  so two texts can be one stored statement; counted apart, one could be removed while the
  other is still stated).

Every statement of the union is then in exactly one graph once (each owned one is only in
its record's graph; each shared one only in the shared graph), so the union default graph is
a set: an RDF merge, as the service description's ``sd:UnionDefaultGraph`` promises. A
record's graph with the shared statements it uses is its full description; what OAI-PMH,
the catalogue and the dataset pages serve is the record's stored N-Triples, whole.

The counts change in the transaction that writes the records, so a crash leaves counts and
records in agreement; the graph store follows in the applier (``applier.py``): a statement
whose count rose from zero is loaded with the batch that raised it (loading one the graph
store holds already changes nothing), and one whose count fell to zero is removed once the
graph store holds the batch that dropped it, and only if nothing raised it again since.
"""

from __future__ import annotations

import re
import sqlite3
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

from pyoxigraph import RdfFormat, Store

from aggregator.store.graphs import statements
from aggregator.store.packing import unpack_graph
from aggregator.store.versions import rows_in_chunks

_DISTRIBUTION = b" <http://www.w3.org/ns/dcat#distribution> <"
_LANG_TAIL = re.compile(rb'"@[A-Za-z0-9-]+')


def shared_graph_iri(base_iri: str) -> str:
    """The graph of the statements about shared resources, in a store of ``base_iri``."""
    return f"{base_iri}shared"


def _object_kind(statement: bytes) -> str:
    """What the object of an N-Triples statement (without " .") is: "plain" (an IRI, a plain
    or a language-tagged string), "typed" (a typed literal) or "blank" (a blank node)."""
    if statement.endswith(b'"'):
        return "plain"
    if statement.endswith(b">"):  # IRIs hold no '"': a typed literal's object if one does
        return "typed" if b'"' in statement else "plain"
    quote = statement.rfind(b'"@')
    return "plain" if quote != -1 and _LANG_TAIL.fullmatch(statement, quote) else "blank"


@lru_cache(maxsize=1 << 14)
def as_stored(statement: bytes) -> bytes:
    """A statement with a typed literal as Oxigraph stores it: it normalises values on insert
    (``"1"^^xsd:int`` comes back ``"1"^^xsd:integer``, ``"01"^^xsd:integer`` as ``"1"``), so
    two texts can be one stored statement; counted by their stored form, they are counted as
    one. Cached: such statements (a specification's date, a catalogue's) repeat across
    records."""
    probe = Store()
    probe.load(statement + b" .\n", format=RdfFormat.N_TRIPLES)
    (quad,) = list(probe)
    return f"{quad.subject} {quad.predicate} {quad.object}".encode()


@dataclass(frozen=True, slots=True)
class Split:
    """A record's dataset statements split into what its graph holds and what is shared."""

    owned: bytes  # N-Triples
    shared: tuple[bytes, ...]  # statements without " ." (the keys of ``shared_triples``)


def _blocks(lines: list[bytes]) -> list[tuple[bytes, int, int]]:
    """(subject, start, end) of each run of statements about one IRI subject, in order; the
    statements about blank nodes (after every IRI subject's, sorted) are not in any. For
    sorted statements only: a subject's statements are found by bisection."""
    out = []
    i, n = 0, len(lines)
    while i < n and lines[i].startswith(b"<"):
        line = lines[i]
        subject = line[: line.find(b"> ") + 1]
        end = bisect_left(lines, subject + b" \xff", i)
        out.append((subject, i, end))
        i = end
    return out


def split_lines(lines: list[bytes], own: Iterable[str]) -> tuple[list[bytes], list[bytes]]:
    """Statements (without " .") split into the owned and the shared ones; ``own``: the IRIs
    the record owns besides its distributions (its catalogue record, its dataset).

    Mapped graphs are canonical N-Triples, sorted, so a subject's statements are together:
    the statements of an owned subject are taken as one slice, and only those of other
    subjects are looked at one by one. Unsorted input is taken line by line."""
    owned = {b"<" + iri.encode() + b">" for iri in own if iri}
    if all(a <= b for a, b in pairwise(lines)):
        blocks = _blocks(lines)
        about_blank = lines[blocks[-1][2] if blocks else 0 :]  # they sort after the IRIs
    else:
        blocks = [
            (line[: line.find(b"> ") + 1], i, i + 1)
            for i, line in enumerate(lines)
            if line.startswith(b"<")
        ]
        about_blank = [line for line in lines if not line.startswith(b"<")]
    for subject, start, end in blocks:
        if subject in owned:
            for line in lines[start:end]:
                pos = line.find(_DISTRIBUTION)
                if pos != -1 and line.endswith(b">"):
                    owned.add(line[pos + len(_DISTRIBUTION) - 1 :])
    kept: list[bytes] = list(about_blank)  # statements about blank nodes: the record's own
    shared: list[bytes] = []
    for subject, start, end in blocks:
        if subject in owned:
            kept += lines[start:end]
            continue
        for statement in lines[start:end]:
            kind = _object_kind(statement)
            if kind == "blank":
                kept.append(statement)
            else:
                shared.append(statement if kind == "plain" else as_stored(statement))
    return kept, shared


def split(ntriples: bytes, own: Iterable[str]) -> Split:
    """Split a record's N-Triples into owned and shared statements (:func:`split_lines`)."""
    if not ntriples:
        return Split(b"", ())
    kept, shared = split_lines(statements(ntriples), own)
    if not shared:
        return Split(ntriples, ())
    owned = b" .\n".join(kept) + b" .\n" if kept else b""
    return Split(owned, tuple(dict.fromkeys(shared)))


def as_nquads(shared: Iterable[bytes], graph_iri: str) -> bytes:
    suffix = b" <" + graph_iri.encode() + b"> .\n"
    return b"".join(s + suffix for s in shared)


def pack_statements(shared: Sequence[bytes]) -> bytes:
    """Shared statements as one N-Triples text (how a worker hands them to the store)."""
    return b" .\n".join(shared) + b" .\n" if shared else b""


class SharedCounts:
    """The reference counts of the shared statements (the ``shared_triples`` table)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def change(self, delta: Counter[bytes], generation: int) -> list[bytes]:
        """Apply a batch's changes of counts (inside its transaction); return the statements
        the graph store must now hold that no record stated before (from zero up). A count
        that falls to zero keeps its row, marked with ``generation``, until the applier has
        removed the statement (:meth:`zeroed`, :meth:`forget`)."""
        keys = [k for k, d in delta.items() if d]
        if not keys:
            return []
        held: dict[bytes, int] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            held.update(
                self.conn.execute(
                    f"SELECT triple, refs FROM shared_triples WHERE triple IN ({marks})", chunk
                ).fetchall()
            )
        rows = []
        risen: list[bytes] = []
        for key in keys:
            before = held.get(key, 0)
            after = max(0, before + delta[key])
            if before == 0 and after > 0:
                risen.append(key)
            rows.append((key, after, generation))
        self.conn.executemany(
            "INSERT INTO shared_triples (triple, refs, generation) VALUES (?, ?, ?)"
            " ON CONFLICT (triple) DO UPDATE SET refs = excluded.refs,"
            " generation = excluded.generation",
            rows,
        )
        return risen

    def zeroed(self, generation: int) -> list[bytes]:
        """Statements no record states any more, as of batches up to ``generation``."""
        return [
            bytes(r[0])
            for r in self.conn.execute(
                "SELECT triple FROM shared_triples WHERE refs = 0 AND generation <= ?",
                (generation,),
            )
        ]

    def forget(self, triples: Sequence[bytes]) -> None:
        """Drop the rows of removed statements, unless a later batch counted them again."""
        self.conn.executemany(
            "DELETE FROM shared_triples WHERE triple = ? AND refs = 0", ((t,) for t in triples)
        )

    def held(self) -> Iterator[tuple[bytes, int]]:
        for triple, refs in self.conn.execute(
            "SELECT triple, refs FROM shared_triples WHERE refs > 0 ORDER BY triple"
        ):
            yield bytes(triple), int(refs)

    def count(self) -> int:
        return int(
            self.conn.execute("SELECT count(*) FROM shared_triples WHERE refs > 0").fetchone()[0]
        )


def record_shared(
    record_iri: str, dataset_iri: str | None, ntriples: bytes, catalog: bytes
) -> Split:
    """A record's dataset and catalogue facts split (:func:`split`): the owned N-Triples of
    both parts, joined, and the shared statements of both."""
    own = (record_iri, dataset_iri or "")
    dataset, facts = split(ntriples, own), split(catalog, own)
    return Split(dataset.owned + facts.owned, tuple(dict.fromkeys(dataset.shared + facts.shared)))


def held_shared(conn: sqlite3.Connection, source: str, local_ids: Iterable[str]) -> Iterator[bytes]:
    """The shared statements the active records ``local_ids`` of ``source`` state now (read
    from their stored N-Triples before a batch overwrites them), once per record."""
    query = (
        "SELECT record_iri, dataset_iri, ntriples, catalog_ntriples FROM records"
        " WHERE local_id IN ({marks}) AND source = ? AND status = 'active'"
    )
    for record_iri, dataset_iri, nt, cat in rows_in_chunks(conn, local_ids, query, source):
        yield from record_shared(
            record_iri, dataset_iri, unpack_graph(nt), unpack_graph(cat)
        ).shared
