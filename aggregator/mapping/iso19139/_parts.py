"""The irregular parts of the ISO 19139 mapping: dates, identifiers, extents and reference
systems (:mod:`._keywords` has keywords and themes, :mod:`._quality` resolution, lineage and
conformity).

Each function reads one part of the identification (``ident``) or of the record (``root``)
and writes triples about ``subject`` into ``state.out``; anything it cannot map is a finding
on ``state.findings``, never silently dropped. The code lists they use are the tables of
mappings/iso19139.toml and mappings/eu-data-themes.toml (:mod:`._table`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache

from lxml import etree

from aggregator.core.models import Finding, Severity, Stage
from aggregator.core.vocab import ADMS, DCAT, DCT, PROV, RDFS, SKOS, XSD
from aggregator.mapping.iso19139._table import IsoTable
from aggregator.mapping.iso19139._xml import (
    GMD,
    TYPE,
    Node,
    Out,
    Texts,
    anchor_href,
    child,
    children,
    code_value,
    date_literal,
    elements,
    first,
    first_under,
    is_iri,
    lexical,
    lit,
    localname,
    named,
    plain,
    typed_lit,
)

LOCN = "http://www.w3.org/ns/locn#"
GSP = "http://www.opengis.net/ont/geosparql#"
GEODCAT = "http://data.europa.eu/930/"
DQV = "http://www.w3.org/ns/dqv#"
OWL = "http://www.w3.org/2002/07/owl#"
INSPIRE_THEME = "http://inspire.ec.europa.eu/theme/"
DEGREE = "http://inspire.ec.europa.eu/metadata-codelist/DegreeOfConformity/"
EPSG = "http://www.opengis.net/def/crs/EPSG/0/"
CRS84 = "http://www.opengis.net/def/crs/OGC/1.3/CRS84"


def _n(ns: str, name: str) -> str:
    return named(ns + name)


P = {
    "created": _n(DCT, "created"),
    "issued": _n(DCT, "issued"),
    "modified": _n(DCT, "modified"),
    "identifier": _n(DCT, "identifier"),
    "adms_identifier": _n(ADMS, "identifier"),
    "notation": _n(SKOS, "notation"),
    "schemaAgency": _n(ADMS, "schemaAgency"),
    "keyword": _n(DCAT, "keyword"),
    "theme": _n(DCAT, "theme"),
    "prefLabel": _n(SKOS, "prefLabel"),
    "inScheme": _n(SKOS, "inScheme"),
    "title": _n(DCT, "title"),
    "spatial": _n(DCT, "spatial"),
    "bbox": _n(DCAT, "bbox"),
    "centroid": _n(DCAT, "centroid"),
    "geometry": _n(LOCN, "geometry"),
    "geographicName": _n(LOCN, "geographicName"),
    "temporal": _n(DCT, "temporal"),
    "startDate": _n(DCAT, "startDate"),
    "endDate": _n(DCAT, "endDate"),
    "conformsTo": _n(DCT, "conformsTo"),
    "referenceSystem": _n(GEODCAT, "referenceSystem"),
    "resolutionMeters": _n(DCAT, "spatialResolutionInMeters"),
    "resolutionText": _n(GEODCAT, "spatialResolutionAsText"),
    "qualityMeasurement": _n(DQV, "hasQualityMeasurement"),
    "isMeasurementOf": _n(DQV, "isMeasurementOf"),
    "value": _n(DQV, "value"),
    "provenance": _n(DCT, "provenance"),
    "label": _n(RDFS, "label"),
    "wasUsedBy": _n(PROV, "wasUsedBy"),
    "qualifiedAssociation": _n(PROV, "qualifiedAssociation"),
    "hadPlan": _n(PROV, "hadPlan"),
    "wasDerivedFrom": _n(PROV, "wasDerivedFrom"),
    "generated": _n(PROV, "generated"),
    "type": _n(DCT, "type"),
    "description": _n(DCT, "description"),
    "versionInfo": _n(OWL, "versionInfo"),
}
C = {
    "Identifier": _n(ADMS, "Identifier"),
    "Concept": _n(SKOS, "Concept"),
    "ConceptScheme": _n(SKOS, "ConceptScheme"),
    "Location": _n(DCT, "Location"),
    "PeriodOfTime": _n(DCT, "PeriodOfTime"),
    "Standard": _n(DCT, "Standard"),
    "QualityMeasurement": _n(DQV, "QualityMeasurement"),
    "ProvenanceStatement": _n(DCT, "ProvenanceStatement"),
    "Activity": _n(PROV, "Activity"),
    "Association": _n(PROV, "Association"),
    "Plan": _n(PROV, "Plan"),
    "Entity": _n(PROV, "Entity"),
}
WKT = GSP + "wktLiteral"
GEOJSON = GSP + "geoJSONLiteral"
DECIMAL = XSD + "decimal"
AS_SCALE = _n(GEODCAT, "spatialResolutionAsScale")


@dataclass
class State:
    """What the parts of one record share: where triples go, the tables, the findings."""

    out: Out
    table: IsoTable
    texts: Texts
    findings: list[Finding] = field(default_factory=list)
    inspire_themes: list[str] = field(default_factory=list)

    def warn(self, rule: str, message: str, el: etree._Element | None = None) -> None:
        line = el.sourceline if el is not None else None
        self.findings.append(
            Finding(Stage.MAP, Severity.WARNING, rule, message, f"line {line}" if line else None)
        )


# -- dates and identifiers -----------------------------------------------------------------


DATE = GMD + "date"
DATE_TYPE = GMD + "dateType"
DATE_TYPE_CODE = GMD + "CI_DateTypeCode"
_CI_DATE_PARTS = frozenset((DATE, DATE_TYPE))


def dates(state: State, ident: etree._Element, subject: Node) -> None:
    """The resource's citation dates (:func:`citation_dates`)."""
    citation = first("gmd:citation/gmd:CI_Citation", ident)
    if citation is not None:
        citation_dates(state, citation, subject)


