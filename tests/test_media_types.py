"""Media types across formats: a literal ``dct:format`` that is itself a media type keeps it as
``dcat:mediaType`` with its IANA IRI beside the EU file type (DCAT and CKAN, which share the
rule table), and every format writes IANA media types as ``https://www.iana.org/...`` IRIs, so
that one media type is one IRI whatever the source's format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lxml import etree
from official_shapes import official_violations
from pyoxigraph import NamedNode, RdfFormat, Triple, parse

from aggregator.core.models import MappedDataset, RawRecord
from aggregator.demo.peers.ckan_data import generate_package, load_bundled_packages
from aggregator.demo.peers.gemini_samples import bundled_gemini_records
from aggregator.demo.peers.mdr_messages import page_element
from aggregator.demo.peers.mdr_pages import load_sample_pages
from aggregator.demo.peers.metashare import SAMPLES, sample_xml
from aggregator.demo.peers.ogc_records_data import load_bundled_records
from aggregator.mapping.base import MappingContext
from aggregator.plugin import mappers

CTX = MappingContext("http://agg.example/", "src")
PEERS = Path(__file__).resolve().parents[1] / "aggregator" / "demo" / "peers" / "data"
DCAT = "http://www.w3.org/ns/dcat#"
DCT = "http://purl.org/dc/terms/"
A = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
CSV = NamedNode("http://publications.europa.eu/resource/authority/file-type/CSV")
IANA_CSV = NamedNode("https://www.iana.org/assignments/media-types/text/csv")


def mapped(fmt: str, payload: bytes, media_type: str, local_id: str = "r") -> list[MappedDataset]:
    raw = RawRecord("src", local_id, fmt, payload, media_type, url="https://x.example/r")
    return mappers.get(fmt)().map(raw, CTX)


def triples(ds: MappedDataset) -> list[Triple]:
    return [q.triple for q in parse(ds.ntriples, RdfFormat.N_TRIPLES)]


DCAT_CSV = b"""
@prefix dcat: <http://www.w3.org/ns/dcat#> .
@prefix dct: <http://purl.org/dc/terms/> .
<https://data.example.org/d/stops> a dcat:Dataset ;
  dct:title "Bus stops"@en ; dct:description "The bus stops of the city."@en ;
  dcat:distribution <https://data.example.org/d/stops/csv> .
<https://data.example.org/d/stops/csv> a dcat:Distribution ;
  dcat:accessURL <https://data.example.org/files/stops.csv> ;
  dct:format "text/csv; charset=utf-8" .
"""


def test_a_media_type_literal_format_keeps_the_media_type_dcat() -> None:
    [ds] = mapped("dcat", DCAT_CSV, "text/turtle")
    dist = NamedNode("https://data.example.org/d/stops/csv")
    ts = triples(ds)
    about = {(t.predicate.value, t.object) for t in ts if t.subject == dist}
    assert (DCT + "format", CSV) in about
    assert (DCAT + "mediaType", IANA_CSV) in about
    assert [t for t in ts if t.subject == dist and t.predicate.value == DCAT + "mediaType"] == [
        Triple(dist, NamedNode(DCAT + "mediaType"), IANA_CSV)
    ]
    assert Triple(CSV, A, NamedNode(DCT + "MediaTypeOrExtent")) in ts
    assert Triple(IANA_CSV, A, NamedNode(DCT + "MediaType")) in ts
    assert official_violations(ds.ntriples) == []


def test_a_format_name_gives_the_file_type_only() -> None:
    [ds] = mapped("dcat", DCAT_CSV.replace(b'"text/csv; charset=utf-8"', b'"CSV"'), "text/turtle")
    ts = triples(ds)
    assert any(t.predicate.value == DCT + "format" and t.object == CSV for t in ts)
    assert not [t for t in ts if t.predicate.value == DCAT + "mediaType"]


def test_a_ckan_resource_format_that_is_a_media_type_keeps_it() -> None:
    package = generate_package(0)
    package["resources"] = [
        {
            "id": "r1",
            "url": "https://data.example.org/files/stops.csv",
            "name": "Bus stops (CSV)",
            "format": "text/csv",
        }
    ]
    [ds] = mapped("ckan", json.dumps(package).encode(), "application/json", package["id"])
    ts = triples(ds)
    [dist] = [t.object for t in ts if t.predicate.value == DCAT + "distribution"]
    about = {(t.predicate.value, t.object) for t in ts if t.subject == dist}
    assert {(DCT + "format", CSV), (DCAT + "mediaType", IANA_CSV)} <= about


def every_format() -> list[tuple[str, bytes, str]]:
    samples: list[tuple[str, bytes, str]] = []
    samples += [("dcat", (PEERS / "dump" / "catalog.ttl").read_bytes(), "text/turtle")]
    samples += [("dcat", p.read_bytes(), "application/rdf+xml") for p in (PEERS / "oai").iterdir()]
    samples += [("iso19139", doc, "application/xml") for _, doc in bundled_gemini_records()]
    samples += [("iso19139", p.read_bytes(), "application/xml") for p in (PEERS / "iso").iterdir()]
    flood = (PEERS / "iso" / "gemini-dataset-flood-risk.xml").read_bytes()
    named = b"<gco:CharacterString>application/gml+xml</gco:CharacterString>"
    gml = flood.replace(b"<gco:CharacterString>GML</gco:CharacterString>", named, 1)
    samples += [("iso19139", gml, "application/xml")]  # a format named by its media type
    samples += [("meta-share", sample_xml(name), "application/xml") for name in SAMPLES]
    samples += [
        ("ckan", json.dumps(p).encode(), "application/json") for p in load_bundled_packages()
    ]
    samples += [
        ("ogc-records", json.dumps(r).encode(), "application/json") for r in load_bundled_records()
    ]
    samples += [
        ("mdr", etree.tostring(page_element(page)), "application/xml")
        for page in load_sample_pages()
    ]
    return samples


@pytest.mark.parametrize("fmt", ["dcat", "iso19139", "meta-share", "ckan", "ogc-records", "mdr"])
def test_every_format_writes_https_iana_media_types(fmt: str) -> None:
    media: set[str] = set()
    for sample_fmt, payload, media_type in every_format():
        if sample_fmt != fmt:
            continue
        mapper = mappers.get(fmt)()
        raw = RawRecord(
            "src", "r", fmt, payload, media_type, url="https://x.example/r",
            is_collection=mapper.reads_collections,
        )  # fmt: skip
        for ds in mapper.map(raw, CTX):
            assert b"http://www.iana.org/" not in ds.ntriples
            media |= {
                t.object.value
                for t in triples(ds)
                if t.predicate.value == DCAT + "mediaType" and isinstance(t.object, NamedNode)
            }  # (a media type no table knows is a blank node labelled with it)
    assert media, f"no {fmt} sample names a media type"
    assert all(m.startswith("https://www.iana.org/assignments/media-types/") for m in media), media
