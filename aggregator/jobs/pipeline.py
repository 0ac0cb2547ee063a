"""run_source: the one place that knows harvester, mapper, validators and store.

The CLI, the demo, the scheduler and the tests all call :func:`run_source`.

Flow: a producer thread walks the harvester's listing into a bounded queue; the main thread
takes chunks, drops records whose source date is not newer than the stored one (before any
mapping, which is what makes an unchanged re-harvest cheap), sends the rest to the mapping and
validation workers, and, while the workers map the next chunks, decides the outcome of each
dataset (lifecycle rules in :mod:`aggregator.jobs.lifecycle`) and writes the batch through the
journaled record store (the threads, chunks and workers: :mod:`aggregator.jobs.flow`). After a
complete full listing, records not seen are withdrawn, unless the mass-withdrawal brake holds.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from aggregator.config import Settings, SourceConfig
from aggregator.core.errors import AggregatorError, TransportError
from aggregator.core.events import EventBus, JobStarted, default_bus
from aggregator.core.logjson import in_job, job_context
from aggregator.core.models import JobStatus, Outcome, RawRecord
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.jobs.announce import emit_closing, rejection_emitter
from aggregator.jobs.flow import CHUNK, InFlight, Prefetch, Progress, chunks, worker_pool
from aggregator.jobs.lifecycle import BatchWriter, UpToDate
from aggregator.jobs.processing import build_chain, mapping_context
from aggregator.net.client import HttpClient, HttpSession
from aggregator.plugin import harvesters
from aggregator.store.journal import Heartbeat, JobLog, JobRow
from aggregator.store.optimize import (
    due_after_job,
    optimize_after_job,
    release_graph_logs,
    release_stale_snapshot,
)
from aggregator.store.records import RecordStore

log = logging.getLogger(__name__)
#: the outcomes that write a record's graph: what makes a harvest large (store/optimize.py)
WRITTEN = (Outcome.ADDED, Outcome.UPDATED, Outcome.WITHDRAWN)


@dataclass(slots=True)
class RunOptions:
    full: bool = False  # ignore the checkpoint
    force: bool = False  # rewrite even when the source date is not newer
    allow_mass_withdrawal: bool = False  # override the brake
    cancel: threading.Event = field(default_factory=threading.Event)
    progress: Callable[[JobLog, Listing], None] | None = None
    #: list records from elsewhere than the source's harvester (revalidating the dead-letter
    #: store); such a run is incremental by nature: it withdraws nothing, saves no checkpoint
    lister: Callable[[HarvestRequest, Listing], Iterator[RawRecord]] | None = None
    #: False: a large harvest leaves its compaction to the caller (``harvest`` of several
    #: sources compacts once, after its last job: ``compact_after_jobs``)
    compact: bool = True


class _RelaxedGc:
    """The process's cyclic-GC setting, relaxed while any job of the process harvests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs = 0  # jobs of this process inside relaxed_gc
        self._before = gc.get_threshold()

    def enter(self, threshold: int) -> None:
        with self._lock:
            if self._jobs == 0:
                self._before = gc.get_threshold()
                gc.freeze()
                gc.set_threshold(threshold, self._before[1], self._before[2])
            self._jobs += 1

    def leave(self) -> None:
        with self._lock:
            self._jobs -= 1
            if self._jobs == 0:
                gc.set_threshold(*self._before)
                gc.unfreeze()


_RELAXED_GC = _RelaxedGc()


@contextmanager
def relaxed_gc(threshold: int = 50_000) -> Iterator[None]:
    """Run the cyclic GC far less often while harvesting.

    A harvest allocates millions of short-lived, acyclic objects (freed by reference
    counting); with the default threshold (700) the cyclic collector runs often enough to take
    a real share of the store process's CPU (docs/benchmarks.md#cyclic-gc-while-harvesting).
    Objects alive at the start are frozen out of its scans.

    The setting is the process's, and the scheduler runs jobs of several sources at once in
    threads: the first job in relaxes it, the last one out puts back what it found (jobs
    overlap in any order, so no job restores a setting another job made).
    """
    _RELAXED_GC.enter(threshold)
    try:
        yield
    finally:
        _RELAXED_GC.leave()


