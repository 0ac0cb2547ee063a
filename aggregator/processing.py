"""Map and validate one raw record: the pure, CPU-bound half of a harvest.

Runs in worker processes (or in-process when ``harvest.workers = 0``); it touches neither the
network nor the store. Plugin instances are created once per process and cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aggregator.errors import AggregatorError
from aggregator.mapping.base import Mapper, MappingContext
from aggregator.models import Finding, MappedDataset, RawRecord, Severity, Stage
from aggregator.plugins import mappers, validators
from aggregator.validate.base import Validator

_mappers: dict[str, Mapper] = {}
_validators: dict[str, Validator] = {}


def _mapper(name: str) -> Mapper:
    if name not in _mappers:
        _mappers[name] = mappers.get(name)()
    return _mappers[name]


def _validator(name: str) -> Validator:
    if name not in _validators:
        _validators[name] = validators.get(name)()
    return _validators[name]


@dataclass(frozen=True, slots=True)
class Checked:
    """One mapped dataset and what the graph validators said of it."""

    dataset: MappedDataset
    findings: tuple[Finding, ...]

    @property
    def conforms(self) -> bool:
        return not any(f.severity is Severity.VIOLATION for f in self.findings)


@dataclass(frozen=True, slots=True)
class Processed:
    raw: RawRecord
    checked: tuple[Checked, ...] = ()
    failure: tuple[Finding, ...] = ()  # the record as a whole failed (parse, map, payload check)


def process(raw: RawRecord, ctx: MappingContext, chain: Sequence[str]) -> Processed:
    """Payload validators (stop at the first failure), mapping, then graph validators."""
    for name in chain:
        v = _validator(name)
        if v.target != "payload":
            continue
        report = v.validate_payload(raw)
        if not report.conforms:
            return Processed(raw, failure=report.findings)
    try:
        datasets = _mapper(raw.format).map(raw, ctx)
    except AggregatorError as err:
        stage = Stage.PARSE if err.code in ("parseError", "unsafeInput") else Stage.MAP
        return Processed(raw, failure=(Finding(stage, Severity.VIOLATION, err.code, err.message),))
    except Exception as err:  # a mapper bug must not stop the job: it is this record's error
        return Processed(
            raw,
            failure=(
                Finding(
                    Stage.MAP, Severity.VIOLATION, "mapperCrash", f"{type(err).__name__}: {err}"
                ),
            ),
        )
    checked = []
    for ds in datasets:
        findings: list[Finding] = list(ds.findings)
        for name in chain:
            v = _validator(name)
            if v.target == "graph":
                findings.extend(v.validate_graph(ds).findings)
        checked.append(Checked(ds, tuple(findings)))
    return Processed(raw, checked=tuple(checked))


def process_chunk(
    raws: Sequence[RawRecord], ctx: MappingContext, chain: Sequence[str]
) -> list[Processed]:
    return [process(r, ctx, chain) for r in raws]
