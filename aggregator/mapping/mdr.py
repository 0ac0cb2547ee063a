"""``mdr``: a web page of a Metadata Replication Service (its WebPageMetadataVO) -> DCAT-AP 3.

The rules are in ``mappings/mdr.toml`` (the simple properties, the language, theme and format
tables) and below (agents, contacts, coverage, distribution, type); ``docs/mappings/mdr.md``
shows them as one table. The page is one dataset whose IRI is minted from its Identifier
(URL), which is also its landing page and its distribution's access URL.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from lxml import etree
from pyoxigraph import BlankNode, Literal, NamedNode, Triple

from aggregator.core.errors import ConfigError, MappingError
from aggregator.core.input_limits import InputLimits
from aggregator.core.models import MappedDataset
from aggregator.core.resources import bundled
from aggregator.core.vocab import EU_THEME_LABELS
from aggregator.mapping.base import (
    Mapper,
    MappingContext,
    canonical_ntriples,
    content_hash,
    mint_iri,
)
from aggregator.mapping.payload import ParsedPayload

TNS = "http://mdc.npi.gov.in"
DCAT = "http://www.w3.org/ns/dcat#"
DCT = "http://purl.org/dc/terms/"
FOAF = "http://xmlns.com/foaf/0.1/"
VCARD = "http://www.w3.org/2006/vcard/ns#"
ORG = "http://www.w3.org/ns/org#"
SKOS = "http://www.w3.org/2004/02/skos/core#"
LOCN = "http://www.w3.org/ns/locn#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
XSD = "http://www.w3.org/2001/XMLSchema#"
THEME = "http://publications.europa.eu/resource/authority/data-theme/"
LANGUAGE = "http://publications.europa.eu/resource/authority/language/"
FILE_TYPE = "http://publications.europa.eu/resource/authority/file-type/"
IANA = "https://www.iana.org/assignments/media-types/"
URL = re.compile(r"^https?://[^\s<>\"{}|\\^`]+$")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
YEAR = re.compile(r"^\d{4}$")


@lru_cache(maxsize=512)
def n(iri: str) -> NamedNode:
    """A named node; the vocabulary's few IRIs are made once (a page makes ~40 triples)."""
    return NamedNode(iri)


@dataclass(frozen=True, slots=True)
class PropertyRule:
    element: str
    property: str
    kind: str
    separator: str = ";"
    fallback: str = ""


@dataclass(frozen=True, slots=True)
class MdrRules:
    properties: tuple[PropertyRule, ...]
    agent_type: str
    agent_type_label: str
    formats: dict[str, str]
    languages: dict[str, tuple[str, str]]
    themes: dict[str, str]
    type_scheme_title: str


@lru_cache(maxsize=1)
def load_rules(path: str = "") -> MdrRules:
    file = path or str(bundled("mappings", "mdr.toml"))
    try:
        with open(file, "rb") as fh:
            doc = tomllib.load(fh)
        properties = tuple(
            PropertyRule(
                element=row["element"],
                property=row["property"],
                kind=row["kind"],
                separator=row.get("separator", ";"),
                fallback=row.get("fallback", ""),
            )
            for row in doc["property"]
        )
        for rule in properties:
            if rule.kind not in ("text", "plain", "keywords", "dateTime", "iri"):
                raise ConfigError(f"{file}: unknown kind {rule.kind!r} of {rule.element}")
        return MdrRules(
            properties=properties,
            agent_type=doc["agents"]["agent_type"],
            agent_type_label=doc["agents"]["agent_type_label"],
            formats=dict(doc["formats"]),
            languages={k: (v[0], v[1]) for k, v in doc["languages"].items()},
            themes=dict(doc["themes"]),
            type_scheme_title=doc["types"]["scheme_title"],
        )
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"MDR mapping rules {file}: {err}") from err


class _Graph:
    """The page's triples as a set (in insertion order), at most ``limits.max_triples``.

    A page repeats values freely (the same keyword in ``subjectKeywords`` a million times):
    kept as a list, every repeat was a Python triple, and a 50 MB page made ~16 million of
    them and aborted the process when memory ran out. A graph is a set, so repeats are kept
    once, and the count is checked as the triples are made, before memory is spent."""

    def __init__(self, limits: InputLimits) -> None:
        self._triples: dict[Triple, None] = {}
        self._limits = limits

    @property
    def triples(self) -> list[Triple]:
        return list(self._triples)

    def _put(self, triple: Triple) -> None:
        self._triples[triple] = None
        if len(self._triples) > self._limits.max_triples:
            raise self._limits.too_many_triples(self._limits.max_triples)

    def add(self, s: NamedNode | BlankNode, p: str, o: NamedNode | BlankNode | Literal) -> None:
        self._put(Triple(s, n(p), o))

    def typed(self, s: NamedNode | BlankNode, *classes: str) -> None:
        for cls in classes:
            self._put(Triple(s, RDF_TYPE, n(cls)))


