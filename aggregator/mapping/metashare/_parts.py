"""The irregular parts of the META-SHARE v3.0 -> DCAT-AP 3 mapping (the regular ones are the
``[[dataset]]`` rules of ``mappings/meta-share.toml``); see docs/mappings/meta-share.md."""

from __future__ import annotations

from collections.abc import Callable

from lxml import etree
from pyoxigraph import BlankNode, Literal, NamedNode

from aggregator.core.vocab import ADMS, DCAT, DCT, FOAF, PROV, RDFS, SKOS, VCARD, XSD
from aggregator.mapping.dcat.vocab import Vocabulary
from aggregator.mapping.metashare._graph import (
    Graph,
    Node,
    find_all,
    first_text,
    is_iri,
    lang_literal,
    mailto,
    text_of,
)
from aggregator.mapping.metashare._rules import MetaShareRules

DCATAP = "http://data.europa.eu/r5r/"
IANA = "https://www.iana.org/assignments/media-types/"
CREATOR_ROLE = "http://w3id.org/meta-share/meta-share/resourceCreator"
LANGUAGE_BASE = "http://publications.europa.eu/resource/authority/language/"


def concept(g: Graph, iri: str, label: str) -> NamedNode:
    node = NamedNode(iri)
    g.typed(node, SKOS + "Concept")
    g.add(node, SKOS + "prefLabel", Literal(label, language="en"))
    return node


def person_name(el: etree._Element) -> str:
    given = first_text(el, "ms:givenName")
    surname = first_text(el, "ms:surname")
    return " ".join(p for p in (given, surname) if p)


def identifiers(g: Graph, subject: Node, info: etree._Element) -> None:
    for el in find_all(info, "ms:identifier") + find_all(info, "ms:metaShareId"):
        value = text_of(el)
        if not value or value == "NOT_DEFINED_FOR_V2":
            continue
        ident = g.new(ADMS + "Identifier")
        g.add(ident, SKOS + "notation", Literal(value))
        g.add(subject, ADMS + "identifier", ident)


def resource_types(
    g: Graph, subject: Node, component: etree._Element, rules: MetaShareRules
) -> None:
    code = first_text(component, "ms:resourceType")
    rtype = rules.resource_types.get(code)
    if rtype is None:
        g.warn("unknownResourceType", f"resourceType {code!r} is not one of v3.0's", component)
    else:
        g.add(subject, DCT + "type", concept(g, rtype.iri, rtype.label))
        g.add(subject, DCAT + "keyword", Literal(rtype.label, language="en"))
    seen: set[str] = set()
    for el in find_all(component, ".//ms:mediaType"):
        media = text_of(el)
        if media in seen:
            continue
        seen.add(media)
        if media in rules.media_types:  # DCAT-AP allows one dct:type: the media types are
            g.add(subject, DCAT + "keyword", Literal(rules.media_types[media][1], language="en"))
        else:
            g.warn("unknownMediaType", f"mediaType {media!r} is not one of v3.0's", el)


def languages(g: Graph, subject: Node, component: etree._Element, table: Vocabulary) -> None:
    """Every languageId of the resource (its media-type parts, a tool's input and output):
    ISO 639 -> the EU Vocabularies language authority table."""
    seen: set[str] = set()
    for el in find_all(component, ".//ms:languageId"):
        code = text_of(el)
        term = table.lookup(code)
        if term is None and len(code) == 3 and code.isalpha():  # ISO 639-3 / 639-2/T
            term = NamedNode(LANGUAGE_BASE + code.upper())
        if term is None:
            g.warn("unknownLanguage", f"languageId {code!r} has no EU language term", el)
            continue
        if term.value not in seen:
            seen.add(term.value)
            g.typed(term, DCT + "LinguisticSystem")
            g.add(subject, DCT + "language", term)


def sizes(g: Graph, subject: Node, component: etree._Element, rules: MetaShareRules) -> int | None:
    """Sizes in non-byte units become dct:extent statements; the largest size in bytes is
    returned for the distributions' dcat:byteSize."""
    byte_size: int | None = None
    for info in find_all(component, ".//ms:sizeInfo"):
        size, unit = first_text(info, "ms:size"), first_text(info, "ms:sizeUnit")
        factor = rules.byte_units.get(unit.casefold())
        if factor is not None and size.isdigit():
            byte_size = max(byte_size or 0, int(size) * factor)
            continue
        if size:
            extent = g.new(DCT + "SizeOrDuration")
            g.add(extent, RDFS + "label", Literal(f"{size} {unit}".strip(), language="en"))
            g.add(subject, DCT + "extent", extent)
    return byte_size


