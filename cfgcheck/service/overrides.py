"""Screening Hydra override strings from a request before composing with them.

Refused: sweeps and functions (``choice(...)``), ``hydra.*`` keys (``hydra.searchpath`` would
add directories to read configs from), interpolations in values (``name=${oc.env:SECRET}``),
and config-group choices that climb out of the config directory (``model=../../x``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cfgcheck.compose import one_line
from cfgcheck.service.errors import RequestError

# Hydra's override parser (pure Python, superlinear on lists): ~0.05 s for a 1,000-character
# list, 0.8 s for 4,000. A request's overrides are bounded in total characters (linear, at
# once) and in the CPU their screening parse took (it predicts the parse under the lock).
MAX_TOTAL_CHARS = 4_000
MAX_PARSE_CPU_S = 0.25
MAX_KEY_CHARS = 200  # Hydra turns group keys into file names (255 bytes at most)


def screen_overrides(overrides: Sequence[str], config_dir: Path) -> None:
    """Raise :class:`RequestError` (422) for the first override the service refuses."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from cfgcheck.compose import INPUT_ERRORS
    from cfgcheck.compose import screen_overrides as bound_overrides
    from cfgcheck.errors import ConfigLoadError

    total = sum(len(text) for text in overrides)
    if total > MAX_TOTAL_CHARS:
        raise RequestError(
            422,
            f"the overrides hold {total:,} characters, over the {MAX_TOTAL_CHARS:,} one request "
            f"may send (Hydra parses about 20,000 a second, under the compose lock): put long "
            f"values in a config file",
        )
    try:
        bound_overrides(overrides)  # lengths and nesting, before Hydra's recursive parser
    except ConfigLoadError as e:
        raise RequestError(422, str(e)) from e
    parser = OverridesParser.create()
    started = time.thread_time()
    for text in overrides:
        _parse_budget(started)
        if "${" in text:
            raise RequestError(
                422,
                f"override {text!r} refused: interpolations (${{...}}) are not accepted in "
                f"overrides; give the value itself",
            )
        try:
            (override,) = parser.parse_overrides([text])
        except (HydraException, *INPUT_ERRORS) as e:  # type: ignore[misc]
            raise RequestError(422, one_line(e)) from e
        reason = _refusal(override, config_dir)
        if reason:
            raise RequestError(422, f"override {text!r} refused: {reason}")
    _parse_budget(started)


def _parse_budget(started: float) -> None:
    """Hydra parses the overrides again while it composes, under the compose lock: the
    screen (outside the lock) measures that cost and refuses it before the lock is taken."""
    if time.thread_time() - started > MAX_PARSE_CPU_S:
        raise RequestError(
            422,
            f"the overrides took more than {MAX_PARSE_CPU_S:g} s of CPU to parse; the service "
            f"composes under one lock per process: send fewer or shorter values",
        )


def _refusal(override: Any, config_dir: Path) -> str | None:
    key: str = override.key_or_group
    if len(key) > MAX_KEY_CHARS:
        return f"the key is longer than {MAX_KEY_CHARS} characters"
    if key.replace("/", ".").split(".")[0] == "hydra":
        return "hydra.* settings cannot be changed through the service"
    if ".." in key.replace("/", ".").split("."):
        return "the key has an empty or '..' component"
    if override.is_sweep_override():
        return "sweeps and functions (choice, range, glob, ...) are not accepted; give one value"
    if override.is_delete():
        return None
    value = override.value()
    if value is None and _is_group(config_dir, key):
        return f"{key} is a config group: choose one of its options (null selects nothing)"
    strings = _strings(value)
    if any("${" in s for s in strings):
        return "interpolations (${...}) are not accepted in overrides; give the value itself"
    if _is_group(config_dir, key):
        # Every shape a group choice can take (a string, a list `model=[a,b]`, `+group=[...]`,
        # a dict's keys and values): each string must name an option file inside the group.
        for choice in strings:
            reason = group_choice_problem(config_dir, key, choice)
            if reason:
                return reason
    return None


def _is_group(config_dir: Path, key: str) -> bool:
    try:
        return (config_dir / key).is_dir()
    except (OSError, ValueError):
        return False


def group_choice_problem(config_dir: Path, group: str, choice: str) -> str | None:
    """Why ``choice`` may not be selected in ``group`` (a file outside the group), or None."""
    parts = choice.replace("\\", "/").split("/")
    if ".." in parts or choice.startswith(("/", "~")) or "\x00" in choice:
        return f"config group choices must name a file under {group}/"
    if any(len(p.encode("utf-8", "surrogateescape")) > 200 for p in parts):
        return f"config group choice {choice[:40]!r}... has a name over 200 bytes"
    try:
        target = (config_dir / group / f"{choice}.yaml").resolve()
    except (OSError, RuntimeError, ValueError):
        return f"config group choice {choice[:40]!r} cannot be resolved"
    if not target.is_relative_to(config_dir):
        return f"config group choices must name a file under {group}/"
    return None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
