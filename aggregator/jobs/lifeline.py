"""End a helper process when the process it works for ends, however that one ends.

The mapping workers of a harvest are children of multiprocessing's fork server, not of the
harvest: ``prctl(PR_SET_PDEATHSIG)`` (which serving processes use) would watch the fork
server, which itself stays up as long as any worker holds its "alive" pipe, and the workers
wait on a queue whose write end they hold themselves. Killed with SIGKILL, the harvest left
them running forever. :func:`end_with` watches the harvest's pid through a pidfd (Linux 5.3+;
a once-a-second check elsewhere) in a daemon thread and ends this process when it exits.
"""

from __future__ import annotations

import os
import select
import threading
import time


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def end_with(pid: int, code: int = 1) -> None:
    """Exit (``os._exit(code)``) as soon as process ``pid`` has ended."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(code)
    except (AttributeError, OSError):
        fd = -1

    def watch() -> None:
        if fd >= 0:
            select.select([fd], [], [])  # readable once the process has exited
        else:
            while not _gone(pid):
                time.sleep(1.0)
        os._exit(code)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()
