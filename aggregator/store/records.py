"""RecordStore: upserts, withdraws and reads records; crash-consistent through a journal.

Layout of a store directory::

    <store>/state.sqlite3   record state, journal, payloads, jobs (see state.py)
    <store>/graphs/         the Oxigraph store: one named graph per record

Each record's named graph (its IRI is the catalogue record's IRI) holds the dataset's DCAT-AP
description and its ``dcat:CatalogRecord``. Withdrawn and rejected records keep only their
catalogue record, so they stay queryable while the dataset leaves the union default graph.

Write protocol of :meth:`RecordStore.write` (one call per batch):

1. one SQLite transaction: payloads, the new record rows with ``pending`` set to the batch's
   generation (below), the job's counters and errors, the dead letters (and the rejections
   of records now stored, closed);
2. the graph store is brought to the new state of every row of the batch (idempotent);
3. ``pending`` is cleared on the rows that still carry the batch's generation (a record
   written again by a later batch keeps that batch's mark).

On open, every row still pending (a crash between 1 and 3) is compared with what the graph
store holds for it and replaced where they differ, so every record is in either its old or
its new state and the next run converges.

One process writes a store at a time: opening a :class:`RecordStore` takes the writer lock
(``writer_lock.py``) or fails with a :class:`~aggregator.core.errors.StoreBusyError` naming the
holder. Step 1 also counts the batch's *generation* (``meta.generation``); once the graph
store holds a batch, the writer publishes a snapshot of it named by that generation
(``snapshots.py``), which the serving processes switch to. So SQLite (read directly by the
readers) is at most the batches in flight ahead of the graph snapshot, and both say which
generation they show. :class:`ReadOnlyStore` is the readers' view: SQLite read-only, no lock.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from aggregator.store.applier import GATHER_BYTES, GATHER_RECORDS, GraphApplier
from aggregator.store.commit_barrier import CommitStamper
from aggregator.store.graphs import GraphBackend, OxigraphGraphs
from aggregator.store.journal import JobLog, Jobs, now_iso
from aggregator.store.migrations import check_readable
from aggregator.store.names import StoreNames
from aggregator.store.recovery import Recovery, recover
from aggregator.store.rejections import DeadLetter, close_rejections, keep_dead_letters
from aggregator.store.shared import SharedCounts, as_nquads, held_shared
from aggregator.store.snapshots import SnapshotShelf, remove_stale_shelves
from aggregator.store.state import (
    RecordRow,
    RecordWrite,
    StateDB,
)
from aggregator.store.versions import put_versions
from aggregator.store.writer_lock import WriterLock

log = logging.getLogger(__name__)

STATE_FILE = "state.sqlite3"  # the state database, in the store directory


class StoreReads(StoreNames):
    """What every command reads from the state database, writer or reader alike."""

    db: StateDB
    jobs: Jobs

    def records(self, source: str, local_ids: Iterable[str]) -> dict[str, RecordRow]:
        return self.db.records_by_local_id(source, local_ids)

    def record(self, source: str, local_id: str) -> RecordRow | None:
        return self.db.record(source, local_id)

    def dataset_ntriples(self, row: RecordRow) -> bytes:
        """The stored canonical N-Triples of a record's dataset graph (datatypes intact)."""
        return self.db.graph_bytes(row.id)[0]

    def catalog_ntriples(self, row: RecordRow) -> bytes:
        return self.db.graph_bytes(row.id)[1]

    def payload(self, sha: str) -> tuple[str, bytes] | None:
        """The original payload, byte for byte, with its media type."""
        return self.db.payload(sha)

    def checkpoint(self, source: str) -> str | None:
        return self.jobs.checkpoint(source)


class ReadOnlyStore(StoreReads):
    """A reader's view of a store: the state database read-only (WAL: beside the writer,
    each statement on a committed state), no lock, no recovery, no graph store. An empty
    store when nothing was harvested yet (nothing is created)."""

    def __init__(self, path: Path, base_iri: str) -> None:
        super().__init__(path, base_iri)
        self.db = StateDB(path / "state.sqlite3", read_only=True)
        if (path / "state.sqlite3").exists():
            try:  # a store of another schema version: say so, rather than a query failing
                check_readable(self.db.conn, path / "state.sqlite3")
            except BaseException:
                self.db.close()
                raise
        self.jobs = Jobs(self.db)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> ReadOnlyStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def snapshot_shelf(path: Path) -> SnapshotShelf:
    """The shelf where a store's writer publishes graph snapshots for its readers."""
    return SnapshotShelf(path / "snapshots")


