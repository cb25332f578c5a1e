"""Axolotl plugins: the keys each one declares are known when ``plugins:`` lists it.

Axolotl merges a plugin's args model into its config schema only for the plugins the config
registers (axolotl-ai-cloud/axolotl at 067b021c, ``src/axolotl/integrations/base.py``
``PluginManager.get_input_args`` and ``src/axolotl/utils/config/__init__.py``
``validate_config``, which builds the schema from ``plugins:``). The table
``keys/axolotl_plugins.json`` is generated from ``src/axolotl/integrations/*/args.py`` by
``scripts/axolotl_plugin_keys.py``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from functools import lru_cache
from importlib import resources

from cfgcheck.findings import Finding
from cfgcheck.sources.base import Format, NativeConfig
from cfgcheck.sources.unknown import RULE, unknown_keys


@lru_cache(maxsize=1)
def plugin_keys() -> dict[str, frozenset[str]]:
    """Integration package name (``swanlab``) -> the keys its args model declares."""
    text = resources.files("cfgcheck.sources").joinpath("keys", "axolotl_plugins.json")
    table = json.loads(text.read_text("utf-8"))["plugins"]
    return {name: frozenset(keys) for name, keys in table.items()}


def listed(native: NativeConfig) -> set[str]:
    """The integration packages ``plugins:`` names (``axolotl.integrations.swanlab.SwanLabPlugin``
    -> ``swanlab``)."""
    value = native.get("plugins")
    entries = value if isinstance(value, list) else [value] if value else []
    out: set[str] = set()
    for entry in entries:
        parts = str(entry).split(".")
        if len(parts) > 2 and parts[:2] == ["axolotl", "integrations"]:
            out.add(parts[2])
    return out


def owner(key: str) -> str | None:
    for name, keys in plugin_keys().items():
        if key in keys:
            return name
    return None


def unknown_with_plugins(native: NativeConfig, fmt: Format) -> Iterator[Finding]:
    """``fmt``'s unknown keys, less the keys of the plugins the config lists; a key of a
    plugin the config does not list names that plugin."""
    active = listed(native)
    for f in unknown_keys(native, fmt):
        key = f.paths[0] if f.rule == RULE and f.paths else ""
        name = owner(key)
        if name is None:
            yield f
        elif name not in active:
            yield dataclasses.replace(
                f,
                message=f"{key} is a key of Axolotl's {name} plugin, which plugins: does not list: "
                "Axolotl reads a plugin's keys only for the plugins the config registers "
                "(src/axolotl/integrations/base.py PluginManager.get_input_args), so the "
                "setting is dropped",
                hint=f"add axolotl.integrations.{name}.<its Plugin class> to plugins:, "
                f"or remove {key}",
            )
