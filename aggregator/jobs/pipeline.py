"""run_source: the one place that knows harvester, mapper, validators and store.

The CLI, the demo, the scheduler and the tests all call :func:`run_source`.

Flow: a producer thread walks the harvester's listing into a bounded queue; the main thread
takes chunks, drops records whose source date is not newer than the stored one (before any
mapping, which is what makes an unchanged re-harvest cheap), sends the rest to the mapping and
validation workers, and, while the workers map the next chunks, decides the outcome of each
dataset (lifecycle rules in :mod:`aggregator.jobs.lifecycle`) and writes the batch through the
journaled record store. After a complete full listing, records not seen are withdrawn, unless
the mass-withdrawal brake holds.
"""

from __future__ import annotations

import contextvars
import gc
import logging
import multiprocessing
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
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
from aggregator.jobs.lifecycle import BatchWriter, UpToDate
from aggregator.jobs.processing import Lean, build_chain, process_chunk, rejoin
from aggregator.mapping.base import MappingContext
from aggregator.net.client import HttpClient, HttpSession
from aggregator.plugin import harvesters
from aggregator.store.journal import Heartbeat, JobLog, JobRow
from aggregator.store.records import RecordStore

log = logging.getLogger(__name__)

CHUNK = 100  # records per worker task
IN_FLIGHT = 4  # worker tasks queued ahead of the writer


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


class _Prefetch:
    """Walk an iterator in a thread into a bounded queue, so fetching overlaps processing.

    Records cross the queue in small lists (a lock round trip per record cost more than the
    skip-by-date work itself in an unchanged re-harvest); a list is handed over when full or
    when the listing ends or fails, so nothing received is held back at the end.
    """

    _END = object()
    BATCH = 50

    def __init__(self, it: Iterator[RawRecord], size: int = 40) -> None:
        self._it = it
        self._q: queue.Queue[Any] = queue.Queue(maxsize=size)
        self._stop = threading.Event()
        # in the job's context: its log lines name the job and source (aggregator/core/logjson.py)
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._run,), name="harvest-listing", daemon=True
        )
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        batch: list[RawRecord] = []
        try:
            for item in self._it:
                batch.append(item)
                if len(batch) >= self.BATCH:
                    if not self._put(batch):
                        return
                    batch = []
            if batch and not self._put(batch):
                return
            self._put(self._END)
        except BaseException as err:  # forwarded to the consumer, raised there
            if batch and not self._put(batch):
                return
            self._put(err)

    def __iter__(self) -> Iterator[RawRecord]:
        while True:
            item = self._q.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield from item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class _Inline(Executor):
    """An executor that runs tasks at submission (harvest.workers = 0)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as err:
            fut.set_exception(err)
        return fut


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
    counting); with the default threshold (700) the cyclic collector ran often enough to take
    ~13 % of the store process's CPU. Objects alive at the start are frozen out of its scans.

    The setting is the process's, and the scheduler runs jobs of several sources at once in
    threads: the first job in relaxes it, the last one out puts back what it found (jobs
    overlap in any order, so no job restores a setting another job made).
    """
    _RELAXED_GC.enter(threshold)
    try:
        yield
    finally:
        _RELAXED_GC.leave()


def worker_signals(harvest_pid: int) -> None:
    """In a mapping worker: Ctrl-C is for the harvest's own process, which cancels the job
    and ends the workers (a terminal sends SIGINT to the whole process group); and end with
    the harvest's process even when it is killed (:mod:`aggregator.jobs.lifeline`)."""
    import signal

    from aggregator.jobs.lifeline import end_with

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with(harvest_pid)


def _chunks(records: Iterator[RawRecord], size: int) -> Iterator[list[RawRecord]]:
    """Group records; when the listing fails, the records received before the failure are
    still handed on (and stored) before the error is raised."""
    chunk: list[RawRecord] = []
    try:
        for r in records:
            chunk.append(r)
            if len(chunk) >= size:
                yield chunk
                chunk = []
    except GeneratorExit:  # the consumer stopped (a cancelled job): nothing more to hand on
        raise
    except BaseException:
        if chunk:
            yield chunk
        raise
    if chunk:
        yield chunk


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
        executor = _worker_pool(workers)
    status, message = JobStatus.SUCCEEDED, ""
    progress = _Progress(store, writer, listing, src.name, job.id, active=opts.lister is None)
    flow = _InFlight(writer, progress, executor, _mapping_context(settings, src), src)
    unreachable: TransportError | None = None
    held = _Held(Heartbeat(str(store.path / "state.sqlite3"), job.id).start())
    try:
        src.require_secrets()  # an unset secret fails this source's job only
        build_chain(src.validation)  # a schema that does not compile fails the job here
        lister = _lister(http, src, opts, held)
        held.up_to_date = UpToDate(store.path / "state.sqlite3", src.name)
        request = _harvest_request(settings, opts, checkpoint, held.up_to_date)
        held.prefetch = _Prefetch(lister(request, listing))
        report = partial(opts.progress, job, listing) if opts.progress else None
        for chunk in _chunks(iter(held.prefetch), CHUNK):
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
    if status is JobStatus.SUCCEEDED and listing.next_checkpoint and opts.lister is None:
        store.jobs.set_checkpoint(src.name, listing.next_checkpoint, job.id)
        facts["checkpoint_saved"] = listing.next_checkpoint
    done = store.jobs.finish(job, status, facts, message)
    emit_closing(events, done, src.url, unreachable, previous[0] if previous else None)
    return done


