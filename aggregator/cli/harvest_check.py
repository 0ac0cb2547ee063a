"""``aggregator validate --profile/--source/--normalised``: a file through the chain a harvest
runs, step by step, with the harvest's decision.

The chain is built by the configuration's own code (``config/validation_chain.py``,
``config/profiles.py``) and run by the harvest's own per-record function
(:func:`aggregator.jobs.processing.check_record`); the verdict is the harvest's
(:func:`aggregator.validate.policy.decide`). Nothing here validates or decides by itself: it
chooses the chain and prints what the harvest's code found.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from aggregator.cli.context import Ctx
from aggregator.config import SourceConfig, ValidationSettings, ValidationStep
from aggregator.core.models import Finding, RawRecord, Severity
from aggregator.validate.policy import Verdict

#: the base IRI and source name of a file checked without a configuration
FILE_BASE = "http://localhost:8000/"


def _config_exists(c: Ctx) -> bool:
    return c.config_path.exists() or bool(c.config_given)  # a named file must exist


def _profile_source(c: Ctx, fmt: str, profile: str | None, file: Path) -> SourceConfig:
    """A source of format ``fmt`` whose ``validation`` is ``profile`` (as aggregator.toml would
    spell it: a profile name, or validator and profile names comma-separated), else the chain
    a source of that format gets when it names none; the [validation.NAME] defaults of
    aggregator.toml apply when there is one."""
    from aggregator.config.profiles import PROFILES, default_chain
    from aggregator.config.validation_chain import parse_chain
    from aggregator.core.errors import ConfigError

    value: Any = default_chain(fmt)
    if profile is not None:
        names = [p.strip() for p in profile.split(",") if p.strip()]
        # a profile alone, as `validation = "gemini"` (its payload steps, then shacl)
        value = names[0] if len(names) == 1 and names[0] in PROFILES else names
    defaults = c.settings.validation if _config_exists(c) else ValidationSettings()
    root = c.config_path.parent if _config_exists(c) else None
    try:
        chain = parse_chain(value, "validate --profile", root, defaults)
    except ConfigError as err:
        raise click.BadParameter(err.message, param_hint="--profile") from None
    return SourceConfig(
        name="file", type="file", url=file.resolve().as_uri(), format=fmt, validation=chain
    )


def _with_ranges(chain: tuple[ValidationStep, ...]) -> tuple[ValidationStep, ...]:
    """--vocabularies: the class range shapes added to every shacl step's own extra_shapes."""
    from aggregator.validate.shacl import ranges_shapes

    ranges = str(ranges_shapes())
    steps = []
    for step in chain:
        if step.validator == "shacl":
            options = dict(step.options)
            extra = [str(p) for p in options.get("extra_shapes", ())]
            if ranges not in extra:
                options["extra_shapes"] = (*extra, ranges)
            step = replace(step, options=tuple(sorted(options.items())))
        steps.append(step)
    return tuple(steps)


def _finding_line(f: Finding) -> str:
    """One finding: severity, step, rule, location, path, message (tab-separated)."""
    fields = (f.severity.value, f.step or "mapping", f.rule, f.location, f.path, f.message)
    return "\t".join(x or "" for x in fields)


def _count(findings: tuple[Finding, ...]) -> str:
    violations = sum(f.severity is Severity.VIOLATION for f in findings)
    warnings = sum(f.severity is Severity.WARNING for f in findings)
    return f"{violations} violation(s), {warnings} warning(s)" if findings else "no finding"


def _print_text(check: Any, source: SourceConfig) -> None:
    from aggregator.jobs.processing import StepStatus

    chain = " -> ".join(s.label for s in source.validation) or "none"
    lenient = ", lenient" if source.lenient else ""
    click.echo(f"# chain ({source.format}{lenient}): {chain}")
    dataset: str | None = None
    for number, run in enumerate(check.steps, start=1):
        if run.dataset != dataset:
            dataset = run.dataset
            click.echo(f"## dataset {dataset}")
        what = run.label if run.label == run.validator else f"{run.label} ({run.validator})"
        said = "" if run.status is StepStatus.NOT_RUN else f": {_count(run.findings)}"
        click.echo(f"# step {number} {what}, {run.target}: {run.status.value}{said}")
        for f in run.findings:
            if f.severity is not Severity.INFO:
                click.echo(_finding_line(f))
    p = check.processed
    if p.failure:  # its findings are those of the step that stopped it, printed above
        click.echo(f"## record {p.raw.local_id}: rejected")
    for checked in p.checked:
        click.echo(f"## record {checked.dataset.dataset_iri}: {DECISION[checked.verdict]}")


