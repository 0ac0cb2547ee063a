"""``aggregator harvest`` while a scheduler runs for the store: the jobs are handed to it and
followed to their end (:mod:`aggregator.schedule.handoff`), with the output and exit codes of
a harvest run in this process: a line per job on stdout, progress on stderr, the summary of
several jobs, exit 0/1/3/4/130. Ctrl-C or SIGTERM cancel them (the scheduler stops each after
its current batch); a second Ctrl-C stops following at once."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, NoReturn

import click

from aggregator.cli.context import Ctx, job_line
from aggregator.jobs.unattended import cancel_on_interrupt, stamp, summary
from aggregator.schedule.handoff import Followed, HandOff
from aggregator.schedule.liveness import scheduler_holder
from aggregator.store.journal import JobRow
from aggregator.store.records import STATE_FILE, ReadOnlyStore

POLL = 0.25  # seconds between looks at the book (the scheduler ticks every second)
QUIET = 3.0  # seconds a request may wait unremarked (the scheduler takes it within one)


class FollowProgress:
    """Live lines of the followed jobs: one rich task each on a terminal; otherwise a plain
    timestamped line when a job starts, and every ``interval`` seconds while it runs."""

    def __init__(self, interval: float = 10.0, tty: bool | None = None) -> None:
        self.interval = interval
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._rich: Any = None
        self._tasks: dict[str, Any] = {}
        self._last: dict[str, tuple[str, float]] = {}
        if self.tty:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._rich = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn()
            )
            self._rich.start()

    def update(self, source: str, phase: str, text: str) -> None:
        """``text`` now; a plain line at once when ``phase`` changed, else every interval."""
        if self._rich is not None:
            if source not in self._tasks:
                self._tasks[source] = self._rich.add_task(text)
            self._rich.update(self._tasks[source], description=text)
            return
        last = self._last.get(source)
        if last is None or last[0] != phase or time.monotonic() - last[1] >= self.interval:
            self._last[source] = (phase, time.monotonic())
            click.echo(f"{stamp()} {text}", err=True)

    def done(self, source: str) -> None:
        if self._rich is not None and source in self._tasks:
            self._rich.remove_task(self._tasks.pop(source))

    def stop(self) -> None:
        if self._rich is not None:
            self._rich.stop()


class _Jobs:
    """The state database read-only (it may not exist before the first job)."""

    def __init__(self, c: Ctx) -> None:
        self.c = c
        self._store: ReadOnlyStore | None = None

    def _open(self) -> ReadOnlyStore | None:
        s = self.c.settings
        if self._store is None and (s.store_path / STATE_FILE).is_file():
            self._store = ReadOnlyStore(s.store_path, s.base_iri)
        return self._store

    def get(self, job_id: int) -> JobRow:
        store = self._open()
        assert store is not None  # the job's own row is in it
        return store.jobs.get(job_id)

    def running(self, source: str) -> JobRow | None:
        store = self._open()
        if store is None:
            return None
        found = store.jobs.recent(source, limit=1)
        return found[0] if found and found[0].status == "running" else None

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def _no_job(f: Followed) -> JobRow:
    """A run that ended before its job was made (the scheduler's own error)."""
    assert f.run is not None
    when = f.run.started.isoformat()
    return JobRow(0, f.source, when, when, when, "failed", f.full, {}, {}, f.run.message)


def harvest_by_scheduler(
    c: Ctx,
    names: list[str],
    holder: str,
    *,
    full: bool,
    force: bool,
    allow_mass_withdrawal: bool,
) -> NoReturn:
    """Hand ``names`` to the scheduler (``holder``: "process N"), follow them, exit."""
    from aggregator.jobs.pipeline import jobs_exit_code

    store_path = c.settings.store_path
    click.echo(
        f"a scheduler runs for {store_path} ({holder}): handing it {len(names)} job(s) and"
        " following them (Ctrl-C cancels them)",
        err=True,
    )
    follow = _Follow(c, holder, several=len(names) > 1)
    cancel = threading.Event()
    try:
        with cancel_on_interrupt(cancel):
            options = {"full": full, "force": force, "allow_mass_withdrawal": allow_mass_withdrawal}
            followed = [follow.handoff.submit(n, **options) for n in names]
            cancelling = False
            while followed:
                if cancel.is_set() and not cancelling:
                    cancelling = True
                    for f in followed:
                        follow.handoff.cancel(f)
                alive = scheduler_holder(store_path) is not None  # asked before the poll
                followed = [g for f in followed if (g := follow.step(f, alive, cancelling))]
                if followed:
                    time.sleep(POLL)
    finally:
        follow.close()
    if len(names) > 1:
        for line in summary(follow.done, follow.skipped):
            click.echo(line)
    code = jobs_exit_code(follow.done)
    if follow.lost:
        code = 1
    elif follow.skipped and not code:
        code = 130
    sys.exit(code)


class _Follow:
    """The jobs handed over, as they go: ``done`` (their rows), ``skipped`` (withdrawn
    before they started), ``lost`` (the scheduler ignored them or stopped first)."""

    def __init__(self, c: Ctx, holder: str, *, several: bool) -> None:
        self.c = c
        self.holder = holder
        self.several = several
        self.handoff = HandOff(c.settings.store_path)
        self.jobs = _Jobs(c)
        self.progress = FollowProgress()
        self.done: list[JobRow] = []
        self.skipped: list[str] = []
        self.lost: list[str] = []
        self._busy_said: set[str] = set()

    def close(self) -> None:
        self.progress.stop()
        self.jobs.close()
        self.handoff.close()

    def step(self, f: Followed, alive: bool, cancelling: bool) -> Followed | None:
        """Look at ``f`` once: what to follow in its place next (None: it is over)."""
        self.handoff.poll(f)
        if f.state == "gone":
            if f.ignored:
                self.lost.append(f.source)
                click.echo(
                    f"error: the scheduler ({self.holder}) has no source {f.source!r} in its"
                    " configuration (is it serving another aggregator.toml?)",
                    err=True,
                )
            else:
                self.skipped.append(f.source)
            return None
        if f.state == "ended":
            assert f.run is not None
            if f.run.status == "busy" and not cancelling:  # another writer: ask again
                if f.source not in self._busy_said:
                    self._busy_said.add(f.source)
                    click.echo(f"{f.source}: {f.run.message}; waiting for it", err=True)
                time.sleep(min(5.0, self.c.settings.schedule.busy_delay))
                return self.handoff.retry_busy(f)
            self.progress.done(f.source)
            self._ended(f)
            return None
        if not alive:
            self.lost.append(f.source)
            self.progress.done(f.source)
            click.echo(
                f"error: the scheduler ({self.holder}) stopped before the job of {f.source}"
                f" ended: see `aggregator jobs {f.source}`",
                err=True,
            )
            return None
        _show(self.progress, self.handoff, self.jobs, f, self.c.settings.schedule.parallel)
        return f

    def _ended(self, f: Followed) -> None:
        """The job's line, as a harvest in this process prints it."""
        assert f.run is not None
        job = self.jobs.get(f.run.job_id) if f.run.job_id else _no_job(f)
        if not job.id:
            click.echo(f"job - {job.source}: {job.status} - {job.message}")
        elif self.several and job.status != "succeeded":  # its reason: once, in the summary
            click.echo(f"job {job.id} {job.source}: {job.status} (see the summary)")
        else:
            click.echo(job_line(job))
        self.done.append(job)


def _show(
    progress: FollowProgress, handoff: HandOff, jobs: _Jobs, f: Followed, parallel: int
) -> None:
    if f.state == "queued":
        if time.monotonic() - f.since < QUIET:
            return  # the scheduler takes requests within a second: say nothing yet
        running = handoff.running_since(f.source)
        if running is not None:
            when = running.strftime("%H:%M:%S UTC")
            why = f"a job of {f.source} started at {when} runs: this one starts after it"
        else:
            why = f"the scheduler runs as many jobs as it may: [schedule] parallel = {parallel}"
        progress.update(f.source, "queued", f"{f.source}: waiting ({why})")
        return
    job = jobs.running(f.source)
    counts = " ".join(f"{k}={v}" for k, v in sorted(job.counters.items()) if v) if job else ""
    label = f"job {job.id} " if job else ""
    text = f"{f.source}: harvesting ({label}run by the scheduler)  {counts}".rstrip()
    progress.update(f.source, "running", text)
