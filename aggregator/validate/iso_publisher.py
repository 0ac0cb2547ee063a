"""The UK DMS publisher cross-check of ISO 19139 records (``validator = "iso-publisher"``).

The DMS collection interface cross-checks each record "against the associated Data Provider
details" given at registration (paragraph 48) and reports records "not associated with the
Data Provider identified as part of the registration" (paragraph 52). This payload step
reads the record's responsible parties, the metadata contact (``gmd:contact``) and the
resource's points of contact (``gmd:identificationInfo/*/gmd:pointOfContact``), and passes
when one of them matches the registered publisher by organisation name (case and spacing
ignored), by e-mail address, or by identifier (the ``xlink:href`` of a ``gmx:Anchor``
organisation name). Otherwise the finding is "not associated with the registered
publisher", a violation with ``action = "reject"`` (the record is rejected) or a warning
with ``action = "warn"`` (stored, the warning listed on the job). Put it first in the chain:
the DMS runs it before the schema checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from lxml import etree

from aggregator.core.models import Finding, Severity, Stage, ValidationReport
from aggregator.mapping.payload import ParsedPayload
from aggregator.validate.base import Validator

_NS = {
    "gmd": "http://www.isotc211.org/2005/gmd",
    "gco": "http://www.isotc211.org/2005/gco",
    "gmx": "http://www.isotc211.org/2005/gmx",
    "xlink": "http://www.w3.org/1999/xlink",
}
_PARTIES = etree.XPath(
    "gmd:contact/gmd:CI_ResponsibleParty"
    " | gmd:identificationInfo/*/gmd:pointOfContact/gmd:CI_ResponsibleParty",
    namespaces=_NS,
)
_ORG = etree.XPath("string(gmd:organisationName/*[1])", namespaces=_NS)
_ORG_HREF = etree.XPath("string(gmd:organisationName/gmx:Anchor/@xlink:href)", namespaces=_NS)
_EMAILS = etree.XPath(
    "gmd:contactInfo/gmd:CI_Contact/gmd:address/gmd:CI_Address"
    "/gmd:electronicMailAddress/*[1]/text()",
    namespaces=_NS,
)
_ROLE = etree.XPath("string(gmd:role/gmd:CI_RoleCode/@codeListValue)", namespaces=_NS)


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass(frozen=True, slots=True)
class Party:
    """One responsible party as the record gives it."""

    organisation: str
    identifier: str
    emails: tuple[str, ...]
    role: str
    line: int | None


def responsible_parties(record: etree._Element) -> list[Party]:
    """The metadata contact and the resource's points of contact, in document order."""
    found = []
    nodes = _PARTIES(record)
    for party in nodes if isinstance(nodes, list) else ():
        if not isinstance(party, etree._Element):
            continue
        emails = _EMAILS(party)
        found.append(
            Party(
                str(_ORG(party)).strip(),
                str(_ORG_HREF(party)).strip(),
                tuple(
                    str(e).strip()
                    for e in (emails if isinstance(emails, list) else ())
                    if str(e).strip()
                ),
                str(_ROLE(party)).strip(),
                line if isinstance(line := party.sourceline, int) else None,
            )
        )
    return found


@dataclass(frozen=True, slots=True)
class IsoPublisherOptions:
    organisation: str  # the registered publisher's name (``name`` labels a chain step)
    email: str = ""
    identifier: str = ""  # an IRI naming the organisation (a gmx:Anchor's xlink:href)
    action: Literal["reject", "warn"] = "reject"
    roles: tuple[str, ...] = ()  # only parties in these roles count (none given: any role)

    def __post_init__(self) -> None:
        if not self.organisation.strip():
            raise ValueError("organisation (the registered publisher) must not be empty")


class IsoPublisherValidator(Validator):
    name: ClassVar[str] = "iso-publisher"
    target: ClassVar[Literal["payload", "graph"]] = "payload"
    Options: ClassVar[type[Any] | None] = IsoPublisherOptions

    def __init__(
        self,
        organisation: str,
        email: str = "",
        identifier: str = "",
        action: str = "reject",
        roles: tuple[str, ...] = (),
    ) -> None:
        self.publisher = organisation
        self.email = email
        self.identifier = identifier
        self.action = action
        self.roles = roles

    def matches(self, party: Party) -> bool:
        if self.roles and party.role not in self.roles:
            return False
        if party.organisation and _norm(party.organisation) == _norm(self.publisher):
            return True
        if self.email and any(e.casefold() == self.email.casefold() for e in party.emails):
            return True
        return bool(self.identifier) and party.identifier == self.identifier

    def validate_payload(self, payload: ParsedPayload) -> ValidationReport:
        parties = responsible_parties(payload.xml())
        if any(self.matches(p) for p in parties):
            return ValidationReport(self.name)
        names = sorted({p.organisation for p in parties if p.organisation})
        listed = ", ".join(repr(n) for n in names) or "none"
        severity = Severity.VIOLATION if self.action == "reject" else Severity.WARNING
        finding = Finding(
            Stage.CHECK,
            severity,
            "publisherMismatch",
            f"not associated with the registered publisher {self.publisher!r}: the record's"
            f" responsible organisations are {listed}",
            location=f"line {parties[0].line}" if parties and parties[0].line else None,
        )
        return ValidationReport(self.name, (finding,))
