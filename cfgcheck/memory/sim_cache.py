"""Replays of an event sequence kept by the sequence's content, in the process and on disk.

A replay (:func:`cfgcheck.memory.allocsim.replay`) is a pure function of the events, the
allocator settings, the capacity and the simulator's code, so it is keyed by exactly those:
the SHA-256 of the events (their ids, sizes and order), of the settings' ``repr`` and of the
capacity, with the bytes of ``allocsim.py`` and ``allocconf.py`` and
:data:`FORMAT` in the on-disk key. Two configs whose steps make the same events (a field the
generator does not read, or two fields that mean the same length) share one replay, and a
second ``cfgcheck check`` of a run replays nothing. The key never comes from the config
fields themselves: a change to the event generator makes new events, hence a new key, so no
entry can outlive the code that made it.

An entry keeps what :func:`~cfgcheck.memory.allocsim.replay` returns: the figures and the
repetitions its gradient-accumulation blocks needed (which
:func:`cfgcheck.memory.simulated.simulate_step` uses to share one replay between
accumulation counts).

On disk (:mod:`cfgcheck.diskcache`): ``<cache>/simulations/<sha256>.json``, one small entry per
replay (``needed`` and the six figures of :class:`~cfgcheck.memory.allocsim.SimResult`),
read bounded, written atomically, the :data:`MAX_ENTRIES` most recently used kept. An entry of
another key, format or shape is ignored and rewritten. ``CFGCHECK_NO_CACHE=1`` turns it off,
``CFGCHECK_CACHE_DIR`` moves it, and it is off wherever the trace cache's is
(:func:`cfgcheck.memory.trace_cache.use_disk`: the HTTP service writes no cache).
"""

from __future__ import annotations

import hashlib
import marshal
from collections.abc import Hashable
from functools import cache
from pathlib import Path

from cfgcheck.diskcache import read_entry, write_entry
from cfgcheck.memory.allocsim import AllocConf, Event, SimResult, replay
from cfgcheck.reuse import ESTIMATES
from cfgcheck.safeio import Limits

FORMAT = 1  # bump when an entry's layout changes
MAX_ENTRIES = 1024  # entries kept on disk (~200 bytes each; each write lists the folder)
_LIMITS = Limits(max_bytes=4096, max_depth=4, max_nodes=256, max_keys=64)
_HERE = Path(__file__).resolve().parent
_CODE: tuple[Path, ...] = (_HERE / "allocsim.py", _HERE / "allocconf.py")

Found = tuple[SimResult, int | None]


@cache
def _code_hash() -> bytes:
    h = hashlib.sha256(f"format={FORMAT}\0".encode())
    for path in _CODE:
        try:
            h.update(hashlib.sha256(path.read_bytes()).digest())
        except OSError:  # pragma: no cover - a zipped install: the version stands for it
            from cfgcheck import __version__

            h.update(__version__.encode())
    return h.digest()


# marshal's format 2 writes every tuple and int out in full; formats 3 and 4 also look every
# shared object up in a table to write a back-reference, which costs twice as long on a
# freshly generated step (its sizes are shared ints) and makes the bytes depend on which
# objects happen to be shared, not only on the values.
MARSHAL_VERSION = 2


def content_key(events: list[Event], conf: AllocConf, capacity: int | None) -> str:
    """The replay's key: SHA-256 over the events (``marshal``'s bytes of the list: its ints
    and their order), the settings and the capacity."""
    h = hashlib.sha256(marshal.dumps(events, MARSHAL_VERSION))
    h.update(f"\0marshal={MARSHAL_VERSION}\0{conf!r}\0{capacity!r}".encode())
    return h.hexdigest()


def replay_cached(events: list[Event], conf: AllocConf, capacity: int | None) -> Found:
    """:func:`cfgcheck.memory.allocsim.replay` of ``events``, from the caches when they hold
    it (see the module docstring)."""
    key = content_key(events, conf, capacity)
    mem = ("replay", key)
    kept: Found | None = ESTIMATES.get(mem)
    if kept is not None:
        return kept
    path = _entry_path(key)
    found = _load(path, key) if path is not None else None
    if found is None:
        found = replay(events, conf, capacity)
        if path is not None:
            _store(path, key, found)
    result = found
    ESTIMATES.get_or(mem, lambda: result)
    return result


@cache
def _package_hash() -> bytes:
    """SHA-256 over everything a step's events can depend on beside the config: the bytes of
    every module of cfgcheck (the generator reaches across the package: the schema's
    defaults, the model tables, the data pipeline), the shipped model traces, and the
    installed transformers and torch (a generically read model's trace depends on them)."""
    from cfgcheck.memory.trace_cache import installed

    root = _HERE.parent
    h = hashlib.sha256(f"format={FORMAT}\0".encode())
    try:
        files = sorted([*root.rglob("*.py"), *(_HERE / "traces").glob("*")])
        for path in files:
            h.update(path.relative_to(root).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    except OSError:  # pragma: no cover - a zipped install: the version stands for it
        from cfgcheck import __version__

        h.update(__version__.encode())
    for package in ("transformers", "torch"):
        h.update(f"{package}={installed(package)}\0".encode())
    return h.digest()


StepFound = tuple[int, SimResult, int | None]


def load_step(key: Hashable) -> StepFound | None:
    """The (events, replay, needed) stored for a step's content key (the config fields the
    events are generated from and the capacity, :func:`cfgcheck.memory.simulated._keys`),
    or None. The key is a :func:`cfgcheck.reuse.frozen` value, whose ``repr`` is the same in
    every process; the package's bytes are part of it (:func:`_package_hash`), so code that
    would generate other events never reads the entry."""
    path, digest = _step_path(key)
    if path is None:
        return None
    entry = read_entry(path, _LIMITS)
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != digest:
        return None
    found = _figures(entry)
    n = _ints([entry.get("events")])
    if found is None or n is None:
        return None
    return n[0], found[0], found[1]


def store_step(key: Hashable, found: StepFound) -> None:
    """Keep a step's (events, replay, needed) on disk under its content key."""
    path, digest = _step_path(key)
    if path is not None:
        _write(path, digest, (found[1], found[2]), {"events": found[0]})


def _step_path(key: Hashable) -> tuple[Path | None, str]:
    where = sim_dir()
    if where is None:
        return None, ""
    digest = hashlib.sha256(repr(key).encode()).hexdigest()
    name = hashlib.sha256(_package_hash() + b"step\0" + digest.encode()).hexdigest()
    return where / f"{name}.json", digest


def sim_dir() -> Path | None:
    """The on-disk store's folder, or None where it is off."""
    from cfgcheck.memory.trace_cache import trace_dir

    traces = trace_dir()  # None: CFGCHECK_NO_CACHE, or the service turned disk caches off
    return None if traces is None else traces.parent / "simulations"


def _entry_path(key: str) -> Path | None:
    where = sim_dir()
    if where is None:
        return None
    name = hashlib.sha256(_code_hash() + key.encode()).hexdigest()
    return where / f"{name}.json"


def _ints(value: object, n: int | None = None) -> list[int] | None:
    if not isinstance(value, list) or (n is not None and len(value) != n):
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        return None
    return value


def _load(path: Path, key: str) -> Found | None:
    entry = read_entry(path, _LIMITS)
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != key:
        return None
    return _figures(entry)


def _figures(entry: dict[str, object]) -> Found | None:
    figures, needed = _ints(entry.get("result"), 6), entry.get("needed", False)
    if figures is None or not (needed is None or _ints([needed]) is not None):
        return None
    return SimResult(*figures), needed  # type: ignore[return-value]


def _store(path: Path, key: str, found: Found) -> None:
    _write(path, key, found, {})


def _write(path: Path, key: str, found: Found, extra: dict[str, int]) -> None:
    r, needed = found
    figures = [
        r.peak_reserved,
        r.peak_allocated,
        r.reserved_at_end,
        r.retries,
        r.ooms,
        r.segments,
    ]
    entry = {"format": FORMAT, "key": key, **extra, "needed": needed, "result": figures}
    write_entry(path, entry, MAX_ENTRIES)
