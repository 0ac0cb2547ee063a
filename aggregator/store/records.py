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

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from pyoxigraph import Literal, NamedNode

from aggregator.core.vocab import (
    AGG_FORMAT,
    AGG_HARVEST_SOURCE,
    AGG_PAYLOAD,
    AGG_SOURCE_DATESTAMP,
    AGG_STATUS,
    DCAT,
    DCT,
    FOAF,
    PROV,
    RDF_TYPE,
    SPDX,
    STATUS_IRIS,
    XSD,
    minted_iri,
)
from aggregator.store.applier import GATHER_BYTES, GATHER_RECORDS, GraphApplier
from aggregator.store.commit_barrier import CommitStamper
from aggregator.store.flag_annotation import flag_ntriples
from aggregator.store.graphs import GraphBackend, GraphContent, OxigraphGraphs, stale_contents
from aggregator.store.journal import JobLog, Jobs, now_iso
from aggregator.store.migrations import check_readable
from aggregator.store.rejections import DeadLetter, close_rejections, keep_dead_letters
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


def _iri(value: str) -> str:
    return str(NamedNode(value))


def _lit(value: str, datatype: str | None = None) -> str:
    if datatype:
        return str(Literal(value, datatype=NamedNode(datatype)))
    return str(Literal(value))


# The fixed terms of the catalogue record, in N-Triples form once (pyoxigraph checks them).
_XSD_DATETIME = XSD + "dateTime"
_XSD_HEX = XSD + "hexBinary"
_T_TYPE = _iri(RDF_TYPE)
_T_CATALOG_RECORD = _iri(DCAT + "CatalogRecord")
_T_ISSUED = _iri(DCT + "issued")
_T_MODIFIED = _iri(DCT + "modified")
_T_IDENTIFIER = _iri(DCT + "identifier")
_T_HARVEST_SOURCE = _iri(AGG_HARVEST_SOURCE)
_T_STATUS = _iri(AGG_STATUS)
_T_STATUS_VALUES = {status: _iri(iri) for status, iri in STATUS_IRIS.items()}
_T_PRIMARY_TOPIC = _iri(FOAF + "primaryTopic")
_T_SOURCE_DATESTAMP = _iri(AGG_SOURCE_DATESTAMP)
_T_GENERATED_BY = _iri(PROV + "wasGeneratedBy")
_T_FORMAT = _iri(AGG_FORMAT)
_T_PAYLOAD = _iri(AGG_PAYLOAD)
_T_CHECKSUM = _iri(SPDX + "checksum")
_T_CHECKSUM_VALUE = _iri(SPDX + "checksumValue")
_CHECKSUM_TYPE = f"_:checksum {_T_TYPE} {_iri(SPDX + 'Checksum')} ."
_CHECKSUM_ALGORITHM = (
    f"_:checksum {_iri(SPDX + 'algorithm')} {_iri(SPDX + 'checksumAlgorithm_sha256')} ."
)


@dataclass(frozen=True, slots=True)
class Recovery:
    """What opening a store found in its journal."""

    pending: int = 0  # rows whose write the graph store might not hold
    repaired: int = 0  # of those, graphs that differed from the journal and were replaced


