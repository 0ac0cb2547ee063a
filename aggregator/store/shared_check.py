"""``aggregator store check`` for the shared graph (``shared.py``): are the counts what the
records state, and does the shared graph hold exactly the counted statements?

The counts are recounted from every active record's stored N-Triples (the same split the
writer makes) into a temporary table, chunk by chunk, so memory stays flat in the number of
records; the shared graph's statements are read through SPARQL (any backend answers it) into
another. ``--repair`` rewrites the counts from the recount and brings the shared graph to
the counted statements.
"""

from __future__ import annotations

from collections import Counter

from pyoxigraph import NamedNode, QuerySolutions

from aggregator.store.check import CheckReport, Finding, records_in_chunks
from aggregator.store.graphs import GraphBackend
from aggregator.store.names import StoreNames
from aggregator.store.shared import as_nquads
from aggregator.store.state import StateDB

SHARED_COUNTS = "shared statement counts"
SHARED_GRAPH = "shared graph"
_EXAMPLES = 3


def _recount(names: StoreNames, db: StateDB) -> None:
    conn = db.conn
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS check_stated (triple BLOB PRIMARY KEY, refs INT)")
    conn.execute("DELETE FROM temp.check_stated")
    for rows in records_in_chunks(db):
        stated: Counter[bytes] = Counter()
        for row in rows:
            if row.status == "active":
                nt, cat = db.graph_bytes(row.id)
                stated.update(names.shared_statements(row, nt, cat))
        conn.executemany(
            "INSERT INTO temp.check_stated (triple, refs) VALUES (?, ?)"
            " ON CONFLICT (triple) DO UPDATE SET refs = refs + excluded.refs",
            stated.items(),
        )


def _read_graph(names: StoreNames, db: StateDB, graphs: GraphBackend) -> None:
    conn = db.conn
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS check_held (triple BLOB PRIMARY KEY)")
    conn.execute("DELETE FROM temp.check_held")
    result = graphs.query(
        f"SELECT ?s ?p ?o WHERE {{ GRAPH {NamedNode(names.shared_graph)} {{ ?s ?p ?o }} }}"
    )
    assert isinstance(result, QuerySolutions)
    batch: list[tuple[bytes]] = []
    for row in result:
        batch.append((f"{row['s']} {row['p']} {row['o']}".encode(),))
        if len(batch) >= 5000:
            conn.executemany("INSERT OR IGNORE INTO temp.check_held VALUES (?)", batch)
            batch = []
    conn.executemany("INSERT OR IGNORE INTO temp.check_held VALUES (?)", batch)


def _finding(kind: str, rows: list[bytes], what: str) -> Finding:
    shown = "; ".join(r.decode(errors="replace") for r in rows[:_EXAMPLES])
    more = f" (and {len(rows) - _EXAMPLES} more)" if len(rows) > _EXAMPLES else ""
    return Finding(kind, f"{len(rows)} statement(s)", f"{what}: {shown}{more}")


def check_shared(
    names: StoreNames, db: StateDB, graphs: GraphBackend, report: CheckReport, *, repair: bool
) -> None:
    """Compare the counts with a recount and the shared graph with the counts."""
    conn = db.conn
    _recount(names, db)
    miscounted = [
        bytes(r[0])
        for r in conn.execute(
            "SELECT s.triple FROM temp.check_stated s LEFT JOIN shared_triples t"
            " ON t.triple = s.triple WHERE coalesce(t.refs, 0) != s.refs"
            " UNION ALL SELECT t.triple FROM shared_triples t WHERE t.refs > 0 AND NOT EXISTS"
            " (SELECT 1 FROM temp.check_stated s WHERE s.triple = t.triple)"
        )
    ]
    _read_graph(names, db, graphs)
    missing = [
        bytes(r[0])
        for r in conn.execute(
            "SELECT triple FROM temp.check_stated EXCEPT SELECT triple FROM temp.check_held"
        )
    ]
    extra = [
        bytes(r[0])
        for r in conn.execute(
            "SELECT triple FROM temp.check_held EXCEPT SELECT triple FROM temp.check_stated"
        )
    ]
    if miscounted:
        report.findings.append(
            _finding(SHARED_COUNTS, miscounted, "counted otherwise than the records state them")
        )
    if missing or extra:
        report.findings.append(
            _finding(
                SHARED_GRAPH,
                missing + extra,
                f"{len(missing)} stated but not in the graph, {len(extra)} in it but stated by"
                " no record",
            )
        )
    if repair and (miscounted or missing or extra):
        graphs.replace(
            [], as_nquads(missing, names.shared_graph), as_nquads(extra, names.shared_graph)
        )
        with db.serial:
            db.begin()
            try:
                conn.execute("DELETE FROM shared_triples")
                conn.execute(
                    "INSERT INTO shared_triples (triple, refs, generation)"
                    " SELECT triple, refs, ? FROM temp.check_stated",
                    (db.generation(),),
                )
                db.commit()
            except BaseException:
                db.rollback()
                raise
        report.repaired[SHARED_COUNTS] = int(bool(miscounted))
        report.repaired[SHARED_GRAPH] = int(bool(missing or extra))
    conn.execute("DROP TABLE temp.check_stated")
    conn.execute("DROP TABLE temp.check_held")