class RecordStore(StoreReads):
    def __init__(
        self,
        path: Path,
        base_iri: str,
        graphs: GraphBackend | None = None,
        *,
        gather_records: int = GATHER_RECORDS,
        gather_bytes: int = GATHER_BYTES,
    ) -> None:
        """Open (or make) the store at ``path`` as its one writer. ``gather_records``,
        ``gather_bytes``: the graph store is loaded in bulk loads of at least this many
        records, unless that would take a load past this many bytes of N-Quads
        (``applier.py``)."""
        super().__init__(path, base_iri)
        # The writer lock comes first: it makes this process the only writer.
        self._writer = WriterLock(path)
        try:
            self.graphs: GraphBackend = graphs or OxigraphGraphs(path / "graphs")
        except BaseException:
            self._writer.release()
            raise
        try:
            self.db = StateDB(path / "state.sqlite3")
        except BaseException:
            self.graphs.close()
            self._writer.release()
            raise
        self.jobs = Jobs(self.db)
        self._stamper = CommitStamper(path, self.db.last_modified())
        # readers of an embedded graph store read snapshots; a server backend serves itself
        self.shelf = snapshot_shelf(path) if isinstance(self.graphs, OxigraphGraphs) else None
        self.recovery = self.recover()
        self._gather = (gather_records, gather_bytes)
        # recover() replayed every pending write
        self._applier = self._start_applier(self.db.generation())
        stale = self.jobs.fail_stale()
        if stale:
            log.warning("marked %d job(s) left running by a dead process as failed", len(stale))
        remove_stale_shelves(path / "sparql-snapshots")  # per-process shelves of old versions
        self._publish(self.db.generation())  # readers start from the state as it is

    def _start_applier(self, applied: int) -> GraphApplier:
        return GraphApplier(
            self.graphs,
            self.path / "state.sqlite3",
            on_applied=self._publish_for_readers,
            gather_records=self._gather[0],
            gather_bytes=self._gather[1],
            gather=self._nobody_reads,
            applied_generation=applied,
            shared_graph=self.shared_graph,
        )

    @contextlib.contextmanager
    def applier_paused(self) -> Iterator[None]:
        """The graph applier's thread ended, and with it its connection to the state
        database, for a change SQLite makes only on a sole connection (a new page size,
        ``optimize.py``); started again afterwards. No write may be made meanwhile."""
        self.sync()
        self._applier.stop()
        try:
            yield
        finally:
            self._applier = self._start_applier(self._applier.applied)

    def close(self) -> None:
        try:
            self._release_stale_snapshot()
            self._applier.stop()
            if self._applier.failed is None:
                self._publish(self._applier.applied)
        finally:
            self.graphs.close()
            self.db.close()
            self._stamper.close()
            self._writer.release()

    def _release_stale_snapshot(self) -> None:
        """Compactions since the last snapshot left it holding files alone: publish a fresh
        one, so the next reader starts from it and the old one goes (``SnapshotShelf.stale``).
        A failure is logged: the store closes whatever happens."""
        shelf = self.shelf
        if shelf is None or self._applier.failed is not None:
            return
        try:
            if shelf.stale(self.path / "graphs"):
                self.graphs_changed()
        except (OSError, sqlite3.Error) as err:
            log.error("could not replace the stale snapshot of the graph store: %s", err)

    def __enter__(self) -> RecordStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes -----------------------------------------------------------------------------
    def write(
        self,
        job: JobLog,
        writes: Sequence[RecordWrite],
        *,
        seen: Iterable[str] = (),
        payloads: Mapping[str, tuple[bytes, str, bytes]] | None = None,
        dead_letters: Sequence[DeadLetter] = (),
        versions: Mapping[str, str] | None = None,
    ) -> None:
        """Apply one batch: journal it in SQLite now; the graphs follow in the applier thread.

        Returns once the batch is durable in SQLite (the journal). The graph store catches
        up in order in a background thread (pyoxigraph releases the GIL while loading), which
        gathers consecutive batches into bigger bulk loads (``applier.py``), so mapping the
        next batches overlaps with loading this one; :meth:`sync` waits for it.
        """
        self._applier.check()
        db = self.db
        # jobs of several sources may write at once (the scheduler): the batch is committed
        # and handed to the applier under one hold, so batches reach it in generation order
        with db.serial:
            db.begin()
            try:
                for sha, (data, media_type, packed) in (payloads or {}).items():
                    db.put_payload(data, media_type, sha=sha, packed=packed)
                # the datestamps are drawn under the commit barrier and committed before it
                # is let go, so no reader misses a record by its datestamp
                with self._stamper.stamping() as stamp:
                    for w in writes:
                        if w.modified_at_commit:
                            w.modified = stamp
                    generation = db.next_generation() if writes else 0
                    added = self._count_shared(writes, generation)
                    ids = db.upsert(writes, generation)
                    close_rejections(db.conn, job.id, writes)
                    if dead_letters:
                        keep_dead_letters(db.conn, dead_letters, now_iso())
                    if versions:
                        put_versions(db.conn, job.source, versions)
                    db.mark_seen(job.source, seen, job.id)
                    job.flush(db)
                    db.commit()
            except BaseException:
                db.rollback()
                raise
            if writes:
                contents = [
                    self.graph_content(w, rid, w.existed, w.ntriples, w.catalog_ntriples)
                    for w, rid in zip(writes, ids, strict=True)
                ]
                self._applier.submit(contents, ids, generation, added)

    def _count_shared(self, writes: Sequence[RecordWrite], generation: int) -> bytes:
        """Count the shared statements the batch's records state now, less those they
        stated before (read before the rows are overwritten); return, as N-Quads of the
        shared graph, those no record stated before."""
        delta: Counter[bytes] = Counter()
        for w in writes:
            delta.update(self.shared_statements(w, w.ntriples, w.catalog_ntriples))
        before: dict[str, list[str]] = {}
        for w in writes:
            if w.existed:
                before.setdefault(w.source, []).append(w.local_id)
        for source, local_ids in before.items():
            delta.subtract(held_shared(self.db.conn, source, local_ids))
        return as_nquads(SharedCounts(self.db.conn).change(delta, generation), self.shared_graph)

    def mark_seen(self, job: JobLog, local_ids: Iterable[str]) -> None:
        """Note listed records that needed no write as seen by ``job`` (they are not
        withdrawn after its listing). No journal transaction: the marks go to a
        connection-local temporary table, whose writes take no lock on the state database
        and need no durability (a job that dies withdraws nothing)."""
        self.db.mark_seen(job.source, sorted(local_ids), job.id)

    def sync(self) -> None:
        """Wait until the graph store and the readers' snapshot hold every journalled write;
        raise what the applier hit."""
        self._applier.wait()
        self._publish_applied()

    def _publish_applied(self) -> None:
        """Publish what the graph store holds, named by the generation it holds (other jobs'
        batches may be committed and not loaded yet: they are published once loaded)."""
        with self._applier.loading:
            self._publish(self._applier.applied)

    def graphs_changed(self) -> None:
        """Count a change made to the graph store outside :meth:`write` (the quality
        measurements) as a generation of its own, and publish it: the generation goes to the
        applier as an empty batch, in commit order with the other jobs' batches."""
        db = self.db
        with db.serial:
            db.begin()
            try:
                generation = db.next_generation()
                db.commit()
            except BaseException:
                db.rollback()
                raise
            self._applier.submit([], [], generation, b"")
        self.sync()

    def reopen_graphs(self) -> None:
        """Close the embedded graph store and open it again. RocksDB keeps the write-ahead
        logs of graph replacements (``remove_graph`` of an updated record) for as long as it
        is open, flushes or not, and drops them when it opens (docs/benchmarks.md#issue-31-disk:
        36-148 MB after 3,000 updates): a long-lived writer (``serve``'s scheduler) would keep
        them as long as it runs. Under the applier's ``loading`` lock, so no batch is being
        loaded and no snapshot taken meanwhile (nothing else of the writer's process uses the
        live graph store; readers read snapshots)."""
        graphs = self.graphs
        if not isinstance(graphs, OxigraphGraphs):
            return
        self.sync()
        with self._applier.loading:
            del graphs.store  # the only reference: RocksDB closes, and its lock goes with it
            graphs.store = OxigraphGraphs(self.path / "graphs").store

    def _nobody_reads(self) -> bool:
        """Whether the graph store may be loaded in gathered batches: an embedded store whose
        snapshots nobody reads now (a reader is given each batch as it is loaded)."""
        return self.shelf is not None and not self.shelf.has_readers()

    def _publish_for_readers(self, generation: int) -> None:
        """After a batch: publish only while some process reads the shelf (``serve``). A
        snapshot per batch is a RocksDB checkpoint (a memtable flush, a link to every file)
        and the collection of the last one: work and disk churn for nobody when no one
        reads. Job ends, opens and closes publish whatever happens, so a ``serve`` started
        later begins from the last committed state."""
        if self.shelf is not None and self.shelf.has_readers():
            self._publish(generation)

    def _publish(self, generation: int) -> None:
        """Publish a snapshot of the graph store, which holds ``generation`` now (the
        applier's thread after each batch; the writer's at open, sync and close)."""
        if self.shelf is None or not isinstance(self.graphs, OxigraphGraphs):
            return
        try:
            self.shelf.publish(self.graphs.store, generation)
        except OSError as err:  # readers keep the snapshot they have; the next batch retries
            log.error("could not publish a snapshot of the graph store: %s", err)

    def recover(self) -> Recovery:
        """Replay the journal (``recovery.py``)."""
        return recover(self, self.db, self.graphs)

    # -- reads of the graph store -------------------------------------------------------------
    def graph_names(self) -> set[str]:
        return self.graphs.graph_names()
