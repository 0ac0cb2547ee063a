"""Media types the SPARQL endpoint produces, and content negotiation over them.

Two tables: query results (SELECT, ASK) and RDF graphs (CONSTRUCT, DESCRIBE, the service
description). Each maps the media types we accept in ``Accept`` (aliases included) to the
canonical type we answer with. The worker process and the web layer share these tables; they
exchange only the canonical media type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyoxigraph import QueryResultsFormat, RdfFormat

from aggregator.serve.negotiation import best_offer


@dataclass(frozen=True, slots=True)
class Offer:
    media_type: str  # the canonical type we answer with
    content_type: str  # the Content-Type header value
    w3c_format: str  # the http://www.w3.org/ns/formats/ IRI (service description)


# Canonical media type -> pyoxigraph format
RESULT_FORMATS: Mapping[str, QueryResultsFormat] = {
    "application/sparql-results+json": QueryResultsFormat.JSON,
    "application/sparql-results+xml": QueryResultsFormat.XML,
    "text/csv": QueryResultsFormat.CSV,
    "text/tab-separated-values": QueryResultsFormat.TSV,
}
GRAPH_FORMATS: Mapping[str, RdfFormat] = {
    "text/turtle": RdfFormat.TURTLE,
    "application/n-triples": RdfFormat.N_TRIPLES,
    "application/rdf+xml": RdfFormat.RDF_XML,
    "application/ld+json": RdfFormat.JSON_LD,
}

_NS = "http://www.w3.org/ns/formats/"
RESULT_OFFERS: Mapping[str, Offer] = {
    "application/sparql-results+json": Offer(
        "application/sparql-results+json",
        "application/sparql-results+json",
        _NS + "SPARQL_Results_JSON",
    ),
    "application/sparql-results+xml": Offer(
        "application/sparql-results+xml",
        "application/sparql-results+xml; charset=utf-8",
        _NS + "SPARQL_Results_XML",
    ),
    "text/csv": Offer("text/csv", "text/csv; charset=utf-8", _NS + "SPARQL_Results_CSV"),
    "text/tab-separated-values": Offer(
        "text/tab-separated-values",
        "text/tab-separated-values; charset=utf-8",
        _NS + "SPARQL_Results_TSV",
    ),
}
GRAPH_OFFERS: Mapping[str, Offer] = {
    "text/turtle": Offer("text/turtle", "text/turtle; charset=utf-8", _NS + "Turtle"),
    "application/n-triples": Offer(
        "application/n-triples", "application/n-triples; charset=utf-8", _NS + "N-Triples"
    ),
    "application/rdf+xml": Offer(
        "application/rdf+xml", "application/rdf+xml; charset=utf-8", _NS + "RDF_XML"
    ),
    "application/ld+json": Offer("application/ld+json", "application/ld+json", _NS + "JSON-LD"),
}

# Accepted names (lower case) -> canonical media type, in our order of preference.
RESULT_ALIASES: Mapping[str, str] = {
    "application/sparql-results+json": "application/sparql-results+json",
    "application/json": "application/sparql-results+json",
    "application/sparql-results+xml": "application/sparql-results+xml",
    "application/xml": "application/sparql-results+xml",
    "text/xml": "application/sparql-results+xml",
    "text/csv": "text/csv",
    "text/tab-separated-values": "text/tab-separated-values",
}
GRAPH_ALIASES: Mapping[str, str] = {
    "text/turtle": "text/turtle",
    "application/turtle": "text/turtle",
    "application/x-turtle": "text/turtle",
    "application/n-triples": "application/n-triples",
    "application/rdf+xml": "application/rdf+xml",
    "application/xml": "application/rdf+xml",
    "text/xml": "application/rdf+xml",
    "application/ld+json": "application/ld+json",
    "application/json": "application/ld+json",
}


def _grouped(aliases: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    """Canonical type -> its accepted names, in the order of ``aliases``."""
    groups: dict[str, list[str]] = {}
    for name, canonical in aliases.items():
        groups.setdefault(canonical, []).append(name)
    return list(groups.items())


def negotiate(accept: str | None, aliases: Mapping[str, str]) -> str | None:
    """The canonical media type to answer with, or None when nothing acceptable is offered
    (:mod:`aggregator.serve.negotiation`: highest q, then the range listed first, then the order of
    ``aliases``). A missing or empty header means ``*/*``."""
    return best_offer(accept, _grouped(aliases))