def citation_dates(state: State, citation: etree._Element, subject: Node) -> None:
    """The dates of a ``gmd:CI_Citation`` by CI_DateTypeCode: creation -> dct:created,
    publication -> dct:issued (the earliest), revision -> dct:modified (the latest)."""
    found: dict[str, list[str]] = {"creation": [], "publication": [], "revision": []}
    for ci in elements("gmd:date/gmd:CI_Date", citation):
        parts = children(ci, _CI_DATE_PARTS)
        kind = code_value(first_under(parts.get(DATE_TYPE, ()), DATE_TYPE_CODE))
        text = plain(child(parts, DATE))
        lit = date_literal(text)
        if lit is None:
            state.warn("iso-date-unreadable", f"citation date {text!r} is not an ISO date", ci)
            continue
        if kind in found:
            found[kind].append(lit)
    out = state.out
    if found["creation"]:
        out.add(subject, P["created"], min(found["creation"], key=lexical))
    if found["publication"]:
        out.add(subject, P["issued"], min(found["publication"], key=lexical))
    if found["revision"]:
        out.add(subject, P["modified"], max(found["revision"], key=lexical))


def identifiers(state: State, ident: etree._Element, subject: Node) -> None:
    """Resource identifiers (MD_Identifier / RS_Identifier code and codeSpace) -> dct:identifier
    (code, or codeSpace/code) and adms:identifier [ skos:notation code ; adms:schemaAgency ]."""
    for idf in elements("gmd:citation/gmd:CI_Citation/gmd:identifier/*", ident):
        code = plain(next(idf.iterchildren(GMD + "code"), None)) or anchor_href(
            next(idf.iterchildren(GMD + "code"), None)
        )
        if not code:
            continue
        space = plain(next(idf.iterchildren(GMD + "codeSpace"), None))
        full = code
        if space and not is_iri(code):
            # joined as GeoDCAT-AP joins them ("CEH:EIDC:" + "/" + code)
            full = space + ("" if space.endswith(("/", "#")) else "/") + code
        out = state.out
        out.add(subject, P["identifier"], lit(full))
        node = out.typed(C["Identifier"])
        out.add(subject, P["adms_identifier"], node)
        out.add(node, P["notation"], lit(code))
        if space:
            out.add(node, P["schemaAgency"], lit(space))


# -- extents --------------------------------------------------------------------------------


def _number_text(text: str) -> Decimal | None:
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def _coord(value: Decimal) -> str:
    """A coordinate as written in WKT and GeoJSON: plain decimal notation, no trailing zeros."""
    text = format(value.normalize(), "f")
    return "0" if text == "-0" else text


_BOX = tuple(
    GMD + side
    for side in (
        "westBoundLongitude",
        "eastBoundLongitude",
        "southBoundLatitude",
        "northBoundLatitude",
    )
)
_BOX_SIDES = frozenset(_BOX)


@lru_cache(maxsize=1024)  # catalogues repeat their areas
def _box(sides: tuple[str, ...]) -> tuple[str, ...]:
    """The dcat:bbox (WKT), locn:geometry (GeoJSON) and dcat:centroid terms of a bounding
    box's west, east, south and north texts; or, when they make no box, the rule and the
    message of the finding."""
    w, e, s, n = (_number_text(text) for text in sides)
    if w is None or e is None or s is None or n is None:
        return "iso-bbox-unreadable", "a bounding box coordinate is not a number"
    if not (-180 <= w <= 180 and -180 <= e <= 180 and -90 <= s <= n <= 90):
        return (
            "iso-bbox-out-of-range",
            f"bounding box W {w} E {e} S {s} N {n} is not a longitude/latitude box",
        )
    W, E, S, N = (_coord(v) for v in (w, e, s, n))
    ring = f"{W} {S},{E} {S},{E} {N},{W} {N},{W} {S}"
    coords = f"[{W},{S}],[{E},{S}],[{E},{N}],[{W},{N}],[{W},{S}]"
    geojson = '{"type":"Polygon","coordinates":[[' + coords + "]]}"
    centre = f"POINT({_coord((w + e) / 2)} {_coord((s + n) / 2)})"
    return (
        typed_lit(f"POLYGON(({ring}))", WKT),
        typed_lit(geojson, GEOJSON),
        typed_lit(centre, WKT),
    )


