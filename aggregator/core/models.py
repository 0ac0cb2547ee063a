"""The value types that flow through the pipeline.

Data flow (see docs/architecture.md)::

    Harvester.list_records()  -> RawRecord*            (bytes as received, never RDF)
    Mapper.map(RawRecord)     -> MappedDataset*        (canonical N-Triples of one dataset)
    Validator.validate(...)   -> ValidationReport      (findings are data, never exceptions)
    RecordStore.apply(batch)  -> RecordOutcome per record

All types here are immutable and picklable so that mapping and validation can run in worker
processes while one process owns the store.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class Severity(StrEnum):
    """How bad a finding is. Only VIOLATION rejects a record."""

    VIOLATION = "violation"
    WARNING = "warning"
    INFO = "info"


class Stage(StrEnum):
    """Where in the pipeline a finding or error arose."""

    FETCH = "fetch"
    PARSE = "parse"
    MAP = "map"
    XSD = "xsd"
    SCHEMATRON = "schematron"
    SHACL = "shacl"
    CHECK = "check"  # initial checks: publisher, checksums, duplicates
    STORE = "store"


class JobStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"  # everything listed and stored; rejected records allowed
    PARTIAL = "partial"  # ran to the end but the listing was incomplete or a brake held
    FAILED = "failed"  # could not run (transport error before any listing, crash)
    CANCELLED = (
        "cancelled"  # stopped on request (Ctrl-C, the scheduler stopping); nothing withdrawn
    )


class Outcome(StrEnum):
    """What happened to one record in one job; the job counters are keyed by these."""

    ADDED = "added"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    SKIPPED = "skipped"  # source metadata date not newer than the stored one
    WITHDRAWN = "withdrawn"
    REJECTED = "rejected"
    ERRORED = "errored"
    #: stored (added, updated or unchanged) although it breaks a rule its source must fix: a
    #: share of those three counters, not an outcome of its own (aggregator/validate/policy.py)
    FLAGGED = "flagged"


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One unit of metadata exactly as a harvester received it.

    ``payload`` is kept byte for byte. ``is_collection`` marks payloads that describe many
    datasets (an RDF dump page, a catalogue document): each dataset the mapper finds becomes
    its own record, identified by its dataset IRI rather than by ``local_id``.
    ``payload_omitted``: listed, but the payload was not built (or fetched) because the store
    already holds this record at this datestamp or a newer one
    (:attr:`aggregator.harvest.base.HarvestRequest.up_to_date`); it is only counted as seen.
    ``version``: an opaque version tag the source gives the record (META-SHARE: the LR
    checksum of the node's inventory); when set, the store holds the record "up to date" when
    it holds this very tag, and dates are not compared (see docs/store.md).
    ``findings``: what the harvester itself found wrong with the record (a checksum that does
    not match); a violation among them rejects the record before its validation chain runs.
    """

    source: str
    local_id: str
    format: str
    payload: bytes
    media_type: str
    url: str | None = None
    datestamp: datetime | None = None
    deleted: bool = False
    is_collection: bool = False
    payload_omitted: bool = False
    version: str | None = None
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True, slots=True)
class Finding:
    """One validation or processing finding."""

    stage: Stage
    severity: Severity
    rule: str
    message: str
    location: str | None = None  # line number for XML, focus node for SHACL, IRI for RDF
    path: str | None = None  # SHACL result path or XPath
    step: str | None = None  # the validation step that found it (its label in the chain)

    def as_dict(self) -> dict[str, str | None]:
        return {
            "stage": self.stage.value,
            "step": self.step,
            "severity": self.severity.value,
            "rule": self.rule,
            "message": self.message,
            "location": self.location,
            "path": self.path,
        }


@dataclass(frozen=True, slots=True)
class ValidationReport:
    validator: str
    findings: tuple[Finding, ...] = ()

    @property
    def conforms(self) -> bool:
        return not any(f.severity is Severity.VIOLATION for f in self.findings)


@dataclass(frozen=True, slots=True)
class MappedDataset:
    """The DCAT-AP 3 description of one dataset, produced by a Mapper.

    ``ntriples`` is the canonical N-Triples serialisation (blank nodes relabelled by
    RDFC-1.0, lines sorted, UTF-8): byte-equal for equal graphs, so ``content_hash`` is the
    SHA-256 of it. ``catalog_ntriples`` holds facts about the source catalogue (its publisher,
    licence, language) that are kept on the catalogue record rather than on the dataset.
    """

    local_id: str
    dataset_iri: str
    ntriples: bytes
    content_hash: str
    datestamp: datetime | None = None
    catalog_ntriples: bytes = b""
    findings: tuple[Finding, ...] = ()
    themes: tuple[str, ...] = field(default=())  # dcat:theme IRIs, for sets and facets


def content_hash(ntriples: bytes) -> str:
    """The ``content_hash`` of a :class:`MappedDataset`: SHA-256 of its canonical N-Triples."""
    return hashlib.sha256(ntriples).hexdigest()


@dataclass(frozen=True, slots=True)
class RecordError:
    """A per-record error as stored on the job (every one of them, not a sample)."""

    local_id: str
    stage: Stage
    rule: str
    message: str
    severity: Severity = Severity.VIOLATION
    location: str | None = None
    step: str | None = None  # the validation step, when a chain step found it

    @property
    def where(self) -> str:
        """What the job shows as the error's stage: the step's label, else the stage."""
        return self.step or self.stage.value

    @classmethod
    def from_finding(cls, local_id: str, finding: Finding) -> RecordError:
        return cls(
            local_id=local_id,
            stage=finding.stage,
            rule=finding.rule,
            message=finding.message,
            severity=finding.severity,
            location=finding.location or finding.path,
            step=finding.step,
        )
