"""Lexical checks of the ``literal-datatype`` rules and the URL / e-mail tests of ``literal-url``.

Each check takes a literal's lexical form and returns ``(canonical lexical form, datatype IRI or
"" for the rule's own datatype)``, or None when the value is not a valid value of the datatype.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation

from pyoxigraph import NamedNode

XSD = "http://www.w3.org/2001/XMLSchema#"

Check = Callable[[str], tuple[str, str] | None]


def _non_negative_integer(lexical: str) -> tuple[str, str] | None:
    text = lexical.strip()
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite() or value < 0 or value != value.to_integral_value():
        return None
    return str(int(value)), ""


def _decimal(lexical: str) -> tuple[str, str] | None:
    text = lexical.strip()
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    return (text if re.fullmatch(r"[+-]?[0-9]*\.?[0-9]+", text) else str(value)), ""


_HEX = re.compile(r"^(?:[0-9A-Fa-f]{2})+$")


def _hex_binary(lexical: str) -> tuple[str, str] | None:
    text = lexical.strip()
    return (text, "") if _HEX.match(text) else None


_DURATION = re.compile(
    r"^-?P(?=\d|T\d)(?:\d+Y)?(?:\d+M)?(?:\d+D)?(?:T(?=\d)(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$"
)


def _duration(lexical: str) -> tuple[str, str] | None:
    text = lexical.strip()
    return (text, "") if _DURATION.match(text) else None


_TZ = r"(?:Z|[+-](?:0\d|1[0-3]):[0-5]\d|[+-]14:00)?"
_DATE_FORMS = (
    (re.compile(r"^\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])" + _TZ + "$"), XSD + "date"),
    (
        re.compile(
            r"^\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])T(?:[01]\d|2[0-3]):[0-5]\d"
            r"(?::[0-5]\d(?:\.\d+)?)?" + _TZ + "$"
        ),
        XSD + "dateTime",
    ),
    (re.compile(r"^\d{4}-(?:0[1-9]|1[0-2])" + _TZ + "$"), XSD + "gYearMonth"),
    (re.compile(r"^\d{4}" + _TZ + "$"), XSD + "gYear"),
)


def _temporal(lexical: str) -> tuple[str, str] | None:
    """xsd:date, xsd:dateTime, xsd:gYearMonth or xsd:gYear, by the lexical form."""
    text = lexical.strip()
    for pattern, datatype in _DATE_FORMS:
        if pattern.match(text):
            if datatype == XSD + "dateTime" and text.count(":") == 1 + (text[-6:-5] in "+-"):
                text = text[:16] + ":00" + text[16:]  # hh:mm -> hh:mm:ss
            return text, datatype
    return None


# Lexical tests for literal-datatype rules: return (canonical lexical form, datatype IRI or ""
# for the rule's datatype), or None when the value is not valid.
CHECKS: Mapping[str, Check] = {
    "non-negative-integer": _non_negative_integer,
    "decimal": _decimal,
    "hex-binary": _hex_binary,
    "duration": _duration,
    "temporal": _temporal,
}
# Source datatypes a literal-datatype rule may convert from (others are reported, not changed).
_NUMERIC = frozenset(
    XSD + name
    for name in (
        "string", "integer", "decimal", "double", "float", "long", "int", "short", "byte",
        "unsignedLong", "unsignedInt", "positiveInteger", "nonNegativeInteger",
    )
)  # fmt: skip
# the datatypes each check may convert from (others are reported, not changed)
CONVERTIBLE: Mapping[str, frozenset[str]] = {
    "non-negative-integer": _NUMERIC,
    "decimal": _NUMERIC,
    "hex-binary": frozenset({XSD + "string"}),
    "duration": frozenset({XSD + "string"}),
    "temporal": frozenset({XSD + "string"}),
}
# datatypes accepted as they are (no finding) besides the rule's own datatype
ACCEPTED: Mapping[str, frozenset[str]] = {
    "temporal": frozenset(XSD + n for n in ("date", "dateTime", "gYear", "gYearMonth")),
}
_URL = re.compile(r"^(?:https?|ftp)://[^\s<>\"{}|\\^`]+$", re.IGNORECASE)
_EMAIL = re.compile(r"^(?:mailto:)?([^@\s<>\"]+@[^@\s<>\"]+\.[A-Za-z]{2,})$", re.IGNORECASE)


def as_iri(text: str, email: bool) -> NamedNode | None:
    """The IRI a literal stands for: an absolute http(s)/ftp URL, or (``email``) an address."""
    value = text.strip()
    if email:
        match = _EMAIL.match(value)
        value = f"mailto:{match.group(1)}" if match else ""
    elif not _URL.match(value):
        return None
    try:
        return NamedNode(value) if value else None
    except ValueError:
        return None
