"""Map and validate one raw record: the pure, CPU-bound half of a harvest.

Runs in worker processes (or in-process when ``harvest.workers = 0``); it touches neither the
network nor the store. Plugin instances are created once per process and cached (validators
by name and options, so two sources with different schemas get two validators).

The payload is parsed once (:class:`~aggregator.mapping.payload.ParsedPayload`): the payload
steps of the chain and the mapper share the parsed form.
"""

from __future__ import annotations

import copyreg
import gc
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from operator import attrgetter
from typing import Any

from aggregator.config import Settings, SourceConfig, ValidationStep, ViolationPolicy
from aggregator.core.errors import AggregatorError
from aggregator.core.models import Finding, MappedDataset, RawRecord, Severity, Stage
from aggregator.mapping.base import Mapper, MappingContext, mint_iri
from aggregator.mapping.finish import finish_mapped
from aggregator.mapping.payload import ParsedPayload
from aggregator.plugin import mappers, validators
from aggregator.store.graphs import lines_to_nquads, statements
from aggregator.store.packing import pack, pack_graph, unpack_graph
from aggregator.store.shared import pack_statements, split_lines
from aggregator.validate.base import Validator
from aggregator.validate.policy import Verdict, decide, rejects_payload

_WORKER_GC_THRESHOLD = 50_000
_mappers: dict[str, Mapper] = {}
_validators: dict[tuple[str, tuple[tuple[str, Any], ...]], Validator] = {}


def _mapper(name: str) -> Mapper:
    if name not in _mappers:
        _mappers[name] = mappers.get(name)()
    return _mappers[name]


def validator(step: ValidationStep) -> Validator:
    """The validator of one chain step (built once per process and options)."""
    key = (step.validator, step.options)
    if key not in _validators:
        _validators[key] = validators.get(step.validator)(**dict(step.options))
    return _validators[key]


def build_chain(steps: Sequence[ValidationStep]) -> list[Validator]:
    """Build (compile) every validator of a chain; raises ConfigError for a bad schema."""
    return [validator(step) for step in steps]


#: labelled findings already made in this process, by (finding, label): most of a source's
#: findings are the same for every record (the same recommended property missing), so they
#: are made once and shared, and a chunk's results pickle each of them once
_labelled_cache: dict[tuple[Finding, str | None], Finding] = {}
_LABELLED_CACHE_MAX = 4096


def _label(finding: Finding, label: str | None) -> Finding:
    key = (finding, label)
    labelled = _labelled_cache.get(key)
    if labelled is None:
        if len(_labelled_cache) >= _LABELLED_CACHE_MAX:
            _labelled_cache.clear()
        labelled = finding if finding.step == label else replace(finding, step=label)
        _labelled_cache[key] = labelled
    return labelled


def _labelled(findings: Sequence[Finding], step: ValidationStep) -> tuple[Finding, ...]:
    return tuple(_label(f, step.label) for f in findings)


def _record_error(err: AggregatorError, step: ValidationStep | None) -> Finding:
    stage = Stage.PARSE if err.code in ("parseError", "unsafeInput", "inputLimit") else Stage.MAP
    label = step.label if step else None
    return Finding(stage, Severity.VIOLATION, err.code, err.message, step=label)


@dataclass(frozen=True, slots=True)
class Prepared:
    """Storage forms of one dataset, made in the worker so the store's process only writes.

    ``nquads`` holds the dataset graph and the catalogue facts in the record's named graph,
    blank nodes scoped to it; valid while the record keeps the IRI it was prepared for.
    """

    record_iri: str
    packed_ntriples: bytes
    packed_catalog: bytes
    nquads: bytes
    shared: bytes = b""  # the statements left to the store's shared graph, as N-Triples


@dataclass(frozen=True, slots=True)
class Checked:
    """One mapped dataset, what the validators said of it and the verdict of its source's
    policy on that (:func:`aggregator.validate.policy.decide`)."""

    dataset: MappedDataset
    findings: tuple[Finding, ...]
    prepared: Prepared | None = None
    verdict: Verdict = Verdict.STORE

    @property
    def conforms(self) -> bool:
        return not any(f.severity is Severity.VIOLATION for f in self.findings)

    @property
    def flagged(self) -> bool:
        return self.verdict is Verdict.FLAG


