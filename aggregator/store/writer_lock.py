"""One writer per store: an exclusive flock on ``<store>/writer.lock`` that says who holds it.

The record store admits one read-write process (the embedded graph store's own lock enforces
it too, with a RocksDB error that names nothing). :class:`WriterLock` is taken first, without
waiting, by every process that opens a :class:`~aggregator.store.records.RecordStore`:
``aggregator harvest``, ``rejected revalidate``, ``quality`` when it keeps its measurements,
``aggregator serve`` for the moment it takes to make the first snapshot, the demo. The lock
file holds a line about its holder (pid, command, since when), so a second writer gets a
:class:`~aggregator.core.errors.StoreBusyError` that names it. A lock dies with its process, so a
crashed writer never blocks the next one, and a job left ``running`` when the lock is taken
belongs to a dead process.

Readers (the serving processes, ``jobs``, ``records``, ``rejected list``, ...) never take it:
they read SQLite read-only and the graph store through snapshots (``snapshots.py``).
"""

from __future__ import annotations

import fcntl
import os
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path

from aggregator.core.errors import StoreBusyError

LOCK_FILE = "writer.lock"


def _describe() -> str:
    command = " ".join(shlex.quote(a) for a in [os.path.basename(sys.argv[0]), *sys.argv[1:]])
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"process {os.getpid()} ({command or 'python'}) since {since}"


class WriterLock:
    def __init__(self, store_path: Path) -> None:
        store_path.mkdir(parents=True, exist_ok=True)
        self.path = store_path / LOCK_FILE
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise StoreBusyError(
                f"the store at {store_path} is being written by {holder}; one process writes"
                " at a time: run this again when it has finished (serving and the read-only"
                " commands work meanwhile)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, (_describe() + "\n").encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # the flock goes with the last descriptor
            self._fd = -1
