"""GeoDCAT-AP completeness of the iso19139 mapper, third round (issue 30): the formats of a
record that names several (one distribution per format when they have one link to the data,
a distributor's formats with its own links), the cited title and date of a specification
named by an IRI, and a thesaurus without IRI as the record's citation of it. Records of our
own making, exact triples, and the official DCAT-AP 3.0.1 shapes (read from
``../shared/reference/`` where present)."""

from __future__ import annotations

import pytest
import rdflib
from official_shapes import official_violations
from rdflib import Literal, URIRef
from rdflib.namespace import DCAT, DCTERMS, RDF, RDFS, SKOS, XSD

from aggregator.core.models import MappedDataset, RawRecord
from aggregator.mapping.base import MappingContext
from aggregator.mapping.iso19139 import IsoMapper

CTX = MappingContext(base_iri="https://agg.example.org/", source="geo")
DS = URIRef("https://agg.example.org/dataset/geo/rec-0003")
FILE_TYPE = "http://publications.europa.eu/resource/authority/file-type/"
VCARD = rdflib.Namespace("http://www.w3.org/2006/vcard/ns#")
GML, KML, SHP = (URIRef(FILE_TYPE + t) for t in ("GML", "KML", "SHP"))
ORDER = URIRef("https://orders.example.org/portal?item=coast")
NS = (
    'xmlns:gmd="http://www.isotc211.org/2005/gmd" xmlns:gco="http://www.isotc211.org/2005/gco" '
    'xmlns:gmx="http://www.isotc211.org/2005/gmx" xmlns:xlink="http://www.w3.org/1999/xlink"'
)


def cs(text: str) -> str:
    return f"<gco:CharacterString>{text}</gco:CharacterString>"


def fmt(name: str, tag: str = "distributionFormat") -> str:
    return (
        f"<gmd:{tag}><gmd:MD_Format><gmd:name>{cs(name)}</gmd:name>"
        f"<gmd:version>{cs('1')}</gmd:version></gmd:MD_Format></gmd:{tag}>"
    )


def link(url: str, function: str = "", name: str = "") -> str:
    parts = f"<gmd:linkage><gmd:URL>{url}</gmd:URL></gmd:linkage>"
    if name:
        parts += f"<gmd:name>{cs(name)}</gmd:name>"
    if function:
        parts += (
            '<gmd:function><gmd:CI_OnLineFunctionCode codeList="x" '
            f'codeListValue="{function}"/></gmd:function>'
        )
    return (
        "<gmd:MD_DigitalTransferOptions><gmd:onLine><gmd:CI_OnlineResource>"
        f"{parts}</gmd:CI_OnlineResource></gmd:onLine></gmd:MD_DigitalTransferOptions>"
    )


def record(distribution: str, quality: str = "") -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<gmd:MD_Metadata {NS}>
  <gmd:fileIdentifier>{cs("rec-0003")}</gmd:fileIdentifier>
  <gmd:language><gmd:LanguageCode codeList="x" codeListValue="eng"/></gmd:language>
  <gmd:hierarchyLevel><gmd:MD_ScopeCode codeList="x" codeListValue="dataset"/></gmd:hierarchyLevel>
  <gmd:dateStamp><gco:Date>2024-05-01</gco:Date></gmd:dateStamp>
  <gmd:identificationInfo><gmd:MD_DataIdentification>
    <gmd:citation><gmd:CI_Citation><gmd:title>{cs("Coastal habitats")}</gmd:title>
    </gmd:CI_Citation></gmd:citation>
    <gmd:abstract>{cs("Habitat polygons along the coast.")}</gmd:abstract>
  </gmd:MD_DataIdentification></gmd:identificationInfo>
  <gmd:distributionInfo><gmd:MD_Distribution>{distribution}</gmd:MD_Distribution>
  </gmd:distributionInfo>{quality}
</gmd:MD_Metadata>
"""


THREE_FORMATS = fmt("ESRI Shapefile") + fmt("KML") + fmt("GML")
# one order portal for three formats (as the SNH records of the development set publish it)
ONE_LINK = record(
    THREE_FORMATS
    + f"<gmd:transferOptions>{link(str(ORDER), 'order', 'Order form')}</gmd:transferOptions>"
)


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


def _formats(g: rdflib.Graph) -> dict[str, set[object]]:
    """Each distribution's access URL -> the formats of the distributions with that URL."""
    out: dict[str, set[object]] = {}
    for dist in g.objects(DS, DCAT.distribution):
        formats = out.setdefault(str(g.value(dist, DCAT.accessURL)), set())
        formats.update(g.objects(dist, DCTERMS.format))
    return out


