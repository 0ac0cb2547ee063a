"""Bring the graph store up to the journal, in order, in a background thread.

The record store commits each batch to SQLite (each record marked in the ``journal`` table
with the batch's generation) and hands the graph contents to this thread, which loads them
and deletes the marks through its own SQLite connection, only those that still carry the
batch's generation (a record written again by a later batch keeps the later batch's mark
until that batch is loaded). If it fails (disk full, a bug), it stops taking work and the
error is raised to the writer at the next call; the journal still holds every batch, so
reopening the store replays them.

While nobody reads the graph store's snapshots (``gather()`` says so; with a reader, each
batch is loaded and published as it comes), consecutive batches are gathered into one bulk
load of at least ``gather_records`` records (or whatever arrived within ``gather_seconds`` of
the first, or when the writer waits for the graph store), unless the next batch would take
the load past ``gather_bytes`` of N-Quads: then what is gathered is loaded first and that
batch starts the next load (a single batch larger than the budget is loaded alone). Each
bulk load writes a set of files that RocksDB compacts into the rest of the store, so fewer,
bigger loads cost less CPU per record, up to a size past which they save no more and only
take memory: the load holds ~4.5 bytes of RSS per byte of N-Quads, so the budget in bytes
keeps the peak flat when records grow (docs/benchmarks.md#record-store). Nothing about
crash safety changes: every gathered batch is journalled already, and its marks are deleted
only once its graphs are loaded.

After each load it calls ``on_applied(generation)`` with the last batch's generation: the
graph store then holds exactly the committed state of that generation (batches are applied
in commit order and nothing else writes the graphs meanwhile), which is when the record store
publishes a snapshot for the readers. ``applied`` says that generation at any time; a
snapshot taken by another thread (a job's end, while another job's batches are loading) is
taken under ``loading`` and named by ``applied``, never by the state database's generation,
which may count batches still on their way here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from aggregator.core.errors import StoreError
from aggregator.store.graphs import GraphBackend, GraphContent
from aggregator.store.shared import SharedCounts, as_nquads
from aggregator.store.state import clear_pending

log = logging.getLogger(__name__)


def _libc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)``, or None on another C library."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return lambda: trim(0)


#: gives the pages the allocator holds free back to the system: glibc keeps what RocksDB's
#: threads free in their arenas (docs/benchmarks.md#the-1m-run-issue-31)
release_free_memory = _libc_trim()

# contents, record ids, generation, the shared statements it raised from zero (N-Quads)
Batch = tuple[list[GraphContent], list[int], int, bytes]
GATHER_RECORDS = 1000  # records per bulk load, at least (unless the writer waits)
GATHER_BYTES = 64 * 2**20  # N-Quads per bulk load, at most (unless one batch is larger)
GATHER_SECONDS = 30.0  # a batch waits no longer than this for others to join it
_FLUSH: Batch = ([], [], -1, b"")  # put by wait(): load what is gathered now


def merged(batches: Sequence[Batch]) -> list[GraphContent]:
    """The contents of consecutive batches as one load: a record written by several of them
    gets its last content, replacing the graph if any of its writes found one. (The shared
    statements they raised are loaded all: each batch counted only its own.)"""
    if len(batches) == 1:
        return batches[0][0]
    out: dict[str, GraphContent] = {}
    for contents, _, _, _ in batches:
        for c in contents:
            prev = out.pop(c.graph_iri, None)
            if prev is not None and prev.existed and not c.existed:
                c = replace(c, existed=True)
            out[c.graph_iri] = c
    return list(out.values())


def nquads_bytes(contents: Sequence[GraphContent]) -> int:
    """The size of the N-Quads ``contents`` load as (``to_nquads``: each statement gets the
    graph name; blank node labels are not counted), without making them: one C-speed count of
    the lines per part."""
    total = 0
    for c in contents:
        per_line = len(c.graph_iri) + 3  # " <" + IRI + ">" before the " .\n"
        total += len(c.nquads)
        for ntriples, _ in c.parts:
            total += len(ntriples) + ntriples.count(b"\n") * per_line
    return total


class GraphApplier:
    def __init__(
        self,
        graphs: GraphBackend,
        db_path: Path,
        max_batches: int = 2,
        on_applied: Callable[[int], None] | None = None,
        gather_records: int = GATHER_RECORDS,
        gather_bytes: int = GATHER_BYTES,
        gather_seconds: float = GATHER_SECONDS,
        gather: Callable[[], bool] = lambda: True,
        applied_generation: int = 0,
        shared_graph: str = "",
    ) -> None:
        """``applied_generation``: the generation the graph store holds at the start;
        ``shared_graph``: the graph of the counted shared statements (``shared.py``)."""
        self.graphs = graphs
        self.shared_graph = shared_graph
        self.db_path = db_path
        self.on_applied = on_applied
        self.gather_records = gather_records
        self.gather_bytes = gather_bytes
        self.gather_seconds = gather_seconds
        self.gather = gather
        self._q: queue.Queue[Batch | None] = queue.Queue(maxsize=max_batches)
        self._error: BaseException | None = None
        # the generation the graph store holds: set, with on_applied called, under
        # ``loading``, which a snapshot taken from another thread holds too (it must never
        # catch a load half done, nor be named after a batch not loaded yet)
        self.applied = applied_generation
        self.loading = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="graph-applier", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn = sqlite3.connect(self.db_path, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 60000")
        held: list[Batch] = []  # gathered, not loaded yet
        held_bytes = 0  # their N-Quads
        owed = 0  # items taken from the queue and not marked done yet
        deadline = 0.0
        try:
            while True:
                try:
                    wait = max(0.0, deadline - time.monotonic()) if held else None
                    item = self._q.get(timeout=wait)
                    owed += 1
                except queue.Empty:
                    item = _FLUSH  # the first gathered batch waited long enough
                if item is not None and item is not _FLUSH and self._error is None:
                    size = nquads_bytes(item[0]) + len(item[3])  # the records' and the shared
                    if held and held_bytes + size > self.gather_bytes:
                        self._apply(conn, held)  # this batch would take it past the budget
                        held, held_bytes = [], 0
                        for _ in range(owed - 1):  # all but this batch, which stays held
                            self._q.task_done()
                        owed = 1
                    if not held:
                        deadline = time.monotonic() + self.gather_seconds
                    held.append(item)
                    held_bytes += size
                    gathered = sum(len(ids) for _, ids, _, _ in held)
                    if (
                        gathered < self.gather_records
                        and held_bytes < self.gather_bytes
                        and self.gather()
                    ):
                        continue
                self._apply(conn, held)
                held, held_bytes = [], 0
                for _ in range(owed):
                    self._q.task_done()
                owed = 0
                if item is None:
                    return
        finally:
            conn.close()

    def _apply(self, conn: sqlite3.Connection, batches: list[Batch]) -> None:
        if not batches or self._error is not None:
            return  # a failed applier drains without applying: the journal keeps the rest
        try:
            with self.loading:
                counts = SharedCounts(conn)
                # statements no record states as of the last batch, and only those: a count
                # a later batch (not loaded yet) took to zero is still stated here
                zeroed = counts.zeroed(batches[-1][2])
                added = b"".join(b[3] for b in batches)
                removed = as_nquads(zeroed, self.shared_graph)
                self.graphs.replace(merged(batches), added, removed)
                conn.execute("BEGIN IMMEDIATE")
                for _, ids, generation, _ in batches:
                    clear_pending(conn, generation, ids)
                counts.forget(zeroed)
                conn.execute("COMMIT")
                self.applied = batches[-1][2]
                if self.on_applied is not None:
                    self.on_applied(self.applied)
            if release_free_memory is not None:
                release_free_memory()
        except BaseException as err:  # kept and raised in the writer's thread
            log.exception("applying journalled writes to the graph store failed")
            self._error = err
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    @property
    def failed(self) -> BaseException | None:
        """What stopped the thread applying batches, if anything did."""
        return self._error

    def check(self) -> None:
        if self._error is not None:
            raise StoreError(
                f"the graph store could not be updated ({self._error!r}); the journal keeps"
                " the writes and replays them when the store is next opened"
            ) from self._error

    def submit(
        self, contents: Sequence[GraphContent], ids: Sequence[int], generation: int, added: bytes
    ) -> None:
        self.check()
        self._q.put((list(contents), list(ids), generation, added))

    def wait(self) -> None:
        """Load what is queued and gathered; raise what the thread hit."""
        if self._thread.is_alive():
            self._q.put(_FLUSH)
        self._q.join()
        self.check()

    def stop(self) -> None:
        """Apply what is queued, then end the thread. Never raises: the journal is safe."""
        if self._thread.is_alive():
            self._q.put(None)
            self._thread.join()
        if self._error is not None:
            log.error("graph store behind the journal; it is replayed at the next open")
