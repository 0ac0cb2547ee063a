"""``/sparql`` for people: a browser (``Accept`` preferring HTML) gets a query form with
example queries and the results as a table; protocol clients keep the endpoint's own
formats (its service description by default). Both answers carry ``Vary: Accept``.

The query runs through the endpoint itself (:meth:`SparqlEndpoint.run_for_page`: the same
read-only guard, deadline, row limit and snapshot), asked for SPARQL JSON results or
N-Triples and laid out here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pyoxigraph import RdfFormat, parse
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from aggregator.serve.dashboard.attempts import TooManyAttemptsError
from aggregator.serve.dashboard.web import Dashboard
from aggregator.serve.negotiation import media_ranges
from aggregator.serve.sparql import SparqlEndpoint

_HTML = ("text/html", "application/xhtml+xml")

# The default graph is a set (the records' graphs and the shared graph, docs/serve/sparql.md):
# counts need no DISTINCT; GRAPH ?g says which record states what.
EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "Datasets with their titles",
        "PREFIX dcat: <http://www.w3.org/ns/dcat#>\nPREFIX dct: <http://purl.org/dc/terms/>\n"
        "SELECT ?dataset ?title WHERE {\n  ?dataset a dcat:Dataset ; dct:title ?title\n}\nLIMIT 20",
    ),
    (
        "Datasets per theme",
        "PREFIX dcat: <http://www.w3.org/ns/dcat#>\n"
        "PREFIX skos: <http://www.w3.org/2004/02/skos/core#>\n"
        "SELECT ?theme ?label (COUNT(?dataset) AS ?datasets) WHERE {\n"
        "  ?dataset a dcat:Dataset ; dcat:theme ?theme .\n"
        '  OPTIONAL { ?theme skos:prefLabel ?label FILTER(langMatches(lang(?label), "en")) }\n}\n'
        "GROUP BY ?theme ?label ORDER BY DESC(?datasets)",
    ),
    (
        "Distributions by format",
        "PREFIX dcat: <http://www.w3.org/ns/dcat#>\nPREFIX dct: <http://purl.org/dc/terms/>\n"
        "SELECT ?format (COUNT(*) AS ?distributions) WHERE {\n"
        "  ?d a dcat:Distribution ; dct:format ?format\n}\n"
        "GROUP BY ?format ORDER BY DESC(?distributions)",
    ),
    (
        "Datasets changed most recently, with the record that states them",
        "PREFIX dcat: <http://www.w3.org/ns/dcat#>\nPREFIX dct: <http://purl.org/dc/terms/>\n"
        "SELECT ?dataset ?modified ?record WHERE {\n"
        "  GRAPH ?record { ?record a dcat:CatalogRecord ; dct:modified ?modified ;\n"
        "    <http://xmlns.com/foaf/0.1/primaryTopic> ?dataset }\n}\n"
        "ORDER BY DESC(?modified) LIMIT 20",
    ),
    (
        "The description of one dataset (CONSTRUCT)",
        "PREFIX dcat: <http://www.w3.org/ns/dcat#>\n"
        "# its record's graph, and the shared statements about what it points to\n"
        "CONSTRUCT { ?s ?p ?o } WHERE {\n  { SELECT ?g WHERE { GRAPH ?g { ?d a dcat:Dataset } }"
        " LIMIT 1 }\n  { GRAPH ?g { ?s ?p ?o } }\n"
        "  UNION { GRAPH ?g { ?x ?y ?s } GRAPH <shared> { ?s ?p ?o } }\n}",
    ),
)


def wants_html(accept: str | None) -> bool:
    """True when the client prefers HTML to every other type it names (browsers do)."""
    html_q, other_q = 0.0, 0.0
    for r in media_ranges(accept):
        if r.media in _HTML:
            html_q = max(html_q, r.q)
        elif "*" not in r.media:
            other_q = max(other_q, r.q)
    return html_q > 0 and html_q >= other_q


@dataclass
class Results:
    columns: list[str] = field(default_factory=list)
    rows: list[list[dict[str, str]]] = field(default_factory=list)
    boolean: bool | None = None
    triples: list[tuple[str, str, str]] = field(default_factory=list)
    error: str | None = None
    status: int = 200


def _cells(data: bytes) -> Results:
    doc = json.loads(data)
    if "boolean" in doc:
        return Results(boolean=bool(doc["boolean"]))
    columns = list(doc.get("head", {}).get("vars", []))
    rows = []
    for binding in doc.get("results", {}).get("bindings", []):
        row = []
        for col in columns:
            term = binding.get(col)
            if term is None:
                row.append({"text": "", "kind": "unbound"})
            else:
                lang = term.get("xml:lang")
                row.append(
                    {
                        "text": str(term.get("value", "")),
                        "kind": term.get("type", ""),
                        "lang": lang or "",
                    }
                )
        rows.append(row)
    return Results(columns, rows)


def _triples(data: bytes) -> Results:
    out = []
    for q in parse(data, format=RdfFormat.N_TRIPLES):
        out.append((str(q.subject), q.predicate.value, str(q.object)))
    return Results(triples=out)


def page_handler(dash: Dashboard, endpoint: SparqlEndpoint):  # type: ignore[no-untyped-def]
    async def page(request: Request) -> Response:
        try:
            allowed = await dash.may_read(request)
        except TooManyAttemptsError as err:
            return await run_in_threadpool(dash.refused, request, err)
        if not allowed:
            return dash.redirect("login?next=/sparql")
        query = request.query_params.get("query", "")
        results = None
        if query.strip():
            client = request.client
            status, body, ctype = await endpoint.run_for_page(
                query, (client.host, client.port) if client else None
            )
            if status != 200:
                results = Results(error=body.decode("utf-8", "replace").strip(), status=status)
            elif ctype.startswith("application/sparql-results+json"):
                results = _cells(body)
            else:
                results = _triples(body)
        response = await run_in_threadpool(
            dash.render,
            request,
            "sparql.html",
            results.status if results else 200,
            query=query or EXAMPLES[0][1],
            examples=EXAMPLES,
            results=results,
            endpoint=dash.ctx.base_url + "sparql",
        )
        response.headers["Vary"] = "Accept"
        return response

    return page
