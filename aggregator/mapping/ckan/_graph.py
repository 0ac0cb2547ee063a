"""The graph a CKAN mapping builds and the readers of CKAN's loose values: text, lists,
language maps, URLs (repaired where a portal wrote them carelessly). The field kinds that use
them are :mod:`._values`."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote, urljoin

from pyoxigraph import BlankNode, Literal, NamedNode, Quad

from aggregator.core.models import Finding, Severity, Stage
from aggregator.core.vocab import DCAT, DCT, FOAF, RDF_TYPE, SKOS, SPDX, VCARD, XSD
from aggregator.mapping.ckan._geometry import (
    GEOJSON,
    WKT,
)

LOCN = "http://www.w3.org/ns/locn#"
A = NamedNode(RDF_TYPE)
FOAF_AGENT = NamedNode(FOAF + "Agent")
FOAF_NAME = NamedNode(FOAF + "name")
FOAF_MBOX = NamedNode(FOAF + "mbox")
FOAF_HOMEPAGE = NamedNode(FOAF + "homepage")
DCT_TYPE = NamedNode(DCT + "type")
RELATION = NamedNode(DCT + "relation")
PROVENANCE = NamedNode(DCT + "provenance")
VCARD_KIND = NamedNode(VCARD + "Kind")
VCARD_FN = NamedNode(VCARD + "fn")
VCARD_EMAIL = NamedNode(VCARD + "hasEmail")
VCARD_URL = NamedNode(VCARD + "hasURL")
VCARD_TEL = NamedNode(VCARD + "hasTelephone")
PERIOD = NamedNode(DCT + "PeriodOfTime")
DISTRIBUTION = NamedNode(DCAT + "Distribution")
ACCESS_URL = NamedNode(DCAT + "accessURL")
START = NamedNode(DCAT + "startDate")
END = NamedNode(DCAT + "endDate")
CHECKSUM = NamedNode(SPDX + "Checksum")
ALGORITHM = NamedNode(SPDX + "algorithm")
CHECKSUM_VALUE = NamedNode(SPDX + "checksumValue")
HEX = NamedNode(XSD + "hexBinary")
DATE_TIME = NamedNode(XSD + "dateTime")
KEYWORD = NamedNode(DCAT + "keyword")
CONCEPT = NamedNode(SKOS + "Concept")
PREF_LABEL = NamedNode(SKOS + "prefLabel")
NOTATION = NamedNode(SKOS + "notation")
LOCATION = NamedNode(DCT + "Location")
GEOMETRY = NamedNode(LOCN + "geometry")
BBOX = NamedNode(DCAT + "bbox")
CENTROID = NamedNode(DCAT + "centroid")
WKT_LITERAL = NamedNode(WKT)
GEOJSON_LITERAL = NamedNode(GEOJSON)
_CONTACT_TYPES = {
    "organization": VCARD + "Organization",
    "individual": VCARD + "Individual",
    "group": VCARD + "Group",
    "location": VCARD + "Location",
}
_HASH_BY_LENGTH = {32: "md5", 40: "sha1", 64: "sha256", 128: "sha512"}

Subject = NamedNode | BlankNode


class Graph:
    """The quads of one description being built, and the findings of the values that could
    not be written as the source gives them."""

    __slots__ = ("findings", "mint", "quads")

    def __init__(self, mint: Callable[[str, str], str] | None = None) -> None:
        self.quads: list[Quad] = []
        self.findings: list[Finding] = []
        #: (kind, key) -> a stable IRI under the source's base (mapping.base.mint_iri)
        self.mint = mint

    def note(self, s: Subject, rule: str, message: str, severity: Severity = Severity.INFO) -> None:
        self.findings.append(Finding(Stage.MAP, severity, rule, message, location=s.value))

    def add(self, s: Subject, p: NamedNode, o: NamedNode | BlankNode | Literal) -> None:
        self.quads.append(Quad(s, p, o))


_URL = re.compile(r'(?i)(?:https?|ftp)://[^\s<>"{}|\\^`]+')


def is_url(text: str) -> bool:
    """An absolute http(s)/ftp URL that can be an IRI as it is (no space, quote, brace ...)."""
    return _URL.fullmatch(text) is not None


#: what stays as it is when a URL is repaired: the delimiters of RFC 3986 and escapes
_URL_SAFE = ":/?#[]@!$&'()*+,;=%~"


def repaired_url(text: str, base: str | None) -> str | None:
    """A URL a resource gives that is no IRI as written, made one: characters an IRI cannot
    hold percent-encoded (``my file.csv`` -> ``my%20file.csv``), a path relative to the portal
    (``/dataset/x/resource/y/download/f.csv``, as some CKAN sites write uploads) resolved
    against ``base`` (the http(s) URL the package was read from); None when it cannot be."""
    text = text.strip()
    if base is not None and text.startswith("/") and not text.startswith("//"):
        text = urljoin(base, text)
    if not re.match(r"(?i)(?:https?|ftp)://", text):
        return None
    candidate = quote(text, safe=_URL_SAFE)
    return candidate if is_url(candidate) else None


def text_of(value: Any) -> str | None:
    """A scalar as stripped text (``None`` for an empty string, null or a container)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str | int | float):
        text = str(value).strip()
        return text or None
    return None


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _language_map(value: Mapping[str, Any]) -> bool:
    return bool(value) and all(
        isinstance(k, str) and 2 <= len(k) <= 12 and "-" not in k[:1] for k in value
    )


def tagged(value: Any) -> Iterable[Literal]:
    """Literals of a text value: a string, a list of strings, or {lang: text | [text]}."""
    if isinstance(value, dict) and _language_map(value) and "label" not in value:
        for lang, texts in value.items():
            for item in _items(texts):
                text = text_of(item)
                if text is not None:
                    try:
                        yield Literal(text, language=lang.lower())
                    except ValueError:  # not a BCP 47 tag: keep the text without one
                        yield Literal(text)
        return
    for item in _items(value):
        text = text_of(item.get("label")) if isinstance(item, dict) else text_of(item)
        if text is not None:
            yield Literal(text)


Emit = Callable[[Graph, Subject, NamedNode, Any], None]
