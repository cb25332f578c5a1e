"""``cfgcheck serve``: the validator service over HTTP (FastAPI + uvicorn, the ``service`` extra).

Listens on 127.0.0.1:8000 by default; ``POST /v1/validate`` answers what
``cfgcheck check --format json`` prints. See :mod:`cfgcheck.service`.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

# Seconds a draining worker waits past the request time limit before cancelling what is left.
DRAIN_MARGIN_S = 5
# Seconds the supervisor waits for a worker's answer to its liveness ping.
WORKER_START_S = 60


def default_workers() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def register(sub: Any) -> None:
    from cfgcheck.compose import DEFAULT_CONFIG_DIR
    from cfgcheck.service.settings import (
        ENV_HARD_TIMEOUT,
        ENV_MAX_PER_CLIENT,
        ENV_MAX_QUEUE,
        ENV_THREADS,
        ENV_TRUSTED_PROXIES,
        HARD_TIMEOUT_MARGIN_S,
        ServiceSettings,
    )

    defaults = ServiceSettings()
    parser = sub.add_parser("serve", help="run the validator HTTP service")
    parser.add_argument("--host", default="127.0.0.1", help="address (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    parser.add_argument(
        "--config-dir",
        default=DEFAULT_CONFIG_DIR,
        help="Hydra config directory for {config_name, overrides} requests (default: ./conf)",
    )
    parser.add_argument(
        "--allow-root",
        action="append",
        default=[],
        metavar="DIR",
        help="directory tokenizer/data paths may point into (repeatable; default: the "
        "working directory)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=defaults.max_body_bytes,
        help=f"request size limit (default: {defaults.max_body_bytes})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=defaults.request_timeout_s,
        help=f"per-request time limit in seconds (default: {defaults.request_timeout_s:g})",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="worker processes, each with its own app, composition lock and threads "
        f"(default: the number of cores, here {default_workers()})",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=defaults.threads,
        metavar="N",
        help=f"validation threads per worker process (default: {defaults.threads}; ${ENV_THREADS})",
    )
    parser.add_argument(
        "--max-queue",
        type=int,
        default=defaults.max_queue,
        metavar="N",
        help="validations that may wait for a thread, per worker process; past it 503 with "
        f"Retry-After (default: {defaults.max_queue}; ${ENV_MAX_QUEUE})",
    )
    parser.add_argument(
        "--max-per-client",
        type=int,
        default=defaults.max_per_client,
        metavar="N",
        help="validations one client address may have in flight, per worker process; past it "
        f"429 with Retry-After (default: {defaults.max_per_client}; ${ENV_MAX_PER_CLIENT})",
    )
    parser.add_argument(
        "--trusted-proxy",
        action="append",
        default=None,
        metavar="ADDR",
        help="a proxy address or network (CIDR) whose X-Forwarded-For names the client "
        f"(repeatable; default: none, ${ENV_TRUSTED_PROXIES} comma-separated)",
    )
    parser.add_argument(
        "--hard-timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds after which the supervisor kills and replaces a worker whose request is "
        "still running, stuck in one call the --timeout budget cannot stop (default: "
        f"--timeout + {HARD_TIMEOUT_MARGIN_S:g}; ${ENV_HARD_TIMEOUT})",
    )
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        help="seconds a client has to send a request head before the connection is closed "
        "(default: 10; uvicorn has no such limit of its own)",
    )
    parser.add_argument("--access-log", action="store_true", help="log every request")
    parser.add_argument(
        "--schema",
        metavar="PKG.MOD:CLASS",
        help="validate with a team's cfgcheck.RunConfig subclass (imported at start; requests "
        "never name one)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from cfgcheck.errors import ConfigLoadError
    from cfgcheck.service.settings import ServiceSettings, SettingsError

    try:
        import uvicorn

        from cfgcheck.service import create_app  # noqa: F401 - FastAPI is installed
    except ImportError as e:
        raise ConfigLoadError(
            f"cfgcheck serve needs FastAPI and uvicorn: pip install 'cfgcheck[service]' ({e})"
        ) from e
    for option, value in (
        ("--threads", args.threads),
        ("--max-per-client", args.max_per_client),
    ):
        if value < 1:
            raise ConfigLoadError(f"{option} must be at least 1, got {value}")
    if args.max_queue < 0:
        raise ConfigLoadError(f"--max-queue must be 0 or more, got {args.max_queue}")
    try:
        extra: dict[str, Any] = {}
        if args.trusted_proxy is not None:
            extra["trusted_proxies"] = tuple(args.trusted_proxy)
        if args.hard_timeout is not None:
            extra["hard_timeout_s"] = args.hard_timeout
        settings = ServiceSettings(
            config_dir=Path(args.config_dir),
            allowed_roots=tuple(Path(p) for p in args.allow_root),
            max_body_bytes=args.max_body_bytes,
            schema=args.schema,
            request_timeout_s=args.timeout,
            threads=args.threads,
            max_queue=args.max_queue,
            max_per_client=args.max_per_client,
            **extra,
        )
    except SettingsError as e:
        raise ConfigLoadError(str(e).replace("hard_timeout_s", "--hard-timeout")) from e
    missing = [str(p) for p in settings.allowed_roots if not p.expanduser().is_dir()]
    if missing:
        raise ConfigLoadError(f"--allow-root directory not found: {', '.join(missing)}")
    if not args.header_timeout > 0:
        raise ConfigLoadError(f"--header-timeout must be positive, got {args.header_timeout}")
    workers = default_workers() if args.workers is None else args.workers
    if workers < 1:
        raise ConfigLoadError(f"--workers must be at least 1, got {workers}")
    from cfgcheck.service.http import uvicorn_options

    options = uvicorn_options(args.header_timeout)
    # SIGTERM drains: no new connections, requests in flight answered (each is bounded by
    # --timeout, so the drain is too), then the process exits.
    common: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "access_log": args.access_log,
        "timeout_graceful_shutdown": math.ceil(settings.request_timeout_s) + DRAIN_MARGIN_S,
    }
    from cfgcheck.service.app import check_config_dir
    from cfgcheck.service.slots import slot_count
    from cfgcheck.service.supervisor import serve
    from cfgcheck.service.worker import APP, ENV, WorkerProtocol, encode_options

    # Refused here, once, rather than by every worker: a missing or unreadable config dir.
    check_config_dir(settings)
    os.environ[ENV] = encode_options(settings, args.header_timeout)
    options["http"] = WorkerProtocol  # pickles by reference: read from ENV in each worker
    # Every worker count runs under the supervisor (one worker too): it alone can end a
    # request stuck in one C call (cfgcheck.service.supervisor).
    config = uvicorn.Config(
        APP,
        factory=True,
        workers=workers,
        # Each worker imports everything at start-up (a few seconds, longer on a busy box):
        # the supervisor must not take that for a hung worker.
        timeout_worker_healthcheck=WORKER_START_S,
        **common,
        **options,
    )
    serve(config, slot_count(settings.threads), settings.hard_limit_s, settings.request_timeout_s)
    return 0