def run_source(
    settings: Settings,
    store: RecordStore,
    source: SourceConfig | str,
    options: RunOptions | None = None,
    *,
    http: HttpClient | None = None,
    executor: Executor | None = None,
    events: EventBus | None = None,
) -> JobRow:
    """Harvest one source into the store as one job; return the finished job.

    Emits the job's events (:mod:`aggregator.core.events`) on ``events``, by default on the
    process-wide bus, whose default subscriber is the log.
    """
    bus = events or default_bus()
    name = source if isinstance(source, str) else source.name
    with relaxed_gc(), in_job(source=name):
        return _run_source(
            settings, store, source, options, http=http, executor=executor, events=bus
        )


def _run_source(
    settings: Settings,
    store: RecordStore,
    source: SourceConfig | str,
    options: RunOptions | None,
    *,
    http: HttpClient | None,
    executor: Executor | None,
    events: EventBus,
) -> JobRow:
    opts = options or RunOptions()
    src = settings.source(source) if isinstance(source, str) else source
    http = http or HttpClient(settings.http)
    previous = store.jobs.recent(src.name, limit=1)
    job = store.jobs.start(src.name, opts.full)
    job_context.set({**job_context.get(), "job": job.id})  # reset by run_source's in_job
    events.emit(JobStarted(source=src.name, job_id=job.id, url=src.url, full=opts.full))
    checkpoint = None if opts.full or opts.lister else store.checkpoint(src.name)
    listing = Listing(incremental=checkpoint is not None or opts.lister is not None)
    writer = BatchWriter(
        store,
        src,
        job,
        force=opts.force,
        batch_size=settings.harvest.batch_size,
        on_reject=rejection_emitter(events, src.name, job.id),
    )
    own_executor = executor is None
    workers: int | None = None  # mapping processes of this job (the caller's executor: None)
    if executor is None:
        workers = settings.harvest.workers if src.workers is None else src.workers
        executor = worker_pool(workers)
    status, message = JobStatus.SUCCEEDED, ""
    progress = Progress(store, writer, listing, src.name, job.id, active=opts.lister is None)
    flow = InFlight(writer, progress, executor, mapping_context(settings, src), src)
    unreachable: TransportError | None = None
    held = _Held(Heartbeat(str(store.path / "state.sqlite3"), job.id).start())
    try:
        src.require_secrets()  # an unset secret fails this source's job only
        build_chain(src.validation)  # a schema that does not compile fails the job here
        lister = _lister(http, src, opts, held)
        held.up_to_date = UpToDate(store.path / "state.sqlite3", src.name)
        request = _harvest_request(settings, opts, checkpoint, held.up_to_date)
        held.prefetch = Prefetch(lister(request, listing))
        report = partial(opts.progress, job, listing) if opts.progress else None
        for chunk in chunks(iter(held.prefetch), CHUNK):
            flow.submit(chunk, report)
            if opts.cancel.is_set():
                listing.mark_truncated("cancelled")
                break
        flow.drain(0, report)
        writer.flush()
        status, message = _finish_listing(store, writer, listing, opts, settings)
        store.sync()  # the job is done when its records are in the graph store too
    except AggregatorError as err:
        status, message = JobStatus.FAILED, err.message
        if isinstance(err, TransportError):
            unreachable = err
        flow.salvage()
    except Exception as err:
        status, message = JobStatus.FAILED, f"internal error: {type(err).__name__}: {err}"
        log.exception("job %s (%s) failed", job.id, src.name)
        flow.salvage()
    finally:
        held.close(executor if own_executor else None)
    facts = _job_facts(listing, checkpoint, workers, progress)
    facts.update(_upkeep(store, writer.job, settings, compact=opts.compact))
    if status is JobStatus.SUCCEEDED and listing.next_checkpoint and opts.lister is None:
        store.jobs.set_checkpoint(src.name, listing.next_checkpoint, job.id)
        facts["checkpoint_saved"] = listing.next_checkpoint
    done = store.jobs.finish(job, status, facts, message)
    emit_closing(events, done, src.url, unreachable, previous[0] if previous else None)
    return done


