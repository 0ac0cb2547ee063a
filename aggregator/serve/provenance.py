"""Dereference the provenance IRIs that catalogue records link to.

- ``{base}source/{name}``: the harvest source, as a ``dcat:Catalog`` (its URL, protocol,
  publisher and record counts; never its secrets);
- ``{base}job/{id}``: a harvest job, as a ``prov:Activity`` (times, status, counters).

RDF by content negotiation (Turtle, JSON-LD, RDF/XML, N-Triples); browsers are redirected
(303) to the dashboard's source and job pages.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from pyoxigraph import Triple
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from aggregator.core.vocab import AGG, DCAT, DCT, FOAF, PROV, RDF_TYPE, XSD
from aggregator.serve.context import ServeContext
from aggregator.serve.rdf_formats import (
    HTML,
    JSONLD,
    NTRIPLES,
    RDFXML,
    TURTLE,
    BadRequestError,
    NotAcceptableError,
    iri,
    literal,
    select,
    serialize_graph,
)

FORMATS = (TURTLE, JSONLD, RDFXML, NTRIPLES, HTML)


def _respond(request: Request, triples: list[Triple], page: str) -> Response:
    """RDF by content negotiation; a browser is sent on to the dashboard's page (``page``, a
    path under the public base URL), which says the same in words."""
    try:
        choice = select(request, None, FORMATS)
    except (BadRequestError, NotAcceptableError) as err:
        vary = {"Vary": "Accept"} if isinstance(err, NotAcceptableError) else {}
        return PlainTextResponse(err.message, status_code=err.http_status, headers=vary)
    headers = {"Vary": "Accept"} if choice.negotiated else {}
    if choice.fmt is HTML:
        return RedirectResponse(page, 303, headers=headers)
    return Response(
        serialize_graph(triples, choice.fmt), media_type=choice.fmt.content_type, headers=headers
    )


def routes(ctx: ServeContext) -> list[BaseRoute]:
    store = ctx.store

    def source(request: Request) -> Response:
        name = request.path_params["name"]
        cfg = ctx.settings.sources.get(name)
        counts = dict(
            ctx.read_db().execute(
                "SELECT status, count(*) FROM records WHERE source = ? GROUP BY status", (name,)
            )
        )
        if cfg is None and not counts:
            return PlainTextResponse("no such source", status_code=404)
        s = iri(store.source_iri(name))
        triples = [
            Triple(s, iri(RDF_TYPE), iri(DCAT + "Catalog")),
            Triple(s, iri(DCT + "title"), literal(name)),
        ]
        if cfg is not None:
            triples += [
                Triple(s, iri(FOAF + "homepage"), iri(cfg.url)),
                Triple(s, iri(AGG + "harvestProtocol"), literal(cfg.type)),
                Triple(s, iri(AGG + "sourceFormat"), literal(cfg.format)),
            ]
            if cfg.publisher:
                triples.append(Triple(s, iri(DCT + "publisher"), literal(cfg.publisher)))
        for status, n in sorted(counts.items()):
            triples.append(
                Triple(s, iri(f"{AGG}{status}Records"), literal(str(n), XSD + "integer"))
            )
        return _respond(request, triples, f"{ctx.base_url}sources/{quote(name, safe='')}")

    def job(request: Request) -> Response:
        try:
            job_id = int(request.path_params["job_id"])
        except ValueError:
            return PlainTextResponse("no such job", status_code=404)
        row = (
            ctx.read_db()
            .execute(
                "SELECT source, started, ended, status, counters FROM jobs WHERE id = ?", (job_id,)
            )
            .fetchone()
        )
        if row is None:
            return PlainTextResponse("no such job", status_code=404)
        source_name, started, ended, status, counters = row
        j = iri(store.job_iri(job_id))
        triples = [
            Triple(j, iri(RDF_TYPE), iri(PROV + "Activity")),
            Triple(j, iri(PROV + "used"), iri(store.source_iri(source_name))),
            Triple(j, iri(PROV + "startedAtTime"), literal(started, XSD + "dateTime")),
            Triple(j, iri(AGG + "jobStatus"), literal(status)),
        ]
        if ended:
            triples.append(Triple(j, iri(PROV + "endedAtTime"), literal(ended, XSD + "dateTime")))
        for key, n in sorted(json.loads(counters).items()):
            triples.append(Triple(j, iri(f"{AGG}{key}"), literal(str(n), XSD + "integer")))
        return _respond(request, triples, f"{ctx.base_url}jobs/{job_id}")

    return [Route("/source/{name}", source), Route("/job/{job_id}", job)]
