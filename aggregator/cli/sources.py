"""``aggregator source``: register, edit, list, show and retire sources (edits aggregator.toml).

A source's records never stay published silently once it leaves the file: ``remove`` refuses
while it has active records unless told ``--purge`` (withdraw them: :mod:`aggregator.jobs.retire`)
or ``--keep-records``; records of sources no longer configured are reported as orphaned by
``source list`` and ``config check`` and can still be purged.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from aggregator.cli.context import Ctx, pass_ctx
from aggregator.config import HttpSettings, SourceConfig
from aggregator.core.errors import AggregatorError, ConfigError

if TYPE_CHECKING:
    from aggregator.harvest.base import Harvester


@click.group()
def source() -> None:
    """Register, edit, list, show and remove sources (edits aggregator.toml)."""


def _value(text: str) -> Any:
    lowered = text.lower()
    if text.isdigit():
        return int(text)
    if lowered in ("true", "false"):
        return lowered == "true"
    return text


def _parse_options(pairs: Sequence[str], hint: str = "--option") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=hint)
        out[key] = _value(value)
    return out


def _parse_secrets(pairs: Sequence[str]) -> dict[str, str]:
    return {k: str(v) for k, v in _parse_options(pairs, "--secret").items()}


def unconfigured(c: Ctx) -> dict[str, Counter[str]]:
    """What the store holds of sources that aggregator.toml no longer names."""
    from aggregator.jobs.retire import read_census

    return {
        name: counts
        for name, counts in read_census(c.settings.store_path).items()
        if name not in c.settings.sources
    }


def is_retired(counts: Counter[str]) -> bool:
    """Only withdrawn records left: the persistent deletions of a purged source."""
    return bool(counts) and all(k == "withdrawn" for k, v in counts.items() if v)


def orphans(c: Ctx) -> dict[str, Counter[str]]:
    """Unconfigured sources with more than their deletions left (records still published,
    rejections, dead letters, a checkpoint): reported until purged."""
    return {n: counts for n, counts in unconfigured(c).items() if not is_retired(counts)}


def orphan_line(name: str, counts: Counter[str]) -> str:
    from aggregator.jobs.retire import describe

    published = counts.get("active", 0)
    what = f"{published} record(s) still published" if published else "no published record"
    return (
        f"orphaned source {name} (not in the configuration; {describe(counts)}): {what};"
        f" purge with: aggregator source remove {name} --purge"
    )


@source.command("add")
@click.argument("name")
@click.option("--type", "kind", required=True, help="Harvester: oai-pmh, rdf-dump, sparql, ...")
@click.option("--url", required=True, help="http(s) URL of the source.")
@click.option("--format", "fmt", default=None, help="Mapper key (default depends on the type).")
@click.option("--publisher", default=None)
@click.option("--schedule", default="daily", show_default=True)
@click.option(
    "--violations",
    type=click.Choice(["flag", "strict", "lenient"]),
    default=None,
    help="What a violation does to a record (default: flag; the GEMINI chain: strict).",
)
@click.option("--lenient", is_flag=True, help="Same as --violations lenient.")
@click.option("--option", "options", multiple=True, help="Harvester option KEY=VALUE.")
@click.option("--secret", "secrets", multiple=True, help="KEY=ENV_VAR_NAME (never the value).")
@click.option(
    "--probe",
    is_flag=True,
    help="Read what the source says about itself first (as `source probe` does; CSW: its"
    " GetCapabilities, cached for the first harvest); the source is not added when that fails.",
)
@pass_ctx
def source_add(
    c: Ctx,
    name: str,
    kind: str,
    url: str,
    fmt: str | None,
    publisher: str | None,
    schedule: str,
    violations: str | None,
    lenient: bool,
    options: tuple[str, ...],
    secrets: tuple[str, ...],
    probe: bool,
) -> None:
    """Register a source. Registration does not harvest.

    The configuration file is created when it does not exist yet (the one command that does).
    """
    from aggregator.config import parse_source
    from aggregator.config.sources_file import add_source

    table: dict[str, Any] = {"type": kind, "url": url, "schedule": schedule}
    if fmt:
        table["format"] = fmt
    if publisher:
        table["publisher"] = publisher
    table.update(_violation_keys(violations or ("lenient" if lenient else None)))
    if options:
        table["options"] = _parse_options(options)
    if secrets:
        table["secrets"] = _parse_secrets(secrets)
    probed = None
    if probe:
        src = parse_source(name, table, root=c.config_path.resolve().parent)
        http = c.settings.http if c.config_path.exists() else HttpSettings()
        try:
            probed = _probe(src, http)
        except AggregatorError:
            click.echo(f"source {name} not added: the probe failed", err=True)
            raise
    add_source(c.config_path, name, table)
    click.echo(f"source {name} added to {c.config_path}")
    if probed is not None:
        _keep_probe(c, name, probed)


def _probe(src: SourceConfig, http: HttpSettings) -> Harvester:
    """Probe a source and echo what it said; the harvester keeps what it read."""
    from aggregator.net.client import HttpClient
    from aggregator.plugin import harvesters

    src.require_secrets()
    with HttpClient(http).session(src) as session:
        harvester = harvesters.get(src.type)(src, session)
        lines = harvester.probe()
    for line in lines or [f"a {src.type} source has nothing to read before harvesting"]:
        click.echo(line)
    return harvester


def _keep_probe(c: Ctx, name: str, harvester: Harvester) -> None:
    """Store the checkpoint a probe leaves (CSW: the capabilities) for the next harvest."""
    current = None
    if c.store_exists():
        with c.reader() as reader:
            current = reader.checkpoint(name)
    value = harvester.probe_checkpoint(current)
    if value is None:
        return
    with c.store() as store:
        store.jobs.set_checkpoint(name, value, 0)  # job 0: written by a probe, not a job
    click.echo(f"kept in the checkpoint of {name} for its next harvest")


@source.command("edit")
@click.argument("name")
@click.option("--url", default=None, help="New http(s) URL.")
@click.option("--format", "fmt", default=None, help="New mapper key.")
@click.option("--publisher", default=None, help="New publisher name ('' removes it).")
@click.option("--schedule", default=None)
@click.option(
    "--violations",
    type=click.Choice(["flag", "strict", "lenient"]),
    default=None,
    help="What a violation does to a record: flag (store it flagged), strict (reject it),"
    " lenient (store whatever maps).",
)
@click.option("--lenient/--strict", default=None, help="Same as --violations lenient / strict.")
@click.option("--enable/--disable", "enabled", default=None, help="Harvested by --all, or not.")
@click.option("--option", "options", multiple=True, help="Set harvester option KEY=VALUE.")
@click.option("--remove-option", "unset_options", multiple=True, help="Drop option KEY.")
@click.option("--secret", "secrets", multiple=True, help="Set KEY=ENV_VAR_NAME.")
@click.option("--remove-secret", "unset_secrets", multiple=True, help="Drop secret KEY.")
@pass_ctx
def source_edit(
    c: Ctx,
    name: str,
    url: str | None,
    fmt: str | None,
    publisher: str | None,
    schedule: str | None,
    violations: str | None,
    lenient: bool | None,
    enabled: bool | None,
    options: tuple[str, ...],
    unset_options: tuple[str, ...],
    secrets: tuple[str, ...],
    unset_secrets: tuple[str, ...],
) -> None:
    """Change a registered source in aggregator.toml (checked before it is written; the
    file's comments stay). Stored records are not touched: after a new format or options,
    re-harvest with --full --force to apply them to every record."""
    from aggregator.config.sources_file import SourceEdit, edit_source

    changes: dict[str, Any] = {}
    unset: list[str] = []
    for key, value in (("url", url), ("format", fmt), ("schedule", schedule)):
        if value is not None:
            changes[key] = value
    if publisher is not None:
        if publisher:
            changes["publisher"] = publisher
        else:
            unset.append("publisher")
    if violations is None and lenient is not None:
        violations = "lenient" if lenient else "strict"
    changes.update(_violation_keys(violations))
    if enabled is not None:
        changes["enabled"] = enabled
    edit = SourceEdit(
        set=changes,
        unset=tuple(unset),
        options=_parse_options(options),
        unset_options=unset_options,
        secrets=_parse_secrets(secrets),
        unset_secrets=unset_secrets,
    )
    if not edit:
        raise click.UsageError("nothing to change: give at least one option (see --help)")
    edit_source(c.config_path, name, edit)
    click.echo(f"source {name} changed in {c.config_path}")


@source.command("list")
@pass_ctx
def source_list(c: Ctx) -> None:
    """List sources with their record counts and last job, then orphaned sources (records in
    the store of sources no longer configured)."""
    s = c.settings
    if not s.sources:
        click.echo("no sources (add one with: aggregator source add)")
    if s.sources and not c.store_exists():
        for src in s.sources.values():
            click.echo(f"{src.name:20} {src.type:10} never harvested  {src.url}")
    elif s.sources:
        from aggregator.schedule.status import describe, schedule_status

        schedules = {x.source: x for x in schedule_status(s)}
        with c.reader() as store:
            for src in s.sources.values():
                counts = store.db.counts_by_status(src.name)
                jobs = store.jobs.recent(src.name, limit=1)
                last = f"job {jobs[0].id} {jobs[0].status}" if jobs else "never harvested"
                unset = "".join(
                    f"  secret {k} unset (${src.secrets[k].env_name})"
                    for k in src.missing_secrets()
                )
                click.echo(
                    f"{src.name:20} {src.type:10} active={counts.get('active', 0)}"
                    f" withdrawn={counts.get('withdrawn', 0)}"
                    f" rejected={counts.get('rejected', 0)}  {last}  {src.url}{unset}"
                )
                click.echo(f"{'':20} schedule: {describe(schedules[src.name])}")
    for name, counts in sorted(unconfigured(c).items()):
        if is_retired(counts):
            click.echo(
                f"retired source {name}: {counts['withdrawn']} withdrawn record(s),"
                " served as OAI-PMH deleted records"
            )
        else:
            click.echo(orphan_line(name, counts))


@source.command("show")
@click.argument("name")
@pass_ctx
def source_show(c: Ctx, name: str) -> None:
    """Show one source's configuration (secrets masked) and state."""
    src = c.settings.source(name)
    info: dict[str, Any] = {
        "name": src.name,
        "type": src.type,
        "url": src.url,
        "format": src.format,
        "publisher": src.publisher,
        "schedule": src.schedule,
        "validation": [step.describe() for step in src.validation],
        "lenient": src.lenient,
        "strict": src.strict,
        "violations": src.policy.value,
        "workers": c.settings.harvest.workers if src.workers is None else src.workers,
        "enabled": src.enabled,
        "options": dict(src.options),
        "secrets": {k: f"${v.env_name}" for k, v in src.secrets.items()},
        "headers": {
            k: v if isinstance(v, str) else f"${v.env_name}" for k, v in src.headers.items()
        },
        "unset_secrets": src.missing_secrets(),
        "records": {},
        "checkpoint": None,
    }
    if c.store_exists():
        with c.reader() as store:
            info["records"] = store.db.counts_by_status(src.name)
            info["checkpoint"] = store.checkpoint(src.name)
    from aggregator.schedule.status import schedule_status

    [state] = [x for x in schedule_status(c.settings) if x.source == name]
    info["schedule_state"] = state.as_dict()
    click.echo(json.dumps(info, indent=2, default=str))


@source.command("probe")
@click.argument("name")
@pass_ctx
def source_probe(c: Ctx, name: str) -> None:
    """Read what a source says about itself, without harvesting.

    OGC API - Records: /conformance and /collections (and which collections a harvest reads);
    CKAN: the number of packages package_search answers; CSW: GetCapabilities (operations and
    bindings, MaxRecordDefault, the Modified queryable, output schemas), kept in the source's
    checkpoint so the next harvest does not read it again. Exits 1 when the source cannot be
    used as configured (a missing collection, an error answer, not a CSW 2.0.2).
    """
    _keep_probe(c, name, _probe(c.settings.source(name), c.settings.http))


@source.command("remove")
@click.argument("name")
@click.option(
    "--purge",
    is_flag=True,
    help="Withdraw every record of the source first (one journalled job; OAI-PMH keeps them"
    " as deleted records), then drop its checkpoint, rejections and quality measurements."
    " Also works for a source found only in the store.",
)
@click.option(
    "--keep-records",
    is_flag=True,
    help="Remove the source from aggregator.toml but leave its records published.",
)
@pass_ctx
def source_remove(c: Ctx, name: str, purge: bool, keep_records: bool) -> None:
    """Remove a source from aggregator.toml; refused while it has published records unless
    --purge or --keep-records says what happens to them."""
    from aggregator.config.sources_file import remove_source
    from aggregator.jobs.retire import describe, purge_source, read_census

    if purge and keep_records:
        raise click.UsageError("--purge and --keep-records exclude each other")
    s = c.settings
    configured = name in s.sources
    held = read_census(s.store_path).get(name)
    if not configured and held is None:
        raise ConfigError(f"no source named {name!r} in {c.config_path} or in the store")
    active = held.get("active", 0) if held else 0
    if active and not (purge or keep_records):
        raise ConfigError(
            f"source {name} has {active} active record(s), still published: remove it with"
            " --purge to withdraw them (served as deleted records), or with --keep-records"
            " to leave them published as records of an unconfigured source"
        )
    if purge and held is not None:
        src = s.sources.get(name) or SourceConfig(name=name, type="", url="")
        with c.store(create=False) as store:
            done = purge_source(store, src, s.harvest.batch_size)
        click.echo(
            f"job {done.job.id} {name}: withdrew {done.withdrawn} record(s); dropped"
            f" {done.rejected_dropped} rejected record(s), {done.dead_letters_dropped} dead"
            f" letter(s), {done.payloads_dropped} payload(s)"
            f"{', the checkpoint' if done.checkpoint_dropped else ''}"
        )
    elif not configured:
        raise ConfigError(
            f"source {name} is not in {c.config_path}; its records ({describe(held or Counter())})"
            f" are in the store: run `aggregator source remove {name} --purge` to retire them"
        )
    if configured:
        remove_source(c.config_path, name)
        kept = f"; its {active} active record(s) stay published" if keep_records and active else ""
        click.echo(f"source {name} removed from {c.config_path}{kept}")


def _violation_keys(violations: str | None) -> dict[str, bool]:
    """The ``strict`` and ``lenient`` keys of a ``--violations`` choice (none for None);
    ``flag`` says ``strict = false``, so that a GEMINI chain is not strict either."""
    if violations is None:
        return {}
    return {"strict": violations == "strict", "lenient": violations == "lenient"}
