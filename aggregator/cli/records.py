"""``aggregator records``, ``record`` and ``rejected``: inspect what the store holds."""

from __future__ import annotations

import json
import sys

import click

from aggregator.cli.context import Ctx, job_line, pass_ctx


@click.command()
@click.option("--source", default=None)
@click.option("--status", type=click.Choice(["active", "withdrawn", "rejected"]), default=None)
@click.option("--limit", default=100, show_default=True)
@pass_ctx
def records(c: Ctx, source: str | None, status: str | None, limit: int) -> None:
    """List stored records."""
    with c.reader() as store:
        for r in store.db.iter_records(source, status, limit):
            click.echo(f"{r.source}\t{r.local_id}\t{r.status}\t{r.modified}\t{r.dataset_iri or ''}")


@click.group()
def record() -> None:
    """Inspect one stored record."""


@record.command("show")
@click.argument("source")
@click.argument("local_id")
@pass_ctx
def record_show(c: Ctx, source: str, local_id: str) -> None:
    """Print a record's catalogue record and dataset graph as N-Triples."""
    from aggregator.core.errors import NotFoundError

    with c.reader() as store:
        row = store.record(source, local_id)
        if row is None:
            raise NotFoundError(f"no record {local_id!r} in source {source!r}")
        sys.stdout.write(store.catalog_record_ntriples(row).decode())
        sys.stdout.write(store.dataset_ntriples(row).decode())


@record.command("payload")
@click.argument("source")
@click.argument("local_id")
@pass_ctx
def record_payload(c: Ctx, source: str, local_id: str) -> None:
    """Write a record's original payload, byte for byte, to standard output."""
    from aggregator.core.errors import NotFoundError

    with c.reader() as store:
        row = store.record(source, local_id)
        found = store.payload(row.payload_sha) if row and row.payload_sha else None
        if found is None:
            raise NotFoundError(f"no payload for {local_id!r} in source {source!r}")
        sys.stdout.buffer.write(found[1])


# -- the dead-letter store ------------------------------------------------------------------
@click.group()
def rejected() -> None:
    """Records that could not be stored: list, show, export, revalidate."""


@rejected.command("list")
@click.option("--source", default=None)
@click.option("--job", "job_id", type=int, default=None)
@click.option("--all", "include_closed", is_flag=True, help="Include rejections retried since.")
@click.option("--limit", default=100, show_default=True)
@pass_ctx
def rejected_list(
    c: Ctx, source: str | None, job_id: int | None, include_closed: bool, limit: int
) -> None:
    """List rejections (open ones: not passed since), oldest first, with the violation
    that caused each (its rule and message)."""
    from aggregator.jobs.deadletter import rejections

    with c.reader() as store:
        for r in rejections(
            store, source=source, job_id=job_id, include_closed=include_closed, limit=limit
        ):
            closed = f" (retried in job {r.superseded_by})" if r.superseded_by else ""
            click.echo(
                f"{r.id}\t{r.source}\t{r.local_id}\tjob {r.job_id}\t{r.stage}"
                f"\t{len(r.findings)} finding(s){closed}\t{r.cause()}"
            )


@rejected.command("show")
@click.argument("rejection_id", type=int)
@click.option("--payload", is_flag=True, help="Write the original payload to stdout instead.")
@pass_ctx
def rejected_show(c: Ctx, rejection_id: int, payload: bool) -> None:
    """Show one rejection with every finding, or its original payload."""
    from aggregator.jobs.deadletter import rejection

    with c.reader() as store:
        r = rejection(store, rejection_id)
        if payload:
            found = store.payload(r.payload_sha)
            sys.stdout.buffer.write(found[1] if found else b"")
            return
    click.echo(json.dumps(r.as_dict(), indent=2))


@rejected.command("export")
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv")
@click.option("--source", default=None)
@click.option("--all", "include_closed", is_flag=True)
@pass_ctx
def rejected_export(c: Ctx, fmt: str, source: str | None, include_closed: bool) -> None:
    """Export rejections: CSV has one row per finding, JSON one object per rejection."""
    from aggregator.jobs.deadletter import export, rejections

    with c.reader() as store:
        items = rejections(store, source=source, include_closed=include_closed)
    sys.stdout.write(export(items, fmt))


@rejected.command("revalidate")
@click.option("--source", default=None)
@pass_ctx
def rejected_revalidate(c: Ctx, source: str | None) -> None:
    """Map and validate open rejections again with today's rules; store what now passes.

    Exit status, as for harvest: 0 every record retried now passes, 3 records were rejected
    again (or catalogue pages still fail), 4 a job was partial, 1 a job failed."""
    from aggregator.jobs.deadletter import revalidate
    from aggregator.jobs.pipeline import jobs_exit_code

    with c.store(create=False) as store:
        jobs = revalidate(c.settings, store, source=source)
    if not jobs:
        click.echo("no open rejections")
    for j in jobs:
        click.echo(job_line(j))
    sys.exit(jobs_exit_code(jobs))
