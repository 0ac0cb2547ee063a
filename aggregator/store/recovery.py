"""The journal replay when a writer opens a store (``records.py``, write protocol).

Every record row the journal still marks (a crash between the batch's commit and its load
into the graph store) is compared with what the graph store holds for it and replaced where
they differ; the shared statements such records state are loaded (those held already change
nothing) and the ones no record states any more are removed (``shared.py``). So every record
is in either its old or its new state, and the counts and the shared graph agree.

A store upgraded to schema version 5 has every active record marked
(``migrations.SHARED_SPLIT_PENDING``): its graphs still hold the shared statements. The
replay then also counts each record's shared statements, in the transaction that clears its
mark, so an interrupted upgrade goes on where it stopped.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

from aggregator.store.graphs import GraphBackend, stale_contents
from aggregator.store.migrations import SHARED_SPLIT_PENDING
from aggregator.store.names import StoreNames
from aggregator.store.shared import SharedCounts, as_nquads
from aggregator.store.state import StateDB

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Recovery:
    """What opening a store found in its journal."""

    pending: int = 0  # rows whose write the graph store might not hold
    repaired: int = 0  # of those, graphs that differed from the journal and were replaced


def recover(names: StoreNames, db: StateDB, graphs: GraphBackend) -> Recovery:
    """Bring the graph store to every write the journal holds as pending, in chunks of rows
    (memory stays flat)."""
    counts = SharedCounts(db.conn)
    splitting = db.get_meta(SHARED_SPLIT_PENDING) is not None
    shared_graph = names.shared_graph
    pending = repaired = 0
    after = 0
    while rows := db.pending_rows(after):
        contents = []
        stated: Counter[bytes] = Counter()
        for row in rows:
            nt, cat = db.graph_bytes(row.id)
            contents.append(names.graph_content(row, row.id, True, nt, cat))
            stated.update(names.shared_statements(row, nt, cat))
        stale = stale_contents(graphs, contents)
        graphs.replace(stale, as_nquads(stated, shared_graph))
        db.begin()
        try:
            if splitting:
                counts.change(stated, db.generation())
            db.clear_pending_rows(rows)
            db.commit()
        except BaseException:
            db.rollback()
            raise
        pending += len(rows)
        repaired += len(stale)
        after = rows[-1].id
    if zeroed := counts.zeroed(db.generation()):  # stated by no record any more
        graphs.replace([], b"", as_nquads(zeroed, shared_graph))
    db.begin()
    try:
        counts.forget(zeroed)
        db.conn.execute("DELETE FROM meta WHERE key = ?", (SHARED_SPLIT_PENDING,))
        db.commit()
    except BaseException:
        db.rollback()
        raise
    if pending:
        log.warning(
            "journal: %d record write(s) of an interrupted run were pending;"
            " %d graph(s) differed from the journal and were replaced",
            pending,
            repaired,
        )
    return Recovery(pending, repaired)
