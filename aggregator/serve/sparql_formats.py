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


def _ranges(accept: str) -> list[tuple[str, float, int]]:
    """Parse an Accept header into (range, q, position); malformed parts are skipped."""
    out = []
    for pos, part in enumerate(accept.split(",")):
        fields = part.split(";")
        media = fields[0].strip().lower()
        if "/" not in media:
            continue
        q = 1.0
        for param in fields[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
        out.append((media, min(max(q, 0.0), 1.0), pos))
    return out


def negotiate(accept: str | None, aliases: Mapping[str, str]) -> str | None:
    """The canonical media type to answer with, or None when nothing acceptable is offered.

    Each offered name gets the quality of the most specific matching range (exact, then
    ``type/*``, then ``*/*``); the highest quality wins, then the range listed first, then our
    preference. A missing or empty header means ``*/*``.
    """
    ranges = _ranges(accept or "") or [("*/*", 1.0, 0)]
    best: tuple[float, int, int] | None = None
    chosen: str | None = None
    for pref, (name, canonical) in enumerate(aliases.items()):
        major = name.split("/", 1)[0] + "/*"
        match: tuple[int, float, int] | None = None  # (specificity, q, position)
        for media, q, pos in ranges:
            specificity = (
                3 if media == name else 2 if media == major else 1 if media == "*/*" else 0
            )
            if specificity and (match is None or specificity > match[0]):
                match = (specificity, q, pos)
        if match is None or match[1] <= 0:
            continue
        key = (match[1], -match[2], -pref)
        if best is None or key > best:
            best, chosen = key, canonical
    return chosen
