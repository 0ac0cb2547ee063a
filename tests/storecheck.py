"""Consistency check shared by the store tests: SQLite state and named graphs agree."""

from __future__ import annotations

from typing import Any

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


def make_unversioned(conn: Any) -> None:
    """Turn a state database of today's schema back into a store made before schema
    versions (version 0, the baseline's tables): what the migrations after the first added
    goes, so that opening it runs every migration as it would on such a store."""
    for trigger in ("record_payload_added", "record_payload_changed", "record_payloads_gone"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE record_payloads")
    conn.execute("DROP INDEX rejections_payload")
    conn.execute("DROP INDEX records_flagged")
    conn.execute("ALTER TABLE records DROP COLUMN flagged")
    conn.execute("CREATE INDEX IF NOT EXISTS records_journal ON records (id) WHERE pending != 0")
    conn.execute("PRAGMA user_version = 0")
