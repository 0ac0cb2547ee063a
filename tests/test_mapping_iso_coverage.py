"""The iso19139 rules added to match the SEMIC GeoDCAT-AP XSLT (docs/mappings/iso19139.md,
"Coverage against the SEMIC GeoDCAT-AP XSLT"): their edge cases, on small records; the
golden records (tests/test_mapping_iso19139.py) cover the ordinary cases."""

from __future__ import annotations

import pytest

from aggregator.core.models import MappedDataset, RawRecord
from aggregator.mapping.base import MappingContext
from aggregator.mapping.iso19139 import IsoMapper
from aggregator.mapping.ranges import complete_ranges
from aggregator.validate.shacl import ShaclValidator

CTX = MappingContext(base_iri="https://aggregator.example.org/", source="gemini")
DS = "https://aggregator.example.org/dataset/gemini/"
NS = (
    'xmlns:gmd="http://www.isotc211.org/2005/gmd" xmlns:gco="http://www.isotc211.org/2005/gco"'
    ' xmlns:gmx="http://www.isotc211.org/2005/gmx" xmlns:srv="http://www.isotc211.org/2005/srv"'
    ' xmlns:xlink="http://www.w3.org/1999/xlink"'
)
HVD = "http://data.europa.eu/r5r/hvdCategory"
LEGISLATION = "http://data.europa.eu/r5r/applicableLegislation"
BYTES = "http://www.w3.org/ns/dcat#byteSize"


@pytest.fixture(scope="module")
def mapper() -> IsoMapper:
    return IsoMapper()


def record(ident: str, distribution: str = "", level: str = "dataset") -> bytes:
    kind = "srv:SV_ServiceIdentification" if level == "service" else "gmd:MD_DataIdentification"
    return f"""<gmd:MD_Metadata {NS}>
  <gmd:fileIdentifier><gco:CharacterString>rec-1</gco:CharacterString></gmd:fileIdentifier>
  <gmd:language><gmd:LanguageCode codeList="x" codeListValue="eng"/></gmd:language>
  <gmd:hierarchyLevel><gmd:MD_ScopeCode codeList="x" codeListValue="{level}"/></gmd:hierarchyLevel>
  <gmd:dateStamp><gco:Date>2024-05-06</gco:Date></gmd:dateStamp>
  <gmd:identificationInfo><{kind}>
    <gmd:citation><gmd:CI_Citation>
      <gmd:title><gco:CharacterString>A title</gco:CharacterString></gmd:title>
    </gmd:CI_Citation></gmd:citation>
    <gmd:abstract><gco:CharacterString>An abstract</gco:CharacterString></gmd:abstract>
    {ident}
  </{kind}></gmd:identificationInfo>
  <gmd:distributionInfo><gmd:MD_Distribution>{distribution}</gmd:MD_Distribution>
  </gmd:distributionInfo>
</gmd:MD_Metadata>""".encode()


def run(mapper: IsoMapper, payload: bytes) -> tuple[MappedDataset, str]:
    [mapped] = mapper.map(RawRecord("gemini", "rec", "iso19139", payload, "application/xml"), CTX)
    report = ShaclValidator().validate_graph(complete_ranges(mapped))
    assert report.conforms, report
    return mapped, mapped.ntriples.decode()


def keywords(thesaurus: str, *keywords: str) -> str:
    words = "".join(f"<gmd:keyword>{k}</gmd:keyword>" for k in keywords)
    return (
        f"<gmd:descriptiveKeywords><gmd:MD_Keywords>{words}<gmd:thesaurusName><gmd:CI_Citation>"
        f"<gmd:title>{thesaurus}</gmd:title></gmd:CI_Citation></gmd:thesaurusName>"
        "</gmd:MD_Keywords></gmd:descriptiveKeywords>"
    )


def online(url: str, protocol: str = "") -> str:
    proto = f"<gmd:protocol><gco:CharacterString>{protocol}</gco:CharacterString></gmd:protocol>"
    return (
        "<gmd:onLine><gmd:CI_OnlineResource>"
        f"<gmd:linkage><gmd:URL>{url}</gmd:URL></gmd:linkage>{proto if protocol else ''}"
        "</gmd:CI_OnlineResource></gmd:onLine>"
    )


