"""Screening Hydra override strings from a request before composing with them.

Refused: sweeps and functions (``choice(...)``), ``hydra.*`` keys (``hydra.searchpath`` would
add directories to read configs from), interpolations in values (``name=${oc.env:SECRET}``),
and config-group choices that climb out of the config directory (``model=../../x``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cfgcheck.compose import one_line
from cfgcheck.service.errors import RequestError


def screen_overrides(overrides: Sequence[str], config_dir: Path) -> None:
    """Raise :class:`RequestError` (422) for the first override the service refuses."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except HydraException as e:
            raise RequestError(422, one_line(e)) from e
        reason = _refusal(override, config_dir)
        if reason:
            raise RequestError(422, f"override {text!r} refused: {reason}")


def _refusal(override: Any, config_dir: Path) -> str | None:
    key: str = override.key_or_group
    if key.replace("/", ".").split(".")[0] == "hydra":
        return "hydra.* settings cannot be changed through the service"
    if ".." in key.replace("/", ".").split("."):
        return "the key has an empty or '..' component"
    if override.is_sweep_override():
        return "sweeps and functions (choice, range, glob, ...) are not accepted; give one value"
    if override.is_delete():
        return None
    value = override.value()
    if any("${" in s for s in _strings(value)):
        return "interpolations (${...}) are not accepted in overrides; give the value itself"
    group = config_dir / key
    if isinstance(value, str) and group.is_dir():
        parts = value.replace("\\", "/").split("/")
        target = (group / f"{value}.yaml").resolve()
        if ".." in parts or value.startswith("/") or not target.is_relative_to(config_dir):
            return f"config group choices must name a file under {key}/"
    return None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
