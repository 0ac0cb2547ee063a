"""What every ``aggregator`` command shares: the context (settings, store) and output helpers.

Commands that change the store open it with :meth:`Ctx.store` (the writer: one process at a
time, a clear error naming the one writing now); commands that only read it use
:meth:`Ctx.reader` (SQLite read-only, no lock), so they work while ``serve`` runs and while a
harvest writes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from aggregator.config import Settings, load_settings
from aggregator.core.errors import AggregatorError, ConfigError, StoreVersionError
from aggregator.store.journal import JobRow
from aggregator.store.names import StoreNames
from aggregator.store.records import STATE_FILE, ReadOnlyStore, RecordStore


class Ctx:
    """``config_given`` says how the configuration was named: ``"-c"``, ``"$AGGREGATOR_CONFIG"``
    or ``""`` (the default ``aggregator.toml`` of the working directory)."""

    def __init__(self, config: Path, config_given: str = "") -> None:
        self.config_path = config
        self.config_given = config_given
        self._settings: Settings | None = None

    def missing_config(self) -> ConfigError:
        """The error for a configuration file that does not exist, saying what was looked for."""
        path = self.config_path
        if self.config_given:
            return ConfigError(
                f"{self.config_given} names {path}, which does not exist"
                " (create it with `aggregator source add`, or fix the path)"
            )
        return ConfigError(
            f"no aggregator.toml in {Path.cwd()} (looked for {path.absolute()}): run in a data"
            " directory, name one with -c FILE or $AGGREGATOR_CONFIG, or create one with"
            " `aggregator source add`"
        )

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            if not self.config_path.exists():
                raise self.missing_config()
            self._settings = load_settings(self.config_path)
        return self._settings

    def store_exists(self) -> bool:
        return (self.settings.store_path / STATE_FILE).is_file()

    def _no_store(self) -> ConfigError:
        return ConfigError(
            f"no store at {self.settings.store_path} yet (looked for {STATE_FILE} there, per"
            f" {self.config_path}): nothing has been harvested"
        )

    def names(self) -> StoreNames:
        """The store's location and IRIs, nothing opened (``serve``)."""
        return StoreNames(self.settings.store_path, self.settings.base_iri)

    @contextmanager
    def reader(self) -> Iterator[ReadOnlyStore]:
        """The store read-only, beside whichever process writes it (the read commands); a
        store that does not exist yet is an error, and none is made."""
        s = self.settings
        if not self.store_exists():
            raise self._no_store()
        store = ReadOnlyStore(s.store_path, s.base_iri)
        try:
            yield store
        finally:
            store.close()

    @contextmanager
    def store(self, *, create: bool = True) -> Iterator[RecordStore]:
        """The store read-write: this process becomes its one writer until the block ends;
        with ``create=False`` a store that does not exist yet is an error."""
        s = self.settings
        if not create and not self.store_exists():
            raise self._no_store()
        store = RecordStore(s.store_path, s.base_iri)
        from aggregator.jobs.notify import attach_default

        attach_default(s)  # the [notify] rules hear this process's harvest events
        try:
            yield store
        finally:
            store.close()


pass_ctx = click.make_pass_decorator(Ctx)


def fail(err: AggregatorError) -> None:
    click.echo(f"error: {err.message}", err=True)
    sys.exit(2 if isinstance(err, ConfigError | StoreVersionError) else 1)


def job_line(job: JobRow) -> str:
    counts = " ".join(f"{k}={v}" for k, v in sorted(job.counters.items()) if v) or "no records"
    msg = f" - {job.message}" if job.message else ""
    if job.status == "running" and not _alive(job.listing.get("pid")):
        # read-only commands mark nothing: the next writer marks it failed
        msg += " - its process is gone (marked failed when the store is next written)"
    return f"job {job.id} {job.source}: {job.status}  {counts}{msg}"


def _alive(pid: object) -> bool:
    if not isinstance(pid, int):
        return True  # not known: say nothing
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