def test_hvd_categories_need_the_category_iri(mapper: IsoMapper) -> None:
    title = '<gmx:Anchor xlink:href="http://data.europa.eu/bna/asd487ae75">HVD</gmx:Anchor>'
    by_label = keywords(title, "<gco:CharacterString>Meteorological</gco:CharacterString>")
    _, text = run(mapper, record(by_label))
    assert HVD not in text and LEGISLATION not in text  # no IRI: only the keyword literal
    assert '"Meteorological"@en' in text
    linked = keywords(
        "<gco:CharacterString>High-value dataset categories</gco:CharacterString>",
        '<gmx:Anchor xlink:href="http://data.europa.eu/bna/c_164e0bf5">Meteorological</gmx:Anchor>',
        '<gmx:Anchor xlink:href="http://data.europa.eu/bna/c_dd313021">Earth obs.</gmx:Anchor>',
    )
    _, text = run(mapper, record(linked))
    assert f"<{HVD}> <http://data.europa.eu/bna/c_164e0bf5>" in text
    assert f"<{HVD}> <http://data.europa.eu/bna/c_dd313021>" in text
    assert text.count(LEGISLATION) == 1  # one regulation, however many categories
    other = keywords(
        "<gco:CharacterString>GEMET - Concepts</gco:CharacterString>",
        '<gmx:Anchor xlink:href="http://www.eionet.europa.eu/gemet/concept/3650">flood</gmx:Anchor>',
    )
    _, text = run(mapper, record(other))
    assert LEGISLATION not in text and HVD not in text


def test_transfer_size_only_on_files_and_unreadable_is_a_finding(mapper: IsoMapper) -> None:
    options = (
        "<gmd:transferOptions><gmd:MD_DigitalTransferOptions>"
        "<gmd:transferSize><gco:Real>{size}</gco:Real></gmd:transferSize>"
        + online("https://files.example.org/a.zip")
        + online("https://maps.example.org/wms", "OGC:WMS-1.3.0-http-get-map")
        + "</gmd:MD_DigitalTransferOptions></gmd:transferOptions>"
    )
    mapped, text = run(mapper, record("", options.format(size="0.5")))
    assert text.count(BYTES) == 1  # the file, not the service endpoint
    assert '"500000"^^<http://www.w3.org/2001/XMLSchema#nonNegativeInteger>' in text
    assert not mapped.findings
    mapped, text = run(mapper, record("", options.format(size="-3")))
    assert BYTES not in text
    assert [f.rule for f in mapped.findings] == ["iso-size-unreadable"]


def test_getcapabilities_links_become_access_services(mapper: IsoMapper) -> None:
    links = (
        "<gmd:transferOptions><gmd:MD_DigitalTransferOptions>"
        + online("https://maps.example.org/ows?SERVICE=WFS&amp;REQUEST=GetCapabilities")
        + online("https://maps.example.org/x?service=NOPE&amp;request=GetCapabilities")
        + "</gmd:MD_DigitalTransferOptions></gmd:transferOptions>"
    )
    _, text = run(mapper, record("", links))
    assert text.count("<http://www.w3.org/ns/dcat#accessService>") == 1  # WFS only
    assert "<http://www.w3.org/ns/dcat#endpointURL> <https://maps.example.org/ows>" in text
    assert (
        "<http://data.europa.eu/930/serviceProtocol> <http://www.opengeospatial.org/standards/wfs>"
        in text
    )
    assert "file-type/WFS_SRVC" in text


def test_coupled_resource_by_uriref(mapper: IsoMapper) -> None:
    service = (
        "<srv:serviceType><gco:LocalName>view</gco:LocalName></srv:serviceType>"
        '<srv:operatesOn uriref="https://data.example.org/id/dataset/roads"/>'
        '<srv:operatesOn uuidref="ds-7" uriref="https://data.example.org/id/dataset/rivers"/>'
        "<srv:containsOperations><srv:SV_OperationMetadata><srv:connectPoint>"
        "<gmd:CI_OnlineResource><gmd:linkage><gmd:URL>https://maps.example.org/wms</gmd:URL>"
        "</gmd:linkage></gmd:CI_OnlineResource></srv:connectPoint></srv:SV_OperationMetadata>"
        "</srv:containsOperations>"
    )
    _, text = run(mapper, record(service, level="service"))
    served = "<http://www.w3.org/ns/dcat#servesDataset>"
    assert f"{served} <https://data.example.org/id/dataset/roads>" in text
    assert f"{served} <{DS}ds-7>" in text  # a record of the same source wins over its IRI
    assert "rivers" not in text


