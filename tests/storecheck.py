"""Consistency check shared by the store tests: SQLite state and named graphs agree."""

from __future__ import annotations

from pyoxigraph import NamedNode, RdfFormat, Store, Triple

from aggregator.mapping.base import canonical_ntriples
from aggregator.store.records import RecordStore


def graph_of(store: RecordStore, graph_iri: str) -> bytes:
    g = NamedNode(graph_iri)
    triples = [
        Triple(q.subject, q.predicate, q.object)
        for q in store.graphs.store.quads_for_pattern(None, None, None, g)
    ]  # type: ignore[attr-defined]
    return canonical_ntriples(triples)


def assert_consistent(store: RecordStore) -> None:
    """Every record's named graph holds exactly its journalled state; nothing is pending."""
    names = store.graph_names()
    rows = list(store.db.iter_records())
    assert not [r for r in rows if r.pending], "journal entries left pending"
    assert not store.db.pending_rows(), "journal entries left pending"
    for row in rows:
        parts = [store.catalog_record_ntriples(row)]
        if row.status == "active":
            parts += [store.dataset_ntriples(row), store.catalog_ntriples(row)]
        # Each part is its own blank node scope (each load() call gets fresh blank nodes), and
        # Oxigraph normalises integer datatypes on insert (see stack-facts): compare with the
        # parts after the same round trip through a store.
        probe = Store()
        for part in parts:
            if part:
                probe.load(part, format=RdfFormat.N_TRIPLES)
        want = canonical_ntriples([q.triple for q in probe])
        assert row.record_iri in names
        assert graph_of(store, row.record_iri) == want, row.local_id
    assert names == {r.record_iri for r in rows}
