"""The harvest dashboard of ``aggregator serve`` (docs/serve/dashboard.md): server-rendered
pages for operators and readers. Overview and sources (:mod:`.status`), jobs and their errors
(:mod:`.job_errors`), quality (:mod:`.quality_view`), dataset search (:mod:`.search`) and
pages (:mod:`.dataset_view`), the SPARQL page (:mod:`.sparql_page`), admin actions
(:mod:`.admin`, :mod:`.auth`). Templates in ``templates/``, styles, scripts and the vendored
Leaflet in ``static/``."""

from __future__ import annotations

from pyoxigraph import Triple
from starlette.requests import Request
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from aggregator.serve.context import ServeContext
from aggregator.serve.dashboard import admin, views
from aggregator.serve.dashboard.dataset_view import build
from aggregator.serve.dashboard.sparql_page import page_handler, wants_html
from aggregator.serve.dashboard.web import STATIC, Dashboard
from aggregator.serve.pages import Links
from aggregator.serve.sparql import SparqlEndpoint
from aggregator.store.state import RecordRow

__all__ = ["Dashboard", "DashboardApp", "wants_html"]

#: vendored by tools/vendor_world.py (make): without it the map has its grid only
WORLD_OUTLINE = STATIC / "vendor" / "world" / "world-110m.geojson"


class DashboardApp:
    def __init__(self, ctx: ServeContext, endpoint: SparqlEndpoint) -> None:
        self.dash = Dashboard.create(ctx)
        self.sparql_page = page_handler(self.dash, endpoint)

    def routes(self) -> list[BaseRoute]:
        return [
            *views.routes(self.dash),
            *admin.routes(self.dash),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]

    def dataset_html(
        self,
        request: Request,
        iri: str,
        row: RecordRow,
        ntriples: bytes,
        triples: list[Triple],
        links: Links,
    ) -> str:
        view = build(iri, row, ntriples, triples, links.local, links.payload)
        serve = self.dash.ctx.settings.serve
        return self.dash.render_string(
            request,
            "dataset.html",
            d=view,
            world_outline=WORLD_OUTLINE.is_file(),
            map_tiles=serve.map_tiles,
            map_attribution=serve.map_attribution,
        )
