"""``aggregator serve``: one supervisor process, several serving processes.

The supervisor does not keep the store open: whichever process writes it (``aggregator
harvest`` beside it, later a scheduler) publishes read-only snapshots of the graph store on the
store's shelf (:mod:`aggregator.store.snapshots`) after each committed batch, and the serving
processes follow them. The supervisor takes the writer lock only when the shelf is behind the
state database, or a job is left running, and nobody writes (a store never served; a writer
killed, noticed within 2 s), for as long as it takes to replay the journal, mark the job failed
and publish. It opens the listening socket, collects the snapshots no serving process reads
any more, keeps the dashboard's search index caught up
(:mod:`aggregator.serve.dashboard.search_keeper`), and runs
``processes`` serving processes (:mod:`aggregator.serve.worker`), each a uvicorn server on the
shared socket. All but one accept new connections; the last is a hot standby that accepts
only while one of them is stuck or gone (:mod:`aggregator.serve.accepting`). It restarts a
serving process that exits, which is how a SPARQL query past its deadline is stopped
(:mod:`aggregator.serve.sparql_runner`): the process that ran it ends and a fresh one takes
its place, while the others keep answering. Connections that arrive in the meantime wait in
the socket's backlog; none is refused.

Each serving process gets a :class:`WorkerSpec` (pickled, on its stdin) and reports on a pipe
when it is ready: its pid and whether its network sandbox is in force.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import pickle
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import aggregator
from aggregator.config import Settings
from aggregator.core.errors import ConfigError, StoreBusyError, StoreError
from aggregator.serve.accepting import AcceptBoard, acceptors_for
from aggregator.serve.dashboard.search_keeper import SearchKeeper
from aggregator.serve.oai_tokens import load_key
from aggregator.store.migrations import LATEST, schema_version
from aggregator.store.names import StoreNames
from aggregator.store.records import RecordStore, snapshot_shelf
from aggregator.store.state import StateDB

log = logging.getLogger(__name__)

# exit codes of a serving process (uvicorn itself uses 1 and 3)
EXIT_OVERRUN = 75  # it ended itself to stop a runaway inline query
EXIT_RETIRED = 76  # it retired after a runaway query in a thread, once in-flight work was done


@dataclass(frozen=True)
class WorkerSpec:
    """What a serving process needs; sent pickled on its stdin by its own supervisor."""

    settings: Settings
    store_path: Path
    base_iri: str
    oai_key: bytes
    snapshot_root: Path
    listen_fd: int
    status_fd: int
    parent: int
    index: int
    board_fd: int  # the AcceptBoard
    slots: int
    acceptors: int


@dataclass(eq=False)
class ServingProcess:
    index: int
    proc: subprocess.Popen[bytes]
    status: int  # read end of the status pipe
    started: float = field(default_factory=time.monotonic)
    sandboxed: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close_status(self) -> None:
        if self.status >= 0:
            os.close(self.status)
            self.status = -1


def bind_listener(host: str, port: int, *, listen: bool = True) -> socket.socket:
    """The server's socket, bound and (with ``listen``) listening: a port in use (another
    ``serve``) is a :class:`ConfigError` in one line, said before anything is started or
    printed. Without ``listen`` the port is only reserved (the demo, while it harvests:
    connections are refused until it serves, rather than left waiting)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP: asyncio then sets TCP_NODELAY (streamed OAI pages stall otherwise, Nagle
    # waiting for a delayed ACK: docs/benchmarks.md#serving)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        if listen:
            start_listening(sock)
    except OSError as err:
        sock.close()
        raise _listen_error(host, port, err) from err
    return sock


def start_listening(sock: socket.socket) -> None:
    """Listen on ``sock`` (again: harmless); a port taken meanwhile is a ConfigError."""
    try:
        sock.listen(2048)
    except OSError as err:
        host, port = sock.getsockname()[:2]
        raise _listen_error(host, port, err) from err


def _listen_error(host: str, port: int, err: OSError) -> ConfigError:
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if err.errno == errno.EADDRINUSE:
        why = (
            "the port is in use (by another `aggregator serve`?): stop it or choose another --port"
        )
    else:
        why = err.strerror or str(err)
    return ConfigError(f"cannot listen on {where}: {why}")


def default_processes() -> int:
    """Two at least (one keeps answering while another is replaced), four at most."""
    return min(4, max(2, os.cpu_count() or 1))


class Supervisor:
    """Serves ``store``: its names (``aggregator serve``: other processes write it), or the
    ``RecordStore`` of this very process (the writer; :meth:`refresh` after its writes)."""

    def __init__(
        self,
        store: StoreNames,
        settings: Settings,
        host: str,
        port: int,
        *,
        processes: int | None = None,
        start_timeout: float = 60.0,
        sock: socket.socket | None = None,
    ) -> None:
        """``sock``: bound by :func:`bind_listener` beforehand (else bound here)."""
        self.store = store
        self.settings = settings
        self.processes = processes or settings.serve.processes or default_processes()
        self.start_timeout = start_timeout
        self.sock = sock if sock is not None else bind_listener(host, port)
        start_listening(self.sock)
        self.sock.set_inheritable(True)
        self.host = host
        self.port: int = self.sock.getsockname()[1]
        self.shelf = snapshot_shelf(store.path)
        self._ensure_snapshot()
        self.oai_key = load_key(store, settings.serve.oai_token_key_env)
        self.board = AcceptBoard.create(self.processes)
        # request counters of the serving processes, summed by /metrics (serve/metrics.py)
        self.metrics_dir = Path(tempfile.mkdtemp(prefix="aggregator-metrics-"))
        self.acceptors = acceptors_for(self.processes)
        self.workers: list[ServingProcess] = []
        self.restarts = 0
        self.exit_codes: list[int] = []  # of the serving processes that ended while serving
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._monitor: threading.Thread | None = None
        self.search_keeper = SearchKeeper(store.path)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    # -- life cycle ---------------------------------------------------------------------------
    def _ensure_snapshot(self) -> None:
        """Make sure the shelf shows the store's committed state before serving it."""
        if isinstance(self.store, RecordStore):
            self.store.sync()  # this process writes: it publishes
            return
        if self._catch_up():
            return
        deadline = time.monotonic() + self.start_timeout
        while self.shelf.current is None:  # a writer that just started publishes at open
            if time.monotonic() > deadline:
                raise StoreError(f"no snapshot of the store appeared under {self.shelf.root}")
            time.sleep(0.1)

    def _catch_up(self) -> bool:
        """When the shelf is behind the state database, a job is left running or the schema is
        older than the code's, and nobody writes (a store never served; a writer killed; an
        upgrade), be the writer for a moment: opening the store migrates its schema, replays
        its journal, marks the dead writer's job failed and publishes.
        False when another process writes now (it publishes itself)."""
        store = self.store
        state = store.path / "state.sqlite3"
        if state.exists():
            db = StateDB(state, read_only=True)
            try:
                running = db.conn.execute("SELECT 1 FROM jobs WHERE status = 'running' LIMIT 1")
                current = schema_version(db.conn) == LATEST  # else opening it upgrades it
                caught_up = self.shelf.generation == db.generation()
                if caught_up and current and running.fetchone() is None:
                    return True  # the usual case: the last writer published its last batch
            finally:
                db.close()
        try:
            RecordStore(store.path, store.base_iri).close()
        except StoreBusyError:
            return False
        log.info("caught up with the store's committed state (its last writer had not)")
        return True

    def start(self) -> None:
        """Start the serving processes and wait until each is ready (connections made
        before that wait in the backlog)."""
        spawned = [self._spawn(i) for i in range(self.processes)]
        for w in spawned:
            self._wait_ready(w)
        with self._lock:
            self.workers = spawned
        self._monitor = threading.Thread(target=self._watch, name="serve-monitor", daemon=True)
        self._monitor.start()
        self.search_keeper.start()

    def refresh(self) -> None:
        """After writes of this process (the writer's ``RecordStore``): wait until their
        snapshot is published; every serving process reads it from its next query, or within
        a second when idle. Other writers publish their own."""
        if not isinstance(self.store, RecordStore):
            raise StoreError("only the process writing the store can refresh its snapshot")
        self.store.sync()

    def stop(self, grace: float = 10.0) -> None:
        """Ask the serving processes to finish (SIGTERM: uvicorn's graceful shutdown), kill
        those still running after ``grace`` seconds, delete the snapshots they let go (the
        shelf stays: it is the store's, for the next ``serve`` and for writers)."""
        self._stopping.set()
        self.search_keeper.stop()
        if self._monitor is not None:
            self._monitor.join()
        with self._lock:
            workers, self.workers = self.workers, []
        for w in workers:
            with contextlib.suppress(OSError):
                w.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for w in workers:
            try:
                w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("serving process %d did not stop in %.0f s; killed", w.pid, grace)
                w.proc.kill()
                w.proc.wait()
            w.close_status()
        self.shelf.collect()
        self.sock.close()
        self.board.close()
        shutil.rmtree(self.metrics_dir, ignore_errors=True)

    def serve_forever(self) -> None:
        """Start, then run until SIGINT or SIGTERM (call from the main thread)."""
        stop = threading.Event()
        signals = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in signals}
        try:
            self.start()
            log.info("serving on %s with %d processes", self.url, self.processes)
            while not stop.wait(0.5):
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stop()

    @property
    def pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self.workers]

    @property
    def accepting(self) -> list[bool]:
        """Per serving process (slot order): whether it accepts new connections now."""
        return self.board.accepting()

    @property
    def sandboxed(self) -> bool:
        """True when every serving process runs with IP networking denied."""
        with self._lock:
            return bool(self.workers) and all(w.sandboxed for w in self.workers)

    # -- serving processes --------------------------------------------------------------------
    def _spawn(self, index: int) -> ServingProcess:
        status_r, status_w = os.pipe()
        spec = WorkerSpec(
            settings=self.settings,
            store_path=self.store.path,
            base_iri=self.store.base_iri,
            oai_key=self.oai_key,
            snapshot_root=self.shelf.root,
            listen_fd=self.sock.fileno(),
            status_fd=status_w,
            parent=os.getpid(),
            index=index,
            board_fd=self.board.fd,
            slots=self.processes,
            acceptors=self.acceptors,
        )
        env = dict(os.environ)
        root = str(Path(aggregator.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(self.metrics_dir)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "aggregator.serve.worker"],
                pass_fds=[self.sock.fileno(), status_w, self.board.fd],
                stdin=subprocess.PIPE,
                env=env,
                start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops them
            )
        finally:
            os.close(status_w)
        assert proc.stdin is not None
        try:
            proc.stdin.write(pickle.dumps(spec))
            proc.stdin.close()
        except OSError:
            pass  # it died at once: the ready wait reports it
        return ServingProcess(index, proc, status_r)

    def _wait_ready(self, w: ServingProcess) -> None:
        deadline = time.monotonic() + self.start_timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            readable, _, _ = select.select([w.status], [], [], max(0.0, left))
            chunk = os.read(w.status, 4096) if readable else b""
            if not chunk:
                w.proc.kill()
                w.proc.wait()
                w.close_status()
                code = w.proc.returncode
                raise StoreError(f"serving process {w.pid} did not start (exit {code})")
            line += chunk
        report = json.loads(line)
        w.sandboxed = bool(report.get("sandboxed"))
        if not w.sandboxed:
            log.warning("serving process %d runs without the network sandbox", w.pid)

    def _watch(self) -> None:
        """Restart serving processes that exit; delete snapshots no process reads (a writer
        collects too, when it publishes; this covers the time after it ended)."""
        delay = 0.5
        last_collect = 0.0
        while not self._stopping.wait(0.1):
            with self._lock:
                dead = [w for w in self.workers if w.proc.poll() is not None]
            for old in dead:
                code = old.proc.returncode
                self.exit_codes.append(code)
                reason = {
                    EXIT_OVERRUN: "stopped a SPARQL query past its deadline",
                    EXIT_RETIRED: "retired after a SPARQL query past its deadline",
                }.get(code, f"exited with {code}")
                log.warning("serving process %d %s; starting another", old.pid, reason)
                self.board.clear(old.index)  # the standby accepts now, if it did not yet
                old.close_status()
                if time.monotonic() - old.started < 1.0 and code not in (
                    EXIT_OVERRUN,
                    EXIT_RETIRED,
                ):
                    self._stopping.wait(delay)  # crashing at start: do not spin
                    delay = min(delay * 2, 30.0)
                else:
                    delay = 0.5
                if self._stopping.is_set():
                    return
                try:
                    fresh = self._spawn(old.index)
                    self._wait_ready(fresh)
                except (OSError, StoreError) as err:
                    log.error("cannot start a serving process: %s", err)
                    continue  # the dead one stays listed and is tried again
                with self._lock:
                    self.workers[self.workers.index(old)] = fresh
                    self.restarts += 1
            if time.monotonic() - last_collect > 2.0:
                last_collect = time.monotonic()
                self.shelf.collect()
                if not isinstance(self.store, RecordStore):
                    try:
                        self._catch_up()
                    except (OSError, sqlite3.Error, StoreError) as err:
                        log.error("cannot bring the SPARQL snapshot up to the store: %s", err)


class SchedulerProcess:
    """The scheduler beside the serving processes (``serve`` without ``--no-scheduler``):
    ``python -m aggregator.schedule.service CONFIG``, which gets SIGTERM when this process
    ends however it ends, and cancels its running jobs before it exits."""

    def __init__(self, settings: Settings) -> None:
        if settings.config_path is None:
            raise StoreError("the scheduler needs the configuration file it re-reads")
        env = dict(os.environ)
        root = str(Path(aggregator.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        level = logging.getLevelName(max(logging.getLogger().getEffectiveLevel(), logging.INFO))
        self.proc = subprocess.Popen(  # noqa: S603 - our own module and configuration file
            [sys.executable, "-m", "aggregator.schedule.service", str(settings.config_path), level],
            env=env,
        )
        log.info("scheduler started (process %d)", self.proc.pid)

    def stop(self, grace: float = 60.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            log.warning("the scheduler did not stop in %.0f s; killed", grace)
            self.proc.kill()
            self.proc.wait()
