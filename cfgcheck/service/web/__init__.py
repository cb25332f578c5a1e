"""The service's web page: ``GET /`` and ``POST /`` (the check of a pasted config or a preset,
server-rendered, working without JavaScript), and its two static files
(:mod:`cfgcheck.service.web.routes`).

It runs the JSON API's validation (:meth:`cfgcheck.service.runner.Runner.check`) on the same
validation threads, with the same body limit, screens and time limit; every answer carries a
Content-Security-Policy that allows scripts, styles and requests from the service only, and
every value is escaped (:mod:`cfgcheck.service.web.render`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

    from cfgcheck.service.runner import Runner
    from cfgcheck.service.web.routes import Offload


def mount(app: FastAPI, runner: Runner, offload: Offload) -> None:
    """Add the page's routes to the service's ``app`` (FastAPI is imported only here)."""
    from cfgcheck.service.web.routes import add_routes

    add_routes(app, runner, offload)


__all__ = ["mount"]
