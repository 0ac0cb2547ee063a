"""Compaction of a store (``aggregator store optimize``), by its writer.

- The graph store: RocksDB compaction (``Store.optimize``), which merges the files every bulk
  load adds and drops what removed graphs left behind. The readers' snapshot still links the
  files compaction replaced, so the compaction counts as a generation of its own
  (``RecordStore.graphs_changed``): a new snapshot is published and the old one, with the only
  links to the replaced files, goes as soon as no reader has it open.
- The state database: the write-ahead log is checkpointed and truncated; ``PRAGMA optimize``
  runs ``ANALYZE`` on the tables whose statistics would change a plan; free pages go back
  to the file system, by ``incremental_vacuum`` where the file has incremental auto-vacuum,
  else by a ``VACUUM`` (a rewrite of the file, which also switches incremental auto-vacuum on)
  when at least ``VACUUM_FREE`` of its pages are free, or when asked.

Sizes before and after come from ``store_stats``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aggregator.store.graphs import OxigraphGraphs
from aggregator.store.records import RecordStore
from aggregator.store.stats import PARTS, human, store_stats

VACUUM_FREE = 0.10  # a VACUUM rewrites the file: worth it when this share of pages is free


@dataclass
class OptimizeReport:
    before: dict[str, int]
    after: dict[str, int] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            "steps": self.steps,
            "total_before": sum(self.before.values()),
            "total_after": sum(self.after.values()),
        }

    def lines(self) -> Iterator[str]:
        yield from self.steps
        yield f"  {'part':<32} {'before':>10} {'after':>10}"
        for part in PARTS:
            before, after = self.before.get(part, 0), self.after.get(part, 0)
            yield f"  {part:<32} {human(before):>10} {human(after):>10}"
        total_before, total_after = sum(self.before.values()), sum(self.after.values())
        yield f"  {'total':<32} {human(total_before):>10} {human(total_after):>10}"


def _sqlite(store: RecordStore, vacuum: bool) -> list[str]:
    conn = store.db.conn
    steps = []
    with store.db.serial:  # no job of this process writes meanwhile
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
        incremental = int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]) == 2
        if vacuum or (not incremental and pages and free / pages >= VACUUM_FREE):
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # takes effect with the VACUUM
            conn.execute("VACUUM")
            steps.append(f"state database: VACUUM ({free} of {pages} page(s) were free)")
        elif incremental and free:
            # executescript steps it to the end: execute() steps a statement without result
            # columns once, which frees one page
            conn.executescript("PRAGMA incremental_vacuum;")
            steps.append(f"state database: {free} free page(s) given back")
        conn.execute("PRAGMA optimize")
        steps.append("state database: statistics brought up to date (PRAGMA optimize)")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return steps


def optimize_store(store: RecordStore, *, vacuum: bool = False) -> OptimizeReport:
    """Compact the graph store and the state database of ``store`` (held as its writer)."""
    store.sync()  # nothing of ours is on its way to the graph store
    report = OptimizeReport(store_stats(store.path, store.db.conn).parts)
    if isinstance(store.graphs, OxigraphGraphs):
        store.graphs.store.optimize()
        report.steps.append("graph store: compacted")
        store.graphs_changed()  # a new snapshot: the old one held the replaced files
    report.steps += _sqlite(store, vacuum)
    if store.shelf is not None:
        store.shelf.collect()
    report.after = store_stats(store.path, store.db.conn).parts
    return report
