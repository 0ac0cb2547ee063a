"""``aggregator scheduler`` (run the scheduler alone) and ``aggregator schedule`` (its state,
"harvest now" and "full re-harvest"); the scheduler itself is :mod:`aggregator.schedule`."""

from __future__ import annotations

import json
import sys
import threading

import click

from aggregator.cli.context import Ctx, pass_ctx


@click.command("scheduler")
@pass_ctx
def scheduler(c: Ctx) -> None:
    """Run the scheduler in the foreground (``serve`` runs it too, unless --no-scheduler):
    harvests each source at its frequency inside the harvest window, retries failed jobs,
    keeps the circuit breakers. SIGINT or SIGTERM cancel the running jobs and stop it."""
    from aggregator.schedule.service import run_scheduler, serve_signals

    stop = threading.Event()
    serve_signals(stop)
    click.echo(
        f"scheduling {len(c.settings.sources)} source(s) of {c.settings.store_path}", err=True
    )
    run_scheduler(c.settings, stop)


@click.group("schedule")
def schedule() -> None:
    """The scheduler's state; harvest a source now."""


@schedule.command("status")
@click.argument("source", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def schedule_status_command(c: Ctx, source: str | None, as_json: bool) -> None:
    """Per source: frequency, next run, running job, circuit breaker, failures (and a note on
    stderr when no scheduler runs for the store to keep to them)."""
    from aggregator.schedule.liveness import scheduler_running
    from aggregator.schedule.status import describe, schedule_status

    if source is not None:
        c.settings.source(source)
    rows = [x for x in schedule_status(c.settings) if source in (None, x.source)]
    if as_json:
        click.echo(json.dumps([x.as_dict() for x in rows], indent=2))
        return
    for x in rows:
        click.echo(f"{x.source}: {describe(x)}")
        if x.last_error:
            click.echo(f"  last error: {x.last_error}")
    if not scheduler_running(c.settings.store_path):
        click.echo(
            f"note: no scheduler is running for the store at {c.settings.store_path}: these"
            " runs happen only while `aggregator serve` (or `aggregator scheduler`) runs",
            err=True,
        )


@schedule.command("now")
@click.argument("sources", nargs=-1, required=True)
@click.option("--full", is_flag=True, help="A full re-harvest (ignore the checkpoint).")
@pass_ctx
def schedule_now(c: Ctx, sources: tuple[str, ...], full: bool) -> None:
    """Ask the running scheduler to harvest SOURCES now, whatever their schedule, window,
    blackouts or circuit breaker, and return (``aggregator harvest`` follows the jobs to their
    end). Exit 1 when no scheduler runs for the store: nothing would take the request."""
    from aggregator.core.errors import StoreError
    from aggregator.schedule.liveness import no_scheduler_message, scheduler_running
    from aggregator.schedule.status import request_harvest

    for name in sources:
        c.settings.source(name)
    if not scheduler_running(c.settings.store_path):
        raise StoreError(no_scheduler_message(c.settings.store_path))
    for name in sources:
        request_harvest(c.settings, name, full=full, by="cli")
        click.echo(f"{name}: {'full re-harvest' if full else 'harvest'} requested")
    sys.exit(0)
