"""Licences, rights and access rights of ISO 19139 records.

Constraints: ``gmd:useConstraints`` -> licence (a known licence IRI, else a
``dct:LicenseDocument`` with the text), ``gmd:accessConstraints`` -> ``dct:accessRights`` (the
first linked value, such as the INSPIRE LimitationsOnPublicAccess anchor, else a
``dct:RightsStatement``), ``gmd:useLimitation`` -> ``dct:rights``. They are mapped once per
record (:class:`Rights`) and go on each distribution (``_distribution.py``) and on a service.
"""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from aggregator.core.vocab import DCT, RDFS
from aggregator.mapping.iso19139._parts import P, State
from aggregator.mapping.iso19139._xml import (
    GMD,
    Node,
    anchor_href,
    children,
    elements,
    is_iri,
    localname,
    named,
    plain,
)

LICENSE = named(DCT + "license")
RIGHTS = named(DCT + "rights")
ACCESS_RIGHTS = named(DCT + "accessRights")
LICENSE_DOCUMENT = named(DCT + "LicenseDocument")
RIGHTS_STATEMENT = named(DCT + "RightsStatement")
LABEL = named(RDFS + "label")
USE_LIMITATION = GMD + "useLimitation"
ACCESS_CONSTRAINTS = GMD + "accessConstraints"
OTHER_CONSTRAINTS = GMD + "otherConstraints"
_CONSTRAINT_PARTS = frozenset((USE_LIMITATION, ACCESS_CONSTRAINTS, OTHER_CONSTRAINTS))


@dataclass
class Rights:
    """The constraints of a record, mapped once and shared by its distributions."""

    licence: Node | None = None
    rights: Node | None = None
    access: Node | None = None


def _statement(state: State, cls: str, el: etree._Element) -> Node | None:
    lits = state.texts.literals(el)
    if not lits:
        return None
    node = state.out.typed(cls)
    state.out.add_all(node, LABEL, lits)
    state.out.add_all(node, P["description"], lits)  # GeoDCAT-AP's property for the text
    return node


def _more_rights(state: State, found: Rights, el: etree._Element) -> None:
    """The texts of ``el`` as labels of the record's one ``dct:rights`` statement (DCAT-AP 3
    allows one per distribution): use limitations and the constraints beyond the licence and
    the access rights."""
    lits = state.texts.literals(el)
    if not lits:
        return
    if found.rights is None:
        found.rights = state.out.typed(RIGHTS_STATEMENT)
    state.out.add_all(found.rights, LABEL, lits)
    state.out.add_all(found.rights, P["description"], lits)


def constraints(state: State, ident: etree._Element) -> Rights:
    found = Rights()
    access: list[etree._Element] = []  # the otherConstraints of the access constraints
    for c in elements("gmd:resourceConstraints/*", ident):
        parts = children(c, _CONSTRAINT_PARTS)
        for lim in parts.get(USE_LIMITATION, ()):
            _more_rights(state, found, lim)
        if localname(c) != "MD_LegalConstraints":
            continue
        is_access = ACCESS_CONSTRAINTS in parts
        for other in parts.get(OTHER_CONSTRAINTS, ()):
            if is_access:
                access.append(other)
                continue
            if found.licence is not None:
                _more_rights(state, found, other)
                continue
            href = anchor_href(other)
            probe = f"{href} {plain(other)}".casefold()
            licence = next((x for match, x in state.table.licences if match in probe), "")
            if licence:
                found.licence = named(licence)
            elif href and is_iri(href):
                found.licence = named(href)
            else:
                found.licence = _statement(state, LICENSE_DOCUMENT, other)
    _access_rights(state, found, access)
    return found


def _access_rights(state: State, found: Rights, others: list[etree._Element]) -> None:
    """The access rights: the first access constraint that links its value (the INSPIRE
    LimitationsOnPublicAccess anchor, a controlled value DCAT-AP 3 prefers), else the first
    text as a ``dct:RightsStatement``; every other text becomes a label of the ``dct:rights``
    statement (one ``dct:accessRights`` is allowed), so nothing is lost."""
    anchored = [o for o in others if is_iri(anchor_href(o))]
    for other in anchored + [o for o in others if o not in anchored]:
        if found.access is None:
            href = anchor_href(other)
            found.access = (
                named(href) if is_iri(href) else _statement(state, RIGHTS_STATEMENT, other)
            )
            if found.access is not None:
                continue
        _more_rights(state, found, other)


def service_rights(state: State, subject: Node, rights: Rights) -> None:
    if rights.licence is not None:
        state.out.add(subject, LICENSE, rights.licence)
    if rights.rights is not None:  # use limitations: dct:rights of a dcat:Resource
        state.out.add(subject, RIGHTS, rights.rights)
    if rights.access is not None:
        state.out.add(subject, ACCESS_RIGHTS, rights.access)
