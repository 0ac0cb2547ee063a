"""Named validation profiles: ready-made payload steps a source's chain may name.

A profile stands for its payload steps in a source's ``validation``::

    validation = "gemini"                    # the profile's steps, then "shacl"
    validation = ["iso19139", "shacl"]       # the same, spelled out
    validation = ["none", "shacl"]           # no payload step

| profile    | steps                                                                        |
|------------|------------------------------------------------------------------------------|
| `iso19139` | `iso19139-xsd` (ISO 19139 XSD), `iso19139-table-a1` (Table A.1 Schematron)   |
| `gemini`   | the two above, then `gemini-2.3` (UK GEMINI 2.3 Schematron)                  |
| `none`     | none                                                                         |

The Schematron steps are the generic ``schematron`` validator with the bundled rule files
``schemas/iso19139-table-a1.sch`` and ``schemas/gemini-2.3.sch``, labelled as above. A source
whose format is ``iso19139`` (the CSW, WAF and single-document harvesters) gets ``gemini``
then ``shacl`` unless it names its own chain (:data:`FORMAT_DEFAULTS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from aggregator.core.resources import bundled

S = TypeVar("S", covariant=True)


class StepDefaults(Protocol[S]):
    """What makes a chain step from validator defaults (the configuration's
    ``ValidationSettings``; named by its shape so that profiles need not import it)."""

    def step(
        self, validator: str, overrides: Mapping[str, Any] | None = None, name: str = ""
    ) -> S: ...


TABLE_A1 = "iso19139-table-a1.sch"
GEMINI = "gemini-2.3.sch"
PROFILES = ("iso19139", "gemini", "none")
#: the chain a source gets when it names none, by format (others: ["shacl"])
FORMAT_DEFAULTS: dict[str, tuple[str, ...]] = {"iso19139": ("gemini", "shacl")}


def default_chain(fmt: str) -> list[Any]:
    return list(FORMAT_DEFAULTS.get(fmt, ("shacl",)))


def _schematron(defaults: StepDefaults[S], filename: str, label: str) -> S:
    return defaults.step(
        "schematron", {"rules": bundled("schemas", filename), "phase": None}, label
    )


def profile_steps(name: str, defaults: StepDefaults[S]) -> list[S]:
    """The payload steps of profile ``name`` (one of :data:`PROFILES`)."""
    if name == "none":
        return []
    steps = [
        defaults.step("iso19139-xsd", name="iso19139-xsd"),
        _schematron(defaults, TABLE_A1, "iso19139-table-a1"),
    ]
    if name == "gemini":
        steps.append(_schematron(defaults, GEMINI, "gemini-2.3"))
    return steps
