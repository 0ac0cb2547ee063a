"""Admin actions: log in and out, register, edit, pause and resume a source, preview a new one,
harvest now. Every POST needs the administrator (a session with its CSRF token, or a bearer
token), checked before its body is read: without them it is 403 whatever it carries.
Source changes go through :mod:`aggregator.config.sources_file`, the code behind
``aggregator source add/edit``, so the file is checked before it is written and keeps its
comments."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from aggregator.config import SOURCE_NAME, SourceConfig, parse_source
from aggregator.config.sources_file import SourceEdit, add_source, edit_source
from aggregator.core.errors import AggregatorError, ConfigError
from aggregator.plugin import harvesters, mappers
from aggregator.schedule.status import request_harvest
from aggregator.serve.dashboard.attempts import TooManyAttemptsError
from aggregator.serve.dashboard.auth import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    SESSION_TTL,
    Auth,
    new_id,
)
from aggregator.serve.dashboard.preview import preview_source
from aggregator.serve.dashboard.sources_file_form import SourceForm
from aggregator.serve.dashboard.sources_state import configured_sources, current_settings
from aggregator.serve.dashboard.web import Dashboard

AsyncHandler = Callable[[Request], Awaitable[Response]]


def _text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value.strip() if isinstance(value, str) else ""


def routes(dash: Dashboard) -> list[BaseRoute]:
    ctx = dash.ctx

    def config_path() -> Any:
        path = ctx.settings.config_path
        if path is None:
            raise ConfigError("the server runs without a configuration file: no sources to change")
        return path

    def choices() -> dict[str, Any]:
        return {"types": harvesters.names(), "formats": mappers.names()}

    def admin_get(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        def run(request: Request) -> Response:
            if not dash.auth.enabled:
                return dash.error(request, 403, "no administrator is configured (see [serve])")
            if dash.user(request) is None:
                return dash.redirect(f"login?next={quote(request.url.path)}")
            try:
                return handler(request)
            except AggregatorError as err:
                return dash.error(request, err.http_status, err.message)

        return run

    def admin_post(handler: Callable[[Request, FormData], Response]) -> AsyncHandler:
        async def run(request: Request) -> Response:
            if not dash.auth.enabled:
                return dash.error(request, 403, "no administrator is configured (see [serve])")
            try:
                caller = await dash.caller(request)
            except TooManyAttemptsError as err:
                return dash.refused(request, err)
            if caller is None:
                return dash.error(request, 403, "log in as the administrator first")
            form = await request.form()
            token = form.get("csrf")
            if caller.session is not None and not dash.auth.csrf_ok(
                caller.session.id, token if isinstance(token, str) else None
            ):
                return dash.error(
                    request, 403, "the form's CSRF token is missing or wrong; reload the page"
                )
            try:
                return await run_in_threadpool(handler, request, form)
            except AggregatorError as err:
                return dash.error(request, err.http_status, err.message)

        return run

    # -- login --------------------------------------------------------------------------------
    def login_page(
        request: Request,
        status: int = 200,
        *,
        next: str = "",
        failed: bool = False,
        expired: bool = False,
    ) -> Response:
        """The login form, with its CSRF token: an HMAC of the nonce in its own cookie (kept
        when the browser has one already, so two open tabs both work)."""
        nonce = Auth.login_nonce(request.cookies.get(LOGIN_COOKIE)) or new_id()
        response = dash.render(
            request,
            "login.html",
            status,
            failed=failed,
            expired=expired,
            next=next,
            password_login=bool(dash.auth.password_hash),
            login_csrf=dash.auth.login_csrf_token(nonce),
        )
        dash.set_cookie(response, LOGIN_COOKIE, nonce, None)
        return response

    def login_form(request: Request) -> Response:
        return login_page(request, next=_next(request.query_params))

    async def login(request: Request) -> Response:
        if not dash.auth.password_hash:
            return await run_in_threadpool(login_page, request, 403)
        form = await request.form()
        token = form.get("csrf")
        if not dash.auth.login_csrf_ok(
            request.cookies.get(LOGIN_COOKIE), token if isinstance(token, str) else None
        ):
            return await run_in_threadpool(
                lambda: login_page(request, 403, next=_next(form), expired=True)
            )
        user, password = _text(form, "user"), form.get("password")
        secret = password if isinstance(password, str) else ""
        try:
            right = await dash.checks.check(
                dash.client(request), lambda: dash.auth.password_ok(user, secret)
            )
        except TooManyAttemptsError as err:
            return await run_in_threadpool(dash.refused, request, err)
        if not right:
            return await run_in_threadpool(
                lambda: login_page(request, 401, next=_next(form), failed=True)
            )
        # a new session id at every login (nothing a visitor had before becomes a session)
        session_id, now = new_id(), time.time()
        expiry = int(now + SESSION_TTL)
        await run_in_threadpool(dash.state.open_session, session_id, dash.auth.user, expiry, now)
        response = dash.redirect(_next(form) or "/")
        dash.set_cookie(
            response, SESSION_COOKIE, dash.auth.session_cookie(session_id, expiry), SESSION_TTL
        )
        dash.delete_cookie(response, LOGIN_COOKIE)
        return response

    async def logout(request: Request) -> Response:
        """Closes the session on the server (its cookie, copied or not, opens nothing after);
        needs the session's CSRF token, so that another site cannot log a visitor out."""
        session = await run_in_threadpool(dash.session, request)
        if session is not None:
            form = await request.form()
            token = form.get("csrf")
            if not dash.auth.csrf_ok(session.id, token if isinstance(token, str) else None):
                return dash.error(request, 403, "the form's CSRF token is missing or wrong")
            await run_in_threadpool(dash.state.close_session, session.id)
        response = dash.redirect("")
        dash.delete_cookie(response, SESSION_COOKIE)
        return response

    # -- sources ------------------------------------------------------------------------------
    def new_form(request: Request) -> Response:
        return dash.render(
            request,
            "source_form.html",
            form=SourceForm(),
            editing=False,
            error=None,
            preview=None,
            **choices(),
        )

    def new_post(request: Request, data: FormData) -> Response:
        form = SourceForm.from_form(data)
        action = _text(data, "action")
        error, preview = None, None
        try:
            if not SOURCE_NAME.match(form.name):
                raise ConfigError(f"the name must match {SOURCE_NAME.pattern}")
            table = form.table()
            path = config_path()
            src = parse_source(form.name, table, root=path.resolve().parent)
            if action == "preview":
                preview = preview_source(current_settings(ctx.settings), src)
            else:
                add_source(path, form.name, table)
                return dash.redirect(f"sources/{quote(form.name)}")
        except ConfigError as err:
            error = err.message
        status = 400 if error else 200
        return dash.render(
            request,
            "source_form.html",
            status,
            form=form,
            editing=False,
            error=error,
            preview=preview,
            **choices(),
        )

    def _configured(name: str) -> SourceConfig:
        found = configured_sources(ctx.settings).get(name)
        if found is None:
            raise ConfigError(f"no source named {name!r} in the configuration")
        return found

    def edit_form(request: Request) -> Response:
        src = _configured(request.path_params["name"])
        return dash.render(
            request,
            "source_form.html",
            form=SourceForm.from_source(src),
            editing=True,
            error=None,
            preview=None,
            **choices(),
        )

    def edit_post(request: Request, data: FormData) -> Response:
        name = request.path_params["name"]
        before = _configured(name)
        form = SourceForm.from_form(data, name=name)
        try:
            table = form.table()
            changes = {k: v for k, v in table.items() if k not in ("options",)}
            unset = tuple(k for k in ("publisher", "format") if k not in table)
            options = dict(table.get("options", {}))
            edit = SourceEdit(
                set=changes,
                unset=unset,
                options=options,
                unset_options=tuple(k for k in before.options if k not in options),
            )
            edit_source(config_path(), name, edit)
        except ConfigError as err:
            return dash.render(
                request,
                "source_form.html",
                400,
                form=form,
                editing=True,
                error=err.message,
                preview=None,
                **choices(),
            )
        return dash.redirect(f"sources/{quote(name)}")

    def pause_post(request: Request, data: FormData) -> Response:
        name = request.path_params["name"]
        src = _configured(name)
        edit_source(config_path(), name, SourceEdit(set={"enabled": not src.enabled}))
        return dash.redirect(f"sources/{quote(name)}")

    def harvest_post(request: Request, data: FormData) -> Response:
        name = request.path_params["name"]
        full = _text(data, "full") == "1"
        who = dash.user(request) or "token"
        request_harvest(current_settings(ctx.settings), name, full=full, by=f"dashboard:{who}")
        return dash.redirect(f"sources/{quote(name)}?requested={'full' if full else 'harvest'}")

    return [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/admin/sources/new", admin_get(new_form), methods=["GET"]),
        Route("/admin/sources/new", admin_post(new_post), methods=["POST"]),
        Route("/admin/sources/{name}/edit", admin_get(edit_form), methods=["GET"]),
        Route("/admin/sources/{name}/edit", admin_post(edit_post), methods=["POST"]),
        Route("/admin/sources/{name}/pause", admin_post(pause_post), methods=["POST"]),
        Route("/admin/sources/{name}/harvest", admin_post(harvest_post), methods=["POST"]),
    ]


def _next(params: Mapping[str, Any]) -> str:
    """Where to go after logging in: a path of ours only (no open redirect)."""
    value = params.get("next")
    text = value if isinstance(value, str) else ""
    if not text.startswith("/") or text.startswith("//") or "\\" in text or ":" in text:
        return ""
    return text