@dataclass(frozen=True, slots=True)
class Processed:
    raw: RawRecord
    checked: tuple[Checked, ...] = ()
    failure: tuple[Finding, ...] = ()  # the record as a whole failed (parse, map, payload check)
    payload_sha: str = ""
    packed_payload: bytes = b""


#: What a worker sends back for one record (:func:`process_chunk`): the checked datasets
#: (lean: no unpacked N-Triples, the prepared forms carry them), the record's failure, the
#: payload's SHA-256 and its packed form. No raw record: the store's process has it
#: (:func:`rejoin`).
Lean = tuple[tuple[Checked, ...], tuple[Finding, ...], str, bytes]


def mapping_context(settings: Settings, source: SourceConfig) -> MappingContext:
    """The mapping context of a harvest of ``source``."""
    return MappingContext(
        base_iri=settings.base_iri,
        source=source.name,
        publisher=source.publisher,
        categorisation=source.categorisation,
        limits=settings.input,
    )


def prepare(ds: MappedDataset, ctx: MappingContext) -> Prepared:
    record_iri = mint_iri(ctx, "record", ds.local_id)
    scope = "x" + hashlib.sha1(record_iri.encode(), usedforsecurity=False).hexdigest()[:16]
    own = (record_iri, ds.dataset_iri)
    dataset, shared = split_lines(statements(ds.ntriples), own) if ds.ntriples else ([], [])
    facts, shared_facts = (
        split_lines(statements(ds.catalog_ntriples), own) if ds.catalog_ntriples else ([], [])
    )
    nquads = lines_to_nquads(dataset, scope + "d", record_iri)
    nquads += lines_to_nquads(facts, scope + "c", record_iri)
    return Prepared(
        record_iri=record_iri,
        packed_ntriples=pack_graph(ds.ntriples),
        packed_catalog=pack_graph(ds.catalog_ntriples),
        nquads=nquads,
        shared=pack_statements(tuple(dict.fromkeys(shared + shared_facts))),
    )


def process(
    raw: RawRecord,
    ctx: MappingContext,
    chain: Sequence[ValidationStep],
    *,
    policy: ViolationPolicy = ViolationPolicy.STRICT,
) -> Processed:
    """Payload validators in chain order, mapping, then graph validators; each dataset gets
    the verdict of ``policy`` on its findings (:func:`aggregator.validate.policy.decide`).

    The first payload step that fails stops the payload steps. When the policy rejects on
    its findings (:func:`~aggregator.validate.policy.rejects_payload`: always when strict)
    the record fails there (its findings are the record's failure). Otherwise it is mapped
    anyway and the failing step's findings are added to every dataset it yields, which the
    lifecycle stores with the record, flagged. A payload that cannot be parsed or mapped
    fails the record under every policy: there is nothing to store.
    """
    checked, failure = _run(raw, ctx, _steps(chain), policy, lean=False)
    return Processed(raw, checked, failure, *_payload_forms(raw))


class StepStatus(StrEnum):
    PASSED = "passed"  # ran; no violation (warnings and infos may come with it)
    FAILED = "failed"  # ran and reported a violation (or, for the mapping, raised an error)
    ERROR = "error"  # could not run on this payload (it cannot be parsed): the record fails
    NOT_RUN = "not run"  # an earlier step stopped the chain


@dataclass(frozen=True, slots=True)
class StepRun:
    """One step of the chain on one record, as :func:`check_record` traces it: the payload
    steps (``target = "payload"``), the mapping (``"mapping"``, label ``mapping``) and, for
    each mapped dataset (``dataset``: its IRI), the graph steps (``"graph"``)."""

    label: str
    validator: str
    target: str
    status: StepStatus
    findings: tuple[Finding, ...] = ()
    dataset: str | None = None


@dataclass(frozen=True, slots=True)
class RecordCheck:
    """A record run through a source's chain exactly as its harvest runs it, step by step,
    with the harvest's verdict on each dataset (:attr:`Checked.verdict`: the source's policy,
    :func:`aggregator.validate.policy.decide`)."""

    processed: Processed
    steps: tuple[StepRun, ...]

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        """One per ``processed.checked``, in order."""
        return tuple(c.verdict for c in self.processed.checked)

    @property
    def rejected(self) -> bool:
        """True when the harvest would reject the record or any dataset it yields."""
        return bool(self.processed.failure) or Verdict.REJECT in self.verdicts


