"""The FastAPI application of the validator service, built by :func:`create_app`.

Imported only by :func:`cfgcheck.service.create_app`, so FastAPI is needed only to serve.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from cfgcheck.errors import ConfigLoadError
from cfgcheck.service import runner
from cfgcheck.service.admission import (
    RETRY_AFTER_S,
    Admission,
    ClientAddress,
    Proxies,
    current_client,
)
from cfgcheck.service.body import media_type, read_within
from cfgcheck.service.errors import RequestError
from cfgcheck.service.models import CheckResponse, ErrorResponse, HealthResponse
from cfgcheck.service.openapi import VALIDATE_REQUEST_BODY, build_openapi
from cfgcheck.service.settings import ServiceSettings
from cfgcheck.service.slots import Slots, drain_hook

log = logging.getLogger("cfgcheck.service")


def _consume(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def log_internal_error(what: str, exc: BaseException) -> None:
    """One log line per internal error (a traceback per request would flood the log under
    load); the traceback only at DEBUG level."""
    log.error(
        "internal error while %s: %s: %s",
        what,
        type(exc).__name__,
        " ".join(str(exc).split())[:300],
    )
    log.debug("traceback", exc_info=exc)


T = TypeVar("T")


async def run_gated(
    pool: WorkerPool,
    gate: Admission,
    timeout_s: float,
    work: Callable[[float], T],
    client: str = "unknown",
) -> T:
    """``work(deadline)`` on one of ``pool``'s threads once ``gate`` admits it (429 past the
    client's limit, 503 when the worker is full or draining), 504 once ``timeout_s`` has
    passed (the work stops at its next stage boundary,
    :class:`cfgcheck.service.runner.Past504`). While it runs, its start time sits in the
    worker's slot table, which the supervisor watches for the hard limit."""
    gate.enter(client)

    deadline = time.monotonic() + timeout_s

    def guarded() -> T:
        slot = gate.slots.claim(client)
        try:
            return work(deadline)
        finally:
            gate.slots.release(slot)
            gate.leave(client)

    done = pool.submit(guarded)
    waiter = asyncio.wrap_future(done)
    try:
        return await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
    except TimeoutError:
        if done.cancel():  # never started: it will not leave the gate itself
            gate.leave(client)
        # The work stops at its next stage boundary (runner.Past504); its outcome is
        # consumed here so asyncio logs no "exception was never retrieved" per request.
        waiter.add_done_callback(_consume)
        raise RequestError(
            504, f"validation took longer than {timeout_s:g} s; not finished"
        ) from None


