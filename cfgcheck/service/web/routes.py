"""The page's routes: ``GET /`` (blank, or the check a shared link holds), ``POST /`` (the
form) and ``GET /static/{name}`` (the stylesheet and the script, by name from a fixed list).
Every answer carries :data:`HEADERS` (the Content-Security-Policy :data:`CSP`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response

from cfgcheck.service.app import log_internal_error
from cfgcheck.service.body import mime_of, read_within
from cfgcheck.service.errors import RequestError
from cfgcheck.service.runner import Runner
from cfgcheck.service.web import form as forms
from cfgcheck.service.web.check import check_form
from cfgcheck.service.web.page import Outcome, Presets, render_page

Offload = Callable[[Callable[[float], Any]], Awaitable[Any]]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
# The static files, by the only names a request may ask for (never a path from the request).
STATIC = {
    "web.css": "text/css; charset=utf-8",
    "web.js": "text/javascript; charset=utf-8",
}
FORM_TYPE = "application/x-www-form-urlencoded"


def static_file(name: str) -> bytes:
    return resources.files("cfgcheck.service.web").joinpath("static", name).read_bytes()


def add_routes(app: FastAPI, runner: Runner, offload: Offload) -> None:
    """Add the page's routes to the service's ``app``; ``offload(work)`` runs
    ``work(deadline)`` on a validation thread within the service's gate and time limit."""
    settings = runner.settings
    presets = Presets(
        {
            group: tuple(sorted(p.stem for p in (runner.config_dir / group).glob("*.yaml")))
            for group in forms.GROUPS
        }
    )
    assets = {name: static_file(name) for name in STATIC}

    def page(
        form: forms.PageForm, outcome: Outcome | None, html: str | None = None
    ) -> HTMLResponse:
        status = 200 if outcome is None else outcome.status
        headers = dict(HEADERS)
        if status in (429, 503):
            headers["Retry-After"] = "1"
        if html is None:
            html = render_page(form, outcome, presets)
        return HTMLResponse(html, status, headers=headers)

    def checked(form: forms.PageForm, deadline: float) -> tuple[Outcome, str]:
        """The check and its page, both on the validation thread (a long file's listing is
        rendered off the event loop too, within the time limit)."""
        try:
            outcome = check_form(runner, form, deadline)
        except RequestError as e:
            outcome = Outcome(status=e.status, detail=e.detail)
        return outcome, render_page(form, outcome, presets)

    async def answer(form: forms.PageForm) -> HTMLResponse:
        if not form.submitted:
            return page(form, None)
        try:
            outcome, html = await offload(lambda deadline: checked(form, deadline))
        except RequestError as e:  # 429, 503 or 504: refused or stopped by the service
            return page(form, Outcome(status=e.status, detail=e.detail))
        except Exception as e:  # a bug: logged, one line on the page
            log_internal_error(f"checking the page's {form.mode} form", e)
            return page(
                form, Outcome(status=500, detail=f"internal error ({type(e).__name__}); logged")
            )
        return page(form, outcome, html)

    def refused(e: RequestError) -> HTMLResponse:
        return page(forms.PageForm(), Outcome(status=e.status, detail=e.detail))

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index(request: Request) -> HTMLResponse:
        """The page; a query string (a shared link) holds the inputs of a check."""
        try:
            form = forms.parse_form(request.url.query, settings.max_body_bytes)
        except RequestError as e:
            return refused(e)
        return await answer(form)

    @app.post("/", response_class=HTMLResponse, include_in_schema=False)
    async def submit(request: Request) -> HTMLResponse:
        """The form, posted (works without JavaScript)."""
        try:
            mime = mime_of(request.headers.get("content-type"))
            if mime != FORM_TYPE:
                raise RequestError(
                    415,
                    f"unsupported Content-Type {mime or '(none)'!r}; the page posts {FORM_TYPE}",
                )
            body = await read_within(
                request.headers.get("content-length"),
                request.stream(),
                settings.max_body_bytes,
                settings.request_timeout_s,
            )
            try:
                raw = body.decode("ascii")  # urlencoded: UTF-8 arrives percent-encoded
            except UnicodeDecodeError:
                raise RequestError(400, "the form body is not urlencoded ASCII") from None
            form = forms.parse_form(raw, settings.max_body_bytes)
        except RequestError as e:
            return refused(e)
        return await answer(form)

    @app.get("/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        if name not in assets:
            return Response("not found", 404, media_type="text/plain", headers=HEADERS)
        return Response(
            assets[name],
            media_type=STATIC[name],
            headers={**HEADERS, "Cache-Control": "public, max-age=3600"},
        )
