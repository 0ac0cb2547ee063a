"""``aggregator store``: the state database's upkeep, its schema version and its retention
(:mod:`aggregator.store.migrations`, :mod:`aggregator.store.retention`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import click

from aggregator.cli.context import Ctx, pass_ctx
from aggregator.store.check import CheckReport
from aggregator.store.graphs import GraphBackend, OxigraphGraphs
from aggregator.store.migrations import LATEST
from aggregator.store.names import StoreNames
from aggregator.store.records import snapshot_shelf
from aggregator.store.state import StateDB
from aggregator.store.stats import human
from aggregator.store.writer_lock import WriterLock


@click.group("store")
def store() -> None:
    """The store's upkeep: its figures, checks, backups, compaction, schema and retention."""


class _Report(Protocol):
    def as_dict(self) -> dict[str, Any]: ...
    def lines(self) -> Iterable[str]: ...


def echo_report(report: _Report, as_json: bool) -> None:
    """A maintenance report as JSON (``--json``) or as its lines."""
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
        return
    for line in report.lines():
        click.echo(line)


@store.command("upgrade")
@pass_ctx
def store_upgrade(c: Ctx) -> None:
    """Upgrade the state database's schema to this release's.

    Any command that writes the store does it too; read commands ask for it. A store made by
    a newer release is refused (exit code 2)."""
    with c.store(create=False) as opened:
        applied = opened.db.migrations
    if not applied:
        click.echo(f"the state database is at schema version {LATEST}: nothing to do")
        return
    first = applied[0].version - 1
    click.echo(f"upgraded the state database from schema version {first} to {LATEST}:")
    for step in applied:
        click.echo(f"  {step.version}: {step.summary}")