def media_types(component: etree._Element) -> list[str]:
    found: list[str] = []
    for el in find_all(component, ".//ms:mimeType"):
        value = text_of(el).lower()
        if "/" in value and " " not in value and value not in found:
            found.append(value)
    return found


def licence(g: Graph, code: str, rules: MetaShareRules) -> Node:
    iri = rules.licences.get(code)
    node: Node = NamedNode(iri) if iri else BlankNode()
    g.typed(node, DCT + "LicenseDocument")
    if iri is None:
        g.add(node, RDFS + "label", Literal(code))
    return node


def rights(g: Graph, info: etree._Element) -> Node | None:
    parts = [text_of(e) for e in find_all(info, "ms:restrictionsOfUse")]
    attributions = [lit for e in find_all(info, "ms:attributionText") if (lit := lang_literal(e))]
    fee = first_text(info, "ms:fee")
    if not parts and not attributions and not fee:
        return None
    statement = g.new(DCT + "RightsStatement")
    if parts:
        g.add(statement, RDFS + "label", Literal("restrictions of use: " + ", ".join(parts)))
    for lit in attributions:
        g.add(statement, RDFS + "label", lit)
    if fee:
        g.add(statement, RDFS + "label", Literal(f"fee: {fee}"))
    return statement


def service_licences(
    g: Graph, subject: Node, distribution: etree._Element, rules: MetaShareRules
) -> None:
    """The licences of a tool/service mapped to a dcat:DataService, which DCAT-AP 3.0.1 allows
    one ``dct:license``: the first licence is it; each further licence, and the restrictions
    of use, attribution and fee of every licenceInfo, are ``dct:rights`` statements."""
    first: str | None = None
    for info in find_all(distribution, "ms:licenceInfo"):
        code = first_text(info, "ms:licence")
        if code and first is None:
            first = code
            g.add(subject, DCT + "license", licence(g, code, rules))
        elif code and code != first:
            where = [text_of(e) for e in find_all(info, "ms:executionLocation")]
            text = f"also available under the licence {code}"
            text += f" at {', '.join(where)}" if where else ""
            further = g.new(DCT + "RightsStatement")
            g.add(further, RDFS + "label", Literal(text))
            g.add(subject, DCT + "rights", further)
            g.note(
                "ms-service-licence",
                f"licence {code} kept as a dct:rights statement: a dcat:DataService has at"
                f" most one dct:license ({first}) in DCAT-AP 3.0.1",
                info,
            )
        statement = rights(g, info)
        if statement is not None:
            g.add(subject, DCT + "rights", statement)


def distributions(
    g: Graph,
    subject: Node,
    distribution: etree._Element,
    fallback_url: str,
    mimes: list[str],
    byte_size: int | None,
    rules: MetaShareRules,
) -> None:
    """One dcat:Distribution per licenceInfo: its licence, rights, access (download or
    execution location, else the landing page or node), media types and size."""
    for info in find_all(distribution, "ms:licenceInfo"):
        dist = g.new(DCAT + "Distribution")
        g.add(subject, DCAT + "distribution", dist)
        downloads = [n for e in find_all(info, "ms:downloadLocation") if (n := g.iri(e))]
        executions = [n for e in find_all(info, "ms:executionLocation") if (n := g.iri(e))]
        for node in downloads:
            g.add(dist, DCAT + "downloadURL", node)
        access = downloads + executions or [NamedNode(fallback_url)]
        for node in access:
            g.add(dist, DCAT + "accessURL", node)
        code = first_text(info, "ms:licence")
        if code:
            g.add(dist, DCT + "license", licence(g, code, rules))
        statement = rights(g, info)
        if statement is not None:
            g.add(dist, DCT + "rights", statement)
        media = ", ".join(text_of(e) for e in find_all(info, "ms:distributionAccessMedium"))
        text = f"{code or 'no licence given'}; access medium: {media or 'not given'}"
        if len(mimes) > 1:  # DCAT-AP allows one dcat:mediaType: the first; all are named here
            text += f"; media types: {', '.join(mimes)}"
        g.add(dist, DCT + "description", Literal(text))
        for mime in mimes[:1]:
            node = NamedNode(IANA + mime)
            g.typed(node, DCT + "MediaType")
            g.add(dist, DCAT + "mediaType", node)
        if byte_size is not None:
            size = Literal(str(byte_size), datatype=NamedNode(XSD + "nonNegativeInteger"))
            g.add(dist, DCAT + "byteSize", size)


