"""The ``meta-share`` validator: the bundled Schematron of the mandatory structure of a
META-SHARE v3.0 resource description (``schemas/meta-share-3.0.sch``), run by the generic
Schematron validator. Full validation against the official XML Schema is an ``xsd`` step with
a local copy of it (see docs/protocols/meta-share.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from aggregator.core.resources import bundled
from aggregator.validate.schematron import SchematronValidator

RULES = "meta-share-3.0.sch"


@dataclass(frozen=True, slots=True)
class MetaShareStructureOptions:
    rules: Path | None = None  # default: the bundled schemas/meta-share-3.0.sch
    max_findings: int = 50

    def __post_init__(self) -> None:
        if self.max_findings < 1:
            raise ValueError("max_findings must be at least 1")


class MetaShareStructureValidator(SchematronValidator):
    name: ClassVar[str] = "meta-share"
    Options: ClassVar[type[Any] | None] = MetaShareStructureOptions

    def __init__(self, rules: str | None = None, max_findings: int = 50) -> None:
        super().__init__(rules or str(bundled("schemas", RULES)), None, max_findings)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self.rules_file), self.max_findings))

    def __repr__(self) -> str:
        return f"MetaShareStructureValidator(rules={self.rules_file.name!r})"