def extents(state: State, ident: etree._Element, subject: Node) -> None:
    """Bounding boxes -> dct:spatial dct:Location with dcat:bbox (WKT), locn:geometry
    (GeoJSON) and dcat:centroid; geographic identifiers -> a Location (IRI when linked);
    temporal extents -> dct:temporal dct:PeriodOfTime."""
    out = state.out
    # gmd:extent, srv:extent (a service's) or any other *:extent; the XPath used to be the union
    # "gmd:extent/gmd:EX_Extent | *[local-name()='extent']/gmd:EX_Extent", whose second part
    # holds the first
    for ext in elements("*[local-name()='extent']/gmd:EX_Extent", ident):
        for box in elements("gmd:geographicElement/gmd:EX_GeographicBoundingBox", ext):
            sides = children(box, _BOX_SIDES)
            terms = _box(tuple(plain(child(sides, tag)) for tag in _BOX))
            if len(terms) == 2:  # no box: the rule and the message of the finding
                state.warn(terms[0], terms[1], box)
                continue
            loc = out.typed(C["Location"])
            out.add(subject, P["spatial"], loc)
            out.add(loc, P["bbox"], terms[0])
            out.add(loc, P["geometry"], terms[1])
            out.add(loc, P["centroid"], terms[2])
        for code_el in elements(
            "gmd:geographicElement/gmd:EX_GeographicDescription/gmd:geographicIdentifier/*/gmd:code",
            ext,
        ):
            code = plain(code_el)
            linked = code.startswith(("http://", "https://"))  # a code that is a place's IRI
            href = anchor_href(code_el) or (code if linked else "")
            if href and is_iri(href):
                out.add(subject, P["spatial"], named(href))
                continue
            if code.casefold().startswith("urn:"):  # a URN names the place, it is no name
                loc = out.typed(C["Location"])
                out.add(subject, P["spatial"], loc)
                out.add(loc, P["identifier"], typed_lit(code, XSD + "anyURI"))
                continue
            lits = state.texts.literals(code_el)
            if lits:
                loc = out.typed(C["Location"])
                out.add(subject, P["spatial"], loc)
                out.add_all(loc, P["geographicName"], lits)
                out.add_all(loc, P["prefLabel"], lits)
                _gazetteer(state, code_el, loc)
        for period in elements(
            "gmd:temporalElement/*/gmd:extent/*[local-name()='TimePeriod' or "
            "local-name()='TimeInstant']",
            ext,
        ):
            _period(state, period, subject)


def _gazetteer(state: State, code_el: etree._Element, loc: Node) -> None:
    """The authority of a geographic identifier (``gmd:authority/gmd:CI_Citation``: "ISO
    3166") as the ``skos:ConceptScheme`` of the place, with its title and date."""
    idf = code_el.getparent()
    cit = first("gmd:authority/gmd:CI_Citation", idf) if idf is not None else None
    if cit is None:
        return
    title_el = next(cit.iterchildren(GMD + "title"), None)
    titles = state.texts.literals(title_el) if title_el is not None else []
    if not titles:
        return
    out = state.out
    scheme = out.typed(C["ConceptScheme"])
    out.add_all(scheme, P["title"], titles)
    when = date_literal(plain(first("gmd:date/gmd:CI_Date/gmd:date", cit)))
    if when is not None:
        out.add(scheme, P["modified"], when)
    out.add(loc, P["inScheme"], scheme)


def _position(el: etree._Element | None) -> str:
    if el is None or el.get("indeterminatePosition") in ("now", "unknown"):
        return ""
    return (el.text or "").strip()


def _bound(period: etree._Element, position: str, container: str) -> etree._Element | None:
    """The first (in document order) ``position`` child of ``period`` or ``timePosition``
    under a ``container`` child, any namespace: what the XPath ``*[local-name()=position] |
    *[local-name()=container]//*[local-name()='timePosition']`` finds first."""
    for part in period:
        tag = part.tag
        if not isinstance(tag, str):
            continue
        name = tag.rpartition("}")[2]
        if name == position:
            return part
        if name == container:
            for inner in part.iterdescendants():
                tag = inner.tag
                if isinstance(tag, str) and tag.rpartition("}")[2] == "timePosition":
                    return inner
    return None


