"""GeoDCAT-AP completeness of the iso19139 mapper, second round (issue 30): keywords of a
thesaurus that has no IRI as minted concepts, anchored keywords and service categories as
themes, access rights that prefer a linked value and are stated on each distribution, and the
links the SEMIC transformation reads (distributors' transfer options, links without function
or protocol as landing pages, GetCapabilities links and capabilities documents as endpoint
descriptions). Each class of fix on a record of our own making, exact triples, and the
official DCAT-AP 3.0.1 shapes (read from ``../shared/reference/`` where present)."""

from __future__ import annotations

import pytest
import rdflib
from official_shapes import official_violations, require_shapes
from rdflib import Literal, URIRef
from rdflib.namespace import DCAT, DCTERMS, FOAF, RDF, SKOS, XSD

from aggregator.core.models import MappedDataset, RawRecord
from aggregator.mapping.base import MappingContext, mint_iri
from aggregator.mapping.iso19139 import IsoMapper

CTX = MappingContext(base_iri="https://agg.example.org/", source="geo")
DS = URIRef("https://agg.example.org/dataset/geo/rec-0002")
SVC = URIRef("https://agg.example.org/dataset/geo/svc-0002")
GEODCAT = rdflib.Namespace("http://data.europa.eu/930/")
CATEGORY = "http://inspire.ec.europa.eu/metadata-codelist/SpatialDataServiceCategory/"
NO_LIMITATIONS = URIRef(
    "http://inspire.ec.europa.eu/metadata-codelist/LimitationsOnPublicAccess/noLimitations"
)
NS = (
    'xmlns:gmd="http://www.isotc211.org/2005/gmd" xmlns:gco="http://www.isotc211.org/2005/gco" '
    'xmlns:gmx="http://www.isotc211.org/2005/gmx" xmlns:srv="http://www.isotc211.org/2005/srv" '
    'xmlns:xlink="http://www.w3.org/1999/xlink"'
)


def cs(text: str) -> str:
    return f"<gco:CharacterString>{text}</gco:CharacterString>"


def anchor(href: str, text: str) -> str:
    return f'<gmx:Anchor xlink:href="{href}">{text}</gmx:Anchor>'


def keywords(words: list[str], thesaurus: str = "", revised: str = "") -> str:
    kws = "".join(f"<gmd:keyword>{w if w.startswith('<') else cs(w)}</gmd:keyword>" for w in words)
    date = (
        f"<gmd:date><gmd:CI_Date><gmd:date><gco:Date>{revised}</gco:Date></gmd:date>"
        '<gmd:dateType><gmd:CI_DateTypeCode codeList="x" codeListValue="revision"/>'
        "</gmd:dateType></gmd:CI_Date></gmd:date>"
        if revised
        else ""
    )
    th = (
        f"<gmd:thesaurusName><gmd:CI_Citation><gmd:title>{cs(thesaurus)}</gmd:title>{date}"
        "</gmd:CI_Citation></gmd:thesaurusName>"
        if thesaurus
        else ""
    )
    group = f"<gmd:MD_Keywords>{kws}{th}</gmd:MD_Keywords>"
    return f"<gmd:descriptiveKeywords>{group}</gmd:descriptiveKeywords>"


def online(url: str, function: str = "", protocol: str = "", name: str = "") -> str:
    parts = f"<gmd:linkage><gmd:URL>{url}</gmd:URL></gmd:linkage>"
    if protocol:
        parts += f"<gmd:protocol>{cs(protocol)}</gmd:protocol>"
    if name:
        parts += f"<gmd:name>{cs(name)}</gmd:name>"
    if function:
        parts += (
            '<gmd:function><gmd:CI_OnLineFunctionCode codeList="x" '
            f'codeListValue="{function}"/></gmd:function>'
        )
    return f"<gmd:onLine><gmd:CI_OnlineResource>{parts}</gmd:CI_OnlineResource></gmd:onLine>"


