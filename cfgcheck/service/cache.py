"""A cache of compositions for ``{config_name, overrides}`` requests.

Hydra composition takes tens of milliseconds and runs one at a time per process, so the same
request composed again is served from here. An entry is keyed by the request and stamped with
the size and modification time of every YAML file under the config directory: editing the
server's conf/ invalidates it. Validation itself is never cached (it reads tokenizer files).
"""

from __future__ import annotations

import copy
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Key = tuple[str, tuple[str, ...], str]


def conf_stamp(config_dir: Path) -> tuple[tuple[str, int, int], ...]:
    """(path, size, mtime) of every YAML file under ``config_dir``, sorted."""
    stamp = []
    for folder, _, files in os.walk(config_dir):
        for name in files:
            if name.endswith((".yaml", ".yml")):
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except OSError:  # a dangling link: composing reports it, one line
                    stamp.append((path, -1, -1))
                    continue
                stamp.append((path, st.st_size, st.st_mtime_ns))
    return tuple(sorted(stamp))


@dataclass
class _Entry:
    stamp: tuple[tuple[str, int, int], ...]
    config: dict[str, Any]
    extras: dict[str, Any]


class ComposeCache:
    """LRU of composed, resolved configs (and of values derived from them, e.g. source maps)."""

    def __init__(self, config_dir: Path, size: int = 256) -> None:
        self.config_dir = config_dir
        self.size = size
        self.hits = self.misses = 0
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(config_name: str, overrides: Sequence[str]) -> Key:
        return (config_name, tuple(overrides), os.getcwd())

    def config(self, key: Key, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """A private copy of the composed config for ``key``, built on a miss."""
        stamp = conf_stamp(self.config_dir)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.stamp == stamp:
                self._entries.move_to_end(key)
                self.hits += 1
                return copy.deepcopy(entry.config)
            self.misses += 1
        config = build()
        with self._lock:
            self._entries[key] = _Entry(stamp, copy.deepcopy(config), {})
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return config

    def extra(self, key: Key, name: str, build: Callable[[], Any]) -> Any:
        """A value derived from ``key``'s composition, built once while the entry lives."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and name in entry.extras:
                return entry.extras[name]
        value = build()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry.extras[name] = value
        return value
