"""ISO Schematron validation of XML source payloads.

The rules come from a file the operator points to (``validator = "schematron"``, ``rules =
"schemas/profile.sch"``, optionally ``phase``); they are compiled once per process (to XSLT,
by lxml's bundled ISO skeleton, no network) and run on each payload's parsed tree. A file
within the subset :mod:`aggregator.validate.schematron_xpath` covers (the bundled ones are)
is also compiled to one XPath per assertion, which runs instead of the XSLT with the same
findings at a fraction of the cost; the XSLT stays the reference and the fallback.

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

from aggregator.core.errors import ConfigError
from aggregator.core.models import Finding, Severity, Stage, ValidationReport
from aggregator.mapping.payload import ParsedPayload
from aggregator.validate.base import Validator
from aggregator.validate.schematron_xpath import Patterns, Unsupported, compile_schema, run
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


@dataclass(frozen=True, slots=True)
class _Compiled:
    xslt: isoschematron.Schematron  # lxml's ISO skeleton: the reference, and the fallback
    xpath: Patterns | None  # the same rules as compiled XPaths, when the file is in the subset


@lru_cache(maxsize=16)
def _compiled(key: FileKey, phase: str | None) -> _Compiled:
    path = Path(key[0])

    def build(tree: etree._ElementTree) -> _Compiled:
        try:
            xslt = isoschematron.Schematron(
                tree,
                phase=phase,
                store_report=True,
                error_finder=isoschematron.Schematron.ASSERTS_AND_REPORTS,
            )
        except (etree.SchematronParseError, etree.XSLTParseError, etree.XSLTApplyError) as err:
            raise ConfigError(f"Schematron rules {path} cannot be compiled: {err}") from err
        return _Compiled(xslt, compile_schema(tree, phase))

    return compile_rules(path, "Schematron rules", build)


@dataclass(frozen=True, slots=True)
class _Result:
    """One svrl:failed-assert or svrl:successful-report, from either implementation."""

    tag: str
    role: str | None
    flag: str | None
    id: str | None
    test: str
    message: str  # white space normalised
    location: str | None  # the SVRL location (an XPath)
    line: str | None  # "line N"

    def severity(self) -> Severity:
        role = (self.role or self.flag or "").strip().lower()
        if role in _ROLES:
            return _ROLES[role]
        return Severity.VIOLATION if self.tag == SVRL + "failed-assert" else Severity.WARNING


class SchematronValidator(Validator):
    name: ClassVar[str] = "schematron"
    target: ClassVar[Literal["payload", "graph"]] = "payload"
    Options: ClassVar[type[Any] | None] = SchematronOptions

    def __init__(self, rules: str, phase: str | None = None, max_findings: int = 50) -> None:
        self.rules_file = Path(rules).resolve()
        self.phase = phase
        self.max_findings = max_findings
        compiled = _compiled(file_key(self.rules_file, "Schematron rules"), phase)
        self._schematron = compiled.xslt
        self._xpath = compiled.xpath  # None: this file needs the XSLT
        self._lock = threading.Lock()  # the report is kept on the Schematron object

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self.rules_file), self.phase, self.max_findings))

    def __repr__(self) -> str:
        return f"SchematronValidator(rules={self.rules_file.name!r}, phase={self.phase!r})"

    def validate_payload(self, payload: ParsedPayload) -> ValidationReport:
        root = payload.xml()
        if self._xpath is not None:
            try:
                with self._lock:
                    hits = run(self._xpath, root)
            except Unsupported:
                pass  # this record needs the XSLT (a comment as context, an XPath error)
            else:
                return self._report(
                    [
                        _Result(
                            SVRL + ("failed-assert" if h.kind == "assert" else "successful-report"),
                            h.role,
                            h.flag,
                            h.id,
                            h.test,
                            h.message,
                            h.location,
                            line_of(root, h.location),
                        )
                        for h in hits
                    ]
                )
        return self._report(self._xslt_results(root))

    def validate_with_xslt(self, payload: ParsedPayload) -> ValidationReport:
        """The report of lxml.isoschematron's XSLT alone: the reference the compiled XPaths
        are tested against."""
        return self._report(self._xslt_results(payload.xml()))

    def _xslt_results(self, root: etree._Element) -> list[_Result]:
        """The findings as lxml.isoschematron's XSLT reports them (SVRL, read back)."""
        with self._lock:
            self._schematron.validate(root)
            report = self._schematron.validation_report
        if report is None:
            return []
        results = []
        for n in report.getroot().iter(SVRL + "failed-assert", SVRL + "successful-report"):
            if not isinstance(n, etree._Element):
                continue
            text = n.find(SVRL + "text")
            message = " ".join(str(t) for t in text.itertext()) if text is not None else ""
            location = n.get("location")
            results.append(
                _Result(
                    str(n.tag),
                    n.get("role"),
                    n.get("flag"),
                    n.get("id"),
                    n.get("test", "?"),
                    " ".join(message.split()),
                    location,
                    line_of(root, location),
                )
            )
        return results

    def _report(self, results: list[_Result]) -> ValidationReport:
        findings = [
            Finding(
                stage=Stage.SCHEMATRON,
                severity=r.severity(),
                rule=r.id or f"test {r.test}",
                message=r.message or f"assertion {r.test} is not met",
                location=r.line,
                path=r.location,
            )
            for r in results[: self.max_findings]
        ]
        rest = [r.severity() for r in results[self.max_findings :]]
        if rest:  # as bad as the worst finding it stands for
            worst = min(rest, key=[Severity.VIOLATION, Severity.WARNING, Severity.INFO].index)
            findings.append(
                Finding(Stage.SCHEMATRON, worst, "tooManyFindings", f"{len(rest)} more findings")
            )
        return ValidationReport(self.name, tuple(findings))