def _date_literal(value: str) -> Literal | None:
    if DATE.match(value):
        return Literal(value, datatype=n(XSD + "date"))
    text = value.replace(" ", "T", 1)
    if re.match(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?$", text):
        return Literal(text, datatype=n(XSD + "dateTime"))
    return None


def _bound(value: str) -> Literal | None:
    value = value.strip()
    if YEAR.match(value):
        return Literal(value, datatype=n(XSD + "gYear"))
    return _date_literal(value)


def period_bounds(text: str) -> tuple[Literal | None, Literal | None]:
    """dcat:startDate / dcat:endDate of a CoverageTemporal text, when it reads as a year, a
    year range, a date, ``from DATE`` or ``DATE to DATE``."""
    t = text.strip()
    if m := re.match(r"^(?:from|since)\s+(\S+)$", t, re.IGNORECASE):
        return _bound(m.group(1)), None
    if m := re.match(r"^(\S+)\s+(?:to|until|-)\s+(\S+)$", t, re.IGNORECASE):
        return _bound(m.group(1)), _bound(m.group(2))
    if m := re.match(r"^(\d{4})\s*[-/]\s*(\d{4})$", t):
        return _bound(m.group(1)), _bound(m.group(2))
    single = _bound(t)
    return (single, single) if single is not None and YEAR.match(t) else (single, None)


class MdrMapper(Mapper):
    name: ClassVar[str] = "mdr"

    def __init__(self, rules: MdrRules | None = None) -> None:
        self.rules = rules or load_rules()

    def map_payload(self, payload: ParsedPayload, ctx: MappingContext) -> list[MappedDataset]:
        root = payload.xml()
        if etree.QName(root).namespace != TNS:
            raise MappingError(f"not an MDR WebPageMetadataVO: {etree.QName(root).text}")
        identifier = (root.findtext(f"{{{TNS}}}identifier") or "").strip()
        md = root.find(f"{{{TNS}}}metadata")
        if not identifier or md is None:
            raise MappingError("an MDR page needs its identifier and its metadata")
        triples = self.page_triples(identifier, md, ctx)
        ntriples = canonical_ntriples(triples)
        themes = sorted(
            {
                t.object.value
                for t in triples
                if t.predicate.value == DCAT + "theme" and isinstance(t.object, NamedNode)
            }
        )
        return [
            MappedDataset(
                local_id=payload.raw.local_id,
                dataset_iri=mint_iri(ctx, "dataset", identifier),
                ntriples=ntriples,
                content_hash=content_hash(ntriples),
                datestamp=payload.raw.datestamp,
                themes=tuple(themes),
            )
        ]

    def page_triples(
        self, identifier: str, md: etree._Element, ctx: MappingContext
    ) -> list[Triple]:
        rules = self.rules
        g = _Graph(ctx.limits)

        def values(element: str) -> list[str]:
            found = (e.text or "" for e in md.findall(f"{{{TNS}}}{element}"))
            return [v.strip() for v in found if v.strip()]

        def first(element: str) -> str:
            got = values(element)
            return got[0] if got else ""

        language = first("language").lower()
        tag, eu_code = rules.languages.get(language, ("", ""))

        def text(value: str) -> Literal:
            return Literal(value, language=tag) if tag else Literal(value)

        ds = n(mint_iri(ctx, "dataset", identifier))
        g.typed(ds, DCAT + "Dataset")
        g.add(ds, DCT + "identifier", Literal(identifier))
        if URL.match(identifier):
            g.add(ds, DCAT + "landingPage", n(identifier))
            g.typed(n(identifier), FOAF + "Document")
        for rule in rules.properties:
            for value in values(rule.element):
                self._property(g, ds, rule, value, text)
        if eu_code:
            g.add(ds, DCT + "language", n(LANGUAGE + eu_code))
            g.typed(n(LANGUAGE + eu_code), DCT + "LinguisticSystem")
        for label in values("subjectClasification"):
            code = rules.themes.get(label)
            if code:
                g.add(ds, DCAT + "theme", n(THEME + code))
                g.typed(n(THEME + code), SKOS + "Concept")
                if code in EU_THEME_LABELS:
                    eu_label = Literal(EU_THEME_LABELS[code], language="en")
                    g.add(n(THEME + code), SKOS + "prefLabel", eu_label)
            else:
                g.add(ds, DCAT + "keyword", text(label))
        self._agents(g, ds, first, text)
        self._coverage(g, ds, first)
        self._distribution(g, ds, identifier, first("format"))
        kind = first("type")
        if kind:
            concept = n(mint_iri(ctx, "resource-type", kind))
            scheme = n(mint_iri(ctx, "resource-type", "scheme"))
            g.add(ds, DCT + "type", concept)
            g.typed(concept, SKOS + "Concept")
            g.add(concept, SKOS + "prefLabel", Literal(kind))
            g.add(concept, SKOS + "inScheme", scheme)
            g.typed(scheme, SKOS + "ConceptScheme")
            g.add(scheme, DCT + "title", Literal(rules.type_scheme_title, language="en"))
        return g.triples

    @staticmethod
    def _property(
        g: _Graph,
        ds: NamedNode,
        rule: PropertyRule,
        value: str,
        text: Callable[[str], Literal],
    ) -> None:
        match rule.kind:
            case "text":
                g.add(ds, rule.property, text(value))
            case "plain":
                g.add(ds, rule.property, Literal(value))
            case "keywords":
                for item in value.split(rule.separator):
                    if item.strip():
                        g.add(ds, rule.property, text(item.strip()))
            case "dateTime":
                literal = _date_literal(value)
                g.add(ds, rule.property, literal if literal is not None else Literal(value))
            case "iri":
                if URL.match(value):
                    g.add(ds, rule.property, n(value))
                else:
                    g.add(ds, rule.fallback or rule.property, Literal(value))

    def _agents(
        self,
        g: _Graph,
        ds: NamedNode,
        first: Callable[[str], str],
        text: Callable[[str], Literal],
    ) -> None:
        for role, prefix in (("creator", "creator"), ("publisher", "publisher")):
            dept = first(f"{prefix}DeptName")
            org = first(f"{prefix}OrgName")
            if dept or org:
                agent = BlankNode()
                g.add(ds, DCT + role, agent)
                g.typed(agent, FOAF + "Organization", FOAF + "Agent")
                g.add(agent, FOAF + "name", Literal(dept or org))
                g.add(agent, DCT + "type", n(self.rules.agent_type))
                kind = n(self.rules.agent_type)
                g.typed(kind, SKOS + "Concept")  # the range of dct:type
                g.add(kind, SKOS + "prefLabel", Literal(self.rules.agent_type_label, language="en"))
                if dept and org:
                    g.typed(agent, ORG + "OrganizationalUnit")
                    parent = BlankNode()
                    g.add(agent, ORG + "unitOf", parent)
                    g.typed(parent, FOAF + "Organization", ORG + "FormalOrganization")
                    g.add(parent, FOAF + "name", Literal(org))
                    g.add(parent, DCT + "type", n(self.rules.agent_type))
            email = first(f"{prefix}Email")
            phone = first(f"{prefix}Phone") if role == "publisher" else ""
            address = first(f"{prefix}Address") if role == "publisher" else ""
            if email or phone or address:
                contact = BlankNode()
                g.add(ds, DCAT + "contactPoint", contact)
                g.typed(contact, VCARD + "Organization", VCARD + "Kind")
                g.add(contact, VCARD + "fn", Literal(dept or org or email))
                if email:
                    g.add(contact, VCARD + "hasEmail", n(f"mailto:{email}"))
                if phone:
                    tel = BlankNode()
                    g.add(contact, VCARD + "hasTelephone", tel)
                    g.typed(tel, VCARD + "Voice")
                    g.add(tel, VCARD + "hasValue", n("tel:" + re.sub(r"[^\d+\-]", "", phone)))
                if address:
                    adr = BlankNode()
                    g.add(contact, VCARD + "hasAddress", adr)
                    g.typed(adr, VCARD + "Address")
                    g.add(adr, VCARD + "street-address", Literal(address))

    @staticmethod
    def _coverage(g: _Graph, ds: NamedNode, first: Callable[[str], str]) -> None:
        spatial = first("coverageSpatial")
        if spatial:
            place = BlankNode()
            g.add(ds, DCT + "spatial", place)
            g.typed(place, DCT + "Location")
            g.add(place, LOCN + "geographicName", Literal(spatial))
        temporal = first("coverageTemporal")
        if temporal:
            period = BlankNode()
            g.add(ds, DCT + "temporal", period)
            g.typed(period, DCT + "PeriodOfTime")
            g.add(period, RDFS + "label", Literal(temporal))
            start, end = period_bounds(temporal)
            if start is not None:
                g.add(period, DCAT + "startDate", start)
            if end is not None:
                g.add(period, DCAT + "endDate", end)
        jurisdiction = first("coverageJurisdiction")
        if jurisdiction:
            node = BlankNode()
            g.add(ds, DCT + "coverage", node)
            g.typed(node, DCT + "Jurisdiction")
            g.add(node, RDFS + "label", Literal(jurisdiction))

    def _distribution(self, g: _Graph, ds: NamedNode, identifier: str, media: str) -> None:
        if not URL.match(identifier):
            return
        dist = BlankNode()
        g.add(ds, DCAT + "distribution", dist)
        g.typed(dist, DCAT + "Distribution")
        g.add(dist, DCAT + "accessURL", n(identifier))
        g.add(dist, DCT + "description", Literal(f"The web page itself ({media or 'web page'})"))
        if re.match(r"^[a-z]+/[a-z0-9.+-]+$", media):
            g.add(dist, DCAT + "mediaType", n(IANA + media))
            g.typed(n(IANA + media), DCT + "MediaType")
        code = self.rules.formats.get(media)
        if code:
            g.add(dist, DCT + "format", n(FILE_TYPE + code))
            g.typed(n(FILE_TYPE + code), DCT + "MediaTypeOrExtent")