@store.command("prune")
@click.option("--dry-run", is_flag=True, help="Only say what would be removed (read-only).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def store_prune(c: Ctx, dry_run: bool, as_json: bool) -> None:
    """Remove what the [retention] policy lets go, and say what it freed.

    Payloads of all but each record's last versions, jobs older than the policy's days
    (with their errors and closed rejections; never a source's latest job nor one a record,
    a checkpoint or an open rejection refers to) and the scheduler's runs of those days. It
    works in short batches beside harvests and serving; the scheduler runs it once a day."""
    from aggregator.schedule.book import BOOK_FILE
    from aggregator.store.retention import prune

    now = datetime.now(UTC)
    policy = c.settings.retention
    if dry_run:  # a reader: checks the schema version, takes no lock
        with c.reader() as reader:
            report = prune(
                reader.db.path, policy, now, dry_run=True, book_path=reader.path / BOOK_FILE
            )
    else:
        with c.store(create=False) as opened:
            report = prune(opened.db.path, policy, now, book_path=opened.path / BOOK_FILE)
    echo_report(report, as_json)


@store.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def store_stats(c: Ctx, as_json: bool) -> None:
    """Records by source and status, and the size on disk of each part of the store, in all
    and per record.

    Read-only: it takes no lock and runs beside a harvest or serving. The snapshots' part is
    what they hold alone (files the live graph store has compacted away since)."""
    from aggregator.store.stats import store_stats as figures

    with c.reader() as reader:
        stats = figures(reader.path, reader.db.conn)
    if as_json:
        click.echo(json.dumps(stats.as_dict(), indent=2))
        return
    for line in stats.lines():
        click.echo(line)


@store.command("check")
@click.option(
    "--repair",
    is_flag=True,
    help="Rewrite the graphs that differ from the state database, drop orphan graphs,"
    " rebuild wrong set rows and a search index that disagrees.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def store_check(c: Ctx, repair: bool, as_json: bool) -> None:
    """Check that graphs, catalogue records, the set index and the search index agree with
    the state database.

    Every record must have its named graph with the content the state database holds for
    it (a withdrawn or rejected record: its catalogue record only), no graph may belong to
    no record, and the OAI-PMH set index and the search index (up to its watermark) must
    match the records. Exit code 1 when something
    disagrees (0 once --repair fixed it). The live graph store admits one process, so this
    takes the writer lock (and refuses, naming the holder, while a harvest runs); --repair
    publishes a snapshot for the readers when it is done."""
    report = CheckReport()
    if repair:
        with c.store(create=False) as opened:  # replays the journal first, as every writer
            check_all(opened, opened.db, opened.graphs, report, repair=True)
            if report.repaired:
                opened.graphs_changed()  # a generation of its own: readers see the repairs
    else:
        with held_graphs(c) as (names, db, graphs):
            check_all(names, db, graphs, report, repair=False)
            report.pending = db.conn.execute("SELECT count(*) FROM journal").fetchone()[0]
    echo_report(report, as_json)
    if not report.ok:
        sys.exit(1)


def check_all(
    names: StoreNames, db: StateDB, graphs: GraphBackend, report: CheckReport, *, repair: bool
) -> None:
    """The graphs, the set index and the search index against the state database."""
    from aggregator.serve.dashboard.search_upkeep import SEARCH, check_search, rebuild_search
    from aggregator.store.check import SET_COUNTS, SETS, check_graphs, check_sets, repair_sets
    from aggregator.store.shared_check import check_shared

    check_graphs(names, db, graphs, report, repair=repair)
    check_shared(names, db, graphs, report, repair=repair)
    bad = check_sets(db.conn, report)
    search = check_search(names.path, db.conn)
    report.findings += search
    if repair and (bad or any(f.kind in (SETS, SET_COUNTS) for f in report.findings)):
        repair_sets(db, bad, report)
    if repair and search:
        rebuild_search(names.path, db.conn)
        report.repaired[SEARCH] = len(search)


@contextmanager
def held_graphs(c: Ctx) -> Iterator[tuple[StoreNames, StateDB, OxigraphGraphs]]:
    """The live graph store and the state database read-only, under the writer lock, with
    nothing replayed nor published: what a check reads without changing anything."""
    s = c.settings
    if not c.store_exists():
        with c.reader():  # says there is no store
            pass
    lock = WriterLock(s.store_path)
    try:
        graphs = OxigraphGraphs(s.store_path / "graphs")
        try:
            with c.reader() as reader:
                yield StoreNames(s.store_path, s.base_iri), reader.db, graphs
        finally:
            graphs.close()
    finally:
        lock.release()


@store.command("backup")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def store_backup(c: Ctx, directory: Path, as_json: bool) -> None:
    """Copy the store into the new or empty DIRECTORY, consistently, while it is served and
    harvested.

    The state database through SQLite's online backup, the graph store from the readers'
    snapshot; it takes no lock. `aggregator store restore DIRECTORY` brings the store back to
    the state the backup holds, a generation the store had."""
    from aggregator.core.errors import StoreError
    from aggregator.store.backup import backup_store

    with c.reader() as reader:  # a store of this schema version, or a clear error
        path = reader.path
    from aggregator.schedule.book import BOOK_FILE

    try:
        report = backup_store(path, directory, [BOOK_FILE])
    except StoreError:
        if snapshot_shelf(path).current is not None:
            raise
        with c.store(create=False):  # no snapshot yet: a writer publishes one when it opens
            pass
        report = backup_store(path, directory, [BOOK_FILE])
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
        return
    click.echo(
        f"backed up {report.records} record(s) at generation {report.generation} to"
        f" {report.path} ({human(report.bytes)})"
    )


@store.command("restore")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@pass_ctx
def store_restore(c: Ctx, directory: Path) -> None:
    """Restore a backup made by `aggregator store backup` into the configured store folder,
    which must be empty or not exist yet; then check the restored store (exit code 1 when
    the check finds a disagreement)."""
    from aggregator.schedule.book import BOOK_FILE
    from aggregator.store.backup import restore_files

    manifest = restore_files(directory, c.settings.store_path, [BOOK_FILE])
    with c.store(create=False) as opened:  # replays the journal the backup carries
        replayed = opened.recovery.repaired
    report = CheckReport()
    with held_graphs(c) as (names, db, graphs):
        check_all(names, db, graphs, report, repair=False)
    click.echo(
        f"restored {manifest['records']} record(s) at generation {manifest['generation']}"
        f" into {c.settings.store_path} ({replayed} graph(s) brought up to that generation)"
    )
    for line in report.lines():
        click.echo(line)
    if not report.ok:
        sys.exit(1)


@store.command("optimize")
@click.option("--vacuum", is_flag=True, help="Rewrite the state database even with few free pages.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def store_optimize(c: Ctx, vacuum: bool, as_json: bool) -> None:
    """Compact the graph store and the state database, and say what each part takes before
    and after.

    A job that wrote [harvest] optimize_after records (and optimize_share of the store) does
    this at its end, without the VACUUM; run it after a prune, or once on a store made
    before graph serialisations were kept packed (it packs them). It takes the writer lock
    (it refuses, naming the holder, while a harvest runs); serving goes on, and the readers
    move to a fresh snapshot, so the files the compaction replaced are freed."""
    from aggregator.store.optimize import optimize_store

    with c.store(create=False) as opened:
        report = optimize_store(opened, vacuum=vacuum)
    echo_report(report, as_json)


@store.command("reindex")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def store_reindex(c: Ctx, as_json: bool) -> None:
    """Rebuild the side indexes from the state database: the OAI-PMH set index and set
    sizes, the search index of the dashboard, and the counts of the shared statements with
    the shared graph (recounted from the records; the graph brought to the counts).

    It takes the writer lock (the set index is in the state database). Serving goes on; a
    search while the search index is rebuilt may see part of the records."""
    from aggregator.serve.dashboard.search_upkeep import rebuild_search
    from aggregator.store.check import CheckReport, rebuild_sets
    from aggregator.store.shared import SharedCounts
    from aggregator.store.shared_check import check_shared

    with c.store(create=False) as opened:
        sets = rebuild_sets(opened.db)
        search = rebuild_search(opened.path, opened.db.conn)
        report = CheckReport()
        check_shared(opened, opened.db, opened.graphs, report, repair=True)
        opened.graphs_changed()  # readers see the shared graph as rebuilt
        shared = SharedCounts(opened.db.conn).count()
    result = {
        "set_index_records": sets,
        "search_index_records": search,
        "shared_statements": shared,
        "shared_statements_corrected": bool(report.findings),
    }
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"set index: rebuilt from {sets} record(s)")
    click.echo(f"search index: rebuilt from {search} record(s)")
    fixed = "corrected" if report.findings else "agreed"
    click.echo(f"shared statements: {shared} counted afresh ({fixed} with the records)")
