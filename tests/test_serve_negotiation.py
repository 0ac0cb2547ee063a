"""One reading of the Accept header for every route (aggregator/serve/negotiation.py), and the two
negotiations built on it: SPARQL result/graph types, and the RDF forms of the other routes."""

from __future__ import annotations

import pytest

from aggregator.serve.negotiation import best_offer, media_ranges
from aggregator.serve.rdf_formats import HTML, JSONLD, RDF_FORMATS, RDFXML, TURTLE
from aggregator.serve.rdf_formats import negotiate as negotiate_route
from aggregator.serve.sparql_formats import GRAPH_ALIASES, RESULT_ALIASES
from aggregator.serve.sparql_formats import negotiate as negotiate_sparql

OFFERS = [("json", ["application/json"]), ("xml", ["application/xml", "text/xml"])]


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        (None, "json"),  # no header: */*, so the server's first preference
        ("", "json"),
        ("text/xml", "xml"),
        ("application/*", "json"),  # both match at the same place: our preference
        ("application/xml, application/json", "xml"),  # equal q: the one listed first
        ("application/json;q=0.5, application/xml", "xml"),
        ("application/*;q=0.9, application/json;q=0", "xml"),  # most specific range rules
        ("*/*;q=0.1, text/*;q=0", "json"),
        ("application/json;q=0.2, application/json;q=0.8, text/xml;q=0.5", "json"),
        ("image/png", None),
        ("application/json;q=0, application/xml;q=0", None),
        ("application/json;q=bogus", None),  # a q that is not a number counts as 0
        ("nonsense, ;q=1, /, text/", "json"),  # nothing valid: as if absent
        ("nonsense, application/xml", "xml"),  # malformed ranges are skipped
        ("APPLICATION/XML;Q=1", "xml"),  # case does not matter
        ("application/json;q=7, application/xml", "json"),  # q is clamped to 1
    ],
)
def test_best_offer(accept: str | None, chosen: str | None) -> None:
    assert best_offer(accept, OFFERS) == chosen


def test_media_ranges_keep_positions() -> None:
    ranges = media_ranges("text/turtle;q=0.5, junk, */*")
    assert [(r.media, r.q, r.position) for r in ranges] == [
        ("text/turtle", 0.5, 0),
        ("*/*", 1.0, 2),
    ]


def test_sparql_negotiation() -> None:
    assert negotiate_sparql(None, RESULT_ALIASES) == "application/sparql-results+json"
    assert negotiate_sparql("application/json", RESULT_ALIASES) == (
        "application/sparql-results+json"
    )
    assert negotiate_sparql("text/xml", RESULT_ALIASES) == "application/sparql-results+xml"
    assert negotiate_sparql("application/rdf+xml, text/turtle", GRAPH_ALIASES) == (
        "application/rdf+xml"
    )
    assert negotiate_sparql("text/turtle, application/rdf+xml", GRAPH_ALIASES) == "text/turtle"
    assert negotiate_sparql("text/html", RESULT_ALIASES) is None
    assert negotiate_sparql("garbage", GRAPH_ALIASES) == "text/turtle"


def test_route_negotiation_prefers_the_client_then_the_default() -> None:
    offered = (*RDF_FORMATS, HTML)
    assert negotiate_route("application/rdf+xml, text/turtle", offered, TURTLE) is RDFXML
    assert negotiate_route("*/*", offered, JSONLD) is JSONLD
    assert negotiate_route("application/*", offered, TURTLE) is JSONLD  # first application/*
    assert negotiate_route("garbage", offered, TURTLE) is TURTLE
