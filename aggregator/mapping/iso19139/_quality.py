"""Data quality parts of the ISO 19139 mapping: spatial resolution, lineage and conformity.

Like :mod:`._parts`, each function reads one part of the record and writes triples about
``subject`` into ``state.out``; what it cannot map is a finding on ``state.findings``.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from lxml import etree

from aggregator.mapping.iso19139._parts import AS_SCALE, DECIMAL, DEGREE, C, P, State
from aggregator.mapping.iso19139._xml import (
    GMD,
    TYPE,
    XLINK_HREF,
    Node,
    anchor_href,
    date_literal,
    elements,
    first,
    is_iri,
    lit,
    localname,
    named,
    plain,
    typed_lit,
)

_UNITS = {"m": 1, "metre": 1, "meter": 1, "metres": 1, "meters": 1, "km": 1000, "cm": 0.01}
_UNITS |= {"mm": 0.001, "urn:ogc:def:uom:epsg::9001": 1, "epsg::9001": 1}
_UNITS |= {"urn:ogc:def:uom:ucum::m": 1, "urn:ogc:def:uom:ogc::m": 1}
_UNITS |= {"ft": 0.3048, "urn:ogc:def:uom:epsg::9002": 0.3048, "epsg::9002": 0.3048}
_UNITS |= {"urn:ogc:def:uom:ucum::[ft_i]": 0.3048, "urn:ogc:def:uom:ogc::[ft_i]": 0.3048}


def _decimal(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return typed_lit(text if "." in text else text + ".0", DECIMAL)


def resolution(state: State, ident: etree._Element, subject: Node) -> None:
    """Equivalent scale -> dqv:hasQualityMeasurement (geodcat:spatialResolutionAsScale, value
    1/denominator); distance -> dcat:spatialResolutionInMeters, or, in a unit that is not a
    length (degrees), geodcat:spatialResolutionAsText "0.0001 deg"."""
    out = state.out
    for res in elements("gmd:spatialResolution/gmd:MD_Resolution/*", ident):
        name = localname(res)
        try:
            if name == "equivalentScale":
                denom = Decimal(plain(first("*/gmd:denominator", res)))
                if denom <= 0:
                    raise InvalidOperation
                node = out.typed(C["QualityMeasurement"])
                out.add(subject, P["qualityMeasurement"], node)
                out.add(node, P["isMeasurementOf"], AS_SCALE)
                out.add(node, P["value"], _decimal(1 / denom))
            elif name == "distance":
                dist = first("gco:Distance", res)
                unit = (dist.get("uom", "m") if dist is not None else "m").strip()
                # the ISO unit dictionary's IRIs (...ML_gmxUom.xml#m) name the unit after "#"
                factor = _UNITS.get(unit.casefold()) or _UNITS.get(unit.rsplit("#", 1)[-1])
                value = Decimal(plain(res))
                if factor is None:  # an angle (deg) or an unknown unit: kept as text
                    text = f"{format(value.normalize(), 'f')} {unit}"
                    out.add(subject, P["resolutionText"], lit(text))
                    continue
                metres = value * Decimal(str(factor))
                out.add(subject, P["resolutionMeters"], _decimal(metres))
        except (InvalidOperation, ValueError):
            message = f"spatial resolution {name} is not a number"
            state.warn("iso-resolution-unreadable", message, res)


# -- lineage and conformity --------------------------------------------------------------


def lineage(state: State, root: etree._Element, subject: Node) -> None:
    for stmt in elements(
        "gmd:dataQualityInfo/gmd:DQ_DataQuality/gmd:lineage/gmd:LI_Lineage/gmd:statement", root
    ):
        lits = state.texts.literals(stmt)
        if lits:
            node = state.out.typed(C["ProvenanceStatement"])
            state.out.add(subject, P["provenance"], node)
            state.out.add_all(node, P["label"], lits)


USED = named("http://www.w3.org/ns/prov#used")


def conformity(state: State, root: etree._Element, subject: Node) -> None:
    """DQ_ConformanceResult -> dct:conformsTo the specification (when passed) and, always,
    GeoDCAT-AP's prov:wasUsedBy activity with the degree of conformity."""
    out = state.out
    for result in elements(
        "gmd:dataQualityInfo/gmd:DQ_DataQuality/gmd:report/*/gmd:result/gmd:DQ_ConformanceResult",
        root,
    ):
        cit = first("gmd:specification/gmd:CI_Citation", result)
        if cit is None:
            continue
        title_el = next(cit.iterchildren(GMD + "title"), None)
        title = plain(title_el)
        spec_el = cit.getparent()
        href = anchor_href(title_el) or (
            (spec_el.get(XLINK_HREF) or "").strip() if spec_el is not None else ""
        )
        spec: Node
        folded = title.casefold()
        known = next((spec for part, spec in state.table.specifications if part in folded), "")
        # the citation's title and date describe the specification however it is named: a
        # regulation's ELI or an anchor gets them too (a dct:Standard is read by its title)
        if href and is_iri(href):
            spec = named(href)
        elif known:
            spec = named(known)
        else:
            spec = out.typed(C["Standard"])
        if title_el is not None:
            out.add_all(spec, P["title"], state.texts.literals(title_el))
        issued = date_literal(plain(first("gmd:date/gmd:CI_Date/gmd:date", cit)))
        if issued is not None:
            out.add(spec, P["issued"], issued)
        passed = plain(next(result.iterchildren(GMD + "pass"), None)).lower()
        degree = {"true": "conformant", "1": "conformant", "false": "notConformant"}
        level = degree.get(passed, "notConformant" if passed == "0" else "notEvaluated")
        if level == "conformant":
            out.add(subject, P["conformsTo"], spec)
        activity = out.typed(C["Activity"])
        out.add(subject, TYPE, C["Entity"])  # what the activity used, as GeoDCAT-AP says
        out.add(subject, P["wasUsedBy"], activity)
        out.add(activity, USED, subject)
        assoc = out.typed(C["Association"])
        out.add(activity, P["qualifiedAssociation"], assoc)
        plan = out.typed(C["Plan"])
        out.add(assoc, P["hadPlan"], plan)
        out.add(plan, P["wasDerivedFrom"], spec)
        entity = out.typed(C["Entity"])
        out.add(activity, P["generated"], entity)
        out.add(entity, P["type"], named(DEGREE + level))
        explanation = next(result.iterchildren(GMD + "explanation"), None)
        if explanation is not None:
            out.add_all(entity, P["description"], state.texts.literals(explanation))
