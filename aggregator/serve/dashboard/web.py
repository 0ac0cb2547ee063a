"""The dashboard's web plumbing: Jinja2 templates with autoescaping, the security headers every
page carries (a Content-Security-Policy that allows scripts and styles from our own static
files only: no inline script, no inline style), who is logged in or holds the token, and the
cookies that say so."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from aggregator.serve.context import ServeContext
from aggregator.serve.dashboard.attempts import SecretChecks, TooManyAttemptsError
from aggregator.serve.dashboard.auth import (
    SESSION_COOKIE,
    Auth,
    SessionCookie,
    bearer_token,
    check_hash_setting,
    load_key,
)
from aggregator.serve.dashboard.auth_state import (
    AuthState,
    Network,
    forwarded_client,
    parse_networks,
)
from aggregator.serve.dashboard.job_errors import rule_label
from aggregator.serve.dashboard.schedule_view import breaker, next_run
from aggregator.serve.dashboard.status import stamp_html, when
from aggregator.serve.rdf_formats import HTML_CSP

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

SECURITY_HEADERS = {
    "Content-Security-Policy": HTML_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


def _query(params: Mapping[str, Any], **changes: Any) -> str:
    merged = {**params, **changes}
    return urlencode([(k, v) for k, v in merged.items() if v not in (None, "", [])], doseq=True)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sends an admin request: the user of an open session (whose form must carry the
    session's CSRF token), or a script with the token (``session`` None: no CSRF token)."""

    user: str
    session: SessionCookie | None


@dataclass
class Dashboard:
    ctx: ServeContext
    env: Environment
    auth: Auth
    state: AuthState
    checks: SecretChecks
    proxies: tuple[Network, ...]

    @classmethod
    def create(cls, ctx: ServeContext) -> Dashboard:
        env = Environment(
            loader=FileSystemLoader(TEMPLATES),
            autoescape=select_autoescape(["html", "svg"], default=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.globals["query"] = _query
        env.filters["when"] = when
        env.filters["stamp"] = stamp_html
        env.filters["next_run"] = next_run
        env.filters["breaker"] = breaker
        env.filters["rule"] = rule_label
        env.filters["yesno"] = lambda v: ("yes" if v else "no") if isinstance(v, bool) else v
        env.globals["query_string"] = lambda text: urlencode({"query": text})
        serve = ctx.settings.serve
        check_hash_setting(serve.admin_password_hash, "admin_password_hash")
        check_hash_setting(serve.admin_token_hash, "admin_token_hash")
        auth = Auth(
            load_key(ctx.store.path),
            serve.admin_user,
            serve.admin_password_hash,
            serve.admin_token_hash,
        )
        state = AuthState(ctx.store.path)
        checks = SecretChecks(
            state,
            limit=serve.admin_max_failures,
            window=serve.admin_failure_window,
            concurrency=serve.admin_hash_concurrency,
        )
        proxies = parse_networks(serve.trusted_proxies, "trusted_proxies")
        return cls(ctx, env, auth, state, checks, proxies)

    @property
    def base(self) -> str:
        """Where the dashboard is mounted, as a path ('/' or '/prefix/')."""
        return urlsplit(self.ctx.base_url).path or "/"

    @property
    def secure_cookies(self) -> bool:
        """Cookies only over HTTPS when clients reach us by HTTPS: decided by the configured
        public URL, not by the request, which arrives over plain HTTP behind a reverse proxy
        that terminates TLS."""
        return urlsplit(self.ctx.base_url).scheme == "https"

    # -- who (sync: they read the session table; call from a thread) --------------------------
    def session(self, request: Request) -> SessionCookie | None:
        """The request's session when its cookie is ours, unexpired and still open."""
        found = self.auth.read_session_cookie(request.cookies.get(SESSION_COOKIE))
        if found is None:
            return None
        user = self.state.session_user(found.id, time.time())
        return found if user is not None and user == self.auth.user else None

    def user(self, request: Request) -> str | None:
        return self.auth.user if self.session(request) is not None else None

    # -- who (async: a token is checked off the event loop, counted per client) -------------
    async def token_holder(self, request: Request) -> bool:
        """The request carries the admin token (raises :class:`TooManyAttemptsError`)."""
        token = bearer_token(request.headers.get("authorization"))
        if token is None or not self.auth.token_hash:
            return False
        return await self.checks.check(self.client(request), lambda: self.auth.token_ok(token))

    def client(self, request: Request) -> str | None:
        """The client's address, whose failed checks are counted: the peer, or behind a
        trusted reverse proxy the address it forwarded for."""
        peer = request.client.host if request.client else None
        forwarded = ",".join(request.headers.getlist("x-forwarded-for"))
        return forwarded_client(peer, forwarded, self.proxies)

    async def caller(self, request: Request) -> Caller | None:
        """Who sends an admin request, if anyone may (raises :class:`TooManyAttemptsError`).
        An open session first: it costs no hash and is never refused for the failures of
        its address."""
        session = await run_in_threadpool(self.session, request)
        if session is not None:
            return Caller(self.auth.user, session)
        return Caller("token", None) if await self.token_holder(request) else None

    async def may_read(self, request: Request) -> bool:
        if self.ctx.settings.serve.dashboard_public:
            return True
        return await self.caller(request) is not None

    def set_cookie(self, response: Response, name: str, value: str, max_age: int | None) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path=self.base,
            httponly=True,
            samesite="strict",
            secure=self.secure_cookies,
        )

    def delete_cookie(self, response: Response, name: str) -> None:
        response.delete_cookie(
            name, path=self.base, httponly=True, samesite="strict", secure=self.secure_cookies
        )

    # -- pages --------------------------------------------------------------------------------
    def render(
        self, request: Request, template: str, status: int = 200, **values: Any
    ) -> HTMLResponse:
        page = self.render_string(request, template, **values)
        return HTMLResponse(page, status, headers=dict(SECURITY_HEADERS))

    def render_string(self, request: Request, template: str, **values: Any) -> str:
        session = self.session(request)
        return self.env.get_template(template).render(
            base=self.base,
            public_base=self.ctx.base_url,
            site=self.ctx.settings.serve.oai_repository_name,
            user=self.auth.user if session else None,
            admin=session is not None,
            auth_enabled=self.auth.enabled,
            csrf=self.auth.csrf_token(session.id) if session else "",
            path=request.url.path,
            params=dict(request.query_params),
            **values,
        )

    def error(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self.render(request, "error.html", status, code=status, message=message)

    def refused(self, request: Request, err: TooManyAttemptsError) -> HTMLResponse:
        response = self.error(request, err.http_status, err.message)
        response.headers["Retry-After"] = str(err.retry_after)
        return response

    def redirect(self, where: str) -> Response:
        return RedirectResponse(self.base + where.lstrip("/"), 303, headers=SECURITY_HEADERS)