#: how the harvest's verdict on a dataset reads (docs/validation.md: what a violation does)
DECISION = {Verdict.STORE: "stored", Verdict.FLAG: "stored, flagged", Verdict.REJECT: "rejected"}


def _overall(check: Any) -> str:
    """What the harvest does with FILE: rejected if it rejects any of it, else stored (and
    flagged when any dataset is)."""
    if check.rejected:
        return "rejected"
    return "stored, flagged" if Verdict.FLAG in check.verdicts else "stored"


def _as_json(check: Any, source: SourceConfig, file: Path) -> dict[str, Any]:
    p = check.processed
    return {
        "file": str(file),
        "format": source.format,
        "source": source.name,
        "lenient": source.lenient,
        "policy": source.policy.value,
        "chain": [step.describe() for step in source.validation],
        "steps": [
            {
                "step": run.label,
                "validator": run.validator,
                "target": run.target,
                "dataset": run.dataset,
                "status": run.status.value,
                "findings": [f.as_dict() for f in run.findings],
            }
            for run in check.steps
        ],
        "failure": [f.as_dict() for f in p.failure],
        "datasets": [
            {
                "dataset": c.dataset.dataset_iri,
                "local_id": c.dataset.local_id,
                "decision": DECISION[c.verdict],
                "findings": [f.as_dict() for f in c.findings],
            }
            for c in p.checked
        ],
        "decision": _overall(check),
    }


def validate_as_harvested(
    c: Ctx,
    raw_of: Any,
    file: Path,
    fmt: str | None,
    profile: str | None,
    source_name: str | None,
    vocabularies: bool,
    as_json: bool,
) -> bool:
    """Run FILE through the chain; print each step's findings and the harvest's decision.
    True when the harvest would store every dataset of FILE (False: it would reject some)."""
    from aggregator.jobs.processing import check_record, mapping_context
    from aggregator.mapping.base import MappingContext
    from aggregator.plugin import mappers

    if source_name is not None:
        if profile is not None:
            raise click.UsageError("give --profile or --source, not both")
        settings = c.settings
        source = settings.source(source_name)
        if fmt is not None and fmt != source.format:
            raise click.UsageError(
                f"--from {fmt}: source {source_name!r} harvests {source.format} records"
            )
        fmt = source.format
        ctx = mapping_context(settings, source)
    else:
        fmt = fmt or "dcat"
        source = _profile_source(c, fmt, profile, file)
        ctx = (
            mapping_context(c.settings, source)
            if _config_exists(c)
            else MappingContext(FILE_BASE, source.name)
        )
    if vocabularies:
        source = replace(source, validation=_with_ranges(source.validation))
    mapper = mappers.get(fmt)
    # one file is one record, as a harvester hands it over (a collection for formats whose
    # payloads hold many datasets, within the input limits otherwise)
    raw: RawRecord = raw_of(file, fmt, collection=mapper.reads_collections)
    records = _as_harvested(replace(raw, source=source.name))
    checks = [check_record(record, ctx, source) for record in records]
    if as_json:
        answers = [_as_json(check, source, file) for check in checks]
        shown: Any = answers[0] if len(answers) == 1 else answers
        click.echo(json.dumps(shown, indent=2, default=str))
    else:
        for record, check in zip(records, checks, strict=True):
            if len(records) > 1:
                click.echo(f"# record {record.local_id} of {file.name}")
            _print_text(check, source)
        overall = [_overall(check) for check in checks]
        click.echo(next((o for o in ("rejected", "stored, flagged") if o in overall), "stored"))
    return not any(check.rejected for check in checks)


def _as_harvested(raw: RawRecord) -> list[RawRecord]:
    """The records a harvest would pass on for FILE: an ISO 19139 document that is a CSW
    envelope gives each of its records alone, under its fileIdentifier (as the WAF and
    single-document harvesters do), so that the XSD and Schematron steps read the record."""
    if raw.format != "iso19139":
        return [raw]
    from aggregator.core.errors import AggregatorError
    from aggregator.core.xml import parse_xml
    from aggregator.harvest.gemini import record_facts, serialise_embedded
    from aggregator.mapping.iso19139.records import iso_records

    try:
        document = iso_records(parse_xml(raw.payload, url=raw.url), raw.local_id)
    except AggregatorError:  # the chain's own parse reports it, as the harvest's would
        return [raw]
    if not document.is_envelope:
        return [raw]
    return [
        replace(
            raw,
            local_id=record_facts(element).file_identifier or f"{raw.local_id}#{number}",
            payload=serialise_embedded(element),
            is_collection=False,
        )
        for number, element in enumerate(document.records, start=1)
    ]
