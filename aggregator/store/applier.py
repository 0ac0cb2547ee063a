"""Bring the graph store up to the journal, in order, in a background thread.

The record store commits each batch to SQLite (``pending`` = the batch's generation) and hands
the graph contents to this thread, which loads them and clears ``pending`` through its own
SQLite connection, only on the rows that still carry that generation (a record written again
by a later batch keeps the later batch's mark until that batch is loaded). If
it fails (disk full, a bug), it stops taking work and the error is raised to the writer at the
next call; the journal still holds every batch, so reopening the store replays them.

After each batch it calls ``on_applied(generation)``: the graph store then holds exactly the
committed state of that generation (batches are applied in commit order and nothing else
writes the graphs meanwhile), which is when the record store publishes a snapshot for the
readers.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from aggregator.errors import StoreError
from aggregator.store.graphs import GraphBackend, GraphContent
from aggregator.store.state import clear_pending

log = logging.getLogger(__name__)

Batch = tuple[list[GraphContent], list[int], int]  # contents, record ids, generation


class GraphApplier:
    def __init__(
        self,
        graphs: GraphBackend,
        db_path: Path,
        max_batches: int = 2,
        on_applied: Callable[[int], None] | None = None,
    ) -> None:
        self.graphs = graphs
        self.db_path = db_path
        self.on_applied = on_applied
        self._q: queue.Queue[Batch | None] = queue.Queue(maxsize=max_batches)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="graph-applier", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn = sqlite3.connect(self.db_path, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 60000")
        try:
            while True:
                item = self._q.get()
                try:
                    if item is None:
                        return
                    if self._error is not None:
                        continue  # drain without applying: the journal keeps the rest
                    contents, ids, generation = item
                    self.graphs.replace(contents)
                    conn.execute("BEGIN IMMEDIATE")
                    clear_pending(conn, generation, ids)
                    conn.execute("COMMIT")
                    if self.on_applied is not None:
                        self.on_applied(generation)
                except BaseException as err:  # kept and raised in the writer's thread
                    log.exception("applying journalled writes to the graph store failed")
                    self._error = err
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                finally:
                    self._q.task_done()
        finally:
            conn.close()

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

    def submit(self, contents: Sequence[GraphContent], ids: Sequence[int], generation: int) -> None:
        self.check()
        self._q.put((list(contents), list(ids), generation))

    def wait(self) -> None:
        self._q.join()
        self.check()

    def stop(self) -> None:
        """Apply what is queued, then end the thread. Never raises: the journal is safe."""
        if self._thread.is_alive():
            self._q.put(None)
            self._thread.join()
        if self._error is not None:
            log.error("graph store behind the journal; it is replayed at the next open")
