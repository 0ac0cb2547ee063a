"""Whether a scheduler runs for a store: ``<store>/scheduler.lock``, an exclusive flock its
scheduler holds for as long as it runs (``serve``'s scheduler process, ``aggregator
scheduler``).

The lock is the liveness sign: the kernel drops it the moment the process ends, however it
ends (even SIGKILL), so there is no heartbeat to age out and no stale pid to trust. The file
also names the holder (``process 4242``) for messages.

- :class:`SchedulerLock`: taken by the scheduler; a second one for the same store is refused,
  naming the first;
- :func:`scheduler_running` / :func:`scheduler_holder`: asked by ``schedule now``,
  ``harvest`` (which hands its jobs to a running scheduler) and the dashboard's "Harvest now".
  They never create the file and hold a shared lock only for the instant of the probe.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from aggregator.core.errors import StoreBusyError

LOCK_FILE = "scheduler.lock"


class SchedulerLock:
    """One scheduler per store: an exclusive flock held for the scheduler's lifetime."""

    def __init__(self, store_path: Path, patience: float = 1.0) -> None:
        store_path.mkdir(parents=True, exist_ok=True)
        path = store_path / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        # a probe (scheduler_running) holds a shared lock for an instant: wait that out
        deadline = time.monotonic() + patience
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                holder = _holder_text(fd)
                os.close(fd)
                raise StoreBusyError(
                    f"a scheduler already runs for the store at {store_path}: {holder}"
                ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = -1


def _holder_text(fd: int) -> str:
    return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"


def scheduler_holder(store_path: Path) -> str | None:
    """``"process 4242"`` when a scheduler runs for the store at ``store_path``, else None."""
    try:
        fd = os.open(store_path / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None  # no scheduler has ever run here
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder_text(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def scheduler_running(store_path: Path) -> bool:
    """Whether a scheduler runs now for the store at ``store_path`` (``settings.store_path``):
    one that takes "harvest now" requests within a second."""
    return scheduler_holder(store_path) is not None


def no_scheduler_message(store_path: Path) -> str:
    """What ``schedule now`` and the like say when nothing would take their request."""
    return (
        f"no scheduler is running for the store at {store_path}: start one with"
        " `aggregator serve` (or `aggregator scheduler`), or harvest in this process with"
        " `aggregator harvest NAME`"
    )
