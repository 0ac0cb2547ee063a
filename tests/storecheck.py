"""Consistency check shared by the store tests: SQLite state and named graphs agree."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pyoxigraph import BlankNode, NamedNode, RdfFormat, Store, Triple

from aggregator.mapping.base import canonical_ntriples
from aggregator.store.packing import unpack_findings
from aggregator.store.records import RecordStore
from aggregator.store.shared import pack_statements, split


def graph_of(store: RecordStore, graph_iri: str) -> bytes:
    g = NamedNode(graph_iri)
    triples = [
        Triple(q.subject, q.predicate, q.object)
        for q in store.graphs.store.quads_for_pattern(None, None, None, g)
    ]  # type: ignore[attr-defined]
    return canonical_ntriples(triples)


def _round_trip(parts: list[bytes]) -> set[Triple]:
    """Triples of N-Triples parts as a store holds them: each part its own blank node scope
    (each load() call gets fresh blank nodes), integer datatypes normalised on insert (see
    stack-facts)."""
    probe = Store()
    for part in parts:
        if part:
            probe.load(part, format=RdfFormat.N_TRIPLES)
    return {q.triple for q in probe}


def assert_consistent(store: RecordStore) -> None:
    """Every record's named graph holds exactly its journalled state less the statements it
    leaves to the shared graph; the shared graph holds exactly those that active records
    state, counted right; nothing is pending."""
    names = store.graph_names()
    rows = list(store.db.iter_records())
    assert not [r for r in rows if r.pending], "journal entries left pending"
    assert not store.db.pending_rows(), "journal entries left pending"
    shared_graph = store.shared_graph
    shared_held = _round_trip([graph_of(store, shared_graph)]) if shared_graph in names else set()
    stated: Counter[bytes] = Counter()
    for row in rows:
        nt, cat = store.dataset_ntriples(row), store.catalog_ntriples(row)
        parts = [store.catalog_record_ntriples(row)]
        if row.status == "active":
            own = (row.record_iri, row.dataset_iri or "")
            parts += [split(nt, own).owned, split(cat, own).owned]
            stated.update(store.shared_statements(row, nt, cat))
        want = canonical_ntriples(list(_round_trip(parts)))
        assert row.record_iri in names
        assert graph_of(store, row.record_iri) == want, row.local_id
        if row.status == "active":  # the record's graph and the shared graph: all it says
            held = _round_trip([graph_of(store, row.record_iri)]) | shared_held
            full = _round_trip([store.catalog_record_ntriples(row), nt, cat])
            blind = {t for t in full if not _has_blank(t)}
            assert blind <= held, row.local_id
    assert shared_held == _round_trip([pack_statements(list(stated))])
    assert dict(store.db.conn.execute("SELECT triple, refs FROM shared_triples")) == {
        k: v for k, v in stated.items()
    }
    assert names - {shared_graph} == {r.record_iri for r in rows}


def _has_blank(t: Triple) -> bool:
    return isinstance(t.subject, BlankNode) or isinstance(t.object, BlankNode)


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
    conn.execute("DROP TABLE shared_triples")
    conn.execute("DELETE FROM meta WHERE key = 'shared_split_pending'")
    packed = conn.execute("SELECT id, findings FROM records WHERE typeof(findings) = 'blob'")
    conn.executemany(  # findings as text, as every store kept them before issue 31
        "UPDATE records SET findings = ? WHERE id = ?",
        [(unpack_findings(f), rid) for rid, f in packed.fetchall()],
    )
    conn.execute("PRAGMA user_version = 0")
