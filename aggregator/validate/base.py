"""The Validator contract.

Two kinds of validators: those that check the source payload (XSD, Schematron; ``target =
"payload"``) and those that check a mapped dataset graph (SHACL; ``target = "graph"``). A
source's chain (:class:`aggregator.config.ValidationStep`) runs the payload validators in
order and stops at the first that fails, then the graph validators. Every validator returns
a :class:`ValidationReport`; it raises only when it cannot run at all (a payload that cannot
be parsed raises :class:`~aggregator.core.errors.ParseError`, recorded as the record's error).

Payload validators get the record as a :class:`~aggregator.mapping.payload.ParsedPayload`: they
ask it for the parsed form they need (``payload.xml()``), which is parsed once and shared with the
other payload validators and the mapper.

A validator declares its options as a frozen dataclass in ``Options`` (see
:mod:`aggregator.config.plugin_options`); its constructor takes the same names as keyword arguments
(paths as ``str``). Instances must pickle cheaply (as their constructor arguments) and keep
compiled schemas in a per-process cache: they are sent to the mapping worker processes.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from aggregator.core.models import MappedDataset, ValidationReport
from aggregator.mapping.payload import ParsedPayload


class Validator:
    name: ClassVar[str]
    target: ClassVar[Literal["payload", "graph"]]
    #: the options dataclass (None: the validator takes no options)
    Options: ClassVar[type[Any] | None] = None

    def validate_payload(self, payload: ParsedPayload) -> ValidationReport:
        raise NotImplementedError

    def validate_graph(self, dataset: MappedDataset) -> ValidationReport:
        raise NotImplementedError
