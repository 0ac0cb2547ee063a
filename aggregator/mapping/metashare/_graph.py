"""A small triple builder for the META-SHARE mapper (pyoxigraph terms, no rdflib)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import lru_cache

from lxml import etree
from pyoxigraph import BlankNode, DefaultGraph, Literal, NamedNode, Quad

from aggregator.core.models import Finding, Severity, Stage
from aggregator.core.vocab import RDF_TYPE, XSD
from aggregator.mapping.metashare._rules import NS

_IRI = re.compile(r"^https?://[^\s<>\"{}|\\^`]+$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_EMAIL = re.compile(r"^[^@\s<>\"]+@[^@\s<>\"]+$")

Node = NamedNode | BlankNode
_DEFAULT = DefaultGraph()


class Graph:
    """Triples of one dataset, and the warnings met while building them."""

    def __init__(self) -> None:
        self.triples: list[Quad] = []  # default-graph quads: what canonical_ntriples loads
        self.findings: list[Finding] = []

    def add(self, s: Node, p: str, o: NamedNode | BlankNode | Literal) -> None:
        self.triples.append(Quad(s, _named(p), o, _DEFAULT))

    def typed(self, node: Node, cls: str) -> Node:
        self.add(node, RDF_TYPE, _named(cls))
        return node

    def new(self, cls: str) -> BlankNode:
        node = BlankNode()
        self.add(node, RDF_TYPE, _named(cls))
        return node

    def warn(self, rule: str, message: str, where: etree._Element | None = None) -> None:
        location = f"line {where.sourceline}" if where is not None and where.sourceline else None
        self.findings.append(Finding(Stage.MAP, Severity.WARNING, rule, message, location))

    def note(self, rule: str, message: str, where: etree._Element | None = None) -> None:
        """An INFO finding: a value kept in another form than the source's."""
        location = f"line {where.sourceline}" if where is not None and where.sourceline else None
        self.findings.append(Finding(Stage.MAP, Severity.INFO, rule, message, location))

    def iri(self, el: etree._Element) -> NamedNode | None:
        """The element's text as an absolute http(s) IRI, else None and a warning."""
        value = text_of(el)
        if _IRI.match(value):
            return NamedNode(value)
        self.warn("notAnIri", f"{local(el)} {value!r} is not an http(s) IRI: left out", el)
        return None

    def date(self, el: etree._Element) -> Literal | None:
        value = text_of(el)
        if _DATE.match(value):
            return Literal(value, datatype=NamedNode(XSD + "date"))
        self.warn("notADate", f"{local(el)} {value!r} is not YYYY-MM-DD: left out", el)
        return None


@lru_cache(maxsize=512)
def _named(iri: str) -> NamedNode:
    """Predicates and classes recur in every record: made once."""
    return NamedNode(iri)


def text_of(el: etree._Element) -> str:
    if len(el) == 0:  # a leaf, as almost every META-SHARE value is
        return " ".join(el.text.split()) if el.text else ""
    return " ".join("".join(str(t) for t in el.itertext()).split())


def local(el: etree._Element) -> str:
    return etree.QName(el).localname


def lang_literal(el: etree._Element) -> Literal | None:
    """The element's text in its ``lang`` attribute's language (plain when it has none)."""
    value = text_of(el)
    if not value:
        return None
    lang = (el.get("lang") or "").strip()
    if lang and re.match(r"^[A-Za-z]{1,8}(-[A-Za-z0-9]{1,8})*$", lang):
        return Literal(value, language=lang.lower())
    return Literal(value)


def find_all(el: etree._Element, path: str) -> list[etree._Element]:
    return [e for e in el.iterfind(path, NS) if isinstance(e, etree._Element)]


def first_text(el: etree._Element, path: str) -> str:
    found = el.find(path, NS)
    return text_of(found) if found is not None else ""


def mailto(value: str) -> NamedNode | None:
    value = value.strip().removeprefix("mailto:")
    return NamedNode(f"mailto:{value}") if _EMAIL.match(value) else None


def is_iri(value: str) -> bool:
    return bool(_IRI.match(value))


def date_time(when: datetime) -> Literal:
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    text = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Literal(text, datatype=NamedNode(XSD + "dateTime"))