def written(counters: Mapping[str, int]) -> int:
    """Records a job added, updated or withdrew."""
    return sum(counters.get(k, 0) for k in WRITTEN)


def compact_after_jobs(
    store: RecordStore, jobs: Iterable[JobRow], settings: Settings
) -> dict[str, Any] | None:
    """The compaction that jobs run with ``RunOptions(compact=False)`` left to their caller,
    once for all of them (None when together they were not a large harvest): one RocksDB
    compaction of the whole store instead of one per large job, each of which rewrote every
    earlier job's files again (docs/benchmarks.md#the-1m-run-issue-31)."""
    return optimize_after_job(
        store,
        sum(written(j.counters) for j in jobs),
        after=settings.harvest.optimize_after,
        share=settings.harvest.optimize_share,
    )


def _upkeep(
    store: RecordStore, job: JobLog, settings: Settings, *, compact: bool
) -> dict[str, Any]:
    """The store's upkeep at a job's end, for the job's facts: a compaction after a large
    harvest (unless left to the caller), else a fresh snapshot if compactions since the last
    one left it holding files alone (``store/optimize.py``). Whatever goes wrong here is
    logged, never the job's end: its records are stored already."""
    wrote = written(job.counters)
    after, share = settings.harvest.optimize_after, settings.harvest.optimize_share
    try:
        compacted = optimize_after_job(store, wrote, after=after, share=share) if compact else None
        if compacted is not None:
            return {"optimized": compacted}
        facts: dict[str, Any] = {}
        if not compact and due_after_job(store, wrote, after=after, share=share):
            facts["optimize_deferred"] = wrote  # the caller compacts after its last job
        logs = release_graph_logs(store)
        if logs:
            facts["graph_logs_released"] = logs
        released = release_stale_snapshot(store)
        if released:
            facts["stale_snapshot_released"] = released
        return facts
    except Exception as err:  # the store's own failure is the job's message already
        log.warning("store upkeep after job %s failed: %s", job.id, err)
        return {"upkeep_error": f"{type(err).__name__}: {err}"}


class _Held:
    """What a job holds open while it runs, closed whether it succeeds or fails."""

    def __init__(self, beat: Heartbeat) -> None:
        self.beat = beat
        self.prefetch: Prefetch | None = None
        self.session: HttpSession | None = None
        self.up_to_date: UpToDate | None = None

    def close(self, executor: Executor | None) -> None:
        """Close all held; shut down ``executor`` too (the job's own, not a caller's)."""
        self.beat.stop()
        if self.prefetch is not None:
            self.prefetch.close()
        if self.session is not None:
            self.session.close()
        if self.up_to_date is not None:
            self.up_to_date.close()
        if executor is not None:
            executor.shutdown(cancel_futures=True)


def _lister(
    http: HttpClient, src: SourceConfig, opts: RunOptions, held: _Held
) -> Callable[[HarvestRequest, Listing], Iterator[RawRecord]]:
    """The listing of this run: the caller's lister, or the source harvester's (whose
    session, ``held`` for closing, has this source's cookies and headers only, retried as
    its protocol allows)."""
    harvester_class = None if opts.lister else harvesters.get(src.type)
    held.session = harvester_class.open_session(http, src) if harvester_class else http.session(src)
    return opts.lister or harvesters.get(src.type)(src, held.session).list_records


