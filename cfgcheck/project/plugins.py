"""Team rules from installed packages: the ``cfgcheck.rules`` entry-point group.

A package declares, in its ``pyproject.toml``::

    [project.entry-points."cfgcheck.rules"]
    team = "team_rules.rules"

and ``team_rules/rules.py`` registers its rules with ``@cfgcheck.rule(...)`` when imported.
Every entry point is imported the first time the rule registry is used. A module that fails to
import, or registers an id that is already taken, is one :class:`~cfgcheck.errors.ConfigLoadError`
line naming the package (exit 2): a team rule is never silently dropped.

Listing entry points scans every installed distribution (about 20 ms on a venv with torch and
transformers, a tenth of a cached check), so the list is cached, keyed by the modification
times of the ``sys.path`` directories (installing or removing a package changes its
directory's): a hit costs a few ``stat`` calls. ``CFGCHECK_NO_CACHE=1`` lists them every time.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

from cfgcheck.diskcache import cache_root, read_entry, write_entry
from cfgcheck.errors import ConfigLoadError
from cfgcheck.safeio import Limits

GROUP = "cfgcheck.rules"

# (entry point name, its value "module[:attr]", the distribution that declares it)
Row = tuple[str, str, str]

_loaded = False
_failure: str | None = None


def _cache_file() -> Path | None:
    root = cache_root()
    return None if root is None else root / "plugins.json"


def _fingerprint() -> str:
    h = hashlib.sha256()
    for entry in sys.path:
        try:
            stamp = str(os.stat(entry or ".").st_mtime_ns)
        except OSError:
            stamp = "-"
        h.update(f"{entry}\0{stamp}\0".encode())
    return h.hexdigest()


def _scan() -> list[Row]:
    from importlib.metadata import entry_points

    rows: list[Row] = []
    for ep in entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        name = f"{dist.name} {dist.version}" if dist is not None else "an unnamed package"
        rows.append((ep.name, ep.value, name))
    return sorted(set(rows))


MAX_KEYS = 16  # interpreters / sys.path layouts remembered (a venv, its console script...)
_ENTRY_LIMITS = Limits(max_bytes=4 << 20, max_depth=8)


def discovered() -> list[Row]:
    """The ``cfgcheck.rules`` entry points of the installed packages (cached, see above)."""
    path = _cache_file()
    key = _fingerprint()
    known: dict[str, list[Row]] = {}
    if path is not None:
        try:
            entry: Any = read_entry(path, _ENTRY_LIMITS)
            known = {
                str(k): [(str(a), str(b), str(c)) for a, b, c in rows]
                for k, rows in entry["keys"].items()
            }
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            known = {}
        if key in known:
            return known[key]
    rows = _scan()
    if path is not None:
        known.pop(key, None)
        kept = dict(list(known.items())[-(MAX_KEYS - 1) :])
        kept[key] = rows
        write_entry(path, {"keys": kept})
    return rows


def load_plugins() -> None:
    """Import every rule plugin once per process. Raises :class:`ConfigLoadError` (the same
    line on every call) when one fails."""
    global _loaded, _failure
    if _failure is not None:
        raise ConfigLoadError(_failure)
    if _loaded:
        return
    _loaded = True  # a plugin that uses the registry while it loads must not recurse
    from importlib.metadata import EntryPoint

    from cfgcheck.rules._registry import DuplicateRuleError

    for name, value, package in discovered():
        where = f"rule plugin {name!r} of {package} ({GROUP} entry point {value})"
        try:
            EntryPoint(name, value, GROUP).load()
        except DuplicateRuleError as e:
            _failure = f"{where}: {e}"
        except Exception as e:
            _failure = f"{where} failed to import: {type(e).__name__}: {' '.join(str(e).split())}"
        if _failure is not None:
            raise ConfigLoadError(_failure)