def check_record(raw: RawRecord, ctx: MappingContext, source: SourceConfig) -> RecordCheck:
    """:func:`process` with a trace of every step of ``source.validation`` (what ran, what
    it found, what did not run) and the harvest's decision: what ``aggregator validate``
    shows a publisher. The same code path as a harvest, not a second implementation."""
    trace: list[StepRun] = []
    steps = _steps(source.validation)
    checked, failure = _run(raw, ctx, steps, source.policy, lean=False, trace=trace)
    processed = Processed(raw, checked, failure, *_payload_forms(raw))
    if not checked:  # nothing mapped: the mapping (if it was not reached) and the graph steps
        if not any(run.target == "mapping" for run in trace):
            trace.append(StepRun("mapping", raw.format, "mapping", StepStatus.NOT_RUN))
        trace.extend(
            StepRun(step.label, step.validator, "graph", StepStatus.NOT_RUN)
            for step, v in steps
            if v.target == "graph"
        )
    return RecordCheck(processed, tuple(trace))


def _status(findings: Sequence[Finding]) -> StepStatus:
    violated = any(f.severity is Severity.VIOLATION for f in findings)
    return StepStatus.FAILED if violated else StepStatus.PASSED


def _steps(chain: Sequence[ValidationStep]) -> list[tuple[ValidationStep, Validator]]:
    return [(step, validator(step)) for step in chain]


def _payload_forms(raw: RawRecord) -> tuple[str, bytes]:
    return hashlib.sha256(raw.payload).hexdigest(), pack(raw.payload)


def _run(
    raw: RawRecord,
    ctx: MappingContext,
    chain: Sequence[tuple[ValidationStep, Validator]],
    policy: ViolationPolicy,
    *,
    lean: bool,
    trace: list[StepRun] | None = None,
) -> tuple[tuple[Checked, ...], tuple[Finding, ...]]:
    """:func:`process` without the payload forms: (checked datasets, failure). ``lean``: the
    datasets come without their unpacked N-Triples (the prepared forms carry them).
    ``trace`` (:func:`check_record` only, never a harvest's hot path) receives a
    :class:`StepRun` for each payload step and for the mapping, and for each dataset its
    graph steps."""
    if any(f.severity is Severity.VIOLATION for f in raw.findings):  # the harvester's own
        return (), raw.findings
    payload = ParsedPayload(raw, ctx.limits)
    carried, failure = _check_payload(payload, chain, policy, trace)
    if failure is not None:
        return (), failure
    try:
        datasets = _mapper(raw.format).map_payload(payload, ctx)
    except AggregatorError as err:
        return (), (*carried, _mapping_failed(raw, _record_error(err, None), trace))
    except Exception as err:  # a mapper bug must not stop the job: it is this record's error
        message = f"{type(err).__name__}: {err}"
        crash = Finding(Stage.MAP, Severity.VIOLATION, "mapperCrash", message)
        return (), (*carried, _mapping_failed(raw, crash, trace))
    # categorisation, the source's publisher, the DCAT-AP 3.0.1 ranges: whatever the format
    datasets = finish_mapped(datasets, ctx)
    if trace is not None:
        mapped = tuple(f for ds in datasets for f in ds.findings)
        trace.append(StepRun("mapping", raw.format, "mapping", _status(mapped), mapped))
    checked = []
    for ds in datasets:
        findings: list[Finding] = [*carried, *ds.findings]
        for step, v in chain:
            if v.target == "graph":
                graph_findings = _labelled(v.validate_graph(ds).findings, step)
                findings.extend(graph_findings)
                if trace is not None:
                    status = _status(graph_findings)
                    run = StepRun(step.label, step.validator, "graph", status, graph_findings)
                    trace.append(replace(run, dataset=ds.dataset_iri))
        prepared = prepare(ds, ctx)
        if lean:
            ds = replace(ds, ntriples=b"", catalog_ntriples=b"")
        checked.append(Checked(ds, tuple(findings), prepared, decide(findings, policy)))
    return tuple(checked), ()