def contact_points(g: Graph, subject: Node, root: etree._Element) -> None:
    for person in find_all(root, "ms:contactPerson"):
        card = g.new(VCARD + "Individual")  # and a vcard:Kind: the range DCAT-AP 3 states
        g.typed(card, VCARD + "Kind")
        g.add(subject, DCAT + "contactPoint", card)
        name = person_name(person)
        if name:
            g.add(card, VCARD + "fn", Literal(name))
        for el in find_all(person, "ms:communicationInfo/ms:email"):
            if (mail := mailto(text_of(el))) is not None:
                g.add(card, VCARD + "hasEmail", mail)
        for el in find_all(person, "ms:communicationInfo/ms:url"):
            if (url := g.iri(el)) is not None:
                g.add(card, VCARD + "hasURL", url)
        for el in find_all(person, "ms:affiliation/ms:organizationName"):
            if (lit := lang_literal(el)) is not None:
                g.add(card, VCARD + "organization-name", lit)


def agent(g: Graph, el: etree._Element) -> Node | None:
    """A personInfo or organizationInfo as a foaf agent."""
    kind = etree.QName(el).localname
    if kind == "personInfo":
        name = person_name(el)
        if not name:
            return None
        node = g.new(FOAF + "Person")
        g.add(node, FOAF + "name", Literal(name))
        g.typed(node, FOAF + "Agent")  # the range of dct:creator and prov:agent, stated
    else:
        names = [lit for e in find_all(el, "ms:organizationName") if (lit := lang_literal(e))]
        if not names:
            return None
        node = g.new(FOAF + "Organization")
        g.typed(node, FOAF + "Agent")
        for lit in names:
            g.add(node, FOAF + "name", lit)
    for mail in find_all(el, "ms:communicationInfo/ms:email"):
        if (m := mailto(text_of(mail))) is not None:
            g.add(node, FOAF + "mbox", m)
    return node


def creation(g: Graph, subject: Node, root: etree._Element) -> None:
    """resourceCreationInfo: creators (dct:creator) and funding projects
    (prov:wasGeneratedBy a prov:Activity, foaf:Project)."""
    creators = [n for e in find_all(root, "ms:resourceCreationInfo/ms:resourceCreator/*")
                if (n := agent(g, e)) is not None]  # fmt: skip
    for i, node in enumerate(creators):
        if i == 0:  # DCAT-AP 3 allows one dct:creator; the others are qualified attributions
            g.add(subject, DCT + "creator", node)
            continue
        attribution = g.new(PROV + "Attribution")
        g.add(attribution, PROV + "agent", node)
        role = NamedNode(CREATOR_ROLE)
        g.typed(role, DCAT + "Role")
        g.add(role, RDFS + "label", Literal("resource creator", language="en"))
        g.add(attribution, DCAT + "hadRole", role)
        g.add(subject, PROV + "qualifiedAttribution", attribution)
    for project in find_all(root, "ms:resourceCreationInfo/ms:fundingProject"):
        node = g.new(PROV + "Activity")
        g.typed(node, FOAF + "Project")
        g.add(subject, PROV + "wasGeneratedBy", node)
        for el in find_all(project, "ms:projectName"):
            if (lit := lang_literal(el)) is not None:
                g.add(node, DCT + "title", lit)
        for path in ("ms:projectShortName", "ms:projectID"):
            for el in find_all(project, path):
                if text_of(el):
                    g.add(node, DCT + "identifier", Literal(text_of(el)))
        for el in find_all(project, "ms:url"):
            if (url := g.iri(el)) is not None:
                g.add(node, FOAF + "homepage", url)
        for el in find_all(project, "ms:fundingType"):
            g.add(node, DCT + "description", Literal(f"funding: {text_of(el)}"))


def relations(
    g: Graph,
    subject: Node,
    root: etree._Element,
    rules: MetaShareRules,
    lr_iri: Callable[[str], str],
) -> None:
    """relationInfo: the relation type's Dublin Core property to the related resource (a
    storage id: our IRI for that LR; an IRI: itself; a name: a resource labelled so)."""
    for info in find_all(root, "ms:relationInfo"):
        kind = first_text(info, "ms:relationType")
        prop = rules.relations.get(kind, DCT + "relation")
        target = first_text(info, "ms:relatedResource/ms:targetResourceNameURI")
        if not target:
            continue
        if kind in rules.generalised_relations:
            g.note(
                "ms-relation-generalised",
                f"relationType {kind} to {target!r} is kept as dct:relation: DCAT-AP 3.0.1"
                f" requires the value of {rules.generalised_relations[kind]} to be a"
                " dcat:Dataset described in the record, which another LR or a name is not",
                info,
            )
        node: Node
        if len(target) == 64 and all(c in "0123456789abcdef" for c in target):
            node = NamedNode(lr_iri(target))
        elif is_iri(target):
            node = NamedNode(target)
        else:
            node = BlankNode()
            g.add(node, RDFS + "label", Literal(target))
        g.add(subject, prop, node)
