"""``mdr-metadata``: a page of an MDR service against the portal's standard metadata schema.

The portal's profile (the MDR specification's Metadata.xml, section 3.2, kept as TOML: the
bundled ``schemas/mdr-metadata.toml`` documents the format and is the default) says which
attributes are mandatory, their maximum lengths, the enumerations (departments, formats,
ISO 639-2 languages, subject classifications, resource types) and how many relations and
classifications a page may have. Dates must be ``xsd:dateTime`` values and the Identifier an
http(s) URL of at most 128 characters. A page the service itself flagged invalid (its
``mdValidationErrVO`` names attributes) is rejected with rule ``serviceValidationError``.

Every finding is a violation whose ``location`` is the attribute (``Language``) and whose
``rule`` says why (``mandatory``, ``maxLength``, ``enumeration``, ``maxValues``,
``dateTime``, ``email``, ``identifier``); the MDR harvest turns the first into a
RECV_INVALID_MD event and a notifyWebSiteAdmin call.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Literal

from lxml import etree

from aggregator.core.errors import ConfigError
from aggregator.core.models import Finding, Severity, Stage, ValidationReport
from aggregator.core.resources import bundled
from aggregator.mapping.payload import ParsedPayload
from aggregator.validate.base import Validator

TNS = "http://mdc.npi.gov.in"
SERVICE_FLAGGED = "serviceValidationError"
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?$")

#: profile attribute -> (MetadataVO element, kind)
ATTRIBUTES: dict[str, tuple[str, str]] = {
    "CreatorDept": ("creatorDeptName", "text"),
    "CreatorOrgName": ("creatorOrgName", "text"),
    "CreatorEmail": ("creatorEmail", "email"),
    "CoverageSpatial": ("coverageSpatial", "text"),
    "CoverageTemporal": ("coverageTemporal", "text"),
    "CoverageJurisdiction": ("coverageJurisdiction", "text"),
    "Description": ("description", "text"),
    "DateCreated": ("dateCreated", "date"),
    "DatePublished": ("datePublished", "date"),
    "DateModified": ("dateModified", "date"),
    "Format": ("format", "text"),
    "Language": ("language", "text"),
    "PublisherOrgName": ("publisherOrgName", "text"),
    "PublisherDept": ("publisherDeptName", "text"),
    "PublisherEmail": ("publisherEmail", "email"),
    "PublisherAddress": ("publisherAddress", "text"),
    "PublisherPhone": ("publisherPhone", "text"),
    "Relation": ("relation", "list"),
    "Source": ("source", "text"),
    "Title": ("title", "text"),
    "TitleAlternate": ("titleAlternate", "text"),
    "SubjectKeywords": ("subjectKeywords", "text"),
    "SubjectClassification": ("subjectClasification", "list"),
    "Type": ("type", "text"),
}
KEYS = {"mandatory", "max_length", "values", "max_values", "departments"}


@dataclass(frozen=True, slots=True)
class Rule:
    mandatory: bool = False
    max_length: int | None = None
    values: frozenset[str] = frozenset()
    max_values: int | None = None


@dataclass(frozen=True, slots=True)
class Profile:
    rules: dict[str, Rule]
    #: email addresses of the listed departments, per attribute (CreatorEmail ...)
    emails: dict[str, frozenset[str]]


def _int(table: dict[str, Any], key: str, where: str, low: int, high: int) -> int | None:
    if key not in table:
        return None
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{where}: {key} must be an integer from {low} to {high}")
    return value


@lru_cache(maxsize=8)
def load_profile(path: str, mtime_ns: int) -> Profile:
    """Read and check a profile file (cached per process by path and modification time)."""
    try:
        doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"MDR metadata profile {path}: {err}") from err
    rules: dict[str, Rule] = {}
    emails: dict[str, frozenset[str]] = {}
    for name, table in doc.items():
        if name == "meta":
            continue
        where = f"MDR metadata profile {path}: [{name}]"
        if name not in ATTRIBUTES:
            raise ConfigError(f"{where}: not an attribute of the standard metadata schema")
        if not isinstance(table, dict) or set(table) - KEYS:
            raise ConfigError(f"{where}: keys are {', '.join(sorted(KEYS))}")
        values = [str(v) for v in table.get("values", [])]
        departments = table.get("departments", [])
        if departments:
            if not all(isinstance(d, dict) and d.get("name") for d in departments):
                raise ConfigError(f"{where}: each department needs a name")
            values += [str(d["name"]) for d in departments]
            email_attr = "CreatorEmail" if name == "CreatorDept" else "PublisherEmail"
            emails[email_attr] = frozenset(str(d["email"]) for d in departments if "email" in d)
        rules[name] = Rule(
            mandatory=bool(table.get("mandatory", False)),
            max_length=_int(table, "max_length", where, 1, 65535),
            values=frozenset(values),
            max_values=_int(table, "max_values", where, 1, 64),
        )
    return Profile(rules, emails)


@dataclass(frozen=True, slots=True)
class MdrMetadataOptions:
    profile: Path | None = None  # default: the bundled schemas/mdr-metadata.toml


class MdrMetadataValidator(Validator):
    name: ClassVar[str] = "mdr-metadata"
    target: ClassVar[Literal["payload", "graph"]] = "payload"
    Options: ClassVar[type[Any] | None] = MdrMetadataOptions

    def __init__(self, profile: str | None = None) -> None:
        path = Path(profile) if profile else bundled("schemas", "mdr-metadata.toml")
        self.profile_file = path.resolve()
        try:
            mtime = self.profile_file.stat().st_mtime_ns
        except OSError as err:
            raise ConfigError(f"MDR metadata profile {path}: {err.strerror}") from err
        self.profile = load_profile(str(self.profile_file), mtime)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self.profile_file),))

    def __repr__(self) -> str:
        return f"MdrMetadataValidator(profile={self.profile_file.name!r})"

    def validate_payload(self, payload: ParsedPayload) -> ValidationReport:
        return ValidationReport(self.name, tuple(check_page(payload.xml(), self.profile)))


def _violation(attribute: str, rule: str, message: str) -> Finding:
    return Finding(
        Stage.CHECK, Severity.VIOLATION, rule, f"{attribute}: {message}", location=attribute
    )


def _shown(values: frozenset[str]) -> str:
    listed = sorted(values)
    more = f", ... ({len(listed)} in all)" if len(listed) > 8 else ""
    return ", ".join(listed[:8]) + more


def check_page(root: etree._Element, profile: Profile) -> list[Finding]:
    """The violations of one WebPageMetadataVO element."""
    if etree.QName(root).namespace != TNS:
        return [_violation("page", "structure", "not a WebPageMetadataVO of the MDR namespace")]
    findings = _flagged(root)
    identifier = (root.findtext(f"{{{TNS}}}identifier") or "").strip()
    if not re.match(r"^https?://\S+$", identifier) or len(identifier) > 128:
        findings.append(
            _violation("Identifier", "identifier", "must be an http(s) URL of at most 128 chars")
        )
    md = root.find(f"{{{TNS}}}metadata")
    if md is None:
        return [*findings, _violation("metadata", "mandatory", "the page has no metadata")]
    for attribute, (element, kind) in ATTRIBUTES.items():
        rule = profile.rules.get(attribute, Rule())
        values = [(e.text or "").strip() for e in md.findall(f"{{{TNS}}}{element}")]
        values = [v for v in values if v]
        if not values:
            if rule.mandatory:
                findings.append(_violation(attribute, "mandatory", "a value is required"))
            continue
        findings += _count_violations(attribute, kind, rule, len(values))
        emails = profile.emails.get(attribute)
        for value in values:
            findings += _value_violations(attribute, kind, rule, emails, value)
    return findings


def _flagged(root: etree._Element) -> list[Finding]:
    """What the MDR service itself reports invalid in the page."""
    flagged = [
        (e.text or "").strip()
        for e in root.findall(f"{{{TNS}}}mdValidationErrVO/{{{TNS}}}errAttributes")
        if (e.text or "").strip()
    ]
    if not flagged:
        return []
    said = root.findtext(f"{{{TNS}}}mdValidationErrVO/{{{TNS}}}errDescription") or ""
    return [
        _violation(
            flagged[0],
            SERVICE_FLAGGED,
            f"the MDR service reports invalid metadata ({', '.join(flagged)}): {said}",
        )
    ]


def _count_violations(attribute: str, kind: str, rule: Rule, count: int) -> list[Finding]:
    findings = []
    if kind != "list" and count > 1:
        findings.append(_violation(attribute, "maxValues", "takes one value"))
    if rule.max_values is not None and count > rule.max_values:
        findings.append(
            _violation(attribute, "maxValues", f"{count} values, at most {rule.max_values}")
        )
    return findings


def _value_violations(
    attribute: str, kind: str, rule: Rule, emails: frozenset[str] | None, value: str
) -> list[Finding]:
    """The violations of one value of ``attribute`` (``emails``: the addresses of the listed
    departments, if the profile lists any for it)."""
    findings = []
    if rule.max_length is not None and len(value) > rule.max_length:
        findings.append(
            _violation(
                attribute,
                "maxLength",
                f"{len(value)} characters, at most {rule.max_length}",
            )
        )
    if rule.values and value not in rule.values:
        findings.append(
            _violation(attribute, "enumeration", f"{value!r} is not one of {_shown(rule.values)}")
        )
    if kind == "date" and not DATETIME.match(value):
        findings.append(_violation(attribute, "dateTime", f"{value!r} is not a date-time"))
    if kind == "email":
        if not EMAIL.match(value):
            findings.append(_violation(attribute, "email", f"{value!r} is not an e-mail"))
        elif emails and value not in emails:
            findings.append(
                _violation(
                    attribute,
                    "enumeration",
                    f"{value!r} is not the address of a listed department",
                )
            )
    return findings
