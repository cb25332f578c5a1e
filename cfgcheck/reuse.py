"""Work shared between checks: bounded caches keyed by content, never by identity.

Two kinds of reuse, both exact (a hit returns what the computation would return):

* :func:`memo_estimate`: the memory estimate is a pure function of its three sections (it reads
  no file and no clock), so its results are kept process-wide, keyed by the sections' contents.
* :func:`shared_scope`: within one sweep (``with shared_scope():``), a built-in rule's findings
  are reused for every point whose sections that rule reads have the same contents, and a
  finding's fixes are verified once per distinct finding and config (see
  :mod:`cfgcheck.fixcheck`). These caches live only as long as the block: a rule that reads a
  tokenizer's files sees the files of this run, never a stale copy from an earlier request.

Keys are :func:`frozen` contents: types are part of the key (``1``, ``1.0`` and ``True`` differ,
floats by their ``repr`` so ``-0.0`` and ``0.0`` differ too); a value that has no content key
(an arbitrary object) is never cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Unkeyable(Exception):
    """A value with no content key: the computation runs uncached."""


def frozen(value: Any) -> Hashable:
    """A hashable key equal for equal contents and types (pydantic models by their fields)."""
    if value is None or isinstance(value, bool | int | str):
        return (type(value).__name__, value)
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, BaseModel):
        items = [(k, getattr(value, k)) for k in type(value).model_fields]
        items += sorted((value.model_extra or {}).items())
        return (type(value), tuple((k, frozen(v)) for k, v in items))
    if isinstance(value, Mapping):
        return ("map", tuple((frozen(k), frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(frozen(v) for v in value))
    raise Unkeyable(type(value).__name__)


class BoundedCache(Generic[K, V]):
    """A least-recently-used mapping of at most ``size`` entries; counts hits and misses.
    Safe to share between threads (the service validates on several): a lock guards the
    mapping, never the computation (two threads may compute the same value; both are equal)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or(self, key: K, compute: Callable[[], V]) -> V:
        with self._lock:
            if key in self._data:
                self.hits += 1
                self._data.move_to_end(key)
                return self._data[key]
            self.misses += 1
        value = compute()
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)
        return value

    def get(self, key: K) -> V | None:
        """The value of ``key`` (a hit), or None (not counted as a miss)."""
        with self._lock:
            if key not in self._data:
                return None
            self.hits += 1
            self._data.move_to_end(key)
            return self._data[key]

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


ESTIMATES: BoundedCache[Hashable, Any] = BoundedCache(4096)


@dataclass
class Scope:
    """The caches of one :func:`shared_scope`."""

    rules: BoundedCache[Hashable, tuple[Any, ...]] = field(
        default_factory=lambda: BoundedCache(16384)
    )
    fixes: BoundedCache[Hashable, Any] = field(default_factory=lambda: BoundedCache(4096))
    # rule id -> the sets of config attributes it was seen to read (see run_rules)
    rule_reads: dict[str, list[frozenset[str]]] = field(default_factory=dict)
    _ids: dict[Hashable, int] = field(default_factory=dict)
    _next: int = 0

    def intern(self, key: Hashable) -> int:
        """A small number for a content key (hashing a deep key once per check, not once per
        rule). Numbers are never reused: when the table is full it starts afresh, and content
        seen again gets a new number (a cache miss, never a wrong hit)."""
        found = self._ids.get(key)
        if found is None:
            if len(self._ids) >= MAX_INTERNED:
                self._ids.clear()
            found = self._ids[key] = self._next
            self._next += 1
        return found


MAX_INTERNED = 65536


_SCOPE: ContextVar[Scope | None] = ContextVar("cfgcheck_shared_scope", default=None)


@contextmanager
def shared_scope() -> Iterator[Scope]:
    """Within the block, rule results and fix verifications are shared between checks."""
    scope = Scope()
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


def current_scope() -> Scope | None:
    return _SCOPE.get()
