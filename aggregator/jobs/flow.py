"""How a job's records move: a listing thread, chunks, mapping workers, writes in order.

:class:`Prefetch` walks the harvester's listing in a thread into a bounded queue; the main
thread groups records into :func:`chunks` and hands them to :class:`InFlight`, which sends
each to the job's mapping workers (:func:`worker_pool`) and writes the results back in
listing order while the workers map the next ones; :class:`Progress` saves the checkpoints a
harvester marks once the records listed before each are written.
:func:`aggregator.jobs.pipeline.run_source` wires them.
"""

from __future__ import annotations

import contextvars
import logging
import multiprocessing
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import Any

from aggregator.config import SourceConfig
from aggregator.core.models import RawRecord
from aggregator.harvest.base import Listing
from aggregator.jobs.lifecycle import BatchWriter
from aggregator.jobs.processing import Lean, process_chunk, rejoin
from aggregator.mapping.base import MappingContext
from aggregator.store.records import RecordStore

log = logging.getLogger("aggregator.jobs.pipeline")  # the name operators filter on

CHUNK = 100  # records per worker task
IN_FLIGHT = 4  # worker tasks queued ahead of the writer


class Prefetch:
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


def worker_signals(harvest_pid: int) -> None:
    """In a mapping worker: Ctrl-C is for the harvest's own process, which cancels the job
    and ends the workers (a terminal sends SIGINT to the whole process group); and end with
    the harvest's process even when it is killed (:mod:`aggregator.jobs.lifeline`)."""
    import signal

    from aggregator.jobs.lifeline import end_with

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with(harvest_pid)


def chunks(records: Iterator[RawRecord], size: int) -> Iterator[list[RawRecord]]:
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


def worker_pool(workers: int) -> Executor:
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


class InFlight:
    """The chunks sent to the mapping workers, written in listing order as they come back
    while the workers map the next ones (at most :data:`IN_FLIGHT` ahead)."""

    def __init__(
        self,
        writer: BatchWriter,
        progress: Progress,
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


class Progress:
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
