"""ISO Schematron validation of XML source payloads, with lxml.isoschematron.

The rules come from a file the operator points to (``validator = "schematron"``, ``rules =
"schemas/profile.sch"``, optionally ``phase``); they are compiled once per process (to XSLT,
by lxml's bundled ISO skeleton, no network) and run on each payload's parsed tree.

Every ``svrl:failed-assert`` and ``svrl:successful-report`` becomes a finding with
``stage=Stage.SCHEMATRON``, ``rule`` = the assertion's ``id`` (or its test when it has none),
``message`` = its text, ``path`` = the SVRL location (an XPath) and ``location`` = ``line N``
of the node it points to. Severity comes from the assertion's ``role`` (or ``flag``):
``warning``/``warn`` -> warning, ``info``/``information`` -> info; otherwise a failed assert
is a violation and a successful report a warning. Only violations fail the step.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Literal

import lxml.isoschematron as isoschematron  # not in lxml-stubs (see pyproject's mypy section)
from lxml import etree

from aggregator.errors import ConfigError
from aggregator.models import Finding, Severity, Stage, ValidationReport
from aggregator.payload import ParsedPayload
from aggregator.validate.base import Validator
from aggregator.validate.xml_rules import FileKey, compile_rules, file_key, line_of

SVRL = "{http://purl.oclc.org/dsdl/svrl}"
_ROLES = {
    "warning": Severity.WARNING,
    "warn": Severity.WARNING,
    "info": Severity.INFO,
    "information": Severity.INFO,
    "error": Severity.VIOLATION,
    "fatal": Severity.VIOLATION,
}


@dataclass(frozen=True, slots=True)
class SchematronOptions:
    rules: Path  # an ISO Schematron schema (.sch)
    phase: str | None = None  # run only this phase (default: the schema's defaultPhase / all)
    max_findings: int = 50

    def __post_init__(self) -> None:
        if self.max_findings < 1:
            raise ValueError("max_findings must be at least 1")


@lru_cache(maxsize=16)
def _compiled(key: FileKey, phase: str | None) -> isoschematron.Schematron:
    path = Path(key[0])

    def build(tree: etree._ElementTree) -> Any:
        try:
            return isoschematron.Schematron(
                tree,
                phase=phase,
                store_report=True,
                error_finder=isoschematron.Schematron.ASSERTS_AND_REPORTS,
            )
        except (etree.SchematronParseError, etree.XSLTParseError, etree.XSLTApplyError) as err:
            raise ConfigError(f"Schematron rules {path} cannot be compiled: {err}") from err

    return compile_rules(path, "Schematron rules", build)


def _severity(node: etree._Element) -> Severity:
    role = (node.get("role") or node.get("flag") or "").strip().lower()
    if role in _ROLES:
        return _ROLES[role]
    return Severity.VIOLATION if node.tag == SVRL + "failed-assert" else Severity.WARNING


class SchematronValidator(Validator):
    name: ClassVar[str] = "schematron"
    target: ClassVar[Literal["payload", "graph"]] = "payload"
    Options: ClassVar[type[Any] | None] = SchematronOptions

    def __init__(self, rules: str, phase: str | None = None, max_findings: int = 50) -> None:
        self.rules_file = Path(rules).resolve()
        self.phase = phase
        self.max_findings = max_findings
        self._schematron = _compiled(file_key(self.rules_file, "Schematron rules"), phase)
        self._lock = threading.Lock()  # the report is kept on the Schematron object

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self.rules_file), self.phase, self.max_findings))

    def __repr__(self) -> str:
        return f"SchematronValidator(rules={self.rules_file.name!r}, phase={self.phase!r})"

    def validate_payload(self, payload: ParsedPayload) -> ValidationReport:
        root = payload.xml()
        with self._lock:
            self._schematron.validate(root)
            report = self._schematron.validation_report
        if report is None:
            return ValidationReport(self.name)
        results = [
            n
            for n in report.getroot().iter(SVRL + "failed-assert", SVRL + "successful-report")
            if isinstance(n, etree._Element)
        ]
        findings = []
        for node in results[: self.max_findings]:
            text = node.find(SVRL + "text")
            message = " ".join(str(t) for t in text.itertext()).strip() if text is not None else ""
            message = " ".join(message.split())
            location = node.get("location")
            findings.append(
                Finding(
                    stage=Stage.SCHEMATRON,
                    severity=_severity(node),
                    rule=node.get("id") or f"test {node.get('test', '?')}",
                    message=message or f"assertion {node.get('test', '?')} is not met",
                    location=line_of(root, location),
                    path=location,
                )
            )
        rest = [_severity(n) for n in results[self.max_findings :]]
        if rest:  # as bad as the worst finding it stands for
            worst = min(rest, key=[Severity.VIOLATION, Severity.WARNING, Severity.INFO].index)
            findings.append(
                Finding(Stage.SCHEMATRON, worst, "tooManyFindings", f"{len(rest)} more findings")
            )
        return ValidationReport(self.name, tuple(findings))
