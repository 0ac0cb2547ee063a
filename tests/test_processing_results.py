"""What a mapping worker sends back (processing.process_chunk, pickled as between processes,
then rejoined with the raw records) is what processing.process makes in-process: the same
checked datasets and storage forms, findings, failures and payload forms."""

from __future__ import annotations

import pickle
from dataclasses import replace

from aggregator.config import SourceConfig, ValidationSettings, ValidationStep
from aggregator.config.profiles import profile_steps
from aggregator.core.models import Finding, RawRecord, Severity, Stage
from aggregator.demo.peers.gemini_samples import bundled_gemini_records, generate_gemini_record
from aggregator.jobs.processing import (
    Checked,
    Processed,
    StepStatus,
    check_record,
    dataset_ntriples,
    process,
    process_chunk,
    rejoin,
)
from aggregator.mapping.base import MappingContext
from aggregator.store.packing import ZSTD_MAGIC, unpack
from aggregator.validate.policy import Verdict

CHAIN = (*profile_steps("gemini", ValidationSettings()), ValidationStep("shacl"))
CTX = MappingContext(base_iri="http://127.0.0.1:8000/", source="s")


def raw(local_id: str, payload: bytes, **kw: object) -> RawRecord:
    return RawRecord("s", local_id, "iso19139", payload, "application/xml", **kw)  # type: ignore[arg-type]


def records() -> list[RawRecord]:
    found = [raw(f"gen-{i}", generate_gemini_record(i)) for i in range(6)]
    found += [raw(name, data) for name, data in bundled_gemini_records()]
    found.append(raw("broken", b"<gmd:MD_Metadata"))  # fails to parse: a failure
    refused = Finding(Stage.FETCH, Severity.VIOLATION, "checksum", "does not match")
    found.append(raw("refused", generate_gemini_record(9), findings=(refused,)))
    return found


def whole(c: Checked) -> tuple[object, ...]:
    """A checked dataset with its N-Triples wherever they are kept."""
    return (
        replace(c.dataset, ntriples=b"", catalog_ntriples=b""),
        dataset_ntriples(c),
        c.findings,
        c.prepared,
    )


def same(a: Processed, b: Processed) -> None:
    assert a.raw == b.raw
    assert a.failure == b.failure
    assert [whole(c) for c in a.checked] == [whole(c) for c in b.checked]
    assert a.payload_sha == b.payload_sha
    assert unpack(a.packed_payload) == unpack(b.packed_payload) == a.raw.payload


def test_worker_results_are_the_in_process_ones() -> None:
    raws = records()
    wire = pickle.loads(pickle.dumps(process_chunk(raws, CTX, CHAIN), pickle.HIGHEST_PROTOCOL))
    back = rejoin(wire, raws)
    here = [process(r, CTX, CHAIN) for r in raws]
    assert len(back) == len(here) == len(raws)
    for a, b in zip(here, back, strict=True):
        same(a, b)
    assert sum(1 for p in here if p.checked) >= 6 and sum(1 for p in here if p.failure) >= 2
    assert all(p.packed_payload[:4] == ZSTD_MAGIC for p in back)
    # the lean form carries no unpacked N-Triples; the in-process one does
    assert all(not c.dataset.ntriples and c.prepared for p in back for c in p.checked)
    assert all(c.dataset.ntriples for p in here for c in p.checked)
    labelled = [f for p in here for c in p.checked for f in c.findings if f.step == "shacl"]
    assert labelled  # findings carry the label of the step that found them


def test_identical_findings_are_one_object_and_pickled_once() -> None:
    raws = [raw(f"gen-{i}", generate_gemini_record(i)) for i in range(4)]
    results = process_chunk(raws, CTX, CHAIN)
    findings = [f for checked, _, _, _ in results for c in checked for f in c.findings]
    assert len(findings) > len(set(findings))  # the same recommendation on every record
    assert len({id(f) for f in findings}) == len(set(findings))


def test_check_record_is_process_with_a_trace_and_the_harvest_decision() -> None:
    """What `aggregator validate --profile/--source` runs: the harvest's own function, the
    same results, plus the steps that ran and decide()'s verdict."""
    strict = SourceConfig(
        name="s", type="waf", url="http://x/", format="iso19139", validation=CHAIN
    )
    lenient = replace(strict, lenient=True)
    for r in records():
        check = check_record(r, CTX, strict)
        same(check.processed, process(r, CTX, CHAIN))
        assert check.rejected == (bool(check.processed.failure) or not all(
            c.conforms for c in check.processed.checked
        ))  # fmt: skip
        labels = [run.label for run in check.steps if run.dataset is None]
        if r.findings:  # refused by its harvester: nothing ran
            assert labels == ["mapping", "shacl"]
            assert {run.status for run in check.steps} == {StepStatus.NOT_RUN}
        else:
            assert labels[:4] == ["iso19139-xsd", "iso19139-table-a1", "gemini-2.3", "mapping"]
        soft = check_record(r, CTX, lenient)
        assert Verdict.REJECT not in soft.verdicts  # lenient: whatever maps is stored
    broken = check_record(raw("broken", b"<gmd:MD_Metadata"), CTX, strict)
    assert [(run.label, run.status) for run in broken.steps] == [
        ("iso19139-xsd", StepStatus.ERROR),
        ("iso19139-table-a1", StepStatus.NOT_RUN),
        ("gemini-2.3", StepStatus.NOT_RUN),
        ("mapping", StepStatus.NOT_RUN),
        ("shacl", StepStatus.NOT_RUN),
    ]
    assert broken.rejected and broken.steps[0].findings == broken.processed.failure
