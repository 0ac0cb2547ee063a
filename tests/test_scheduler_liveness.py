"""Whether a scheduler runs for a data directory (aggregator/schedule/liveness.py), with real
processes holding the real scheduler lock: running while one holds it; not after a clean
stop, nor after a kill -9 (its pid left in the file), nor when the file names a live process
that holds no lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from aggregator.schedule.liveness import (
    LOCK_FILE,
    SchedulerLock,
    scheduler_holder,
    scheduler_running,
)

HOLDER = """
import sys, time
from pathlib import Path
from aggregator.schedule.liveness import SchedulerLock
lock = SchedulerLock(Path(sys.argv[1]))
print("locked", flush=True)
sys.stdin.readline()  # until told to stop
lock.release()
"""


def holder(store: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "locked"
    return child


def test_no_scheduler_ever(tmp_path: Path) -> None:
    assert scheduler_holder(tmp_path) is None
    assert not scheduler_running(tmp_path / "missing")
    assert not (tmp_path / LOCK_FILE).exists()  # asking creates nothing


def test_running_while_a_scheduler_holds_the_lock_not_after_a_clean_stop(tmp_path: Path) -> None:
    child = holder(tmp_path)
    try:
        assert scheduler_holder(tmp_path) == f"process {child.pid}"
        assert scheduler_running(tmp_path)
    finally:
        assert child.stdin is not None
        child.stdin.write("stop\n")
        child.stdin.close()
        child.wait(timeout=60)
    assert (tmp_path / LOCK_FILE).read_text() == ""
    assert scheduler_holder(tmp_path) is None


def test_a_killed_scheduler_is_not_running_though_its_pid_stays(tmp_path: Path) -> None:
    child = holder(tmp_path)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=60)
    assert str(child.pid) in (tmp_path / LOCK_FILE).read_text()
    assert not scheduler_running(tmp_path)
    SchedulerLock(tmp_path).release()  # and a new scheduler can start


def test_a_live_pid_without_the_lock_is_not_a_scheduler(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_text(f"process {os.getpid()}\n")  # alive, holds no lock
    assert not scheduler_running(tmp_path)
    lock = SchedulerLock(tmp_path)  # this very process takes the lock: now it is one
    try:
        assert scheduler_holder(tmp_path) == f"process {os.getpid()}"
    finally:
        lock.release()