def test_agents_named_by_iri_with_phone_and_web_page(mapper: IsoMapper) -> None:
    party = """<gmd:pointOfContact><gmd:CI_ResponsibleParty>
      <gmd:individualName>
        <gmx:Anchor xlink:href="https://orcid.org/0000-0002-1825-0097">Ada Byron</gmx:Anchor>
      </gmd:individualName>
      <gmd:contactInfo><gmd:CI_Contact>
        <gmd:phone><gmd:CI_Telephone><gmd:voice>
          <gco:CharacterString>+44 (0)20 7946 0000</gco:CharacterString>
        </gmd:voice></gmd:CI_Telephone></gmd:phone>
        <gmd:onlineResource><gmd:CI_OnlineResource><gmd:linkage>
          <gmd:URL>https://lab.example.org/</gmd:URL>
        </gmd:linkage></gmd:CI_OnlineResource></gmd:onlineResource>
      </gmd:CI_Contact></gmd:contactInfo>
      <gmd:role><gmd:CI_RoleCode codeList="x" codeListValue="author"/></gmd:role>
    </gmd:CI_ResponsibleParty></gmd:pointOfContact>"""
    _, text = run(mapper, record(party))
    ada = "<https://orcid.org/0000-0002-1825-0097>"
    assert f"<{DS}rec-1> <http://purl.org/dc/terms/creator> {ada}" in text
    assert (
        f"{ada} <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <http://xmlns.com/foaf/0.1/Person>"
        in text
    )
    # the trunk prefix "(0)" beside the country code is not dialled from abroad
    assert f"{ada} <http://xmlns.com/foaf/0.1/phone> <tel:+442079460000>" in text
    assert f"{ada} <http://xmlns.com/foaf/0.1/workplaceHomepage> <https://lab.example.org/>" in text


def test_feet_unit_iris_http_place_codes_and_more_format_names(mapper: IsoMapper) -> None:
    uom = "http://standards.iso.org/iso/19139/resources/uom/ML_gmxUom.xml#m"
    ident = f"""
    <gmd:spatialResolution><gmd:MD_Resolution><gmd:distance>
      <gco:Distance uom="urn:ogc:def:uom:EPSG::9002">10</gco:Distance>
    </gmd:distance></gmd:MD_Resolution></gmd:spatialResolution>
    <gmd:spatialResolution><gmd:MD_Resolution><gmd:distance>
      <gco:Distance uom="{uom}">25</gco:Distance>
    </gmd:distance></gmd:MD_Resolution></gmd:spatialResolution>
    <gmd:extent><gmd:EX_Extent><gmd:geographicElement><gmd:EX_GeographicDescription>
      <gmd:geographicIdentifier><gmd:MD_Identifier><gmd:code>
        <gco:CharacterString>http://publications.europa.eu/resource/authority/country/IRL</gco:CharacterString>
      </gmd:code></gmd:MD_Identifier></gmd:geographicIdentifier>
    </gmd:EX_GeographicDescription></gmd:geographicElement></gmd:EX_Extent></gmd:extent>"""
    fmt = (
        "<gmd:distributionFormat><gmd:MD_Format><gmd:name><gco:CharacterString>JSON-LD"
        "</gco:CharacterString></gmd:name></gmd:MD_Format></gmd:distributionFormat>"
        "<gmd:transferOptions><gmd:MD_DigitalTransferOptions>"
        + online("https://files.example.org/a.jsonld")
        + "</gmd:MD_DigitalTransferOptions></gmd:transferOptions>"
    )
    _, text = run(mapper, record(ident, fmt))
    metres = "<http://www.w3.org/ns/dcat#spatialResolutionInMeters>"
    assert f'{metres} "3.048"^^<http://www.w3.org/2001/XMLSchema#decimal>' in text
    assert f'{metres} "25.0"^^<http://www.w3.org/2001/XMLSchema#decimal>' in text
    ireland = "<http://publications.europa.eu/resource/authority/country/IRL>"
    assert f"<http://purl.org/dc/terms/spatial> {ireland}" in text
    assert "authority/file-type/JSON_LD>" in text