def options(*links: str) -> str:
    return f"<gmd:MD_DigitalTransferOptions>{''.join(links)}</gmd:MD_DigitalTransferOptions>"


OPEN = "Open to all, registration needed for bulk use"
ACCESS = f"""<gmd:resourceConstraints><gmd:MD_LegalConstraints>
      <gmd:accessConstraints><gmd:MD_RestrictionCode codeList="x"
        codeListValue="otherRestrictions"/></gmd:accessConstraints>
      <gmd:otherConstraints>{cs(OPEN)}</gmd:otherConstraints>
      <gmd:otherConstraints>{anchor(str(NO_LIMITATIONS), "no limitations")}</gmd:otherConstraints>
    </gmd:MD_LegalConstraints></gmd:resourceConstraints>"""

HEAD = """<gmd:language><gmd:LanguageCode codeList="x" codeListValue="eng"/></gmd:language>
  <gmd:hierarchyLevel><gmd:MD_ScopeCode codeList="x" codeListValue="{level}"/></gmd:hierarchyLevel>
  <gmd:dateStamp><gco:Date>2024-05-01</gco:Date></gmd:dateStamp>"""

DATASET = f"""<?xml version="1.0" encoding="UTF-8"?>
<gmd:MD_Metadata {NS}>
  <gmd:fileIdentifier>{cs("rec-0002")}</gmd:fileIdentifier>
  {HEAD.format(level="dataset")}
  <gmd:identificationInfo><gmd:MD_DataIdentification>
    <gmd:citation><gmd:CI_Citation><gmd:title>{cs("Coastal erosion")}</gmd:title>
    </gmd:CI_Citation></gmd:citation>
    <gmd:abstract>{cs("Erosion rates along the coast.")}</gmd:abstract>
    {keywords(["Coastal  erosion", "Sea defences"], "Shoreline Survey Keywords", "2019-04-02")}
    {keywords(["Addresses"], "external.theme.inspire-theme")}
    {keywords([anchor("https://vocab.example.org/coast", "Coast"), "beach"])}
    {ACCESS}
  </gmd:MD_DataIdentification></gmd:identificationInfo>
  <gmd:distributionInfo><gmd:MD_Distribution>
    <gmd:distributor><gmd:MD_Distributor><gmd:distributorTransferOptions>
      {options(online("https://shore.example.org/"))}
    </gmd:distributorTransferOptions></gmd:MD_Distributor></gmd:distributor>
    <gmd:transferOptions>{
    options(
        online("https://shore.example.org/erosion.zip", "download", name="Rates (ZIP)"),
        online("https://maps.shore.example.org/wms?request=GetCapabilities"),
        online("https://shore.example.org/points.csv"),
        online("https://shore.example.org/catalogue/main.home?uuid=rec-0002"),
    )
}</gmd:transferOptions>
  </gmd:MD_Distribution></gmd:distributionInfo>
</gmd:MD_Metadata>
"""

SERVICE = f"""<?xml version="1.0" encoding="UTF-8"?>
<gmd:MD_Metadata {NS}>
  <gmd:fileIdentifier>{cs("svc-0002")}</gmd:fileIdentifier>
  {HEAD.format(level="service")}
  <gmd:identificationInfo><srv:SV_ServiceIdentification>
    <gmd:citation><gmd:CI_Citation><gmd:title>{cs("Coastal erosion map")}</gmd:title>
    </gmd:CI_Citation></gmd:citation>
    <gmd:abstract>{cs("A view service of the erosion rates.")}</gmd:abstract>
    {keywords(["infoMapAccessService"], "ISO 19119:2005")}
    {ACCESS}
    <srv:serviceType><gco:LocalName>view</gco:LocalName></srv:serviceType>
    <srv:operatesOn uuidref="rec-0002"/>
  </srv:SV_ServiceIdentification></gmd:identificationInfo>
  <gmd:distributionInfo><gmd:MD_Distribution><gmd:transferOptions>{
    options(
        online(
            "https://maps.shore.example.org/capabilities.xml",
            protocol="OGC:WMS-1.3.0-http-get-capabilities",
        ),
        online("https://maps.shore.example.org/wms?", protocol="OGC:WMS-1.3.0-http-get-map"),
    )
}</gmd:transferOptions></gmd:MD_Distribution></gmd:distributionInfo>
</gmd:MD_Metadata>
"""


