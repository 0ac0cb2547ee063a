"""Output and signals of ``aggregator harvest`` that fit a terminal, cron and systemd alike.

- :class:`Progress`: a live line (rich) on a terminal; otherwise a plain, timestamped line
  when a job starts and every ``interval`` seconds (no control characters in a cron mail or
  the journal);
- :func:`cancel_on_interrupt`: the first Ctrl-C (SIGINT) or SIGTERM asks the running job to
  stop after its current batch: it ends ``cancelled``, keeps what it stored, withdraws
  nothing, and the command exits 130 without a traceback. A second Ctrl-C ends the process
  at once (the journal makes that safe: the job is marked failed when the store is next
  opened);
- :func:`summary`: the end of ``harvest --all``: counts, then each failed, partial or
  cancelled source once, with its reason.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import click

from aggregator.harvest.base import Listing
from aggregator.store.journal import JobLog, JobRow
from aggregator.store.stats import human


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Progress:
    """rich progress on a terminal, a plain line every ``interval`` seconds otherwise."""

    def __init__(self, source: str, interval: float = 10.0, tty: bool | None = None) -> None:
        self.source = source
        self.interval = interval
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._last = time.monotonic()
        self._rich: Any = None
        self._task: Any = None
        if self.tty:
            from rich.progress import Progress as RichProgress
            from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

            self._rich = RichProgress(
                SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn()
            )
            self._rich.start()
            self._task = self._rich.add_task(source)
        else:
            click.echo(f"{stamp()} {source}: harvesting", err=True)

    def __call__(self, job: JobLog, listing: Listing) -> None:
        counts = " ".join(f"{k}={v}" for k, v in sorted(job.counters.items()) if v)
        total = f"/{listing.expected_total}" if listing.expected_total else ""
        text = f"{self.source}: {listing.seen}{total} listed  {counts}"
        if self._rich is not None:
            self._rich.update(self._task, description=text)
        elif time.monotonic() - self._last >= self.interval:
            self._last = time.monotonic()
            click.echo(f"{stamp()} {text}", err=True)

    def stop(self) -> None:
        if self._rich is not None:
            self._rich.stop()


@contextmanager
def cancel_on_interrupt(cancel: threading.Event) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM set ``cancel`` (a second SIGINT exits 130)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if cancel.is_set() and signum == signal.SIGINT:
            click.echo("interrupted again: stopping now", err=True)
            os._exit(130)
        cancel.set()
        click.echo(
            "cancelling: the running job stops after its current batch and keeps what it"
            " stored (Ctrl-C again to stop at once)",
            err=True,
        )

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def summary(jobs: Sequence[JobRow], skipped: Sequence[str] = ()) -> list[str]:
    """The closing lines of a run of several jobs: totals, then each problem once."""
    statuses = Counter(j.status for j in jobs)
    records: Counter[str] = Counter()
    for j in jobs:
        records.update({k: v for k, v in j.counters.items() if v})
    order = ("succeeded", "partial", "failed", "cancelled")
    shown = ", ".join(f"{statuses[s]} {s}" for s in order if statuses[s])
    lines = [f"summary: {len(jobs)} job(s): {shown or 'none'}"]
    if records:
        lines.append("  records: " + " ".join(f"{k}={v}" for k, v in sorted(records.items())))
    for j in jobs:
        if j.status in ("failed", "partial", "cancelled"):
            lines.append(f"  {j.status}: {j.source} (job {j.id or '-'}): {j.message or '-'}")
    if skipped:
        lines.append(f"  not harvested (cancelled before their turn): {', '.join(skipped)}")
    return lines


def compaction_lines(compacted: dict[str, Any] | None, jobs: Sequence[JobRow]) -> list[str]:
    """What the one compaction after several jobs did (``pipeline.compact_after_jobs``), or
    that a cancelled run left the store uncompacted."""
    if compacted is None:
        if any("optimize_deferred" in j.listing for j in jobs):
            return ["store: not compacted (cancelled): run `aggregator store optimize`"]
        return []
    if "error" in compacted:
        return [f"store: the compaction after the jobs failed: {compacted['error']}"]
    return [
        f"store: compacted once after the jobs ({compacted['written']} records written) in"
        f" {compacted['seconds']} s: {human(compacted['bytes_before'])} ->"
        f" {human(compacted['bytes_after'])}"
    ]
