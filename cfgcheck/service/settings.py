"""Settings of the validator service: where configs come from and the limits on requests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Media types POST /v1/validate accepts, by the parser that reads them.
JSON_TYPES: tuple[str, ...] = ("application/json",)
YAML_TYPES: tuple[str, ...] = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")


class SettingsError(ValueError):
    """A service setting is out of range (raised when the app is created)."""


@dataclass(frozen=True)
class ServiceSettings:
    """What one validator service may read and how much work one request may cause.

    ``allowed_roots`` confine every tokenizer/data path a submitted config names; relative
    paths resolve against the working directory, as ``cfgcheck check`` resolves them. When
    empty, the only root is the working directory at the time the app is created.
    """

    config_dir: Path = Path("conf")
    allowed_roots: tuple[Path, ...] = ()
    max_body_bytes: int = 1_000_000
    max_depth: int = 16
    max_nodes: int = 20_000
    request_timeout_s: float = 10.0
    workers: int = 4
    max_pending: int = 64
    offline: bool = True
    # A team's cfgcheck.RunConfig subclass ("pkg.mod:Class"), imported when the app is created;
    # a request never names one (nor a settings file).
    schema: str | None = None

    def __post_init__(self) -> None:
        positive = {
            "max_body_bytes": self.max_body_bytes,
            "max_depth": self.max_depth,
            "max_nodes": self.max_nodes,
            "request_timeout_s": self.request_timeout_s,
            "workers": self.workers,
            "max_pending": self.max_pending,
        }
        bad = [f"{name}={value}" for name, value in positive.items() if value <= 0]
        if bad:
            raise SettingsError(f"service settings must be positive: {', '.join(bad)}")

    def roots(self) -> tuple[Path, ...]:
        """The allowed roots, absolute with symlinks resolved (the working directory if none)."""
        return tuple(p.expanduser().resolve() for p in (self.allowed_roots or (Path.cwd(),)))
