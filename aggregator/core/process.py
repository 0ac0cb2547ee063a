"""What a child process asks of Linux: to be stopped when its parent goes (the serving
workers and the scheduler, children of ``aggregator serve``, even when serve is killed)."""

from __future__ import annotations

import ctypes
import sys

_PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_parent(signal_number: int) -> bool:
    """Ask Linux to send ``signal_number`` to this process when its parent exits."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(_PR_SET_PDEATHSIG, signal_number, 0, 0, 0) == 0)
