"""cfgcheck's cache folder and how an entry in it is read, written and pruned: one place for
the caches that keep work across runs (compositions, :mod:`cfgcheck.compose_cache`; model
traces, :mod:`cfgcheck.memory.trace_cache`; rule plugins, :mod:`cfgcheck.project.plugins`).

* Where: ``CFGCHECK_CACHE_DIR``, else ``$XDG_CACHE_HOME/cfgcheck`` or ``~/.cache/cfgcheck``;
  ``CFGCHECK_NO_CACHE`` turns every cache off. Each cache keeps a subfolder or a file there.
* Reading: through :mod:`cfgcheck.safeio` (a regular file, opened non-blocking, at most
  ``max_bytes``; JSON nesting and size bounded before the parser runs), so a planted FIFO or
  a huge file in the cache costs nothing but the hit. A hit touches the entry (most recently
  used).
* Writing: to a temporary file in the same folder, then renamed over the entry (atomic); a
  read-only or full disk costs only the next run's hit.
* Pruning: a folder keeps its ``keep`` most recently used entries.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from cfgcheck.safeio import Limits, UnsafeInput, decode, load_json_text, read_bytes


def cache_root() -> Path | None:
    """cfgcheck's cache folder, or ``None`` when ``CFGCHECK_NO_CACHE`` turns caching off."""
    if os.environ.get("CFGCHECK_NO_CACHE"):
        return None
    explicit = os.environ.get("CFGCHECK_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cfgcheck"


def read_entry(path: Path, limits: Limits) -> Any | None:
    """The JSON data of the entry ``path`` (touched as most recently used), or ``None`` when
    it is missing, not a regular file, larger than ``limits.max_bytes``, or malformed."""
    try:
        data = load_json_text(
            decode(read_bytes(path, limits.max_bytes), path.name), path.name, limits
        )
    except UnsafeInput:
        return None
    with contextlib.suppress(OSError):
        os.utime(path)
    return data


def write_entry(path: Path, data: Any, keep: int | None = None) -> None:
    """Write ``data`` as JSON to ``path`` atomically, then keep the folder's ``keep`` most
    recently used ``*.json`` entries (all of them when ``None``). Never raises ``OSError``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, separators=(",", ":"))
            os.replace(tmp, path)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
            raise
        if keep is not None:
            prune(path.parent, keep)
    except OSError:
        return


def prune(directory: Path, keep: int) -> None:
    """Delete all but the ``keep`` most recently used ``*.json`` entries of ``directory``."""
    entries = list(directory.glob("*.json"))
    if len(entries) <= keep:
        return
    for stale in sorted(entries, key=_used, reverse=True)[keep:]:
        with contextlib.suppress(OSError):
            stale.unlink(missing_ok=True)


def _used(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:  # pruned by another process meanwhile
        return 0