class StoreNames:
    """What a store's IRIs and catalogue records are, without opening anything: enough for
    the serving processes, which read the state database and a graph snapshot themselves."""

    def __init__(self, path: Path, base_iri: str) -> None:
        self.path = path
        self.base_iri = base_iri

    # -- IRIs -------------------------------------------------------------------------------
    def record_iri(self, source: str, local_id: str) -> str:
        return minted_iri(self.base_iri, source, "record", local_id)

    def source_iri(self, source: str) -> str:
        return f"{self.base_iri}source/{quote(source, safe='')}"

    def payload_iri(self, sha: str) -> str:
        return f"{self.base_iri}payload/{sha}"

    def job_iri(self, job_id: int) -> str:
        return f"{self.base_iri}job/{job_id}"

    # -- the catalogue record ---------------------------------------------------------------
    def catalog_record_ntriples(self, w: RecordWrite | RecordRow) -> bytes:
        rec = _iri(w.record_iri)
        lines = [
            f"{rec} {_T_TYPE} {_T_CATALOG_RECORD} .",
            f"{rec} {_T_ISSUED} {_lit(w.first_seen, _XSD_DATETIME)} .",
            f"{rec} {_T_MODIFIED} {_lit(w.modified, _XSD_DATETIME)} .",
            f"{rec} {_T_IDENTIFIER} {_lit(w.local_id)} .",
            f"{rec} {_T_HARVEST_SOURCE} {_iri(self.source_iri(w.source))} .",
            f"{rec} {_T_STATUS} {_T_STATUS_VALUES[w.status]} .",
        ]
        if w.dataset_iri:
            lines.append(f"{rec} {_T_PRIMARY_TOPIC} {_iri(w.dataset_iri)} .")
        if w.source_datestamp:
            lines.append(f"{rec} {_T_SOURCE_DATESTAMP} {_lit(w.source_datestamp, _XSD_DATETIME)} .")
        if w.job_id is not None:
            lines.append(f"{rec} {_T_GENERATED_BY} {_iri(self.job_iri(w.job_id))} .")
        if w.format:
            lines.append(f"{rec} {_T_FORMAT} {_lit(w.format)} .")
        if w.payload_sha:
            lines.append(f"{rec} {_T_PAYLOAD} {_iri(self.payload_iri(w.payload_sha))} .")
        if w.content_hash:
            lines += [
                f"{rec} {_T_CHECKSUM} _:checksum .",
                _CHECKSUM_TYPE,
                _CHECKSUM_ALGORITHM,
                f"_:checksum {_T_CHECKSUM_VALUE} {_lit(w.content_hash, _XSD_HEX)} .",
            ]
        if w.flagged and w.status == "active":
            lines += flag_ntriples(rec, w.dataset_iri, w.findings)
        return ("\n".join(lines) + "\n").encode()

    def graph_content(
        self,
        w: RecordWrite | RecordRow,
        record_id: int,
        existed: bool,
        ntriples: bytes,
        catalog: bytes,
    ) -> GraphContent:
        """What the record's named graph holds: its catalogue record and, while it is
        active, its dataset description and the source's catalogue facts."""
        parts = [(self.catalog_record_ntriples(w), f"r{record_id}m")]
        prepared = b""
        if w.status == "active":
            if isinstance(w, RecordWrite) and w.nquads:
                prepared = w.nquads  # built by the worker for this very record IRI
            else:
                parts += [(ntriples, f"r{record_id}d"), (catalog, f"r{record_id}c")]
        return GraphContent(w.record_iri, tuple(parts), existed, prepared)


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
        self._applier = GraphApplier(
            self.graphs,
            path / "state.sqlite3",
            on_applied=self._publish_for_readers,
            gather_records=gather_records,
            gather_bytes=gather_bytes,
            gather=self._nobody_reads,
            applied_generation=self.db.generation(),  # recover() replayed every pending write
        )
        stale = self.jobs.fail_stale()
        if stale:
            log.warning("marked %d job(s) left running by a dead process as failed", len(stale))
        remove_stale_shelves(path / "sparql-snapshots")  # per-process shelves of old versions
        self._publish(self.db.generation())  # readers start from the state as it is

    def close(self) -> None:
        try:
            self._applier.stop()
            if self._applier.failed is None:
                self._publish(self._applier.applied)
        finally:
            self.graphs.close()
            self.db.close()
            self._stamper.close()
            self._writer.release()

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
                self._applier.submit(contents, ids, generation)

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
            self._applier.submit([], [], generation)
        self.sync()

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
        """Bring the graph store to every write the journal holds as pending: compare what
        it holds for each such record with the journalled state, replace where they differ,
        then clear the marks. In chunks of rows, so memory stays flat."""
        pending = repaired = 0
        after = 0
        while rows := self.db.pending_rows(after):
            contents = []
            for row in rows:
                nt, cat = self.db.graph_bytes(row.id)
                contents.append(self.graph_content(row, row.id, True, nt, cat))
            stale = stale_contents(self.graphs, contents)
            if stale:
                self.graphs.replace(stale)
            self.db.begin()
            try:
                self.db.clear_pending_rows(rows)
                self.db.commit()
            except BaseException:
                self.db.rollback()
                raise
            pending += len(rows)
            repaired += len(stale)
            after = rows[-1].id
        if pending:
            log.warning(
                "journal: %d record write(s) of an interrupted run were pending;"
                " %d graph(s) differed from the journal and were replaced",
                pending,
                repaired,
            )
        return Recovery(pending, repaired)

    # -- reads of the graph store -------------------------------------------------------------
    def graph_names(self) -> set[str]:
        return self.graphs.graph_names()
