"""The dashboard's read-only pages: overview, sources, jobs (errors, CSV, rejected records),
quality, dataset search and the SPARQL page. Admin actions are in :mod:`.admin`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from aggregator.core.errors import AggregatorError
from aggregator.schedule.liveness import scheduler_holder
from aggregator.serve.dashboard import job_errors, rejections_view, status
from aggregator.serve.dashboard.attempts import TooManyAttemptsError
from aggregator.serve.dashboard.quality_view import QualityCache
from aggregator.serve.dashboard.schedule_view import schedules
from aggregator.serve.dashboard.search import FACETS, PENDING_CAP, SearchIndex, snippet_parts
from aggregator.serve.dashboard.sources_state import configured_sources, current_settings
from aggregator.serve.dashboard.web import SECURITY_HEADERS, Dashboard

PAGE_SIZE = 20
MAX_PAGE = 500  # deep pages of a search: refine the query instead


def _int(value: str | None, default: int, low: int = 0, high: int = 10**12) -> int:
    try:
        return max(low, min(high, int(value))) if value else default
    except ValueError:
        return default


def guard(
    dash: Dashboard, handler: Callable[[Request], Response]
) -> Callable[[Request], Awaitable[Response]]:
    """Readers only when the pages are public (or the reader is logged in or holds the token,
    checked off the event loop); the page in a worker thread; errors as pages."""

    async def run(request: Request) -> Response:
        try:
            allowed = await dash.may_read(request)
        except TooManyAttemptsError as err:
            return await run_in_threadpool(dash.refused, request, err)
        if not allowed:
            return dash.redirect(f"login?next={quote(request.url.path)}")
        return await run_in_threadpool(_page, request)

    def _page(request: Request) -> Response:
        try:
            return handler(request)
        except AggregatorError as err:
            return dash.error(request, err.http_status, err.message)

    return run


def routes(dash: Dashboard) -> list[BaseRoute]:
    ctx = dash.ctx
    index = SearchIndex(ctx.store.path, ctx.store.path / "state.sqlite3")
    quality = QualityCache()

    def overview(request: Request) -> Response:
        db = ctx.read_db()
        sources = status.source_statuses(db, configured_sources(ctx.settings))
        failing = [s for s in sources if s.health in ("failing", "partial")]
        return dash.render(
            request,
            "overview.html",
            sources=sources,
            failing=failing,
            totals=status.totals(db),
            jobs=status.recent_jobs(db, limit=10),
            schedule=schedules(current_settings(ctx.settings)),
        )

    def sources_page(request: Request) -> Response:
        db = ctx.read_db()
        sources = status.source_statuses(db, configured_sources(ctx.settings), jobs_each=1)
        return dash.render(request, "sources.html", sources=sources)

    def source_page(request: Request) -> Response:
        name = request.path_params["name"]
        db = ctx.read_db()
        configured = configured_sources(ctx.settings)
        found = [s for s in status.source_statuses(db, configured) if s.name == name]
        if not found:
            return dash.error(request, 404, f"no source named {name!r}")
        jobs = status.recent_jobs(db, source=name, limit=50)
        settings = current_settings(ctx.settings)
        return dash.render(
            request,
            "source.html",
            s=found[0],
            jobs=jobs,
            schedule=schedules(settings).get(name),
            scheduler=scheduler_holder(settings.store_path),
            config_path=settings.config_path,
        )

    def jobs_page(request: Request) -> Response:
        db = ctx.read_db()
        source = request.query_params.get("source", "")
        state = request.query_params.get("status", "")
        jobs = status.recent_jobs(db, source=source or None, status=state or None, limit=100)
        names = sorted(configured_sources(ctx.settings))
        return dash.render(request, "jobs.html", jobs=jobs, names=names, source=source, state=state)

    def _filter(request: Request) -> job_errors.ErrorFilter:
        p = request.query_params
        return job_errors.ErrorFilter(
            p.get("stage", ""), p.get("rule", ""), p.get("severity", ""), p.get("q", "").strip()
        )

    def job_page(request: Request) -> Response:
        job_id = _int(request.path_params["id"], -1)
        db = ctx.read_db()
        job = status.job(db, job_id)
        if job is None:
            return dash.error(request, 404, f"no job {job_id}")
        flt = _filter(request)
        everything = job_errors.ErrorFilter()
        return dash.render(
            request,
            "job.html",
            job=job,
            flt=flt,
            groups=job_errors.groups(db, job_id, flt),
            all_groups=job_errors.groups(db, job_id, everything),
            rows=job_errors.rows(db, job_id, flt),
            shown_max=job_errors.PAGE,
            matching=job_errors.count(db, job_id, flt),
            rejections=job_errors.job_rejections(db, job_id),
        )

    def job_csv(request: Request) -> Response:
        job_id = _int(request.path_params["id"], -1)
        db = ctx.read_db()
        if status.job(db, job_id) is None:
            return dash.error(request, 404, f"no job {job_id}")
        flt = _filter(request)
        return StreamingResponse(
            job_errors.csv_stream(ctx.store.path / "state.sqlite3", job_id, flt),
            media_type="text/csv; charset=utf-8",
            headers={
                **SECURITY_HEADERS,
                "Content-Disposition": f'attachment; filename="job-{job_id}-errors.csv"',
            },
        )

    def rejection_page(request: Request) -> Response:
        rid = _int(request.path_params["id"], -1)
        found = job_errors.rejection(ctx.read_db(), rid)
        if found is None:
            return dash.error(request, 404, f"no rejected record {rid}")
        return dash.render(request, "rejection.html", r=found)

    def rejections_page(request: Request) -> Response:
        p = request.query_params
        db = ctx.read_db()
        before = _int(p.get("before"), 0, 1) or None
        source, stage = p.get("source", ""), p.get("stage", "")
        found = rejections_view.open_rejections(db, source=source, stage=stage, before=before)
        sources, stages = rejections_view.open_facets(db)
        return dash.render(
            request,
            "rejections.html",
            page=found,
            source=source,
            stage=stage,
            before=before,
            sources=sources,
            stages=stages,
        )

    def quality_page(request: Request) -> Response:
        db = ctx.read_db()
        report = quality.report(db)
        return dash.render(
            request, "quality.html", report=report, changed=quality.changed_since(db)
        )

    def datasets_page(request: Request) -> Response:
        p = request.query_params
        text = p.get("q", "").strip()[:500]
        selected = {k: p.getlist(k) for k in FACETS if p.getlist(k)}
        page = _int(p.get("page"), 1, 1, MAX_PAGE)
        results = index.search(
            ctx.read_db(), text, selected, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE
        )
        return dash.render(
            request,
            "datasets.html",
            q=text,
            selected=selected,
            qparams={"q": text, **selected},
            results=results,
            pending_cap=PENDING_CAP,
            page=page,
            pages=min(MAX_PAGE, max(1, -(-results.total // PAGE_SIZE))),
            facet_names={
                "source": "Source",
                "theme": "Theme",
                "format": "Format",
                "licence": "Licence",
                "conformance": "Conformance",
            },
            snippet_parts=snippet_parts,
            dataset_url=_dataset_url,
        )

    def _dataset_url(iri: str) -> str:
        from urllib.parse import urlencode

        base = ctx.store.base_iri
        if iri.startswith(f"{base}dataset/"):
            return ctx.base_url + iri[len(base) :]
        return f"{ctx.base_url}dataset?{urlencode({'iri': iri})}"

    def g(handler: Callable[[Request], Response]) -> Callable[[Request], Awaitable[Response]]:
        return guard(dash, handler)

    return [
        Route("/", g(overview), methods=["GET"]),
        Route("/sources", g(sources_page), methods=["GET"]),
        Route("/sources/{name}", g(source_page), methods=["GET"]),
        Route("/jobs", g(jobs_page), methods=["GET"]),
        Route("/jobs/{id}", g(job_page), methods=["GET"]),
        Route("/jobs/{id}/errors.csv", g(job_csv), methods=["GET"]),
        Route("/rejections", g(rejections_page), methods=["GET"]),
        Route("/rejections/{id}", g(rejection_page), methods=["GET"]),
        Route("/quality", g(quality_page), methods=["GET"]),
        Route("/datasets", g(datasets_page), methods=["GET"]),
    ]