def test_one_link_with_several_formats_is_one_distribution_per_format(mapper: IsoMapper) -> None:
    mapped = _map(mapper, ONE_LINK)
    g = _graph(mapped)
    dists = list(g.objects(DS, DCAT.distribution))
    assert len(dists) == 3
    assert sorted(str(g.value(d, DCTERMS.format)) for d in dists) == sorted(
        str(t) for t in (SHP, KML, GML)
    )
    for dist in dists:  # each the same link, in one format (DCAT-AP 3.0.1: dct:format 0..1)
        assert set(g.predicate_objects(dist)) == {
            (RDF.type, DCAT.Distribution),
            (DCAT.accessURL, ORDER),
            (DCTERMS.title, Literal("Order form", lang="en")),
            (DCTERMS.format, g.value(dist, DCTERMS.format)),
        }
    assert official_violations(mapped.ntriples + mapped.catalog_ntriples) == []


def test_a_distributors_formats_go_with_its_own_links(mapper: IsoMapper) -> None:
    distributor = (
        "<gmd:distributor><gmd:MD_Distributor>"
        + fmt("SDE Feature Class", "distributorFormat")
        + "<gmd:distributorTransferOptions>"
        + link("https://gis.example.org/orders", "order")
        + "</gmd:distributorTransferOptions></gmd:MD_Distributor></gmd:distributor>"
    )
    g = _graph(
        _map(
            mapper,
            record(
                fmt("GML")
                + distributor
                + f"<gmd:transferOptions>{link(str(ORDER), 'download')}</gmd:transferOptions>"
            ),
        )
    )
    formats = _formats(g)
    assert formats[str(ORDER)] == {GML}
    [sde] = formats["https://gis.example.org/orders"]
    assert (sde, RDFS.label, Literal("SDE Feature Class")) in g
    assert (sde, RDF.type, DCTERMS.MediaTypeOrExtent) in g


@pytest.mark.parametrize(
    "links",
    [
        # two links, two formats: which link gives which is not said
        link("https://data.example.org/habitats.gml", "download")
        + link("https://data.example.org/habitats.kml", "download"),
        # one link naming one file: a file is in one format, not in each of the record's
        link("https://data.example.org/habitats.zip", "download"),
    ],
    ids=["two-links", "a-named-file"],
)
def test_no_format_is_guessed_when_the_link_of_each_is_not_said(
    mapper: IsoMapper, links: str
) -> None:
    g = _graph(
        _map(
            mapper,
            record(fmt("GML") + fmt("KML") + f"<gmd:transferOptions>{links}</gmd:transferOptions>"),
        )
    )
    dists = list(g.objects(DS, DCAT.distribution))
    assert dists
    assert all(not set(g.objects(d, DCTERMS.format)) for d in dists)
    assert not set(g.subjects(RDF.type, DCTERMS.MediaTypeOrExtent))  # nothing left dangling


def test_several_names_of_one_format_are_one_format(mapper: IsoMapper) -> None:
    g = _graph(
        _map(
            mapper,
            record(
                fmt("GML")
                + fmt("gml", "distributionFormat")
                + f"<gmd:transferOptions>{link(str(ORDER), 'order')}</gmd:transferOptions>"
            ),
        )
    )
    assert _formats(g) == {str(ORDER): {GML}}


REGULATION = (
    "Commission Regulation (EU) No 1089/2010 of 23 November 2010 implementing Directive "
    "2007/2/EC of the European Parliament and of the Council as regards interoperability of "
    "spatial data sets and services"
)


def conformance(title: str, when: str) -> str:
    return f"""<gmd:dataQualityInfo><gmd:DQ_DataQuality><gmd:report><gmd:DQ_DomainConsistency>
  <gmd:result><gmd:DQ_ConformanceResult><gmd:specification><gmd:CI_Citation>
    <gmd:title>{title}</gmd:title>
    <gmd:date><gmd:CI_Date><gmd:date><gco:Date>{when}</gco:Date></gmd:date>
      <gmd:dateType><gmd:CI_DateTypeCode codeList="x" codeListValue="publication"/></gmd:dateType>
    </gmd:CI_Date></gmd:date></gmd:CI_Citation></gmd:specification>
    <gmd:explanation>{cs("See the regulation")}</gmd:explanation>
    <gmd:pass><gco:Boolean>true</gco:Boolean></gmd:pass>
  </gmd:DQ_ConformanceResult></gmd:result>
</gmd:DQ_DomainConsistency></gmd:report></gmd:DQ_DataQuality></gmd:dataQualityInfo>"""


