"""The Validator contract.

Two kinds of validators: those that check the source payload (XSD, Schematron; ``target =
"payload"``) and those that check a mapped dataset graph (SHACL; ``target = "graph"``). A
source's chain runs the payload validators in order and stops at the first that fails, then
the graph validators. Every validator returns a :class:`ValidationReport`; it raises only when
it cannot run at all.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from aggregator.models import MappedDataset, RawRecord, ValidationReport


class Validator:
    name: ClassVar[str]
    target: ClassVar[Literal["payload", "graph"]]

    def validate_payload(self, raw: RawRecord) -> ValidationReport:
        raise NotImplementedError

    def validate_graph(self, dataset: MappedDataset) -> ValidationReport:
        raise NotImplementedError
