"""The ``aggregator`` command line. Thin: every command calls the library.

Exit codes: 0 success; 1 a job failed or a file does not conform; 2 usage or configuration
error, or a store whose schema is newer than this code (for a read command, older too); 3 a
harvest ran but some records were rejected or errored; 4 a harvest was partial (truncated
listing, mass-withdrawal brake); 130 a harvest was cancelled (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

import click

from aggregator.cli.context import Ctx, fail, job_line, pass_ctx
from aggregator.cli.files import map_file, validate
from aggregator.cli.mdr import mdc_monitor
from aggregator.cli.records import record, records, rejected
from aggregator.cli.schedule import schedule, scheduler
from aggregator.cli.sources import orphan_line, orphans, source
from aggregator.cli.store import store
from aggregator.core.errors import AggregatorError, ConfigError
from aggregator.jobs.unattended import Progress, cancel_on_interrupt, compaction_lines, summary

log = logging.getLogger("aggregator")


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AggregatorError as err:
            fail(err)


@click.group(cls=_Group)
@click.option(
    "--config",
    "-c",
    type=click.Path(dir_okay=False, path_type=Path),
    default=lambda: os.environ.get("AGGREGATOR_CONFIG", "aggregator.toml"),
    show_default="aggregator.toml or $AGGREGATOR_CONFIG",
    help="Configuration file.",
)
@click.option("--log-level", default="WARNING", show_default=True, help="Python log level.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object per line, with job, source, record and stage where known.",
)
@click.version_option(package_name="ld-aggregator")
@click.pass_context
def main(ctx: click.Context, config: Path, log_level: str, log_format: str) -> None:
    """Harvest catalogues into DCAT-AP 3, validate, store and republish them."""
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if log_format == "json":
        from aggregator.core.logjson import use_json_logs

        use_json_logs(log_level)
    if logging.getLogger().getEffectiveLevel() >= logging.WARNING:
        # urllib3 warns of each retry in its own terms; the job's message says it in words
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    if ctx.get_parameter_source("config") is click.core.ParameterSource.COMMANDLINE:
        given = "-c"
    else:
        given = "$AGGREGATOR_CONFIG" if os.environ.get("AGGREGATOR_CONFIG") else ""
    ctx.obj = Ctx(config, given)


# -- config ---------------------------------------------------------------------------------
@main.group()
def config() -> None:
    """Inspect the configuration."""


@config.command("check")
@pass_ctx
def config_check(c: Ctx) -> None:
    """Validate aggregator.toml (plugins, options, secrets) without harvesting; report
    records of sources no longer configured. Exit 2 if a source's secret is unset."""
    from aggregator.jobs.processing import build_chain

    s = c.settings
    unset: list[str] = []
    for src in s.sources.values():
        build_chain(src.validation)  # compiles the schemas: a broken one fails here
        try:
            src.require_secrets()
        except ConfigError as err:
            unset.append(err.message)
    click.echo(f"{c.config_path}: {f'{len(unset)} source(s) cannot harvest' if unset else 'OK'}")
    click.echo(f"  store: {s.store_path}  base IRI: {s.base_iri}")
    for src in s.sources.values():
        chain = " -> ".join(step.label for step in src.validation) or "none"
        click.echo(f"  source {src.name}: {src.type} -> {src.format} ({src.url}); checks: {chain}")
    for name, counts in sorted(orphans(c).items()):
        click.echo(f"  warning: {orphan_line(name, counts)}")
    for message in unset:
        click.echo(f"error: {message}", err=True)
    if unset:
        sys.exit(2)


