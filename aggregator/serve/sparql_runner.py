"""Running SPARQL queries in the serving process, with a deadline that is kept.

pyoxigraph's ``query()`` has no timeout and cannot be interrupted; it releases the GIL while it
evaluates. A query runs in one of two ways:

- **inline**, in the event loop's thread, when the process is supervised (``aggregator
  serve``), no other query runs in it and no response in it is half-sent
  (:attr:`Supervision.quiet`): no thread or process hop, so a point query costs what the
  engine costs. A watchdog thread checks the deadline; a query past it is answered with a
  503 by :attr:`Supervision.overrun` straight on its socket, requests waiting behind it get
  a 503 "retry", and the process exits (its supervisor starts another): the only way to stop
  the engine, and no response is cut short;
- **in a thread** otherwise: the loop stays free, and at the deadline the client gets a clean
  503 at once. The thread cannot be stopped, so a supervised process then retires
  (:attr:`Supervision.retire`: it stops accepting, finishes what is in flight and exits);
  an unsupervised one (an app embedded in a test or another server) logs an error and keeps
  the query's slot until the thread ends.

At most ``concurrency`` queries run at once in a process; a query waits ``queue_wait`` seconds
at most for a slot, then :class:`RunnerBusy`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from aggregator.serve.sparql_exec import execute
from aggregator.store.snapshots import SnapshotReader, generation_of

log = logging.getLogger(__name__)

Result = tuple[dict[str, Any], bytes]


class RunnerBusy(Exception):
    """Every query slot stayed taken for the whole queue wait."""


class QueryDeadline(Exception):
    """The query ran past its deadline."""


@dataclass(frozen=True)
class Supervision:
    """Hooks of a serving process that a supervisor replaces when it exits.

    ``quiet()``: True when no response of this process is half-sent (the loop thread asks,
    just before running a query inline). ``overrun(client)``: called from
    the watchdog thread when an inline query ran past its deadline; it answers that client
    (the ASGI ``client`` address) with a 503 and ends the process. ``retire()``: called in the
    loop thread after a threaded query ran past its deadline; the process stops taking work
    and exits once what is in flight is done."""

    quiet: Callable[[], bool]
    overrun: Callable[[tuple[str, int] | None, float], NoReturn]
    retire: Callable[[], None]


class _Threads:
    """Daemon threads that run queries (daemon: a runaway query never holds up exit)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._idle == 0:
                threading.Thread(target=self._work, name="sparql-query", daemon=True).start()
            else:
                self._idle -= 1
        self._jobs.put(job)

    def _work(self) -> None:
        while True:
            self._jobs.get()()
            with self._lock:
                self._idle += 1


class QueryRunner:
    def __init__(
        self,
        reader: SnapshotReader,
        *,
        timeout: float,
        concurrency: int,
        queue_wait: float,
        supervision: Supervision | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("at least one query must be able to run")
        self.reader = reader
        self.timeout = timeout
        self.queue_wait = queue_wait
        self.supervision = supervision
        self.concurrency = concurrency
        self._running = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._threads = _Threads()
        # (deadline, client) of the inline query, read by the watchdog
        self._inline: tuple[float, tuple[str, int] | None] | None = None
        self._watchdog: threading.Thread | None = None
        self.inline_queries = 0
        self.threaded_queries = 0

    def start(self) -> None:
        if self.supervision is not None and self._watchdog is None:
            self._watchdog = threading.Thread(
                target=self._watch, name="sparql-watchdog", daemon=True
            )
            self._watchdog.start()

    async def run(self, request: dict[str, Any], client: tuple[str, int] | None) -> Result:
        """The complete response to one request, or :class:`RunnerBusy` /
        :class:`QueryDeadline`."""
        await self._take_slot()
        released = False
        try:
            snap = self.reader.acquire()
            if self.supervision is not None and self._running == 1 and self.supervision.quiet():
                self.inline_queries += 1
                self._inline = (time.monotonic() + self.timeout, client)
                try:
                    return _named(execute(snap.store, request), snap.name)
                finally:
                    self._inline = None
                    self.reader.release(snap)
            self.threaded_queries += 1
            loop = asyncio.get_running_loop()
            done: asyncio.Future[Result] = loop.create_future()

            def job() -> None:
                try:
                    outcome: Result | BaseException = _named(
                        execute(snap.store, request), snap.name
                    )
                except BaseException as err:
                    outcome = err
                finally:
                    self.reader.release(snap)
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                    loop.call_soon_threadsafe(self._finish, done, outcome)

            self._threads.submit(job)
            try:
                return await asyncio.wait_for(asyncio.shield(done), self.timeout)
            except TimeoutError:
                released = True  # the slot is freed when the thread ends (_finish)
                done.add_done_callback(lambda _: self._free_slot())
                self._overran_in_thread()
                raise QueryDeadline from None
        finally:
            if not released:
                self._free_slot()

    # -- slots --------------------------------------------------------------------------------
    async def _take_slot(self) -> None:
        if self._running < self.concurrency:
            self._running += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, self.queue_wait)
        except TimeoutError:
            raise RunnerBusy from None
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        # _free_slot handed its slot to us: _running already counts it

    def _free_slot(self) -> None:
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                return
        self._running -= 1

    @staticmethod
    def _finish(done: asyncio.Future[Result], outcome: Result | BaseException) -> None:
        if done.done():
            return
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome)

    # -- deadlines ----------------------------------------------------------------------------
    def _overran_in_thread(self) -> None:
        if self.supervision is not None:
            log.warning(
                "SPARQL query over its %.1f s deadline: this serving process retires", self.timeout
            )
            self.supervision.retire()
        else:
            log.error(
                "SPARQL query over its %.1f s deadline still runs and cannot be stopped in an"
                " unsupervised process; `aggregator serve` replaces the process instead",
                self.timeout,
            )

    def _watch(self) -> None:
        assert self.supervision is not None
        period = min(0.1, max(0.01, self.timeout / 10))
        while True:
            time.sleep(period)
            inline = self._inline
            if inline is not None and time.monotonic() > inline[0]:
                self.supervision.overrun(inline[1], self.timeout)


def _named(result: Result, snapshot: str) -> Result:
    """The result with the generation of the snapshot it was read from."""
    result[0]["generation"] = generation_of(snapshot)
    return result
