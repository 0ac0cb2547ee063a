"""What a violation does to a record: rejected, stored flagged, or stored.

One rule, used by the harvest (:mod:`aggregator.jobs.processing` and the lifecycle), the
dashboard's preview and ``aggregator validate``: :func:`decide` takes a record's findings and
its source's :class:`~aggregator.config.ViolationPolicy` and returns a :class:`Verdict`.

A record **cannot be used** when one of its violations matches :data:`UNUSABLE` (the one list
of such rules): it could not be read, it is not the format it claims, it has no identity or
no title, or a check step (the source's publisher, a checksum) refused it. Such a record is
rejected under every policy. Any other violation is a DCAT-AP (or ISO, GEMINI ...) rule its
source must fix: a missing mandatory description, a cardinality, a value no mapping can
repair. Under ``flag`` (the default) and ``lenient`` the record is stored and republished
with its findings, flagged; under ``strict`` it is rejected. Warnings and infos never decide.

``lenient`` (the older opt-in) stores every record that maps, flagged, even one that
:data:`UNUSABLE` names (a titleless dataset of a multi-dataset document, a check step's
refusal); only a record that cannot be parsed or mapped at all is rejected under every policy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from aggregator.config import ViolationPolicy
from aggregator.core.models import Finding, Severity, Stage
from aggregator.core.vocab import DCT


class Verdict(StrEnum):
    STORE = "store"  # no violation
    FLAG = "flag"  # stored and republished with its findings, flagged
    REJECT = "reject"  # kept in the rejections (dead letters) with its findings, not published


@dataclass(frozen=True, slots=True)
class UnusableRule:
    """Violations that make a record unusable: every violation of ``stage`` (``path`` None)
    or those of ``stage`` on ``path`` (a SHACL result path)."""

    stage: Stage
    why: str
    path: str | None = None

    def matches(self, f: Finding) -> bool:
        return f.stage is self.stage and (self.path is None or f.path == self.path)


#: The one list of what makes a record unusable
#: (docs/validation.md#what-a-violation-does-to-a-record).
#: Mappers raise (a ``parse`` or ``map`` failure of the whole record) for a payload that is
#: not the format it claims, a record without identifier or without title; the DCAT mapper
#: reports a titleless dataset of a multi-dataset document as a ``map`` violation; the SHACL
#: gate's ``dct:title`` minimum catches any other.
UNUSABLE: tuple[UnusableRule, ...] = (
    UnusableRule(Stage.FETCH, "the record could not be fetched"),
    UnusableRule(Stage.PARSE, "the payload cannot be parsed as its format"),
    UnusableRule(Stage.MAP, "not the format it claims, no identifier or no title"),
    UnusableRule(Stage.CHECK, "a check step refused it (publisher, checksum)"),
    UnusableRule(Stage.SHACL, "no title (dct:title)", DCT + "title"),
)


def unusable(f: Finding) -> bool:
    """Whether this finding makes its record unusable (a violation matching :data:`UNUSABLE`)."""
    return f.severity is Severity.VIOLATION and any(r.matches(f) for r in UNUSABLE)


def decide(findings: Iterable[Finding], policy: ViolationPolicy) -> Verdict:
    """The verdict on one record (one dataset) from all its findings: payload steps, mapping
    and graph steps. ``strict`` rejects on any violation; ``flag`` rejects the unusable and
    flags the rest; ``lenient`` flags every violation (a record that could not be parsed or
    mapped has no graph to store: the pipeline rejects it before asking)."""
    violations = [f for f in findings if f.severity is Severity.VIOLATION]
    if not violations:
        return Verdict.STORE
    if policy is ViolationPolicy.STRICT:
        return Verdict.REJECT
    if policy is ViolationPolicy.FLAG and any(unusable(f) for f in violations):
        return Verdict.REJECT
    return Verdict.FLAG


def rejects_payload(findings: Iterable[Finding], policy: ViolationPolicy) -> bool:
    """Whether a failing payload step (XSD, Schematron, a check) stops the record before it is
    mapped: under ``strict`` always, under ``flag`` for an unusable finding (a check step's
    refusal), under ``lenient`` never; the others are carried to every dataset the record
    yields and flag it."""
    return decide(findings, policy) is Verdict.REJECT