# -- harvesting -----------------------------------------------------------------------------
@main.command()
@click.argument("sources", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Harvest every enabled source.")
@click.option("--full", is_flag=True, help="Ignore the checkpoint: list everything.")
@click.option("--force", is_flag=True, help="Rewrite records even if their date is not newer.")
@click.option("--allow-mass-withdrawal", is_flag=True, help="Override the withdrawal brake.")
@pass_ctx
def harvest(
    c: Ctx,
    sources: tuple[str, ...],
    all_: bool,
    full: bool,
    force: bool,
    allow_mass_withdrawal: bool,
) -> None:
    """Harvest sources now, one job per source. When a scheduler runs for the store
    (``serve``, ``aggregator scheduler``), the jobs are handed to it and followed to their
    end, with the same output and exit codes (Ctrl-C cancels them)."""
    from aggregator.jobs.pipeline import (
        RunOptions,
        compact_after_jobs,
        jobs_exit_code,
        run_source,
    )
    from aggregator.net.client import HttpClient
    from aggregator.store.journal import JobRow

    s = c.settings
    if all_:
        names = [n for n, src in s.sources.items() if src.enabled]
    elif sources:
        names = list(sources)
        for n in names:
            s.source(n)
    else:
        raise click.UsageError("name one or more sources, or --all")
    from aggregator.schedule.liveness import scheduler_holder

    holder = scheduler_holder(s.store_path)
    if holder is not None:  # it writes the store whenever it runs jobs: it runs these too
        from aggregator.cli.handoff import harvest_by_scheduler

        harvest_by_scheduler(
            c,
            names,
            holder,
            full=full,
            force=force,
            allow_mass_withdrawal=allow_mass_withdrawal,
        )
    http = HttpClient(s.http)
    done: list[JobRow] = []
    skipped: list[str] = []
    cancel = threading.Event()
    if logging.getLogger().getEffectiveLevel() >= logging.WARNING:
        # the job line and the summary say what failed: not each event again on stderr
        logging.getLogger("aggregator.events").setLevel(logging.ERROR)
    several = len(names) > 1  # one compaction after the last job, not one per large job
    with c.store() as store, cancel_on_interrupt(cancel):
        for name in names:
            if cancel.is_set():
                skipped.append(name)
                continue
            progress = Progress(name)
            try:
                job = run_source(
                    s,
                    store,
                    name,
                    RunOptions(
                        full=full,
                        force=force,
                        allow_mass_withdrawal=allow_mass_withdrawal,
                        progress=progress,
                        cancel=cancel,
                        compact=not several,
                    ),
                    http=http,
                )
            finally:
                progress.stop()
            if len(names) > 1 and job.status != "succeeded":  # its reason: once, in the summary
                click.echo(f"job {job.id} {job.source}: {job.status} (see the summary)")
            else:
                click.echo(job_line(job))
            done.append(job)
        compacted = None
        if several and not cancel.is_set():
            compacted = compact_after_jobs(store, done, s)
    if several:
        for line in summary(done, skipped) + compaction_lines(compacted, done):
            click.echo(line)
    sys.exit(jobs_exit_code(done))


@main.command()
@click.argument("source", required=False)
@click.option("--limit", default=20, show_default=True)
@pass_ctx
def jobs(c: Ctx, source: str | None, limit: int) -> None:
    """List recent jobs, newest first."""
    with c.reader() as store:
        for job in store.jobs.recent(source, limit):
            click.echo(f"{job.started}  {job_line(job)}")


@main.group()
def job() -> None:
    """Inspect one job."""


@job.command("show")
@click.argument("job_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def job_show(c: Ctx, job_id: int, as_json: bool) -> None:
    """Show a job with its listing facts and every per-record error."""
    with c.reader() as store:
        j = store.jobs.get(job_id)
        errors = store.jobs.errors(job_id)
    if as_json:
        doc = {
            "id": j.id,
            "source": j.source,
            "started": j.started,
            "ended": j.ended,
            "heartbeat": j.heartbeat,
            "status": j.status,
            "full": j.full,
            "counters": j.counters,
            "listing": j.listing,
            "message": j.message,
            "errors": errors,
        }
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(job_line(j))
    click.echo(f"  started {j.started}  ended {j.ended or '-'}  heartbeat {j.heartbeat}")
    click.echo(f"  listing {json.dumps(j.listing)}")
    click.echo(f"  {len(errors)} error(s)")
    for e in errors:
        where = f" at {e['location']}" if e["location"] else ""
        click.echo(f"  - {e['local_id']} [{e['stage']}/{e['rule']}]{where}: {e['message']}")


_COMMANDS = (source, records, record, rejected, map_file, validate, mdc_monitor)
for _command in (*_COMMANDS, schedule, scheduler, store):
    main.add_command(_command)


# -- quality --------------------------------------------------------------------------------
@main.command()
@click.option("--source", default=None, help="Only this source.")
@click.option("--check-links", is_flag=True, help="Check access/download URLs (slow, polite).")
@click.option("--no-store", is_flag=True, help="Do not keep the DQV measurements in the store.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def quality(c: Ctx, source: str | None, check_links: bool, no_store: bool, as_json: bool) -> None:
    """Metadata Quality Assessment (data.europa.eu MQA): scores and the top shortcomings.

    The measurements are kept as W3C DQV graphs in the store (query them with SPARQL),
    unless another process is writing the store (a harvest): then they are only shown.
    """
    from aggregator.core.errors import StoreBusyError
    from aggregator.validate.quality.runner import run_quality

    run = None
    if not no_store:
        try:
            with c.store(create=False) as store:
                run = run_quality(c.settings, store, source=source, check_links=check_links)
        except StoreBusyError as busy:
            click.echo(f"measurements not stored: {busy.message}", err=True)
    if run is None:
        with c.reader() as reader:
            run = run_quality(
                c.settings, reader, source=source, check_links=check_links, keep_measurements=False
            )
    scopes = [*run.per_source.values()] + ([run.catalogue] if source is None else [])
    if as_json:
        click.echo(json.dumps([a.as_dict() for a in scopes], indent=2))
        return
    for agg in scopes:
        name = "whole catalogue" if agg.scope == "*" else f"source {agg.scope}"
        rating = agg.rating.value if agg.rating else "-"
        ratings = ", ".join(f"{r.value} {n}" for r, n in agg.ratings.items() if n)
        click.echo(f"{name}: {agg.datasets} datasets, mean {agg.mean_score:.0f}/405 ({rating})")
        click.echo(f"  ratings: {ratings or '-'}")
        for s in agg.shortcomings[:5]:
            click.echo(f"  - {s.key}: {s.datasets} dataset(s), {s.points_lost} points lost")
    for src, local_id, message in run.errors:
        click.echo(f"not assessed: {src} {local_id}: {message}", err=True)


# -- serving and the demo -------------------------------------------------------------------
@main.command()
@click.option("--host", default=None, help="Address to listen on  [default: serve.host]")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port to listen on  [default: serve.port]",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=None,
    help="Serving processes (default: serve.processes, else CPUs, at least 2, at most 4);"
    " with two or more, one is a standby that accepts only while another is stuck or gone.",
)
@click.option(
    "--scheduler/--no-scheduler",
    default=None,
    help="Run the scheduler beside the server  [default: schedule.in_serve, true]",
)
@pass_ctx
def serve(c: Ctx, host: str, port: int, processes: int | None, scheduler: bool | None) -> None:
    """Serve the aggregate (SPARQL endpoint, OAI-PMH, catalogue, records, payloads), and
    harvest each source on its schedule (see ``aggregator scheduler``). A port in use is an
    error (exit 2) before anything starts."""
    from aggregator.serve.app import run_server
    from aggregator.serve.supervisor import bind_listener

    host = host or c.settings.serve.host
    port = port or c.settings.serve.port
    sock = bind_listener(host, port)  # a port in use: one line, exit 2, nothing started
    base = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    click.echo(f"serving {base}  SPARQL: {base}sparql  OAI-PMH: {base}oai")
    if scheduler is None:
        scheduler = c.settings.schedule.in_serve
    run_server(c.names(), c.settings, host, port, processes, scheduler=scheduler, sock=sock)


@main.command("dashboard-hash")
@click.password_option("--secret", prompt="Password or token", help="Read from a prompt if absent.")
def dashboard_hash(secret: str) -> None:
    """Print the scrypt hash of a dashboard password or API token, for admin_password_hash or
    admin_token_hash in [serve] (the secret itself is never stored)."""
    from aggregator.serve.dashboard.auth import hash_secret

    click.echo(hash_secret(secret))


@main.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("demo-data"),
    show_default=True,
    help="Fresh data directory for the demo (emptied first).",
)
@click.option("--port", default=8000, show_default=True)
@click.option("--no-serve", is_flag=True, help="Stop after harvesting.")
def demo(directory: Path, port: int, no_serve: bool) -> None:
    """Start bundled sources on 127.0.0.1, harvest them, then serve them with the scheduler, as
    ``serve`` does (``schedule now`` and ``harvest`` work meanwhile). No internet needed."""
    from aggregator.demo.run import run_demo

    sys.exit(run_demo(directory, port=port, serve=not no_serve))
