"""XML Schema (XSD 1.0) validation of XML source payloads, with lxml.

The schema comes from a file the operator points to (``[[sources.x.validation]]`` with
``validator = "xsd"`` and ``schema = "path/to/schema.xsd"``): official schemas are used from
local copies or installed packages, never fetched (an ``xs:import`` over http is refused when
the schema is compiled). Findings carry ``stage=Stage.XSD``, ``rule`` = libxml2's error type
(``SCHEMAV_CVC_COMPLEX_TYPE_2_4``), the message, ``location`` = ``line N`` of the payload and
``path`` = the XPath of the offending element. At most ``max_findings`` are kept per record,
then one finding says how many more there were.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

from lxml import etree

from aggregator.core.errors import ConfigError
from aggregator.core.models import Finding, Severity, Stage, ValidationReport
from aggregator.mapping.payload import ParsedPayload
from aggregator.validate.base import Validator
from aggregator.validate.xml_rules import FileKey, compile_rules, file_key


@dataclass(frozen=True, slots=True)
class XsdOptions:
    schema: Path  # the top-level schema document; its imports resolve next to it
    max_findings: int = 50

    def __post_init__(self) -> None:
        if self.max_findings < 1:
            raise ValueError("max_findings must be at least 1")


@lru_cache(maxsize=16)
def _compiled(key: FileKey) -> etree.XMLSchema:
    path = Path(key[0])

    def build(tree: etree._ElementTree) -> etree.XMLSchema:
        try:
            return etree.XMLSchema(tree)
        except etree.XMLSchemaParseError as err:
            raise ConfigError(f"XML schema {path} cannot be compiled: {err}") from err

    return compile_rules(path, "XML schema", build)


class XsdValidator(Validator):
    name: ClassVar[str] = "xsd"
    target: ClassVar[Literal["payload", "graph"]] = "payload"
    Options: ClassVar[type[Any] | None] = XsdOptions

    def __init__(self, schema: str, max_findings: int = 50) -> None:
        self.schema_file = Path(schema).resolve()
        self.max_findings = max_findings
        self._schema = _compiled(file_key(self.schema_file, "XML schema"))
        self._lock = threading.Lock()  # an XMLSchema keeps its error log on itself

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self.schema_file), self.max_findings))

    def __repr__(self) -> str:
        return f"XsdValidator(schema={self.schema_file.name!r})"

    def validate_payload(self, payload: ParsedPayload) -> ValidationReport:
        root = payload.xml()
        with self._lock:
            if self._schema.validate(root):
                return ValidationReport(self.name)
            errors: list[Any] = [*cast(Iterable[Any], self._schema.error_log)]
        findings = [
            Finding(
                stage=Stage.XSD,
                severity=Severity.VIOLATION,
                rule=e.type_name,
                message=e.message,
                location=f"line {e.line}" if e.line else None,
                path=e.path or None,
            )
            for e in errors[: self.max_findings]
        ]
        if len(errors) > self.max_findings:
            more = len(errors) - self.max_findings
            findings.append(
                Finding(Stage.XSD, Severity.VIOLATION, "tooManyFindings", f"{more} more errors")
            )
        return ValidationReport(self.name, tuple(findings))
