"""The validator service: an HTTP API over ``cfgcheck check`` that is safe on untrusted configs.

Needs the ``service`` extra (FastAPI, uvicorn): ``pip install 'cfgcheck[service]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cfgcheck.service.settings import ServiceSettings

if TYPE_CHECKING:
    from fastapi import FastAPI


def create_app(settings: ServiceSettings | None = None) -> FastAPI:
    """The FastAPI app (FastAPI is imported only here, when the service is wanted)."""
    from cfgcheck.service.app import create_app as build

    return build(settings)


__all__ = ["ServiceSettings", "create_app"]
