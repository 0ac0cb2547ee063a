"""Compaction of a store (``aggregator store optimize``), by its writer.

- The graph store: RocksDB compaction (``Store.optimize``), which merges the files every bulk
  load adds and drops what removed graphs left behind. The readers' snapshot still links the
  files compaction replaced, so the compaction counts as a generation of its own
  (``RecordStore.graphs_changed``): a new snapshot is published and the old one, with the only
  links to the replaced files, goes as soon as no reader has it open.
- The state database: graph serialisations and findings an older store kept as they are
  (before issue 31) are packed (``packing.pack_graph``, ``packing.pack_findings``), 500 rows
  per transaction; the write-ahead log is
  checkpointed and truncated; ``PRAGMA optimize``
  runs ``ANALYZE`` on the tables whose statistics would change a plan; free pages go back
  to the file system, by ``incremental_vacuum`` where the file has incremental auto-vacuum,
  else by a ``VACUUM`` (a rewrite of the file, which also switches incremental auto-vacuum on)
  when at least ``VACUUM_FREE`` of its pages are free, or when asked. A database of an older
  store, with pages of 4 KB, gets a new store's 16 KB pages from that VACUUM when no other
  process has it open (``_vacuum``).

Sizes before and after come from ``store_stats``.

After a large harvest (:func:`optimize_after_job`: a job that wrote at least ``[harvest]
optimize_after`` records and at least ``optimize_share`` of the records the store holds) the
job runs the same compaction itself, without a ``VACUUM`` (a rewrite of the file, which would
hold the other jobs' commits that long) and measuring only the files' total (``dbstat`` reads
every page): RocksDB's compaction of a bulk load is then done before the job's snapshot is
published, so the snapshot shares its files with the live store instead of keeping the
pre-compaction ones alone, and the write-ahead log of the state database is truncated.
A harvest of several sources leaves it to the end of its last job
(``jobs/pipeline.compact_after_jobs``): one compaction instead of one per large job.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aggregator.store.graphs import OxigraphGraphs
from aggregator.store.migrations import PAGE_SIZE
from aggregator.store.packing import (
    NO_FINDINGS,
    ZSTD_MAGIC,
    pack_findings,
    pack_graph,
    unpack_graph,
)
from aggregator.store.records import RecordStore
from aggregator.store.stats import PARTS, disk_total, human, store_stats

log = logging.getLogger(__name__)
VACUUM_FREE = 0.10  # a VACUUM rewrites the file: worth it when this share of pages is free
LAYOUT_WAIT_MS = 2000  # how long the page size change waits for other connections to close


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


def _sqlite(store: RecordStore, vacuum: bool, rewrite: bool = True) -> list[str]:
    conn = store.db.conn
    steps = []
    with store.db.serial:  # no job of this process writes meanwhile
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
        incremental = int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]) == 2
        if vacuum or (rewrite and not incremental and pages and free / pages >= VACUUM_FREE):
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # takes effect with the VACUUM
            smaller = int(conn.execute("PRAGMA page_size").fetchone()[0]) < PAGE_SIZE
            with store.applier_paused() if smaller else contextlib.nullcontext():
                layout = _vacuum(conn)
            steps.append(f"state database: VACUUM ({free} of {pages} page(s) were free){layout}")
        elif incremental and free:
            # executescript steps it to the end: execute() steps a statement without result
            # columns once, which frees one page
            conn.executescript("PRAGMA incremental_vacuum;")
            steps.append(f"state database: {free} free page(s) given back")
        conn.execute("PRAGMA optimize")
        steps.append("state database: statistics brought up to date (PRAGMA optimize)")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return steps


def _vacuum(conn: sqlite3.Connection) -> str:
    """VACUUM the state database; one with pages smaller than a new store's
    (``migrations.PAGE_SIZE``) is rewritten with pages of that size, which SQLite can only
    do outside WAL mode, so only while no other process has the database open. Returns what
    became of the page size, for the report."""
    page = int(conn.execute("PRAGMA page_size").fetchone()[0])
    if page >= PAGE_SIZE:
        conn.execute("VACUUM")
        return ""
    waited = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
    conn.execute(f"PRAGMA busy_timeout = {LAYOUT_WAIT_MS}")
    try:
        mode = str(conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0])
    except sqlite3.OperationalError:  # locked: another connection has it open
        mode = "wal"
    finally:
        conn.execute(f"PRAGMA busy_timeout = {waited}")
    if mode.lower() != "delete":
        conn.execute("VACUUM")
        return (
            f"; its pages stay at {page} bytes: another process has it open (stop `serve`"
            f" and the harvests, then run `store optimize --vacuum` for pages of {PAGE_SIZE})"
        )
    try:
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        conn.execute("VACUUM")
    finally:
        conn.execute("PRAGMA journal_mode = WAL")
    return f"; pages of {page} -> {PAGE_SIZE} bytes, as a new store's"


REPACK_BATCH = 500  # rows per transaction when graph serialisations are packed


def _repack(
    store: RecordStore,
    select: str,
    args: dict[str, object],
    update: str,
    packed: Callable[[tuple[Any, ...]], tuple[Any, ...]],
) -> int:
    """Rewrite the rows ``select`` finds (``:after`` and ``:batch`` given here), in id order
    and ``REPACK_BATCH`` rows per transaction, with ``update`` and the values ``packed``
    makes of each row (its id last). Returns the rows rewritten."""
    db, done, after = store.db, 0, 0
    while rows := db.conn.execute(
        select, {**args, "after": after, "batch": REPACK_BATCH}
    ).fetchall():
        db.begin()
        try:
            db.conn.executemany(update, [packed(row) for row in rows])
            db.commit()
        except BaseException:
            db.rollback()
            raise
        done += len(rows)
        after = rows[-1][0]
    return done


def _repack_graphs(store: RecordStore) -> int:
    """Pack the graph serialisations kept as they are (N-Triples, or zlib streams of older
    stores); the same bytes once unpacked, so graphs, journal and generation are untouched.
    Returns the rows packed."""
    return _repack(
        store,
        "SELECT id, ntriples, catalog_ntriples FROM records WHERE id > :after"
        " AND (substr(ntriples, 1, 4) != :magic OR substr(catalog_ntriples, 1, 4) != :magic)"
        " ORDER BY id LIMIT :batch",
        {"magic": ZSTD_MAGIC},
        "UPDATE records SET ntriples = ?, catalog_ntriples = ? WHERE id = ?",
        lambda r: (
            pack_graph(unpack_graph(r[1])) or None,
            pack_graph(unpack_graph(r[2])) or None,
            r[0],
        ),
    )


def _repack_findings(store: RecordStore) -> int:
    """Pack the findings older stores kept as text (``packing.pack_findings``); the same
    JSON once unpacked. Returns the rows packed."""
    return _repack(
        store,
        "SELECT id, findings FROM records WHERE id > :after AND typeof(findings) = 'text'"
        " AND findings != :none ORDER BY id LIMIT :batch",
        {"none": NO_FINDINGS},
        "UPDATE records SET findings = ? WHERE id = ?",
        lambda r: (pack_findings(r[1]), r[0]),
    )


def optimize_store(store: RecordStore, *, vacuum: bool = False) -> OptimizeReport:
    """Compact the graph store and the state database of ``store`` (held as its writer)."""
    store.sync()  # nothing of ours is on its way to the graph store
    report = OptimizeReport(store_stats(store.path, store.db.conn).parts)
    if isinstance(store.graphs, OxigraphGraphs):
        store.graphs.store.optimize()
        store.reopen_graphs()
        report.steps.append("graph store: compacted, its write-ahead logs dropped")
        store.graphs_changed()  # a new snapshot: the old one held the replaced files
    repacked = _repack_graphs(store)
    if repacked:
        report.steps.append(f"state database: graph serialisations of {repacked} record(s) packed")
    repacked = _repack_findings(store)
    if repacked:
        report.steps.append(f"state database: findings of {repacked} record(s) packed")
    report.steps += _sqlite(store, vacuum)
    if store.shelf is not None:
        store.shelf.collect()
    report.after = store_stats(store.path, store.db.conn).parts
    return report


def due(written: int, held: int, *, after: int, share: float) -> bool:
    """Whether a job that wrote ``written`` records into a store holding ``held`` is a large
    harvest: at least ``after`` records (0: never) and at least ``share`` of the store (a
    daily 1 % of a million records is not, the first harvest of a source is)."""
    return after > 0 and written >= after and written >= share * held


def due_after_job(store: RecordStore, written: int, *, after: int, share: float) -> bool:
    """Whether ``written`` records make a large harvest of ``store`` (:func:`due`)."""
    if after <= 0 or written < after:
        return False  # no need to count the store
    held = int(store.db.conn.execute("SELECT count(*) FROM records").fetchone()[0])
    return due(written, held, after=after, share=share)


def optimize_after_job(
    store: RecordStore, written: int, *, after: int, share: float
) -> dict[str, Any] | None:
    """Compact ``store`` when a job that wrote ``written`` records was a large harvest; return
    what it did for the job's facts (None when it was not due). A failure is logged and
    reported, not raised: the job's records are stored whatever happens here."""
    if not due_after_job(store, written, after=after, share=share):
        return None
    started = time.perf_counter()
    before, graphs_before = disk_total(store.path), disk_total(store.path / "graphs")
    try:
        store.sync()
        if isinstance(store.graphs, OxigraphGraphs):
            store.graphs.store.optimize()
            store.reopen_graphs()  # RocksDB drops the write-ahead logs it kept
            store.graphs_changed()  # the job's snapshot is taken again, after the compaction
        _sqlite(store, vacuum=False, rewrite=False)
        if store.shelf is not None:
            store.shelf.collect()
    except (OSError, sqlite3.Error) as err:
        log.warning("the compaction after this harvest failed: %s", err)
        return {"written": written, "error": str(err)}
    facts = {
        "written": written,
        "seconds": round(time.perf_counter() - started, 1),
        "bytes_before": before,
        "bytes_after": disk_total(store.path),
        "graph_store_before": graphs_before,
        "graph_store_after": disk_total(store.path / "graphs"),
    }
    log.info(
        "compacted the store after %d record(s) written in %.1f s: %s -> %s",
        written,
        facts["seconds"],
        human(before),
        human(facts["bytes_after"]),
    )
    return facts


