"""One worker process of ``cfgcheck serve --workers N``.

The supervisor (:mod:`cfgcheck.service.supervisor`, built on uvicorn's
``uvicorn.supervisors.Multiprocess``) binds the socket in the parent and starts each worker
with ``multiprocessing``'s *spawn* method, handing it the pickled ``uvicorn.Config``: the app
must be an import string, and anything else the config names must pickle by reference. So the
parent puts the service settings and the header timeout in one environment variable
(:data:`ENV`, inherited by the spawned workers), and each worker builds its own app with
:func:`app` (a factory: preload, composition lock, thread pool and caches are per process)
and reads its header deadline in :class:`WorkerProtocol`.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfgcheck.service.http import HEADER_TIMEOUT_S, HeaderTimeoutProtocol
from cfgcheck.service.settings import ServiceSettings

if TYPE_CHECKING:
    from fastapi import FastAPI

ENV = "CFGCHECK_SERVE_OPTIONS"
APP = "cfgcheck.service.worker:app"


def _encode(value: Any) -> Any:
    if isinstance(value, Path):
        return {"path": str(value)}
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"path"}:
        return Path(value["path"])
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
    return value


def encode_options(settings: ServiceSettings, header_timeout_s: float) -> str:
    """The value of :data:`ENV` for ``settings`` and the header deadline."""
    encoded = {f.name: _encode(getattr(settings, f.name)) for f in fields(settings)}
    return json.dumps({"settings": encoded, "header_timeout_s": header_timeout_s})


def _options() -> dict[str, Any]:
    raw = os.environ.get(ENV)
    if raw is None:
        raise RuntimeError(f"{APP} is started by `cfgcheck serve --workers N` ({ENV} not set)")
    options: dict[str, Any] = json.loads(raw)
    return options


def decode_settings(raw: str) -> ServiceSettings:
    """The settings :func:`encode_options` wrote."""
    encoded: dict[str, Any] = json.loads(raw)["settings"]
    return ServiceSettings(**{name: _decode(value) for name, value in encoded.items()})


class WorkerProtocol(HeaderTimeoutProtocol):
    """The header-deadline protocol, its deadline read from :data:`ENV` in each worker."""

    header_timeout_s = float(
        json.loads(os.environ.get(ENV, "{}")).get("header_timeout_s", HEADER_TIMEOUT_S)
    )


def app() -> FastAPI:
    """The app of this worker process (uvicorn calls it once per worker: ``factory=True``)."""
    from cfgcheck.service import create_app

    _options()
    return create_app(decode_settings(os.environ[ENV]))
