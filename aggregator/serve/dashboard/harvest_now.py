""" "Harvest now" and "full re-harvest" from the dashboard: start ``aggregator harvest`` for one
source as a process of its own, detached from the serving process.

The serving processes never hold the store open for writing; a harvest takes the store's
writer lock like any other ``aggregator harvest`` (a second one for the same store waits or
fails with its own message in the log), and the dashboard follows the job through the state
database like every other job. The process's output goes to ``dashboard-harvests.log`` in the
store folder.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from aggregator.config import Settings
from aggregator.errors import ConfigError

LOG = "dashboard-harvests.log"


def command(config_path: Path, source: str, *, full: bool) -> list[str]:
    cmd = [
        sys.executable,
        "-c",
        "from aggregator.cli import main; main()",
        "-c",
        str(config_path),
        "harvest",
        source,
    ]
    return [*cmd, "--full"] if full else cmd


def start_harvest(settings: Settings, source: str, *, full: bool = False) -> int:
    """Start the harvest; returns the process id (the job shows up in the jobs list)."""
    if settings.config_path is None:
        raise ConfigError("the server runs without a configuration file: nothing to harvest")
    settings.source(source)  # a clear error for an unknown source
    log = (settings.store_path / LOG).open("ab")
    try:
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments, no shell
            command(settings.config_path, source, full=full),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()
    # reap it when it ends (no zombie left in the serving process)
    threading.Thread(target=proc.wait, name=f"harvest-{source}", daemon=True).start()
    return proc.pid
