"""Plugins used only by the tests: an in-memory harvester, an N-Triples mapper and a mapper of
a small XML record format (``urn:test:record``, see tests/data/chains/record.xsd).

They are real plugins (registered in the registries like any third-party one, and importing
only the public API, ``aggregator.plugin``), not mocks of a protocol: the protocol harvesters
have their own tests against local servers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from pyoxigraph import Literal, NamedNode, RdfFormat, Triple, parse

from aggregator.plugin import (
    Harvester,
    HarvestRequest,
    Listing,
    MappedDataset,
    Mapper,
    MappingContext,
    MappingError,
    ParsedPayload,
    ParseError,
    RawRecord,
    canonical_ntriples,
    content_hash,
    harvesters,
    mappers,
    mint_iri,
)

DCAT_DATASET = NamedNode("http://www.w3.org/ns/dcat#Dataset")
RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")

# source name -> (records, complete?)
FEEDS: dict[str, tuple[list[RawRecord], bool]] = {}


class MemoryHarvester(Harvester):
    name: ClassVar[str] = "memory"

    def list_records(self, request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        records, complete = FEEDS[self.source.name]
        for r in records:
            listing.seen += 1
            yield r
        listing.pages = 1
        if complete:
            listing.mark_complete()
        else:
            listing.mark_truncated("test feed marked incomplete")


class NTriplesMapper(Mapper):
    """One dataset per N-Triples record; with ``fix_typos`` it also reads ``dcat:Datset``
    (a stand-in for a mapping rule added after records were rejected)."""

    name: ClassVar[str] = "test-nt"
    fix_typos: ClassVar[bool] = False

    def map(self, raw: RawRecord, ctx: MappingContext) -> list[MappedDataset]:
        payload = raw.payload
        if self.fix_typos:
            payload = payload.replace(b"dcat#Datset>", b"dcat#Dataset>")
        try:
            triples = list(parse(payload, format=RdfFormat.N_TRIPLES))
        except SyntaxError as err:
            raise ParseError(str(err)) from err
        subjects = [
            t.subject for t in triples if t.predicate == RDF_TYPE and t.object == DCAT_DATASET
        ]
        if not subjects:
            raise MappingError("no dcat:Dataset in the record")
        nt = canonical_ntriples(triples)
        return [
            MappedDataset(
                local_id=raw.local_id,
                dataset_iri=str(subjects[0].value) if subjects else "urn:none",
                ntriples=nt,
                content_hash=content_hash(nt),
                datestamp=raw.datestamp,
            )
        ]


REC = "{urn:test:record}"
DCT = "http://purl.org/dc/terms/"
DCAT = "http://www.w3.org/ns/dcat#"


class RecordXmlMapper(Mapper):
    """``<record xmlns="urn:test:record">`` (id, title, description, keywords) -> a dataset.

    It reads the parsed tree the payload validators share (``payload.xml()``): the XSD and
    Schematron steps and this mapper parse each record once between them."""

    name: ClassVar[str] = "test-record"

    def map_payload(self, payload: ParsedPayload, ctx: MappingContext) -> list[MappedDataset]:
        root = payload.xml()
        if root.tag != REC + "record":
            raise MappingError(f"not a test record: {root.tag}")
        local = root.findtext(REC + "id") or payload.raw.local_id
        ds = NamedNode(mint_iri(ctx, "dataset", local))
        triples = [
            Triple(ds, RDF_TYPE, DCAT_DATASET),
            Triple(ds, NamedNode(DCT + "identifier"), Literal(local)),
        ]
        for tag, prop in (("title", DCT + "title"), ("description", DCT + "description")):
            text = root.findtext(REC + tag)
            if text:
                triples.append(Triple(ds, NamedNode(prop), Literal(text, language="en")))
        for kw in root.iterfind(REC + "keyword"):
            triples.append(Triple(ds, NamedNode(DCAT + "keyword"), Literal(kw.text or "")))
        nt = canonical_ntriples(triples)
        return [
            MappedDataset(
                local_id=payload.raw.local_id,
                dataset_iri=ds.value,
                ntriples=nt,
                content_hash=content_hash(nt),
                datestamp=payload.raw.datestamp,
            )
        ]


def register() -> None:
    harvesters.register("memory", MemoryHarvester)
    mappers.register("test-nt", NTriplesMapper)
    mappers.register("test-record", RecordXmlMapper)
