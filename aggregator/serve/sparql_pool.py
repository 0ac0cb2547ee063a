"""Killable query workers over a read-only snapshot of the graph store.

pyoxigraph's ``query()`` has no timeout and cannot be interrupted, so queries run in worker
processes (:mod:`aggregator.serve.sparql_worker`) and a query past its deadline ends by
killing its process (SIGKILL: no CPU is used afterwards) and starting a replacement.

The workers cannot open the live store: a second read-write ``Store`` on the directory fails on
its lock, and ``Store.read_only`` beside a writer is undefined behaviour. They read a snapshot
made with ``Store.backup`` (a RocksDB checkpoint: hard links, consistent, cheap).
:meth:`WorkerPool.refresh` makes a new snapshot; each worker switches to it with its next
query, and a snapshot is deleted once no worker has it open. The pool size is the number of
queries that run at once; a request waits at most ``queue_wait`` seconds for a free worker.

All methods but :meth:`refresh` belong to the event loop's thread (:meth:`start` and
:meth:`close` may also be called before or after the loop runs); :meth:`refresh` may be
called from any thread, e.g. the one that ran a harvest.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pyoxigraph import Store

import aggregator

log = logging.getLogger(__name__)
_LEN = struct.Struct(">I")


class PoolBusy(Exception):
    """Every worker stayed busy for the whole queue wait."""


class QueryDeadline(Exception):
    """The query ran past its deadline; its worker was killed."""


class WorkerFailed(Exception):
    """The worker died or broke the protocol while running the query."""


class _Frames(asyncio.Protocol):
    """The event loop's end of a worker socket: writes request frames and assembles response
    frames as data arrives. One transport per worker for its whole life, so a query costs one
    write and (usually) one read, with no reader registered and removed around each."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[bytes] | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) < 4:
            return
        size = _LEN.unpack_from(self.buf)[0]
        if len(self.buf) < size + 4:
            return
        frame = bytes(memoryview(self.buf)[4 : size + 4])
        del self.buf[: size + 4]
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(WorkerFailed("the worker closed its socket"))

    async def exchange(self, payload: bytes) -> bytes:
        if self.lost or self.transport is None:
            raise WorkerFailed("the worker closed its socket")
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(_LEN.pack(len(payload)) + payload)
        return await self.waiter


@dataclass(eq=False)
class _Worker:
    proc: subprocess.Popen[bytes]
    sock: socket.socket
    sandboxed: bool = False
    snapshot: str | None = None
    frames: _Frames | None = None  # made by the event loop on first use

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close_socket(self) -> None:
        if self.frames is not None and self.frames.transport is not None:
            self.frames.transport.abort()
        else:
            self.sock.close()


