"""Settings of the validator service: where configs come from and the limits on requests.

The admission limits read their defaults from the environment (``CFGCHECK_SERVE_*``, below),
so a container or a process manager can set them without changing the command line;
``cfgcheck serve``'s options override them.
"""

from __future__ import annotations

import ipaddress
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

# Media types POST /v1/validate accepts, by the parser that reads them.
JSON_TYPES: tuple[str, ...] = ("application/json",)
YAML_TYPES: tuple[str, ...] = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")

# Seconds past the request timeout before the supervisor kills a worker whose request is still
# running (a request the cooperative budget could not stop: it is inside one long C call).
HARD_TIMEOUT_MARGIN_S = 5.0

ENV_THREADS = "CFGCHECK_SERVE_THREADS"
ENV_MAX_QUEUE = "CFGCHECK_SERVE_MAX_QUEUE"
ENV_MAX_PER_CLIENT = "CFGCHECK_SERVE_MAX_PER_CLIENT"
ENV_TRUSTED_PROXIES = "CFGCHECK_SERVE_TRUSTED_PROXIES"
ENV_HARD_TIMEOUT = "CFGCHECK_SERVE_HARD_TIMEOUT"


class SettingsError(ValueError):
    """A service setting is out of range (raised when the app is created)."""


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as e:
        raise SettingsError(f"{name}={raw!r} is not a whole number") from e


def _env_float(name: str) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError as e:
        raise SettingsError(f"{name}={raw!r} is not a number of seconds") from e


def _env_list(name: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in os.environ.get(name, "").split(",") if p.strip())


@dataclass(frozen=True)
class ServiceSettings:
    """What one validator service may read and how much work one request may cause.

    ``allowed_roots`` confine every tokenizer/data path a submitted config names; relative
    paths resolve against the working directory, as ``cfgcheck check`` resolves them. When
    empty, the only root is the working directory at the time the app is created.

    Per worker process: ``threads`` validation threads, at most ``max_queue`` validations
    waiting for one (503 past it), at most ``max_per_client`` validations in flight (running
    or queued) per client address (429 past it). A client's address is the connection's
    peer; ``X-Forwarded-For`` is read only when the peer is one of ``trusted_proxies``
    (addresses or networks). ``hard_timeout_s`` (default: ``request_timeout_s`` + 5 s) is the
    limit the supervisor of ``cfgcheck serve`` enforces by killing the worker process.
    ``workers`` is the old name of ``threads`` (deprecated).
    """

    config_dir: Path = Path("conf")
    allowed_roots: tuple[Path, ...] = ()
    max_body_bytes: int = 1_000_000
    max_depth: int = 16
    max_nodes: int = 20_000
    request_timeout_s: float = 10.0
    threads: int = field(default_factory=lambda: _env_int(ENV_THREADS, 4))
    max_queue: int = field(default_factory=lambda: _env_int(ENV_MAX_QUEUE, 16))
    max_per_client: int = field(default_factory=lambda: _env_int(ENV_MAX_PER_CLIENT, 2))
    trusted_proxies: tuple[str, ...] = field(default_factory=lambda: _env_list(ENV_TRUSTED_PROXIES))
    hard_timeout_s: float | None = field(default_factory=lambda: _env_float(ENV_HARD_TIMEOUT))
    offline: bool = True
    # A team's cfgcheck.RunConfig subclass ("pkg.mod:Class"), imported when the app is created;
    # a request never names one (nor a settings file).
    schema: str | None = None
    workers: int | None = None  # deprecated: the old name of ``threads``

    def __post_init__(self) -> None:
        if self.workers is not None:
            warnings.warn(
                "ServiceSettings(workers=N) is deprecated: it means validation threads per "
                "worker process; use ServiceSettings(threads=N)",
                DeprecationWarning,
                stacklevel=3,
            )
            object.__setattr__(self, "threads", self.workers)
            object.__setattr__(self, "workers", None)
        if self.hard_timeout_s is None:
            object.__setattr__(
                self, "hard_timeout_s", self.request_timeout_s + HARD_TIMEOUT_MARGIN_S
            )
        positive = {
            "max_body_bytes": self.max_body_bytes,
            "max_depth": self.max_depth,
            "max_nodes": self.max_nodes,
            "request_timeout_s": self.request_timeout_s,
            "threads": self.threads,
            "max_per_client": self.max_per_client,
        }
        bad = [f"{name}={value}" for name, value in positive.items() if value <= 0]
        if self.max_queue < 0:
            bad.append(f"max_queue={self.max_queue}")
        if bad:
            raise SettingsError(f"service settings must be positive: {', '.join(bad)}")
        if self.hard_limit_s <= self.request_timeout_s:
            raise SettingsError(
                f"hard_timeout_s={self.hard_limit_s:g} must be longer than "
                f"request_timeout_s={self.request_timeout_s:g}"
            )
        for proxy in self.trusted_proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError as e:
                raise SettingsError(
                    f"trusted proxy {proxy!r} is not an IP address or network"
                ) from e

    @property
    def hard_limit_s(self) -> float:
        """``hard_timeout_s`` (never ``None`` once the settings exist)."""
        return (
            self.request_timeout_s + HARD_TIMEOUT_MARGIN_S
            if self.hard_timeout_s is None
            else self.hard_timeout_s
        )

    @property
    def max_in_flight(self) -> int:
        """Validations one worker process holds at most: running plus queued."""
        return self.threads + self.max_queue

    def roots(self) -> tuple[Path, ...]:
        """The allowed roots, absolute with symlinks resolved (the working directory if none)."""
        return tuple(p.expanduser().resolve() for p in (self.allowed_roots or (Path.cwd(),)))
