"""What every ``aggregator`` command shares: the context (settings, store) and output helpers."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from aggregator.config import Settings, load_settings
from aggregator.errors import AggregatorError, ConfigError
from aggregator.jobs.journal import JobRow
from aggregator.store.records import RecordStore


class Ctx:
    def __init__(self, config: Path) -> None:
        self.config_path = config
        self._settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.config_path)
        return self._settings

    @contextmanager
    def store(self) -> Iterator[RecordStore]:
        s = self.settings
        store = RecordStore(s.store_path, s.base_iri)
        try:
            yield store
        finally:
            store.close()


pass_ctx = click.make_pass_decorator(Ctx)


def fail(err: AggregatorError) -> None:
    click.echo(f"error: {err.message}", err=True)
    sys.exit(2 if isinstance(err, ConfigError) else 1)


def job_line(job: JobRow) -> str:
    counts = " ".join(f"{k}={v}" for k, v in sorted(job.counters.items()) if v) or "no records"
    msg = f" - {job.message}" if job.message else ""
    return f"job {job.id} {job.source}: {job.status}  {counts}{msg}"
