"""The scheduler as a process: ``aggregator scheduler``, or a child of ``aggregator serve``
(``python -m aggregator.schedule.service CONFIG``, ended with its parent even on SIGKILL).

SIGTERM or SIGINT stop it cleanly: running jobs are cancelled (each ends ``cancelled`` and is
run again at the next allowed moment after a restart), then the store is closed.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

from aggregator.config import Settings, load_settings
from aggregator.schedule.book import Book
from aggregator.schedule.runner import ConfigFile, SchedulerLock, StoreJobs
from aggregator.schedule.scheduler import Scheduler

log = logging.getLogger(__name__)


def run_scheduler(settings: Settings, stop: threading.Event, interval: float = 1.0) -> None:
    """Schedule the store of ``settings`` until ``stop`` is set (raises StoreBusyError when
    another scheduler runs for that store)."""
    lock = SchedulerLock(settings.store_path)
    book = Book(settings.store_path)
    try:
        jobs = StoreJobs(settings)
        scheduler = Scheduler(ConfigFile(settings), book, jobs, prune=jobs.prune)
        log.info("scheduler running for %s", settings.store_path)
        scheduler.run_forever(stop, interval, each_tick=notify_tick)
    finally:
        book.close()
        lock.release()


def notify_tick(settings: Settings) -> None:
    """The notifier of the (possibly re-read) configuration hears the jobs' events on the
    process's bus; escalate lasting conditions, mail the digests of ended days."""
    from aggregator.jobs.notify import attach_default
    from aggregator.jobs.notify.wiring import flush_digests

    notifier = attach_default(settings)
    if notifier is not None:
        notifier.tick()
        flush_digests()


def serve_signals(stop: threading.Event) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())


def main(argv: list[str] | None = None) -> int:
    from aggregator.core.errors import AggregatorError
    from aggregator.core.process import die_with_parent

    args = sys.argv[1:] if argv is None else argv
    die_with_parent(signal.SIGTERM)  # serve's child: a clean stop when serve goes, even killed
    logging.basicConfig(
        level=args[1] if len(args) > 1 else "INFO", format="%(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()
    serve_signals(stop)
    try:
        run_scheduler(load_settings(Path(args[0])), stop)
    except AggregatorError as err:
        log.error("scheduler not started: %s", err.message)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