def _harvest_request(
    settings: Settings, opts: RunOptions, checkpoint: str | None, up_to_date: UpToDate
) -> HarvestRequest:
    shortcut = not opts.force  # forced runs map every record: they need every payload
    return HarvestRequest(
        full=opts.full,
        checkpoint=checkpoint,
        cancel=opts.cancel,
        up_to_date=up_to_date if shortcut else None,
        held_versions=up_to_date.versions if shortcut else None,
        deleted_versions=up_to_date.deleted_versions if shortcut else None,
        held_elsewhere=up_to_date.holders,
        limits=settings.input,
    )


def _job_facts(
    listing: Listing, checkpoint: str | None, workers: int | None, progress: Progress
) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "complete": listing.complete,
        "incremental": listing.incremental,
        "truncated": listing.truncated_reason,
        "pages": listing.pages,
        "expected_total": listing.expected_total,
        "seen": listing.seen,
        "notes": listing.notes,
        "checkpoint_used": checkpoint,
    }
    if workers is not None:
        facts["workers"] = workers
    if progress.saved is not None:
        facts["checkpoint_progress"] = progress.saved
    return facts


def _finish_listing(
    store: RecordStore,
    writer: BatchWriter,
    listing: Listing,
    opts: RunOptions,
    settings: Settings,
) -> tuple[JobStatus, str]:
    """Withdraw what a complete full listing no longer holds; decide the job's status."""
    if opts.cancel.is_set():
        return (
            JobStatus.CANCELLED,
            "cancelled: the records stored so far are kept; nothing withdrawn",
        )
    if listing.truncated_reason:
        return (
            JobStatus.PARTIAL,
            f"truncated listing: {listing.truncated_reason}; nothing withdrawn",
        )
    if not listing.complete:
        return (
            JobStatus.PARTIAL,
            "the harvester did not confirm a complete listing; nothing withdrawn",
        )
    if writer.unmappable_collections:
        return (
            JobStatus.PARTIAL,
            f"{writer.unmappable_collections} catalogue page(s) could not be read,"
            " so absent records cannot be told apart from unreadable ones; nothing withdrawn",
        )
    if listing.incremental:
        return JobStatus.SUCCEEDED, "incremental run: absent records are not withdrawn"
    job = writer.job
    candidates = store.db.unseen_active(job.source, job.id)
    if not candidates:
        return JobStatus.SUCCEEDED, ""
    active = store.db.count_records(job.source, "active")
    share = len(candidates) / max(active, 1)
    brake = settings.harvest.withdraw_brake
    if share > brake and not opts.allow_mass_withdrawal:
        return (
            JobStatus.PARTIAL,
            f"mass-withdrawal brake: {len(candidates)} of {active} active records"
            f" ({share:.0%}) are missing from the source, over the limit of {brake:.0%};"
            " nothing withdrawn (run with --allow-mass-withdrawal to accept)",
        )
    writer.withdraw(candidates)
    writer.flush()
    return JobStatus.SUCCEEDED, f"withdrew {len(candidates)} record(s) missing from the source"


def exit_code(job: JobRow) -> int:
    """0 all stored; 1 the job failed; 3 ran but some records rejected/errored; 4 partial;
    130 cancelled (Ctrl-C, as a shell reports a command ended by SIGINT)."""
    if job.status == JobStatus.FAILED.value:
        return 1
    if job.status == JobStatus.CANCELLED.value:
        return 130
    if job.status == JobStatus.PARTIAL.value:
        return 4
    if job.counters.get(Outcome.REJECTED.value, 0) or job.counters.get(Outcome.ERRORED.value, 0):
        return 3
    return 0


def jobs_exit_code(jobs: Iterable[JobRow]) -> int:
    """The exit status of a command that ran several jobs: 1 when any failed (a later
    partial or rejecting job must not hide it), else the highest of the others."""
    codes = [exit_code(j) for j in jobs]
    return 1 if 1 in codes else max(codes, default=0)