def _check_payload(
    payload: ParsedPayload,
    chain: Sequence[tuple[ValidationStep, Validator]],
    policy: ViolationPolicy,
    trace: list[StepRun] | None,
) -> tuple[tuple[Finding, ...], tuple[Finding, ...] | None]:
    """The payload steps in chain order: (the findings every dataset carries, the record's
    failure or None). The first step that fails stops them; it fails the record when the
    policy rejects on its findings (see :func:`process`)."""
    carried: tuple[Finding, ...] = ()
    for i, (step, v) in enumerate(chain):
        if v.target != "payload":
            continue
        try:
            report = v.validate_payload(payload)
        except AggregatorError as err:
            error = _record_error(err, step)
            if trace is not None:
                trace.append(_payload_run(step, StepStatus.ERROR, (error,)))
                _not_run(trace, chain[i + 1 :])
            return carried, (error,)
        found = _labelled(report.findings, step)
        carried += found  # a passing step's warnings come along
        if trace is not None:
            trace.append(_payload_run(step, _status(found), found))
        if not report.conforms:
            if trace is not None:
                _not_run(trace, chain[i + 1 :])
            return carried, carried if rejects_payload(carried, policy) else None
    return carried, None


def _mapping_failed(raw: RawRecord, error: Finding, trace: list[StepRun] | None) -> Finding:
    if trace is not None:
        trace.append(StepRun("mapping", raw.format, "mapping", StepStatus.FAILED, (error,)))
    return error


def _payload_run(
    step: ValidationStep, status: StepStatus, findings: tuple[Finding, ...] = ()
) -> StepRun:
    return StepRun(step.label, step.validator, "payload", status, findings)


def _not_run(trace: list[StepRun], steps: Sequence[tuple[ValidationStep, Validator]]) -> None:
    trace.extend(_payload_run(s, StepStatus.NOT_RUN) for s, v in steps if v.target == "payload")


def _pickled_by_constructor(cls: type[Any]) -> None:
    """Results cross to the store's process pickled as constructor calls (``copyreg``): the
    ``__setstate__`` of a slots dataclass runs ``dataclasses.fields()`` for every object,
    which made unpickling a chunk's results far dearer for the store's process
    (docs/benchmarks.md#record-store). Every field is an ``__init__`` argument, so the call
    rebuilds the object."""
    names = tuple(f.name for f in fields(cls) if f.init)
    assert len(names) == len(fields(cls)) > 1, cls
    values = attrgetter(*names)
    copyreg.pickle(cls, lambda obj: (cls, values(obj)))


for _cls in (RawRecord, Finding, MappedDataset, Prepared, Checked, Processed):
    _pickled_by_constructor(_cls)


def process_chunk(
    raws: Sequence[RawRecord],
    ctx: MappingContext,
    chain: Sequence[ValidationStep],
    policy: ViolationPolicy = ViolationPolicy.STRICT,
) -> list[Lean]:
    """Run in a worker: lean results, which :func:`rejoin` makes whole again."""
    if gc.get_threshold()[0] < _WORKER_GC_THRESHOLD:  # see pipeline.relaxed_gc
        gc.set_threshold(_WORKER_GC_THRESHOLD)
    steps = _steps(chain)
    results: list[Lean] = []
    for raw in raws:
        checked, failure = _run(raw, ctx, steps, policy, lean=True)
        results.append((checked, failure, *_payload_forms(raw)))
    return results


def rejoin(results: Sequence[Lean], raws: Sequence[RawRecord]) -> list[Processed]:
    """Lean results with their raw records (same order as submitted)."""
    return [
        Processed(raw, checked, failure, sha, packed)
        for (checked, failure, sha, packed), raw in zip(results, raws, strict=True)
    ]


def dataset_ntriples(c: Checked) -> tuple[bytes, bytes]:
    """The dataset's canonical N-Triples and catalogue facts, from wherever they are kept."""
    if c.dataset.ntriples or c.prepared is None:
        return c.dataset.ntriples, c.dataset.catalog_ntriples
    return unpack_graph(c.prepared.packed_ntriples), unpack_graph(c.prepared.packed_catalog)