def _mapping_context(settings: Settings, src: SourceConfig) -> MappingContext:
    return MappingContext(
        base_iri=settings.base_iri,
        source=src.name,
        publisher=src.publisher,
        categorisation=src.categorisation,
        limits=settings.input,
    )


def _worker_pool(workers: int) -> Executor:
    """The job's own mapping processes (none: map in this process, harvest.workers = 0)."""
    if workers <= 0:
        return _Inline()
    # forkserver, not fork: this process runs threads (RocksDB, the graph applier, the
    # listing) that a forked child must not inherit, nor its growing heap
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("forkserver"),
        initializer=worker_signals,
        initargs=(os.getpid(),),
    )


class _Held:
    """What a job holds open while it runs, closed whether it succeeds or fails."""

    def __init__(self, beat: Heartbeat) -> None:
        self.beat = beat
        self.prefetch: _Prefetch | None = None
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
    listing: Listing, checkpoint: str | None, workers: int | None, progress: _Progress
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


class _InFlight:
    """The chunks sent to the mapping workers, written in listing order as they come back
    while the workers map the next ones (at most :data:`IN_FLIGHT` ahead)."""

    def __init__(
        self,
        writer: BatchWriter,
        progress: _Progress,
        executor: Executor,
        ctx: MappingContext,
        src: SourceConfig,
    ) -> None:
        self.writer, self.progress, self.executor = writer, progress, executor
        self.ctx, self.src = ctx, src
        self.tasks: deque[tuple[Future[list[Lean]], list[RawRecord]]] = deque()
        self.listed: deque[int] = deque()  # records listed in each chunk in flight
        self.stored = 0  # records listed and stored (or skipped, rejected): batch written

    def submit(self, chunk: list[RawRecord], report: Callable[[], None] | None) -> None:
        if self.tasks and any(r.deleted for r in chunk):
            # a deletion may follow the listing of its own record in a chunk still being
            # mapped (an MDR page published, then exited): decide that one first
            self.drain(0, report)
        todo = self.writer.prefilter(chunk)
        task: Future[list[Lean]]
        if todo:
            src = self.src
            task = self.executor.submit(process_chunk, todo, self.ctx, src.validation, src.policy)
        else:  # all skipped (an unchanged re-harvest): no worker is started or sent to
            task = Future()
            task.set_result([])
        self.tasks.append((task, todo))
        self.listed.append(len(chunk))
        self.drain(IN_FLIGHT, report)

    def drain(self, limit: int, report: Callable[[], None] | None) -> None:
        while len(self.tasks) > limit:
            future, submitted = self.tasks.popleft()
            self.writer.apply(rejoin(future.result(), submitted))
            self.stored += self.listed.popleft()
            if report:
                report()
        self.progress.save(self.stored)

    def salvage(self) -> None:
        """After a listing failed: store what was already fetched and mapped, then flush,
        and save the checkpoints the stored records reached."""
        try:
            while self.tasks:
                future, submitted = self.tasks.popleft()
                self.writer.apply(rejoin(future.result(), submitted))
                self.stored += self.listed.popleft()
            self.writer.flush()
            self.progress.save(self.stored)
            self.writer.store.sync()
        except Exception:  # the job is failing already; its batch is journaled or rolled back
            log.exception("could not write the last batch of a failing job")


class _Progress:
    """Saves the checkpoints a harvester marks with :meth:`Listing.checkpoint_at` once the
    records listed before each are written (their batch flushed: the journal transaction is
    the durable point), so a run that fails later resumes from the last one."""

    def __init__(
        self,
        store: RecordStore,
        writer: BatchWriter,
        listing: Listing,
        source: str,
        job_id: int,
        *,
        active: bool,
    ) -> None:
        self.store, self.writer, self.listing = store, writer, listing
        self.source, self.job_id, self.active = source, job_id, active
        self.saved: str | None = None

    def save(self, done: int) -> None:
        marks = self.listing.progress
        latest: str | None = None
        while marks and marks[0][0] <= done:
            latest = marks.popleft()[1]
        if latest is None or not self.active:
            return
        self.writer.flush()
        self.store.jobs.set_checkpoint(self.source, latest, self.job_id)
        self.saved = latest


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
