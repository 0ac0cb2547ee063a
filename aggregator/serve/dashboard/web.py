"""The dashboard's web plumbing: Jinja2 templates with autoescaping, the security headers every
page carries (a Content-Security-Policy that allows scripts and styles from our own static
files only: no inline script, no inline style), who is logged in, and CSRF checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from aggregator.errors import AggregatorError
from aggregator.serve.context import ServeContext
from aggregator.serve.dashboard.auth import SESSION_COOKIE, Auth, check_hash_setting, load_key
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


class ForbiddenError(AggregatorError):
    http_status = 403
    code = "forbidden"


def _query(params: Mapping[str, Any], **changes: Any) -> str:
    merged = {**params, **changes}
    return urlencode([(k, v) for k, v in merged.items() if v not in (None, "", [])], doseq=True)


@dataclass
class Dashboard:
    ctx: ServeContext
    env: Environment
    auth: Auth

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
        return cls(ctx, env, auth)

    @property
    def base(self) -> str:
        """Where the dashboard is mounted, as a path ('/' or '/prefix/')."""
        from urllib.parse import urlsplit

        return urlsplit(self.ctx.base_url).path or "/"

    # -- who ----------------------------------------------------------------------------------
    def user(self, request: Request) -> str | None:
        return self.auth.session_user(request.cookies.get(SESSION_COOKIE))

    def is_admin(self, request: Request) -> bool:
        if self.user(request) is not None:
            return True
        return self.auth.bearer_ok(request.headers.get("authorization"))

    def may_read(self, request: Request) -> bool:
        return self.ctx.settings.serve.dashboard_public or self.is_admin(request)

    def check_admin_post(self, request: Request, form: Mapping[str, Any]) -> None:
        """An admin action: a logged-in session with its CSRF token, or a bearer token."""
        if self.auth.bearer_ok(request.headers.get("authorization")):
            return
        cookie = request.cookies.get(SESSION_COOKIE)
        if self.auth.session_user(cookie) is None:
            raise ForbiddenError("log in as the administrator first")
        token = form.get("csrf")
        if not self.auth.csrf_ok(cookie, token if isinstance(token, str) else None):
            raise ForbiddenError("the form's CSRF token is missing or wrong; reload the page")

    # -- pages --------------------------------------------------------------------------------
    def render(
        self, request: Request, template: str, status: int = 200, **values: Any
    ) -> HTMLResponse:
        page = self.render_string(request, template, **values)
        return HTMLResponse(page, status, headers=dict(SECURITY_HEADERS))

    def render_string(self, request: Request, template: str, **values: Any) -> str:
        cookie = request.cookies.get(SESSION_COOKIE)
        user = self.auth.session_user(cookie)
        return self.env.get_template(template).render(
            base=self.base,
            public_base=self.ctx.base_url,
            site=self.ctx.settings.serve.oai_repository_name,
            user=user,
            admin=user is not None,
            auth_enabled=self.auth.enabled,
            csrf=self.auth.csrf_token(cookie) if user and cookie else "",
            path=request.url.path,
            params=dict(request.query_params),
            **values,
        )

    def error(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self.render(request, "error.html", status, code=status, message=message)

    def redirect(self, where: str) -> Response:
        return RedirectResponse(self.base + where.lstrip("/"), 303, headers=SECURITY_HEADERS)