@pytest.fixture(scope="module")
def mapper() -> IsoMapper:
    return IsoMapper()


def _map(mapper: IsoMapper, xml: str) -> MappedDataset:
    [mapped] = mapper.map(
        RawRecord("geo", "local", "iso19139", xml.encode(), "application/xml"), CTX
    )
    return mapped


def _graph(mapped: MappedDataset) -> rdflib.Graph:
    return rdflib.Graph().parse(data=mapped.ntriples.decode(), format="nt")


@pytest.fixture(scope="module")
def g(mapper: IsoMapper) -> rdflib.Graph:
    return _graph(_map(mapper, DATASET))


@pytest.fixture(scope="module")
def svc(mapper: IsoMapper) -> rdflib.Graph:
    return _graph(_map(mapper, SERVICE))


# -- themes -----------------------------------------------------------------------------------


def test_keywords_of_a_thesaurus_without_iri_are_minted_concepts_of_its_cited_scheme(
    g: rdflib.Graph, mapper: IsoMapper
) -> None:
    erosion = URIRef(mint_iri(CTX, "concept", "shoreline survey keywords\ncoastal erosion"))
    defences = URIRef(mint_iri(CTX, "concept", "shoreline survey keywords\nsea defences"))
    assert {erosion, defences} <= set(g.objects(DS, DCAT.theme))
    # the scheme is the record's citation of the thesaurus, a blank node with its title and
    # date (as GeoDCAT-AP and the SEMIC transformation write it), one for the group
    scheme = g.value(erosion, SKOS.inScheme)
    assert isinstance(scheme, rdflib.BNode)
    assert set(g.predicate_objects(erosion)) == {
        (RDF.type, SKOS.Concept),
        (SKOS.prefLabel, Literal("Coastal  erosion", lang="en")),
        (SKOS.inScheme, scheme),
    }
    assert set(g.objects(defences, SKOS.inScheme)) == {scheme}
    assert set(g.predicate_objects(scheme)) == {
        (RDF.type, SKOS.ConceptScheme),
        (DCTERMS.title, Literal("Shoreline Survey Keywords", lang="en")),
        (DCTERMS.modified, Literal("2019-04-02", datatype=XSD.date)),
    }
    # no scheme IRI is minted under the source's base any more
    assert not [s for s in g.subjects() if "concept-scheme" in str(s)]
    # still keywords too, and no finding: each keyword named a concept
    assert (DS, DCAT.keyword, Literal("Sea defences", lang="en")) in g
    mapped = _map(mapper, DATASET)
    assert not [f for f in mapped.findings if f.rule == "iso-keyword-not-a-concept"]
    # stable: the same thesaurus and keyword in another record of the source, any case or
    # spacing, is the same concept
    other = DATASET.replace("Coastal  erosion", "coastal erosion").replace("rec-0002", "rec-9")
    assert (None, SKOS.prefLabel, Literal("coastal erosion", lang="en")) in _graph(
        _map(mapper, other)
    )
    assert (erosion, RDF.type, SKOS.Concept) in _graph(_map(mapper, other))


def test_geonetwork_inspire_theme_key_and_anchored_free_keywords_are_themes(
    g: rdflib.Graph,
) -> None:
    ad = URIRef("http://inspire.ec.europa.eu/theme/ad")
    assert (DS, DCAT.theme, ad) in g
    assert (ad, SKOS.prefLabel, Literal("Addresses", lang="en")) in g
    coast = URIRef("https://vocab.example.org/coast")
    assert (DS, DCAT.theme, coast) in g
    assert set(g.predicate_objects(coast)) == {
        (RDF.type, SKOS.Concept),
        (SKOS.prefLabel, Literal("Coast", lang="en")),
    }
    # a free keyword without a link stays a keyword only
    assert (DS, DCAT.keyword, Literal("beach", lang="en")) in g
    assert not list(g.subjects(SKOS.prefLabel, Literal("beach", lang="en")))