@pytest.mark.parametrize(
    ("title", "spec"),
    [
        (cs(REGULATION), URIRef("http://data.europa.eu/eli/reg/2010/1089")),  # the table's ELI
        (
            f'<gmx:Anchor xlink:href="https://specs.example.org/coast/2">{REGULATION}</gmx:Anchor>',
            URIRef("https://specs.example.org/coast/2"),
        ),
    ],
    ids=["known-regulation", "anchor"],
)
def test_a_specification_named_by_an_iri_keeps_its_cited_title_and_date(
    mapper: IsoMapper, title: str, spec: URIRef
) -> None:
    mapped = _map(mapper, record("", conformance(title, "2010-12-08")))
    g = _graph(mapped)
    assert (DS, DCTERMS.conformsTo, spec) in g
    assert set(g.predicate_objects(spec)) == {
        (RDF.type, DCTERMS.Standard),
        (DCTERMS.title, Literal(REGULATION, lang="en")),
        (DCTERMS.issued, Literal("2010-12-08", datatype=XSD.date)),
    }
    assert official_violations(mapped.ntriples + mapped.catalog_ntriples) == []


def test_two_records_citing_one_thesaurus_keep_each_citation_whole(mapper: IsoMapper) -> None:
    """The scheme of a thesaurus without IRI is each record's citation of it (a blank node),
    so two records citing two versions do not merge their dates on one minted IRI."""

    def with_thesaurus(revised: str) -> str:
        group = (
            f"<gmd:MD_Keywords><gmd:keyword>{cs('Saltmarsh')}</gmd:keyword><gmd:thesaurusName>"
            f"<gmd:CI_Citation><gmd:title>{cs('Coastal Habitat Terms')}</gmd:title><gmd:date>"
            f"<gmd:CI_Date><gmd:date><gco:Date>{revised}</gco:Date></gmd:date><gmd:dateType>"
            '<gmd:CI_DateTypeCode codeList="x" codeListValue="revision"/></gmd:dateType>'
            "</gmd:CI_Date></gmd:date></gmd:CI_Citation></gmd:thesaurusName></gmd:MD_Keywords>"
        )
        return ONE_LINK.replace(
            "</gmd:abstract>",
            f"</gmd:abstract><gmd:descriptiveKeywords>{group}</gmd:descriptiveKeywords>",
        )

    union = rdflib.Graph()
    for revised in ("2015-01-01", "2021-06-30"):
        mapped = _map(mapper, with_thesaurus(revised))
        assert official_violations(mapped.ntriples + mapped.catalog_ntriples) == []
        union.parse(data=mapped.ntriples.decode(), format="nt")
    [concept] = set(union.objects(DS, DCAT.theme)) - {
        t for t in union.objects(DS, DCAT.theme) if "data-theme" in str(t)
    }
    schemes = set(union.objects(concept, SKOS.inScheme))
    assert len(schemes) == 2
    assert {str(union.value(s, DCTERMS.modified)) for s in schemes} == {
        "2015-01-01",
        "2021-06-30",
    }
    assert all(len(set(union.objects(s, DCTERMS.modified))) == 1 for s in schemes)


def test_a_telephone_extension_is_an_rfc_3966_extension_not_more_digits(
    mapper: IsoMapper,
) -> None:
    """ "+44 115 936 3100 Ex:3499" (as the BGS records write it) is the number with extension
    3499, ``tel:+441159363100;ext=3499``; its digits run together are another number."""
    contact = f"""<gmd:pointOfContact><gmd:CI_ResponsibleParty>
      <gmd:organisationName>{cs("Coastal Survey")}</gmd:organisationName>
      <gmd:contactInfo><gmd:CI_Contact><gmd:phone><gmd:CI_Telephone>
        <gmd:voice>{cs("+44 115 936 3100 Ex:3499")}</gmd:voice>
      </gmd:CI_Telephone></gmd:phone></gmd:CI_Contact></gmd:contactInfo>
      <gmd:role><gmd:CI_RoleCode codeList="x" codeListValue="pointOfContact"/></gmd:role>
    </gmd:CI_ResponsibleParty></gmd:pointOfContact>"""
    mapped = _map(mapper, ONE_LINK.replace("</gmd:abstract>", "</gmd:abstract>" + contact))
    g = _graph(mapped)
    card = g.value(DS, DCAT.contactPoint)
    assert set(g.objects(card, VCARD.hasTelephone)) == {URIRef("tel:+441159363100;ext=3499")}
    assert official_violations(mapped.ntriples + mapped.catalog_ntriples) == []