def release_stale_snapshot(store: RecordStore) -> int:
    """Publish a fresh snapshot when the current one is stale (``SnapshotShelf.stale``:
    RocksDB compacted files away after it was published, as a job's background compactions
    outlive its last publish); the old one goes as soon as no reader has it open. Run at
    each job's end; returns the bytes the stale snapshot held alone (0: not replaced)."""
    shelf = store.shelf
    if shelf is None or not isinstance(store.graphs, OxigraphGraphs):
        return 0
    alone = shelf.stale(store.path / "graphs")
    if not alone:
        return 0
    store.graphs_changed()  # a generation of its own, as a compaction by `store optimize`
    shelf.collect()
    log.info("published a fresh snapshot: the last one held %s alone", human(alone))
    return alone


#: the graph store's write-ahead logs are dropped at a job's end (by reopening it) when they
#: take more than this share of the graph store and GRAPH_LOGS_FLOOR bytes
GRAPH_LOGS_SHARE = 0.10
GRAPH_LOGS_FLOOR = 64 * 2**20


def graph_logs(store: RecordStore) -> int:
    """Bytes of the write-ahead logs (``*.log``) in the embedded graph store's folder."""
    total = 0
    for log_file in (store.path / "graphs").glob("*.log"):
        with contextlib.suppress(FileNotFoundError):
            total += log_file.stat().st_blocks * 512
    return total


def release_graph_logs(store: RecordStore) -> int:
    """Reopen the graph store when its write-ahead logs have grown past
    :data:`GRAPH_LOGS_SHARE` of it and :data:`GRAPH_LOGS_FLOOR` (``RecordStore.reopen_graphs``);
    returns the bytes the logs took (0: left as they were). Run at each job's end."""
    if not isinstance(store.graphs, OxigraphGraphs):
        return 0
    logs = graph_logs(store)
    limit = max(GRAPH_LOGS_SHARE * disk_total(store.path / "graphs"), GRAPH_LOGS_FLOOR)
    if logs <= limit:
        return 0
    store.reopen_graphs()
    log.info("dropped %s of the graph store's write-ahead logs", human(logs))
    return logs