def test_service_category_is_also_a_theme(svc: rdflib.Graph) -> None:
    category = URIRef(CATEGORY + "infoMapAccessService")
    assert (SVC, GEODCAT.serviceCategory, category) in svc
    assert (SVC, DCAT.theme, category) in svc
    assert (category, SKOS.prefLabel, Literal("infoMapAccessService", lang="en")) in svc


# -- access rights -----------------------------------------------------------------------------


def test_access_rights_prefer_the_linked_value_and_go_on_each_distribution(
    g: rdflib.Graph, svc: rdflib.Graph
) -> None:
    for graph, subject in ((g, DS), (svc, SVC)):
        assert set(graph.objects(subject, DCTERMS.accessRights)) == {NO_LIMITATIONS}
        # the text is kept in the rights statement
        rights = set(graph.objects(subject, DCTERMS.rights)) or {
            r
            for d in graph.objects(subject, DCAT.distribution)
            for r in graph.objects(d, DCTERMS.rights)
        }
        [statement] = rights
        text = Literal(OPEN, lang="en")
        assert (statement, DCTERMS.description, text) in graph
    distributions = list(g.objects(DS, DCAT.distribution))
    assert len(distributions) == 3
    for dist in distributions:
        assert set(g.objects(dist, DCTERMS.accessRights)) == {NO_LIMITATIONS}


# -- links ----------------------------------------------------------------------------------


def test_links_without_function_or_protocol_are_landing_pages(g: rdflib.Graph) -> None:
    # a distributor's transfer option is read too; nothing says it is the data
    page = URIRef("https://shore.example.org/")
    assert (DS, DCAT.landingPage, page) in g and (page, RDF.type, FOAF.Document) in g
    access_urls = {
        u for d in g.objects(DS, DCAT.distribution) for u in g.objects(d, DCAT.accessURL)
    }
    assert page not in access_urls
    assert URIRef("https://shore.example.org/erosion.zip") in access_urls
    # a file of a known format is the data, function code or not; any other page is a page
    assert URIRef("https://shore.example.org/points.csv") in access_urls
    home = URIRef("https://shore.example.org/catalogue/main.home?uuid=rec-0002")
    assert (DS, DCAT.landingPage, home) in g


def test_getcapabilities_without_service_parameter_is_an_access_service(g: rdflib.Graph) -> None:
    caps = URIRef("https://maps.shore.example.org/wms?request=GetCapabilities")
    [dist] = g.subjects(DCAT.accessURL, caps)
    assert (
        dist,
        DCTERMS.format,
        URIRef("http://publications.europa.eu/resource/authority/file-type/WMS_SRVC"),
    ) in g
    [service] = g.objects(dist, DCAT.accessService)
    assert set(g.objects(service, DCAT.endpointDescription)) == {caps}
    assert set(g.objects(service, DCAT.endpointURL)) == {
        URIRef("https://maps.shore.example.org/wms")
    }


def test_a_capabilities_document_is_the_endpoint_description(svc: rdflib.Graph) -> None:
    caps = URIRef("https://maps.shore.example.org/capabilities.xml")
    assert set(svc.objects(SVC, DCAT.endpointDescription)) == {caps}
    # the GetMap endpoint without its empty query
    assert URIRef("https://maps.shore.example.org/wms") in set(svc.objects(SVC, DCAT.endpointURL))


@pytest.mark.parametrize("xml", [DATASET, SERVICE], ids=["dataset", "service"])
def test_these_records_conform_to_the_official_shapes(mapper: IsoMapper, xml: str) -> None:
    require_shapes()
    mapped = _map(mapper, xml)
    assert official_violations(mapped.ntriples + mapped.catalog_ntriples) == []