class WorkerPool:
    """The validation threads. Started on first use and released when the app shuts down, so
    an app whose lifespan runs more than once (a restarted server, several test clients) gets
    a fresh pool each time instead of one that refuses new work."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self.workers, thread_name_prefix="cfgcheck-validate"
                )
            return self._executor.submit(fn)

    def shutdown(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in {
        400: "Malformed body: not JSON/YAML, not UTF-8, empty, or a bad Content-Length.",
        408: "The body did not arrive within the per-request time limit.",
        413: "The body is over the size limit.",
        415: "Unsupported Content-Type.",
        422: "Refused: nesting/size limits, non-JSON values, resolver interpolations, paths "
        "outside the allowed roots, or a compose request that does not compose.",
        429: "This client already has its limit of validations in flight; retry after "
        "`Retry-After` seconds.",
        500: "A bug in validation (logged by the server; no traceback is sent).",
        503: "The worker's queue is full, or it is draining; retry after `Retry-After` seconds.",
        504: "The validation ran past the per-request time limit.",
    }.items()
}


def check_config_dir(settings: ServiceSettings) -> None:
    """Raise :class:`ConfigLoadError` if the server's config dir is missing or unsafe.

    The server's own conf/ is screened once at start-up (a dangling link, a FIFO, a file that
    is not UTF-8 or crosses a bound): a clear error now, not a failure per request."""
    from cfgcheck.safeio import screen_config_dir

    if not settings.config_dir.expanduser().is_dir():
        raise ConfigLoadError(f"config directory not found: {settings.config_dir}")
    screen_config_dir(settings.config_dir.expanduser().resolve())


def create_app(settings: ServiceSettings | None = None) -> FastAPI:
    """The validator service. Raises :class:`ConfigLoadError` if the config dir is missing."""
    from cfgcheck import __version__
    from cfgcheck.jsonschema import json_schemas

    settings = settings or ServiceSettings()
    check_config_dir(settings)
    if settings.offline:
        # Validation may load tokenizers; nothing it does may reach the network.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
    # A request's model is traced in this process only (and read from the shipped traces),
    # never written to the server account's on-disk cache (cfgcheck.memory.trace_cache).
    from cfgcheck.memory.trace_cache import use_disk

    use_disk(False)
    # Imported now, not by the first concurrent requests (see cfgcheck.service.preload).
    from cfgcheck.service.preload import preload

    missing = preload()
    if missing:
        log.info("optional modules not installed: %s", ", ".join(missing))
    job = runner.Runner(settings)
    pool = WorkerPool(settings.threads)
    gate = Admission(settings, Slots(settings.threads))
    schemas = json_schemas(job.schema) if job.schema is not None else json_schemas()

    async def offload(work: Callable[[float], T]) -> T:
        """``work(deadline)`` on a validation thread, within the gate and the time limit
        (429/503 when too many are in flight, 504 past the limit); its own errors propagate."""
        client = current_client.get()
        return await run_gated(pool, gate, settings.request_timeout_s, work, client)

    drain = drain_hook()

    async def drain_when_stuck(drain: Callable[[], None]) -> None:
        """Drain this worker once a validation is stuck past its deadline (the supervisor
        kills it at the hard limit; meanwhile it takes no new connection)."""
        while not gate.draining():
            await asyncio.sleep(0.25)
        log.warning(
            "worker [%d] draining: a validation is stuck past its deadline; it stops taking "
            "connections and exits (or is killed at the hard limit of %g s)",
            os.getpid(),
            settings.hard_limit_s,
        )
        drain()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        watcher = None if drain is None else asyncio.create_task(drain_when_stuck(drain))
        yield
        if watcher is not None:
            watcher.cancel()
        pool.shutdown()

    app = FastAPI(
        title="cfgcheck validator service",
        version=__version__,
        description="POST a run config (or a config name and Hydra overrides) and get the "
        "verdict of `cfgcheck check --format json`.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.runner = job
    app.state.admission = gate
    app.add_middleware(ClientAddress, proxies=Proxies(settings.trusted_proxies))

    @app.exception_handler(RequestError)
    async def refused(_: Request, exc: RequestError) -> JSONResponse:
        headers = dict(exc.headers)
        if exc.status in (429, 503):
            headers.setdefault("Retry-After", RETRY_AFTER_S)
        return JSONResponse({"detail": exc.detail}, exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        return JSONResponse({"detail": "; ".join(parts) or "invalid request"}, 422)

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        log_internal_error(f"{request.method} {request.url.path}", exc)
        return JSONResponse({"detail": f"internal error ({type(exc).__name__})"}, 500)

    @app.post(
        "/v1/validate",
        response_class=Response,
        responses={200: {"model": CheckResponse, "description": "The verdict."}, **_ERRORS},
        openapi_extra={"requestBody": VALIDATE_REQUEST_BODY},
        summary="Validate a run config",
    )
    async def validate(request: Request) -> Response:
        """The verdict on a composed run config (JSON or YAML, by Content-Type) or on
        `{"config_name": ..., "overrides": [...]}` composed from the server's config directory.
        HTTP 200 for a verdict either way: `ok` says whether the config has errors."""
        kind = media_type(request.headers.get("content-type"))
        body = await read_within(
            request.headers.get("content-length"),
            request.stream(),
            settings.max_body_bytes,
            settings.request_timeout_s,
        )
        try:
            text = await offload(lambda deadline: job.run(body, kind, deadline))
        except RequestError:
            raise
        except Exception as e:  # a bug in validation: logged here, one line to the client
            log_internal_error(f"validating a {kind} body of {len(body)} bytes", e)
            return JSONResponse(
                {"detail": f"internal error while validating ({type(e).__name__}); logged"}, 500
            )
        return Response(text, media_type="application/json")

    @app.get("/v1/schema", summary="JSON Schemas of the run config and each section")
    async def schema() -> dict[str, dict[str, Any]]:
        """`{"run": ..., "model": ..., "tokenizer": ..., "data": ..., "trainer": ...}`."""
        return schemas

    @app.get("/healthz", summary="Liveness", response_model=HealthResponse)
    async def healthz() -> HealthResponse:
        """200 `{"status": "ok", ...}` from a worker that has finished start-up (every
        import done); no auth, no work. A load balancer's liveness/health check."""
        return HealthResponse(status="ok", version=__version__, pid=os.getpid())

    @app.get(
        "/readyz",
        summary="Readiness",
        response_model=HealthResponse,
        responses={
            503: {"model": HealthResponse, "description": "Saturated or draining: retry elsewhere."}
        },
    )
    async def readyz() -> Response:
        """200 `{"status": "ready", ...}` while this worker can take a validation; 503
        `{"status": "busy", ...}` while it already holds its limit of validations in flight
        (running and queued: the request would get 503 too), `{"status": "draining", ...}`
        while one of its validations is stuck past its deadline (the supervisor replaces the
        worker at the hard limit). No auth, no work."""
        status: Literal["ready", "busy", "draining"] = (
            "draining" if gate.draining() else "busy" if gate.count >= gate.limit else "ready"
        )
        body = HealthResponse(status=status, version=__version__, pid=os.getpid())
        return JSONResponse(body.model_dump(), 200 if status == "ready" else 503)

    from cfgcheck.service.web import mount

    mount(app, job, offload)
    app.openapi = lambda: build_openapi(app)  # type: ignore[method-assign]
    return app
