"""Distributions, licences and access rights, and the service-only parts of ISO 19139.

* Transfer options (``gmd:MD_DigitalTransferOptions/gmd:onLine/gmd:CI_OnlineResource``): the
  CI_OnLineFunctionCode (``[online-function]``) decides whether a link is a distribution
  (``dcat:accessURL``, plus ``dcat:downloadURL`` for downloads and ``WWW:DOWNLOAD`` protocols),
  a ``dcat:landingPage`` or a ``foaf:page``; a service protocol (``[[protocol]]``) gives the
  distribution its file type and a ``dcat:accessService``; otherwise the record's one
  ``gmd:distributionFormat`` gives ``dct:format`` (EU file type, IANA media type or a labelled
  node).
* Constraints: ``gmd:useConstraints`` -> licence (a known licence IRI, else a
  ``dct:LicenseDocument`` with the text), ``gmd:accessConstraints`` -> ``dct:accessRights``
  (the first linked value, such as the INSPIRE LimitationsOnPublicAccess anchor, else a
  ``dct:RightsStatement``), ``gmd:useLimitation`` -> ``dct:rights``. Licence, rights and access
  rights go on each distribution (and on a service), access rights also on the resource.
* Services: ``srv:operatesOn`` -> ``dcat:servesDataset``, connect points and transfer options ->
  ``dcat:endpointURL`` (GetCapabilities links also ``dcat:endpointDescription``),
  ``srv:serviceTypeVersion`` -> ``dct:conformsTo`` a ``dct:Standard`` with ``owl:versionInfo``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from urllib.parse import parse_qs, urlsplit

from lxml import etree

from aggregator.core.vocab import DCAT, DCT, FOAF, RDFS, XSD
from aggregator.mapping.base import MappingContext, mint_iri
from aggregator.mapping.iso19139._parts import OWL, P, State
from aggregator.mapping.iso19139._table import format_key
from aggregator.mapping.iso19139._xml import (
    GCO,
    GMD,
    TYPE,
    XLINK_HREF,
    Node,
    Out,
    anchor_href,
    child,
    children,
    elements,
    first_under,
    is_iri,
    lit,
    localname,
    named,
    plain,
    typed_lit,
)

D = {
    name: named(DCAT + name)
    for name in (
        "Distribution",
        "DataService",
        "distribution",
        "accessURL",
        "downloadURL",
        "landingPage",
        "accessService",
        "mediaType",
        "endpointURL",
        "endpointDescription",
        "servesDataset",
        "byteSize",
    )
}
FORMAT = named(DCT + "format")
LICENSE = named(DCT + "license")
RIGHTS = named(DCT + "rights")
ACCESS_RIGHTS = named(DCT + "accessRights")
LICENSE_DOCUMENT = named(DCT + "LicenseDocument")
RIGHTS_STATEMENT = named(DCT + "RightsStatement")
MEDIA_TYPE_OR_EXTENT = named(DCT + "MediaTypeOrExtent")
STANDARD = named(DCT + "Standard")
PAGE = named(FOAF + "page")
DOCUMENT = named(FOAF + "Document")
LABEL = named(RDFS + "label")
VERSION_INFO = named(OWL + "versionInfo")
IANA = "https://www.iana.org/assignments/media-types/"
SERVICE_PROTOCOL = named("http://data.europa.eu/930/serviceProtocol")
_PER_DISTRIBUTION = frozenset(
    {
        named("http://www.w3.org/2011/content#characterEncoding"),
        named("http://www.w3.org/ns/adms#representationTechnique"),
    }
)

LINKAGE = GMD + "linkage"
PROTOCOL = GMD + "protocol"
NAME = GMD + "name"
DESCRIPTION = GMD + "description"
FUNCTION = GMD + "function"
FUNCTION_CODE = GMD + "CI_OnLineFunctionCode"
USE_LIMITATION = GMD + "useLimitation"
ACCESS_CONSTRAINTS = GMD + "accessConstraints"
OTHER_CONSTRAINTS = GMD + "otherConstraints"
_CONSTRAINT_PARTS = frozenset((USE_LIMITATION, ACCESS_CONSTRAINTS, OTHER_CONSTRAINTS))
DISTRIBUTION = GMD + "MD_Distribution"
DISTRIBUTOR = GMD + "MD_Distributor"
_DISTRIBUTION_FORMATS = "gmd:distributionFormat/gmd:MD_Format/gmd:name"
_DISTRIBUTOR_FORMATS = "gmd:distributorFormat/gmd:MD_Format/gmd:name"
_ONLINE_PARTS = frozenset((LINKAGE, PROTOCOL, NAME, DESCRIPTION, FUNCTION))
#: the transfer options of the distribution and of each distributor
#: (``gmd:distributor/*/gmd:distributorTransferOptions``)
_ONLINE = (
    "gmd:distributionInfo/gmd:MD_Distribution//gmd:MD_DigitalTransferOptions/"
    "gmd:onLine/gmd:CI_OnlineResource"
)


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


#: a distribution format: (``dct:format``, an EU file type), (``dcat:mediaType``, an IANA media
#: type) or (``dct:format``, "" and the name: a ``dct:MediaTypeOrExtent`` labelled with it, made
#: only when a distribution gets it)
Format = tuple[str, Node, str]


def _formats(state: State, names: list[etree._Element]) -> list[Format]:
    """The formats of these ``gmd:MD_Format/gmd:name`` elements, each once."""
    found: dict[Format, None] = {}
    for el in names:
        name = plain(el)
        if not name:
            continue
        file_type = state.table.formats.get(format_key(name))
        if file_type:
            found[FORMAT, named(file_type), ""] = None
        elif "/" in name and " " not in name and is_iri(IANA + name.lower()):
            found[D["mediaType"], named(IANA + name.lower()), ""] = None
        else:
            found[FORMAT, "", name] = None
    return list(found)


def _formats_of(
    state: State, onl: etree._Element, known: dict[etree._Element, list[Format]]
) -> list[Format]:
    """The formats a link's data comes in (``known`` keeps them by the element that holds the
    link): a distributor's link (``distributorTransferOptions``) those of its
    ``distributorFormat``, else (and for a link of the ``MD_Distribution``'s own
    ``transferOptions``) those of the ``distributionFormat``, else every format of the
    distribution (its distributors')."""
    owner: etree._Element | None = onl
    for _ in range(4):  # CI_OnlineResource < onLine < MD_DigitalTransferOptions < ... < owner
        owner = owner.getparent() if owner is not None else None
    if owner is None:
        return []
    if owner in known:
        return known[owner]
    found: list[Format] = []
    distribution: etree._Element | None = owner
    if owner.tag == DISTRIBUTOR:
        found = _formats(state, elements(_DISTRIBUTOR_FORMATS, owner))
        distribution = owner.getparent()
        distribution = distribution.getparent() if distribution is not None else None
    if not found and distribution is not None and distribution.tag == DISTRIBUTION:
        found = _formats(state, elements(_DISTRIBUTION_FORMATS, distribution)) or _formats(
            state, elements(".//gmd:MD_Format/gmd:name", distribution)
        )
    known[owner] = found
    return found


def _add_format(out: Out, dist: Node, fmt: Format) -> None:
    prop, value, label = fmt
    if label:
        value = out.typed(MEDIA_TYPE_OR_EXTENT)
        out.add(value, LABEL, lit(label))
    out.add(dist, prop, value)


def _one_per_format(out: Out, subject: Node, dist: Node, formats: list[Format]) -> None:
    """The record's one link to the data, in each of its formats: one distribution per format,
    each with the link (DCAT-AP 3.0.1 gives a distribution at most one ``dct:format``, and
    ISO 19139 says the resource is distributed in every format it lists; with one transfer
    option, each format is got through it)."""
    said = [(p, o) for s, p, o in out.triples if s == dist and p != TYPE]
    _add_format(out, dist, formats[0])
    for fmt in formats[1:]:
        copy = out.typed(D["Distribution"])
        out.add(subject, D["distribution"], copy)
        for p, o in said:
            out.add(copy, p, o)
        _add_format(out, copy, fmt)


def distributions(state: State, root: etree._Element, subject: Node, rights: Rights) -> None:
    out, table = state.out, state.table
    formats: dict[etree._Element, list[Format]] = {}  # by the element that holds the links
    # the links to the data (not to a service), by the formats they come in
    to_data: dict[tuple[Format, ...], list[tuple[Node, str]]] = {}
    # GeoDCAT-AP describes the encoding and the representation technique on the distribution:
    # each distribution repeats the resource's (mapped by the element rows)
    shared = [(p, o) for s, p, o in out.triples if s == subject and p in _PER_DISTRIBUTION]
    for onl in elements(_ONLINE, root):
        parts = children(onl, _ONLINE_PARTS)
        url = plain(child(parts, LINKAGE))
        if not is_iri(url):
            state.warn("iso-link-not-url", f"online resource linkage {url!r} is not a URL", onl)
            continue
        function = _code(parts)
        protocol = plain(child(parts, PROTOCOL))
        capabilities = _capabilities_of(url)
        kind = table.online_function.get(function, "distribution")
        if not function and not protocol and not capabilities and _is_web_page(url, table.formats):
            # nothing says the link gives the data, and it is a web page, not a file: the
            # page to go to for it (DCAT's landing page), as the SEMIC transformation reads it
            kind = "landing-page"
        link = named(url)
        if kind in ("page", "landing-page"):
            out.add(subject, PAGE if kind == "page" else D["landingPage"], link)
            _document(state, link, parts)
            continue
        dist = out.typed(D["Distribution"])
        out.add(subject, D["distribution"], dist)
        out.add(dist, D["accessURL"], link)
        if kind == "download" or protocol.upper().startswith("WWW:DOWNLOAD"):
            out.add(dist, D["downloadURL"], link)
        name = child(parts, NAME)
        if name is not None:
            out.add_all(dist, P["title"], state.texts.literals(name))
        desc = child(parts, DESCRIPTION)
        if desc is not None:
            out.add_all(dist, P["description"], state.texts.literals(desc))
        folded = protocol.casefold() or (f"ogc:{capabilities}" if capabilities else "")
        proto = next((p for p in table.protocols if folded.startswith(p.prefix)), None)
        if proto is not None:
            out.add(dist, FORMAT, named(proto.file_type))
            if proto.service:
                service = out.typed(D["DataService"])
                out.add(dist, D["accessService"], service)
                _endpoint(out, service, url, link, protocol)
                out.add(service, D["servesDataset"], subject)
                names = state.texts.literals(name) if name is not None else []
                out.add_all(service, P["title"], names or [lit(protocol or proto.prefix.upper())])
                if proto.standard:
                    out.add(service, SERVICE_PROTOCOL, named(proto.standard))
                    out.add(service, P["conformsTo"], named(proto.standard))
        else:
            its_formats = _formats_of(state, onl, formats)
            if len(its_formats) == 1:
                _add_format(out, dist, its_formats[0])
            to_data.setdefault(tuple(its_formats), []).append((dist, url))
            size = _byte_size(state, onl)
            if size is not None:
                out.add(dist, D["byteSize"], size)
        if rights.licence is not None:
            out.add(dist, LICENSE, rights.licence)
        if rights.rights is not None:
            out.add(dist, RIGHTS, rights.rights)
        if rights.access is not None:  # DCAT 3 gives a distribution its own access rights
            out.add(dist, ACCESS_RIGHTS, rights.access)
        for prop, value in shared:
            out.add(dist, prop, value)
    # several formats: which link gives which is not said, unless they have one link to the
    # data, and not a named file (``a.zip`` is one file in one format)
    for several, links in to_data.items():
        if len(several) > 1 and len(links) == 1 and _is_web_page(links[0][1], table.formats):
            _one_per_format(out, subject, links[0][0], list(several))


def _document(state: State, link: Node, parts: dict[str, list[etree._Element]]) -> None:
    """A page (foaf:page, dcat:landingPage) as the ``foaf:Document`` GeoDCAT-AP describes:
    the link's name as ``dct:title``, its description as ``dct:description``."""
    out = state.out
    out.add(link, TYPE, DOCUMENT)
    name = child(parts, NAME)
    if name is not None:
        out.add_all(link, P["title"], state.texts.literals(name))
    desc = child(parts, DESCRIPTION)
    if desc is not None:
        out.add_all(link, P["description"], state.texts.literals(desc))


@lru_cache(maxsize=1024)  # a catalogue links the same services from many records
def _capabilities_of(url: str) -> str:
    """The service a GetCapabilities URL names (``...?service=WMS&request=GetCapabilities``
    -> ``"wms"``; without a ``service`` parameter, the service its path names, as in
    ``.../wms?request=getCapabilities``), else ""."""
    if "?" not in url:  # no query
        return ""
    parts = urlsplit(url)
    query = {k.lower(): v for k, v in parse_qs(parts.query).items()}
    if [v.lower() for v in query.get("request", [])] != ["getcapabilities"]:
        return ""
    named_service = (query.get("service") or [""])[0].lower()
    if named_service:
        return named_service
    in_path = _SERVICE_IN_PATH.search(parts.path.lower())
    return in_path.group(1) if in_path else ""


@lru_cache(maxsize=1024)
def _extension(url: str) -> str:
    """The file extension of the link's last path segment (``a.zip`` -> ``"zip"``), else ""."""
    last = urlsplit(url).path.rsplit("/", 1)[-1]
    return last.rsplit(".", 1)[1].lower() if "." in last else ""


def _is_web_page(url: str, formats: dict[str, str]) -> bool:
    """A link that names no file of a format the ``[format]`` table knows (``/snhi``,
    ``/metadata?uuid=...``, ``main.home``, ``index.html``), not a file to download
    (``a.zip``, ``levels.csv``)."""
    file_type = formats.get(format_key(_extension(url)), "") if _extension(url) else ""
    return not file_type or file_type.endswith(("/HTML", "/XHTML"))


_SERVICE_IN_PATH = re.compile(r"(?<![a-z])(wmts|wms|wfs|wcs|csw|sos)")


def _is_description(url: str, protocol: str) -> bool:
    """A link to the service's description: a GetCapabilities request, or a link whose
    protocol says so (``OGC:WMS-1.3.0-http-get-capabilities``, a capabilities document)."""
    folded = protocol.casefold()
    return (
        "getcapabilities" in url.casefold()
        or "get-capabilities" in folded
        or "getcapabilities" in folded
    )


def _endpoint(out: Out, service: Node, url: str, link: Node, protocol: str) -> None:
    """A link to the service's description (:func:`_is_description`) is the endpoint's
    description, its address without the query the endpoint URL; any other link is the
    endpoint URL (without an empty query: ``.../wms?``)."""
    if _is_description(url, protocol):
        out.add(service, D["endpointDescription"], link)
    out.add(service, D["endpointURL"], _endpoint_url(url, link))


def _endpoint_url(url: str, link: Node) -> Node:
    """The endpoint of a link: the address without a GetCapabilities query or an empty one."""
    base = url.split("?", 1)[0] if "getcapabilities" in url.casefold() else url.rstrip("?")
    return named(base) if base != url and is_iri(base) else link


def _byte_size(state: State, onl: etree._Element) -> str | None:
    """``gmd:transferSize`` of the link's transfer options (megabytes, ISO 19115) as
    ``dcat:byteSize`` (10^6 bytes a megabyte); only file distributions get it, a service
    endpoint has no size."""
    options = onl.getparent()
    options = options.getparent() if options is not None else None
    if options is None:
        return None
    el = first_under(options.iterchildren(GMD + "transferSize"), GCO + "Real")
    if el is None:
        return None
    text = (el.text or "").strip()
    try:
        megabytes = Decimal(text)
    except InvalidOperation:
        megabytes = Decimal(-1)
    if not megabytes.is_finite() or megabytes < 0:
        state.warn("iso-size-unreadable", f"transfer size {text!r} is not a size in MB", el)
        return None
    return typed_lit(str(int(megabytes * 1_000_000)), XSD + "nonNegativeInteger")


def _code(parts: dict[str, list[etree._Element]]) -> str:
    """The link's CI_OnLineFunctionCode (``parts``: the link's :func:`children`)."""
    el = first_under(parts.get(FUNCTION, ()), FUNCTION_CODE)
    return (el.get("codeListValue") or el.text or "").strip() if el is not None else ""


def served_dataset(ctx: MappingContext, ref: etree._Element) -> str | None:
    """The dataset a srv:operatesOn names: its @uuidref (a metadata file identifier of the
    same source), else its @uriref (an http IRI of the resource), else the ``id`` parameter
    of its xlink:href (a CSW GetRecordById link), else the link itself."""
    uuid = (ref.get("uuidref") or "").strip()
    href = (ref.get(XLINK_HREF) or "").strip()
    uriref = (ref.get("uriref") or "").strip()  # the INSPIRE MIG's resource IRI, if any
    if not uuid and uriref.startswith(("http://", "https://")) and is_iri(uriref):
        return named(uriref)
    if not uuid and href:
        query = parse_qs(urlsplit(href).query)
        ids = {k.lower(): v for k, v in query.items()}.get("id")
        if ids:
            uuid = ids[0]
        elif "#" in href and not uuid:
            uuid = href.rsplit("#", 1)[1]
    if uuid:
        return named(mint_iri(ctx, "dataset", uuid))
    return named(href) if href and is_iri(href) else None


def service(
    state: State, ctx: MappingContext, root: etree._Element, ident: etree._Element, subject: Node
) -> None:
    out = state.out
    for ref in elements("srv:operatesOn", ident):
        dataset = served_dataset(ctx, ref)
        if dataset is not None:
            out.add(subject, D["servesDataset"], dataset)
    links = [
        (plain(u), "")
        for u in elements(
            "srv:containsOperations/srv:SV_OperationMetadata/srv:connectPoint/"
            "gmd:CI_OnlineResource/gmd:linkage",
            ident,
        )
    ]
    for onl in elements(_ONLINE, root):
        parts = children(onl, _ONLINE_PARTS)
        links.append((plain(child(parts, LINKAGE)), plain(child(parts, PROTOCOL))))
    for url, protocol in dict.fromkeys(links):
        if not is_iri(url):
            if url:
                state.warn("iso-link-not-url", f"service endpoint {url!r} is not a URL", ident)
            continue
        link = named(url)
        if _is_description(url, protocol):
            out.add(subject, D["endpointDescription"], link)
        out.add(subject, D["endpointURL"], _endpoint_url(url, link))
    kind = plain(first_local(ident, "serviceType"))
    for version in elements("srv:serviceTypeVersion", ident):
        text = plain(version)
        if text:
            std = out.typed(STANDARD)
            out.add(subject, P["conformsTo"], std)
            if kind:
                out.add(std, P["title"], lit(kind))
            out.add(std, VERSION_INFO, lit(text))


def first_local(ident: etree._Element, name: str) -> etree._Element | None:
    found = elements(f"srv:{name}", ident)
    return found[0] if found else None


def service_rights(state: State, subject: Node, rights: Rights) -> None:
    if rights.licence is not None:
        state.out.add(subject, LICENSE, rights.licence)
    if rights.rights is not None:  # use limitations: dct:rights of a dcat:Resource
        state.out.add(subject, RIGHTS, rights.rights)
    if rights.access is not None:
        state.out.add(subject, ACCESS_RIGHTS, rights.access)