def _period(state: State, period: etree._Element, subject: Node) -> None:
    if localname(period) == "TimeInstant":
        start = end = _position(_bound(period, "timePosition", ""))
    else:
        start = _position(_bound(period, "beginPosition", "begin"))
        end = _position(_bound(period, "endPosition", "end"))
    bounds = []
    for pred, text in ((P["startDate"], start), (P["endDate"], end)):
        if not text:
            continue
        lit = date_literal(text)
        if lit is None:
            message = f"time position {text!r} is not an ISO date"
            state.warn("iso-temporal-unreadable", message, period)
        else:
            bounds.append((pred, lit))
    if bounds:
        node = state.out.typed(C["PeriodOfTime"])
        state.out.add(subject, P["temporal"], node)
        for pred, lit in bounds:
            state.out.add(node, pred, lit)


# -- reference systems ---------------------------------------------------------------------

_EPSG_CODE = re.compile(r"(?:^|[:/])(\d{4,6})$")


def crs_iri(code: str, space: str, href: str) -> str:
    """The OGC IRI of a reference system code ("EPSG:27700", "urn:ogc:def:crs:EPSG::4258",
    code "27700" with codeSpace "EPSG", "CRS84"), its link, or "" when it is not recognised."""
    if href and is_iri(href):
        return href
    if code.startswith(("http://", "https://")) and is_iri(code):
        return code
    if code.upper().endswith("CRS84"):
        return CRS84
    if code.upper().replace(" ", "") == "ETRS89":  # named, not numbered (EPSG 4258)
        return EPSG + "4258"
    if "EPSG" in (code + space).upper():
        m = _EPSG_CODE.search(code)
        if m:
            return EPSG + m.group(1)
    return ""


SRS_TYPE = named("http://inspire.ec.europa.eu/glossary/SpatialReferenceSystem")
EPSG_SCHEME = EPSG.rstrip("/")


def reference_systems(state: State, root: etree._Element, subject: Node) -> None:
    """Reference systems -> ``dct:conformsTo`` and ``geodcat:referenceSystem`` a
    ``dct:Standard`` and ``skos:Concept`` described as GeoDCAT-AP does: ``dct:type``
    SpatialReferenceSystem, the code as written as ``dct:identifier`` and ``skos:notation``
    (a URN or URL) or as ``dct:title`` / ``skos:prefLabel`` (a name), ``skos:inScheme`` the
    EPSG register (or a scheme titled by the code space)."""
    out = state.out
    for rs in elements(
        "gmd:referenceSystemInfo/gmd:MD_ReferenceSystem/gmd:referenceSystemIdentifier/"
        "gmd:RS_Identifier",
        root,
    ):
        code_el = next(rs.iterchildren(GMD + "code"), None)
        code = plain(code_el)
        space = plain(next(rs.iterchildren(GMD + "codeSpace"), None))
        crs = crs_iri(code, space, anchor_href(code_el))
        node: Node
        if crs:
            node = named(crs)
        elif code:
            node = out.typed(C["Standard"])
            out.add(node, TYPE, C["Concept"])
        else:
            continue
        out.add(subject, P["conformsTo"], node)
        out.add(subject, P["referenceSystem"], node)
        out.add(node, P["type"], SRS_TYPE)
        if not code:
            continue
        if space.casefold().startswith("urn:") and code.isdigit():
            # code space "urn:ogc:def:crs:EPSG", version "6.11.2", code "27700": the URN
            version = plain(next(rs.iterchildren(GMD + "version"), None))
            code = f"{space}:{version}:{code}"
        if code.casefold().startswith(("urn:", "http://", "https://")):
            out.add(node, P["identifier"], typed_lit(code, XSD + "anyURI"))
            out.add(node, P["notation"], typed_lit(code, XSD + "anyURI"))
            out.add(node, P["prefLabel"], lit(code))  # a concept needs a label: its code
        else:
            if not crs:  # a system no register names: the code identifies it
                out.add(node, P["identifier"], lit(f"{space}:{code}" if space else code))
            names = state.texts.literals(code_el) if code_el is not None else [lit(code)]
            out.add_all(node, P["title"], names)
            out.add_all(node, P["prefLabel"], names)
        if crs.startswith(EPSG):
            out.add(node, P["inScheme"], named(EPSG_SCHEME))
            out.add(named(EPSG_SCHEME), TYPE, C["ConceptScheme"])
            out.add(named(EPSG_SCHEME), P["title"], lit("EPSG Coordinate Reference Systems", "en"))
        elif space:
            scheme = out.typed(C["ConceptScheme"])
            out.add(scheme, P["title"], lit(space))
            out.add(node, P["inScheme"], scheme)


__all__ = ["State"]
