"""Read-only snapshots of the graph store for the SPARQL endpoint.

The serving processes cannot open the live store: a second read-write ``Store`` on the
directory fails on its lock, and ``Store.read_only`` beside a writer is undefined behaviour.
They read snapshots made with ``Store.backup`` (a RocksDB checkpoint: hard links, consistent,
cheap). Layout of a shelf::

    <root>/gen-000001/      a snapshot
    <root>/gen-000001.lock  readers hold a shared flock on it while the snapshot is open
    <root>/CURRENT          the name of the newest snapshot (replaced atomically)

:class:`SnapshotShelf` is the writer's side (the process that owns the store): it publishes a
snapshot after writes and deletes old ones once no reader holds their lock (an exclusive
non-blocking flock succeeds). :class:`SnapshotReader` is each serving process's side: it opens
the current snapshot, notices a newer ``CURRENT`` (one ``stat`` per check) and keeps an older
snapshot open while a query still reads it. Locks die with their process, so a crashed
reader never pins a snapshot.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

from pyoxigraph import Store

log = logging.getLogger(__name__)
CURRENT = "CURRENT"


class SnapshotShelf:
    """Publishes snapshots of ``source`` under ``root``. Thread-safe."""

    def __init__(self, root: Path, source: Store) -> None:
        self.root = root
        self.source = source
        self._lock = threading.Lock()
        self._generation = 0
        self.current: str | None = None

    def publish(self) -> Path:
        """Snapshot the store as it is now; readers switch to it at their next check."""
        with self._lock:
            self.root.mkdir(parents=True, exist_ok=True)
            self._generation += 1
            name = f"gen-{self._generation:06d}"
            path = self.root / name
            shutil.rmtree(path, ignore_errors=True)
            self.source.backup(str(path))
            (self.root / f"{name}.lock").touch()
            tmp = self.root / f"{CURRENT}.tmp"
            tmp.write_text(name, encoding="ascii")
            os.replace(tmp, self.root / CURRENT)
            self.current = name
            self._collect()
            return path

    def collect(self) -> None:
        """Delete the snapshots that are not current and that no reader has open."""
        with self._lock:
            self._collect()

    def _collect(self) -> None:
        if not self.root.is_dir():
            return
        for lock_path in self.root.glob("gen-*.lock"):
            name = lock_path.name.removesuffix(".lock")
            if name == self.current:
                continue
            with open(lock_path, "rb") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a reader still has it open
                shutil.rmtree(self.root / name, ignore_errors=True)  # before the unlock
                lock_path.unlink(missing_ok=True)

    def remove(self) -> None:
        """Delete the whole shelf (when serving stops)."""
        with self._lock:
            shutil.rmtree(self.root, ignore_errors=True)
            self.current = None


@dataclass(eq=False)
class Snapshot:
    name: str
    store: Store
    lock_fd: int
    users: int = 0
    retired: bool = field(default=False)


class SnapshotReader:
    """One serving process's view of a shelf. ``acquire``/``release`` around each query; call
    ``check`` now and then (it is also done by ``acquire``). Thread-safe."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._current = str(root / CURRENT)  # a str: stat'ed for every query
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._seen: tuple[int, int] | None = None  # CURRENT's (inode, mtime) when last read

    @property
    def name(self) -> str | None:
        snap = self._snapshot
        return snap.name if snap else None

    def acquire(self) -> Snapshot:
        self.check()
        with self._lock:
            snap = self._snapshot
            if snap is None:
                raise FileNotFoundError(f"no SPARQL snapshot published under {self.root}")
            snap.users += 1
            return snap

    def release(self, snap: Snapshot) -> None:
        with self._lock:
            snap.users -= 1
            if snap.retired and snap.users == 0:
                _close(snap)

    def check(self) -> None:
        """Switch to the newest snapshot if ``CURRENT`` changed."""
        try:
            st = os.stat(self._current)
        except FileNotFoundError:
            return
        seen = (st.st_ino, st.st_mtime_ns)  # a new file each time: a new inode
        if seen == self._seen and self._snapshot is not None:
            return
        with self._lock:
            if seen == self._seen and self._snapshot is not None:
                return
            fresh = self._open_current()
            if fresh is None:
                return
            old, self._snapshot, self._seen = self._snapshot, fresh, seen
            if old is not None:
                old.retired = True
                if old.users == 0:
                    _close(old)

    def close(self) -> None:
        with self._lock:
            snap, self._snapshot = self._snapshot, None
            if snap is not None:
                snap.retired = True
                if snap.users == 0:
                    _close(snap)

    def _open_current(self) -> Snapshot | None:
        for _ in range(5):  # a publish may retire the name we read; read again
            try:
                name = (self.root / CURRENT).read_text(encoding="ascii").strip()
            except FileNotFoundError:
                return None
            if self._snapshot is not None and name == self._snapshot.name:
                return None
            try:
                fd = os.open(self.root / f"{name}.lock", os.O_RDONLY)
            except FileNotFoundError:
                continue
            fcntl.flock(fd, fcntl.LOCK_SH)
            if not (self.root / name).is_dir():  # collected before our lock: read again
                os.close(fd)
                continue
            try:
                store = Store.read_only(str(self.root / name))
            except OSError:
                os.close(fd)
                raise
            return Snapshot(name, store, fd)
        log.warning("could not open the current SPARQL snapshot under %s", self.root)
        return None


def _close(snap: Snapshot) -> None:
    del snap.store  # the last reference: RocksDB closes the snapshot
    with contextlib.suppress(OSError):
        os.close(snap.lock_fd)


def remove_stale_shelves(parent: Path) -> None:
    """Delete shelves named ``<pid>-...`` whose process no longer runs (a crash, a kill -9)."""
    if not parent.is_dir():
        return
    for folder in parent.iterdir():
        pid = folder.name.split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass
