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

* :func:`pinned`: within the block (the estimate, the fix search, the gpu-memory rule, the
  rules of one check: code that never changes a config), a pydantic section's content key is
  computed once per object and :func:`derived` keeps what is computed from a section's
  contents alone (a model's module layout, parameter counts, LoRA's share) process-wide, keyed
  by the section's :func:`content_number`. Outside the block nothing is memoized by identity.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Unkeyable(Exception):
    """A value with no content key: the computation runs uncached."""


def frozen(value: Any) -> Hashable:
    """A hashable key equal for equal contents and types (pydantic models by their fields)."""
    kind = type(value)
    atom = _ATOMS.get(kind)
    if atom is not None:  # the common cases first, by exact type (the same keys as below)
        return (atom, value)
    if kind is float:
        return ("float", repr(value))
    if kind is dict:
        return _frozen_map(value)
    if kind is list or kind is tuple:
        return _frozen_items(value)
    if kind in _FIELDS or isinstance(value, BaseModel):
        memo = _PINNED.get()
        if memo is None:
            return _frozen_model(value)
        hit = memo.get(id(value))
        if hit is None or hit[0] is not value:
            # the entry holds the object: its id is not reused while the block lasts
            hit = memo[id(value)] = [value, _frozen_model(value), None, {}]
        key: Hashable = hit[1]
        return key
    if value is None or isinstance(value, bool | int | str):
        return (kind.__name__, value)
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, Mapping):
        return _frozen_map(value)
    if isinstance(value, list | tuple):
        return _frozen_items(value)
    raise Unkeyable(kind.__name__)


def _frozen_map(value: Mapping[Any, Any]) -> Hashable:
    atoms = _ATOMS  # frozen(x) inlined for the atoms (a raw config is mostly those)
    pairs = [
        (
            (ka, k) if (ka := atoms.get(type(k))) is not None else frozen(k),
            (va, v) if (va := atoms.get(type(v))) is not None else frozen(v),
        )
        for k, v in value.items()
    ]
    return ("map", tuple(pairs))


def _frozen_items(value: list[Any] | tuple[Any, ...]) -> Hashable:
    atoms = _ATOMS
    items = [(a, v) if (a := atoms.get(type(v))) is not None else frozen(v) for v in value]
    return (type(value).__name__, tuple(items))


# Exact types whose key is (type name, value): most fields of most sections.
_ATOMS: dict[type, str] = {t: t.__name__ for t in (type(None), bool, int, str)}


def _frozen_model(value: BaseModel) -> Hashable:
    cls = type(value)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(cls.model_fields)
    fields = value.__dict__
    atoms = _ATOMS
    items = [
        (k, (a, v) if (a := atoms.get(type(v))) is not None else frozen(v))
        for k in names
        for v in (fields[k] if k in fields else getattr(value, k),)
    ]
    extra = value.__pydantic_extra__
    if extra:
        items += [(k, frozen(v)) for k, v in sorted(extra.items())]
    return (cls, tuple(items))


# A model class's field names, in order (fixed once the class is built).
_FIELDS: dict[type[BaseModel], tuple[str, ...]] = {}


# id(section) -> [section, its frozen key, its number or None, {fields left out: number}]
Pins = dict[int, list[Any]]
_PINNED: ContextVar[Pins | None] = ContextVar("cfgcheck_pinned", default=None)  # see pinned()


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
DERIVED: BoundedCache[Hashable, Any] = BoundedCache(8192)


def pinned(pins: Pins | None = None) -> AbstractContextManager[None]:
    """Within the block, a pydantic section's content key is computed once per object (its
    fields are taken as they were when first keyed: code inside never changes a config) and
    :func:`derived` values are shared. Nested blocks share the outer one's keys; ``pins``
    (an empty dict at first) carries the keys over to a later block of the same configs."""
    return _Pinned(pins)


class _Pinned:
    """:func:`pinned`'s block: a plain class (entered once per rule of every check)."""

    __slots__ = ("_pins", "_token")

    def __init__(self, pins: Pins | None) -> None:
        self._pins = pins
        self._token: Token[Pins | None] | None = None

    def __enter__(self) -> None:
        if _PINNED.get() is None:
            self._token = _PINNED.set({} if self._pins is None else self._pins)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _PINNED.reset(self._token)
            self._token = None


class _Numbers:
    """Content key -> a number that stands for that content only, process-wide: numbers are
    never reused (when the table is full it starts afresh, and content seen again gets a new
    number: a miss of what was kept under the old one, never a wrong hit)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._ids: dict[Hashable, int] = {}
        self._next = 0
        self._lock = threading.Lock()

    def of(self, key: Hashable) -> int:
        with self._lock:
            found = self._ids.get(key)
            if found is None:
                if len(self._ids) >= self.size:
                    self._ids.clear()
                found = self._ids[key] = self._next
                self._next += 1
            return found


_NUMBERS = _Numbers(4096)


def content_number(section: BaseModel) -> int | None:
    """A number equal for sections of equal contents (:func:`frozen`), computed once per object
    within :func:`pinned`; None outside it or for a section with no content key."""
    if _PINNED.get() is None:
        return None
    try:
        entry = _entry(section)
    except Unkeyable:
        return None
    if entry[2] is None:
        entry[2] = _NUMBERS.of(entry[1])
    number: int = entry[2]
    return number


def _entry(section: BaseModel) -> list[Any]:
    """``section``'s entry in the current :func:`pinned` block (made on first use)."""
    pins = _PINNED.get()
    assert pins is not None  # callers check
    entry = pins.get(id(section))
    if entry is None or entry[0] is not section:
        frozen(section)  # makes the entry
        entry = pins[id(section)]
    return entry


def fields_number(section: BaseModel, leave_out: frozenset[str]) -> int | None:
    """:func:`content_number` of ``section`` without the fields named in ``leave_out``: a
    number standing for the other fields' contents (None outside :func:`pinned` or for a
    section with no content key)."""
    if content_number(section) is None:  # fills the section's entry
        return None
    entry = _entry(section)
    partial: dict[frozenset[str], int] = entry[3]
    if leave_out not in partial:
        pairs = tuple(pair for pair in entry[1][1] if pair[0] not in leave_out)
        partial[leave_out] = _NUMBERS.of(("fields", type(section), pairs))
    return partial[leave_out]


def number_of(value: Any) -> int:
    """A number standing for ``value``'s contents (:func:`frozen`) in this process, from the
    table :func:`content_number` draws on (a section's number is computed once per object
    within :func:`pinned`). Raises :class:`Unkeyable` for a value with no content key."""
    if isinstance(value, BaseModel):
        number = content_number(value)
        if number is not None:
            return number
    return _NUMBERS.of(frozen(value))


def derived(tag: str, section: BaseModel, args: Hashable, compute: Callable[[], V]) -> V:
    """``compute()``, a pure function of ``section``'s contents and ``args`` (named by
    ``tag``), shared within and across :func:`pinned` blocks; computed afresh outside one.
    The value is shared: it must be immutable (tuples, frozen dataclasses, numbers)."""
    number = content_number(section)
    if number is None:
        return compute()
    value: V = DERIVED.get_or((tag, number, args), compute)
    return value


@dataclass
class Scope:
    """The caches of one :func:`shared_scope`."""

    rules: BoundedCache[Hashable, tuple[Any, ...]] = field(
        default_factory=lambda: BoundedCache(16384)
    )
    fixes: BoundedCache[Hashable, Any] = field(default_factory=lambda: BoundedCache(4096))
    # rule id -> the sets of config attributes it was seen to read (see run_rules)
    rule_reads: dict[str, list[frozenset[str]]] = field(default_factory=dict)
    # what the checks of the block take as fixed: whether live GPUs are visible (rules/memory.py)
    facts: dict[str, Any] = field(default_factory=dict)


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
