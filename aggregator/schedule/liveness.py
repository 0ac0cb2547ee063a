"""Whether a scheduler is alive for a data directory, read from outside it (no lock taken).

A scheduler (``aggregator scheduler``, or the child ``aggregator serve`` starts) holds an
exclusive ``flock`` on ``<store>/scheduler.lock`` for its whole life and writes ``process
PID`` into the file (:class:`aggregator.schedule.runner.SchedulerLock`); a clean stop empties
the file, a killed one leaves its pid behind. So a scheduler is alive when the file names a
process that still runs and, where the kernel lists its locks (``/proc/locks`` on Linux),
that process holds a lock on this very file (a pid reused by an unrelated process after a
``kill -9`` holds none).

Probing the lock itself (taking it for a moment) is not done: a scheduler starting at that
moment would find the lock held and refuse to start.
"""

from __future__ import annotations

import os
from pathlib import Path

from aggregator.schedule.runner import LOCK_FILE

PROC_LOCKS = Path("/proc/locks")


def scheduler_pid(store_path: Path) -> int | None:
    """The process id of the scheduler alive for ``store_path``, else None."""
    path = store_path / LOCK_FILE
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
        inode = path.stat().st_ino
    except OSError:
        return None
    word = text.removeprefix("process").strip()
    if not word.isdigit():
        return None  # empty: the last scheduler stopped cleanly (or none ever ran)
    pid = int(word)
    if not _running(pid):
        return None
    held = _lock_holders(inode)
    if held is not None and pid not in held:
        return None
    return pid


def scheduler_alive(store_path: Path) -> bool:
    return scheduler_pid(store_path) is not None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def _lock_holders(inode: int) -> set[int] | None:
    """The pids holding a flock on the file of that inode, per /proc/locks; None where the
    kernel does not list its locks (then the pid alone decides)."""
    try:
        lines = PROC_LOCKS.read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return None
    holders: set[int] = set()
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 12694 fe:00:2148029 0 EOF" (a "->" marks a waiter)
        parts = line.split()
        if len(parts) < 6 or "->" in parts or parts[1] != "FLOCK":
            continue
        where = parts[5].rsplit(":", 1)
        if len(where) == 2 and where[1] == str(inode) and parts[4].isdigit():
            holders.add(int(parts[4]))
    return holders
