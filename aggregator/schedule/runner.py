"""Running the scheduler for real: jobs against the store, the configuration as it changes,
one scheduler per store.

- :class:`StoreJobs` runs a job with :func:`aggregator.jobs.pipeline.run_source`. It opens the
  store (becoming its one writer) when a job starts and no other job holds it open, and closes
  it when the last running job ends, so ``aggregator harvest`` and the other writing commands
  work while the scheduler is idle; should one of them hold the store, the job is ``busy`` and
  tried again later. All jobs share one :class:`~aggregator.net.client.HttpClient`: the per-host
  limit (``[http] per_host_concurrency``) holds across the sources harvested at once.
  :meth:`StoreJobs.prune` is the scheduler's daily prune, as the writer in the same way.
- :class:`ConfigFile` re-reads ``aggregator.toml`` when it changes (a source added, edited or
  paused from the CLI or the dashboard); a broken edit is logged and the last good
  configuration kept.
- :class:`~aggregator.schedule.liveness.SchedulerLock`: ``<store>/scheduler.lock``, so
  ``serve`` and ``aggregator scheduler`` never both schedule one store (and others can tell
  that a scheduler runs).
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime

from aggregator.config import Settings, load_settings
from aggregator.core.errors import ConfigError
from aggregator.schedule.liveness import LOCK_FILE, SchedulerLock
from aggregator.schedule.scheduler import JobResult
from aggregator.store.records import RecordStore

log = logging.getLogger(__name__)

__all__ = ["LOCK_FILE", "ConfigFile", "SchedulerLock", "StoreJobs"]


class StoreJobs:
    """The scheduler's ``run_job``: one harvest job per call, the store open while any runs."""

    def __init__(self, settings: Settings) -> None:
        from aggregator.net.client import HttpClient

        self.http = HttpClient(settings.http)
        self._lock = threading.Lock()
        self._store: RecordStore | None = None
        self._users = 0

    def _acquire(self, settings: Settings) -> RecordStore:
        with self._lock:
            if self._store is None:
                self._store = RecordStore(settings.store_path, settings.base_iri)
            self._users += 1
            return self._store

    def _release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._store is not None:
                store, self._store = self._store, None
                store.close()

    def __call__(
        self,
        settings: Settings,
        source: str,
        full: bool,
        cancel: threading.Event,
        *,
        force: bool = False,
        allow_mass_withdrawal: bool = False,
    ) -> JobResult:
        from aggregator.jobs.pipeline import RunOptions, run_source

        options = RunOptions(
            full=full, force=force, allow_mass_withdrawal=allow_mass_withdrawal, cancel=cancel
        )
        store = self._acquire(settings)  # StoreBusyError: the scheduler tries again later
        try:
            job = run_source(settings, store, source, options, http=self.http)
        finally:
            self._release()
        return JobResult(job.status, job.id, job.message, not job.listing.get("incremental"))

    def prune(self, settings: Settings, now: datetime, stop: threading.Event) -> list[str]:
        """Prune the store by ``[retention]`` as of ``now`` (the scheduler's ``prune``); what
        it freed, in words. StoreBusyError: another process writes the store."""
        from aggregator.schedule.book import BOOK_FILE
        from aggregator.store.retention import prune

        store = self._acquire(settings)
        try:
            book = store.path / BOOK_FILE
            report = prune(store.db.path, settings.retention, now, book_path=book, stop=stop)
        finally:
            self._release()
        return report.lines()


class ConfigFile:
    """The settings, re-read from their file when it changes."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self.path = settings.config_path
        self._stamp = self._stat()

    def _stat(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def __call__(self) -> Settings:
        stamp = self._stat()
        if stamp is not None and stamp != self._stamp and self.path is not None:
            self._stamp = stamp
            try:
                self._settings = load_settings(self.path)
                log.info("configuration re-read from %s", self.path)
            except ConfigError as err:
                log.error("configuration not re-read (the last good one stays): %s", err.message)
        return self._settings