def _recv_exact_blocking(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            raise WorkerFailed("the worker closed its socket")
        buf += chunk
    return bytes(buf)


def _split(frame: bytes) -> tuple[dict[str, Any], bytes]:
    (meta_len,) = _LEN.unpack_from(frame)
    header: dict[str, Any] = json.loads(frame[4 : 4 + meta_len])
    return header, frame[4 + meta_len :]


class WorkerPool:
    def __init__(
        self,
        source: Store,
        snapshot_root: Path,
        *,
        size: int,
        queue_wait: float,
        start_timeout: float = 60.0,
    ) -> None:
        if size < 1:
            raise ValueError("the pool needs at least one worker")
        self.source = source
        self.snapshot_root = snapshot_root
        self.size = size
        self.queue_wait = queue_wait
        self.start_timeout = start_timeout
        self._lock = threading.Lock()  # guards _workers, _current, _snapshots
        self._refresh_lock = threading.Lock()  # one snapshot at a time
        self._workers: list[_Worker] = []
        self._current: str | None = None
        self._snapshots: list[str] = []
        self._generation = 0
        self._idle: collections.deque[_Worker] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[_Worker]] = collections.deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._start_lock: asyncio.Lock | None = None
        self._started = False
        self._closed = False

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Make the first snapshot and start the workers; blocks until they are ready."""
        if self._started:
            return
        self._closed = False
        self.snapshot_root.mkdir(parents=True, exist_ok=True)
        self.refresh()
        spawned = [self._spawn() for _ in range(self.size)]
        for w in spawned:
            self._handshake(w)
        with self._lock:
            self._workers.extend(spawned)
        self._idle.extend(spawned)
        self._started = True

    def close(self) -> None:
        """Kill the workers and delete the snapshots."""
        self._closed = True
        with self._lock:
            workers, self._workers = self._workers, []
        for w in workers:
            self._kill(w)
        self._idle.clear()
        for f in self._waiters:
            f.cancel()
        self._waiters.clear()
        shutil.rmtree(self.snapshot_root, ignore_errors=True)
        with self._lock:
            self._snapshots.clear()
            self._current = None
        self._started = False

    def refresh(self) -> str:
        """Snapshot the store as it is now; queries sent from now on read it. Thread-safe.
        Call it after writes are complete (``RecordStore.sync()``), e.g. after each harvest."""
        with self._refresh_lock:
            self._generation += 1
            path = self.snapshot_root / f"gen-{self._generation:06d}"
            shutil.rmtree(path, ignore_errors=True)
            self.source.backup(str(path))
            with self._lock:
                self._current = str(path)
                self._snapshots.append(str(path))
                self._collect()
            return str(path)

    @property
    def pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self._workers]

    @property
    def sandboxed(self) -> bool:
        """True when every worker runs with IP networking denied."""
        with self._lock:
            return bool(self._workers) and all(w.sandboxed for w in self._workers)

    @property
    def snapshot(self) -> str | None:
        return self._current

    # -- running a query ----------------------------------------------------------------------
    async def run(self, request: dict[str, Any], timeout: float) -> tuple[dict[str, Any], bytes]:
        """Send one request to a free worker; the complete response, or an exception:
        :class:`PoolBusy`, :class:`QueryDeadline` or :class:`WorkerFailed`."""
        await self._ensure_started()
        w = await self._acquire()
        with self._lock:
            w.snapshot = self._current
        request["snapshot"] = w.snapshot
        payload = json.dumps(request).encode()
        try:
            async with asyncio.timeout(timeout):
                frame = await self._exchange(w, payload)
            header, body = _split(frame)
        except TimeoutError:
            log.warning("SPARQL query over its %.1f s deadline; worker %d killed", timeout, w.pid)
            self._discard(w)
            raise QueryDeadline from None
        except (OSError, ValueError, struct.error, WorkerFailed) as err:
            log.error("SPARQL worker %d failed: %s", w.pid, err)
            self._discard(w)
            raise WorkerFailed(str(err)) from err
        except BaseException:  # cancelled mid-query: the worker's state is unknown
            self._discard(w)
            raise
        self._release(w)
        return header, body

    async def _ensure_started(self) -> None:
        if self._started:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if not self._started:
                await asyncio.get_running_loop().run_in_executor(None, self.start)

    async def _exchange(self, w: _Worker, payload: bytes) -> bytes:
        if w.frames is None:
            loop = asyncio.get_running_loop()
            _, w.frames = await loop.create_unix_connection(_Frames, sock=w.sock)
        return await w.frames.exchange(payload)

    async def _acquire(self) -> _Worker:
        if self._idle:
            return self._idle.pop()  # the most recently used worker: its caches are warm
        waiter: asyncio.Future[_Worker] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await asyncio.wait({waiter}, timeout=self.queue_wait)
        if waiter.done() and not waiter.cancelled():
            return waiter.result()
        waiter.cancel()
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)
        raise PoolBusy

    def _release(self, w: _Worker) -> None:
        if self._closed:
            self._kill(w)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(w)
                return
        self._idle.append(w)
        if len(self._snapshots) > 1:
            with self._lock:
                self._collect()

    # -- workers ------------------------------------------------------------------------------
    def _spawn(self) -> _Worker:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        root = str(Path(aggregator.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        cmd = [sys.executable, "-m", "aggregator.serve.sparql_worker"]
        try:
            proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                [*cmd, str(child.fileno()), str(os.getpid())],
                pass_fds=[child.fileno()],
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            child.close()
        return _Worker(proc, parent)

    def _handshake(self, w: _Worker) -> None:
        """Wait (blocking) for the ready frame, then hand the socket to the event loop."""
        w.sock.settimeout(self.start_timeout)
        try:
            size = _LEN.unpack(_recv_exact_blocking(w.sock, 4))[0]
            header, _ = _split(_recv_exact_blocking(w.sock, size))
        except (OSError, ValueError, struct.error) as err:
            self._kill(w)
            raise WorkerFailed(f"SPARQL worker did not start: {err}") from err
        w.sandboxed = bool(header.get("sandboxed"))
        if not w.sandboxed:
            log.warning("SPARQL worker %d runs without the network sandbox", w.pid)
        w.sock.setblocking(False)

    def _spawn_ready(self) -> _Worker:
        w = self._spawn()
        self._handshake(w)
        return w

    def _kill(self, w: _Worker) -> None:
        with contextlib.suppress(OSError):
            w.proc.kill()
        w.close_socket()
        try:
            w.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.error("SPARQL worker %d did not exit after SIGKILL", w.pid)

    def _discard(self, w: _Worker) -> None:
        """Kill a worker now and start its replacement in the background."""
        with self._lock:
            if w in self._workers:
                self._workers.remove(w)
        with contextlib.suppress(OSError):
            w.proc.kill()
        w.close_socket()
        task = asyncio.get_running_loop().create_task(self._replace(w))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _replace(self, old: _Worker) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, old.proc.wait)  # reap: the process is gone
        with self._lock:
            self._collect()
        delay = 0.5
        while not self._closed:
            try:
                w = await loop.run_in_executor(None, self._spawn_ready)
            except (OSError, WorkerFailed) as err:
                log.error("cannot start a SPARQL worker (%s); retrying in %.1f s", err, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            if self._closed:
                self._kill(w)
                return
            with self._lock:
                self._workers.append(w)
            self._release(w)
            return

    def _collect(self) -> None:
        """Delete the snapshots no worker has open (caller holds ``_lock``)."""
        in_use = {w.snapshot for w in self._workers} | {self._current}
        keep = []
        for path in self._snapshots:
            if path in in_use:
                keep.append(path)
            else:
                shutil.rmtree(path, ignore_errors=True)
        self._snapshots = keep
