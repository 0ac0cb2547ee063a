"""Read-only snapshots of the graph store, one shelf per store, for every reader.

Readers (the SPARQL endpoint of each serving process of ``aggregator serve``) cannot open the
live store: a second read-write ``Store`` on the directory fails on its lock, and
``Store.read_only`` beside a writer is undefined behaviour. They read snapshots made with
``Store.backup`` (a RocksDB checkpoint: hard links, consistent, cheap:
docs/benchmarks.md#record-store). Layout of the shelf
``<store>/snapshots/``::

    gen-000000042/      a snapshot: the graph store as of generation 42
    gen-000000042.lock  readers hold a shared flock on it while the snapshot is open
    CURRENT             the name of the newest snapshot (replaced atomically)
    .shelf.lock         publishing and collecting hold it (exclusive flock), one at a time

A generation is the state database's count of committed graph changes (``meta.generation``,
bumped in the same transaction as each batch of record writes; see ``records.py``), so a
snapshot's name says which committed state it holds, names never repeat over the life of
the store whichever process writes, and an answer read from SQLite can name the same
generation. The writer (the process holding the store, see ``writer_lock.py``) publishes;
any process may collect: a snapshot that is not current and that no reader has open (an
exclusive non-blocking flock on its lock file succeeds) is deleted. :class:`SnapshotReader`
is a reader's side: it opens the current snapshot, notices a newer ``CURRENT`` (one
``stat`` per check) and keeps an older snapshot open while a query still reads it. Locks
die with their process, so a crashed reader never pins a snapshot.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pyoxigraph import Store

log = logging.getLogger(__name__)
CURRENT = "CURRENT"
#: a snapshot holding alone more than this share of the live graph store's bytes, and more
#: than STALE_FLOOR bytes (below, a new generation is more churn than it gives back), is
#: stale: the writer replaces it at a job's end and when it closes the store
STALE_SHARE = 0.10
STALE_FLOOR = 32 * 2**20
_PREFIX = "gen-"


def snapshot_name(generation: int) -> str:
    return f"{_PREFIX}{generation:09d}"


def generation_of(name: str | None) -> int | None:
    """The generation a snapshot name stands for (None for no or a foreign name)."""
    if name is None or not name.startswith(_PREFIX) or not name[len(_PREFIX) :].isdigit():
        return None
    return int(name[len(_PREFIX) :])


class SnapshotShelf:
    """A store's shelf of snapshots: ``publish`` (the writer), ``collect`` (anyone).
    Thread-safe, and safe between processes (the shelf lock)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()

    @property
    def current(self) -> str | None:
        """The name ``CURRENT`` holds now (None before the first snapshot)."""
        try:
            return (self.root / CURRENT).read_text(encoding="ascii").strip() or None
        except FileNotFoundError:
            return None

    @property
    def generation(self) -> int | None:
        return generation_of(self.current)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(self.root / ".shelf.lock", "ab") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
                yield

    def publish(self, source: Store, generation: int) -> Path:
        """Snapshot ``source``, which holds the graphs of ``generation``, and make it current
        (nothing to do when it is current already); readers switch at their next check."""
        name = snapshot_name(generation)
        path = self.root / name
        with self._locked():
            now = generation_of(self.current)
            if now is not None and now >= generation:
                if now > generation:  # cannot happen while generations only grow
                    log.warning("snapshot %s is older than the current one; not published", name)
                return self.root / snapshot_name(now)
            # a folder of this name is left by a publish that died before CURRENT named it:
            # no reader can have opened it
            shutil.rmtree(path, ignore_errors=True)
            source.backup(str(path))
            (self.root / f"{name}.lock").touch()
            tmp = self.root / f"{CURRENT}.tmp"
            tmp.write_text(name, encoding="ascii")
            os.replace(tmp, self.root / CURRENT)
            self._collect(name)
            return path

    @contextlib.contextmanager
    def pinned(self, while_locked: Callable[[], None] = lambda: None) -> Iterator[Path | None]:
        """The current snapshot (None before the first), kept from collection as a reader
        keeps it (a shared flock on its lock file) until the block ends. ``while_locked`` runs
        under the shelf lock, where no snapshot is being published: what it reads of the
        state database cannot be older than the snapshot (``store/backup.py``)."""
        fd = -1
        with self._locked():
            name = self.current
            if name is not None:
                try:
                    fd = os.open(self.root / f"{name}.lock", os.O_RDONLY)
                    fcntl.flock(fd, fcntl.LOCK_SH)
                except FileNotFoundError:
                    name = None
            while_locked()
        try:
            yield self.root / name if name is not None else None
        finally:
            if fd >= 0:
                os.close(fd)

    def stale(self, live: Path) -> int:
        """The bytes the current snapshot holds alone when they are more than
        :data:`STALE_SHARE` of the live graph store at ``live`` and :data:`STALE_FLOOR`
        (worth a fresh snapshot); else 0."""
        alone = self.held_alone()
        if alone <= max(STALE_SHARE * _disk_bytes(live), STALE_FLOOR):
            return 0
        return alone

    def held_alone(self) -> int:
        """Bytes of the current snapshot's files that nothing else links (``st_nlink`` 1):
        files the live store has compacted away since the snapshot was published (and the
        checkpoint's own small manifest and options), freed only with the snapshot."""
        name = self.current
        if name is None:
            return 0
        alone = 0
        for entry in (self.root / name).glob("*"):
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # collected meanwhile
                continue
            if st.st_nlink == 1:
                alone += st.st_blocks * 512
        return alone

    def has_readers(self) -> bool:
        """Whether some process has a snapshot of this shelf open (holds its shared flock)."""
        for lock_path in self.root.glob(f"{_PREFIX}*.lock"):
            with contextlib.suppress(FileNotFoundError), open(lock_path, "rb") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return True
        return False

    def collect(self) -> None:
        """Delete the snapshots that are not current and that no reader has open."""
        if not self.root.is_dir():
            return
        with self._locked():
            self._collect(self.current)

    def _collect(self, current: str | None) -> None:
        for lock_path in self.root.glob(f"{_PREFIX}*.lock"):
            name = lock_path.name.removesuffix(".lock")
            if name == current:
                continue
            with open(lock_path, "rb") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a reader still has it open
                shutil.rmtree(self.root / name, ignore_errors=True)  # before the unlock
                lock_path.unlink(missing_ok=True)
        for folder in self.root.glob(f"{_PREFIX}*"):  # a publish that died before its lock
            lock_path = self.root / f"{folder.name}.lock"
            if folder.is_dir() and folder.name != current and not lock_path.exists():
                shutil.rmtree(folder, ignore_errors=True)


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

    @property
    def generation(self) -> int | None:
        return generation_of(self.name)

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


def _disk_bytes(folder: Path) -> int:
    total = 0
    for entry in folder.glob("*"):
        with contextlib.suppress(FileNotFoundError):
            total += entry.stat(follow_symlinks=False).st_blocks * 512
    return total


def _close(snap: Snapshot) -> None:
    del snap.store  # the last reference: RocksDB closes the snapshot
    with contextlib.suppress(OSError):
        os.close(snap.lock_fd)


def remove_stale_shelves(parent: Path) -> None:
    """Delete shelves named ``<pid>-...`` whose process no longer runs: the per-process
    shelves of earlier versions, under ``<store>/sparql-snapshots/``."""
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
    with contextlib.suppress(OSError):
        parent.rmdir()  # when it is empty
