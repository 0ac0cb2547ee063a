"""The ``jsonl-dataset`` mapper: one JSON object -> one dcat:Dataset."""

from __future__ import annotations

from typing import ClassVar

from pyoxigraph import Literal, NamedNode, Triple

from aggregator.plugin import (
    DCAT,
    DCT,
    RDF_TYPE,
    MappedDataset,
    Mapper,
    MappingContext,
    MappingError,
    ParsedPayload,
    canonical_ntriples,
    content_hash,
    mint_iri,
)


class JsonLinesMapper(Mapper):
    name: ClassVar[str] = "jsonl-dataset"

    def map_payload(self, payload: ParsedPayload, ctx: MappingContext) -> list[MappedDataset]:
        item = payload.json()  # parsed once, within the configured input limits
        if not isinstance(item, dict):
            raise MappingError("expected a JSON object")
        title = item.get("title")
        if not isinstance(title, str) or not title.strip():
            raise MappingError("the record has no title")
        language = item.get("language") if isinstance(item.get("language"), str) else None
        local_id = payload.raw.local_id
        dataset = NamedNode(mint_iri(ctx, "dataset", local_id))
        triples = [
            Triple(dataset, NamedNode(RDF_TYPE), NamedNode(DCAT + "Dataset")),
            Triple(dataset, NamedNode(DCT + "identifier"), Literal(local_id)),
            Triple(dataset, NamedNode(DCT + "title"), Literal(title, language=language)),
        ]
        description = item.get("description")
        if isinstance(description, str) and description:
            text = Literal(description, language=language)
            triples.append(Triple(dataset, NamedNode(DCT + "description"), text))
        for keyword in item.get("keywords") or ():
            if isinstance(keyword, str) and keyword:
                triples.append(Triple(dataset, NamedNode(DCAT + "keyword"), Literal(keyword)))
        ntriples = canonical_ntriples(triples)
        return [
            MappedDataset(
                local_id=local_id,
                dataset_iri=dataset.value,
                ntriples=ntriples,
                content_hash=content_hash(ntriples),
                datestamp=payload.raw.datestamp,
            )
        ]
