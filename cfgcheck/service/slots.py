"""Shared memory between the supervisor of ``cfgcheck serve`` and each worker process.

**The in-flight table** of one worker: a pair of ``double`` per running validation, the
``time.monotonic()`` instant it started (0.0 when free) and its client's key
(:func:`client_key`). The supervisor (:mod:`cfgcheck.service.supervisor`) created it for this
worker and reads it every half second: a request running past the hard limit gets its worker
killed and replaced, whatever the request is doing (the cooperative budget,
:mod:`cfgcheck.budget`, cannot stop one long C call; a watchdog thread in the worker cannot
either while that call holds the GIL). ``CLOCK_MONOTONIC`` is one clock for every process of
the machine, so the supervisor compares the instants with its own clock. The worker reads the
table too: once a request has outlived its deadline, the worker drains (:func:`drain`).

**The offenders table**, one for all workers: per client key, the instant until which the
client is refused, and until which its last strike counts. The supervisor adds the clients
whose requests got a worker killed (:mod:`cfgcheck.service.supervisor`); every worker refuses
their validations until then (429), so one client cannot kill worker after worker.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, MutableSequence
from typing import Any

# Entries of the offenders table (the one expiring first is reused when all are taken), and
# the doubles of each: client key, refused until, strike counts until.
OFFENDER_SLOTS = 256
OFFENDER_FIELDS = 3

# What the supervisor attached for this process (None outside a supervised worker: tests,
# the library): the in-flight table, the offenders table, and how to drain this worker.
_inflight: MutableSequence[float] | None = None
_offenders: MutableSequence[float] | None = None
_drain: Callable[[], None] | None = None


def slot_count(threads: int) -> int:
    """Slots a worker of ``threads`` threads needs: its threads, and as many again for threads
    of a pool the app released while their requests still ran (see ``WorkerPool``)."""
    return 2 * threads


def client_key(client: str) -> float:
    """A number for ``client``'s address, the same in every process (48 bits: exact in a
    double; never 0)."""
    digest = hashlib.blake2b(client.encode("utf-8", "replace"), digest_size=6).digest()
    return float(int.from_bytes(digest, "big") | 1)


def attach(
    inflight: MutableSequence[float],
    offenders: MutableSequence[float],
    drain: Callable[[], None] | None = None,
) -> None:
    """Use the supervisor's shared tables for this process, and ``drain`` to stop taking
    connections (uvicorn's graceful exit)."""
    global _inflight, _offenders, _drain
    _inflight, _offenders, _drain = inflight, offenders, drain


def drain_hook() -> Callable[[], None] | None:
    return _drain


class Slots:
    """Claim a slot when a validation starts, release it when it ends."""

    def __init__(self, threads: int) -> None:
        size = 2 * slot_count(threads)
        table = _inflight
        self.table: MutableSequence[float]
        if table is not None and len(table) >= size:
            self.table, self.supervised = table, True
        else:
            self.table, self.supervised = [0.0] * size, False
        self._free = list(range(len(self.table) // 2 - 1, -1, -1))
        self._lock = threading.Lock()

    def claim(self, client: str = "unknown") -> int | None:
        """A slot stamped with now; ``None`` when every slot is taken (not recorded then)."""
        with self._lock:
            if not self._free:
                return None
            index = self._free.pop()
        self.table[2 * index + 1] = client_key(client)
        self.table[2 * index] = time.monotonic()
        return index

    def release(self, index: int | None) -> None:
        if index is None:
            return
        self.table[2 * index] = 0.0
        with self._lock:
            self._free.append(index)

    def oldest(self) -> float | None:
        """Seconds the longest-running validation has run (``None`` when none runs)."""
        return oldest(self.table)[0]

    def stuck(self, after_s: float) -> bool:
        """Whether a validation has run longer than ``after_s`` seconds."""
        age = self.oldest()
        return age is not None and age > after_s


def running(table: Any) -> list[tuple[float, float]]:
    """(seconds it has run, client key) of each request of an in-flight ``table``, the
    longest-running first."""
    values = list(table)
    now = time.monotonic()
    pairs = [(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2) if values[i] > 0.0]
    return [(now - start, key) for start, key in sorted(pairs)]


def oldest(table: Any) -> tuple[float | None, float]:
    """(seconds the oldest request of an in-flight ``table`` has run, its client key)."""
    requests = running(table)
    return requests[0] if requests else (None, 0.0)


class Offenders:
    """The offenders table: per client key, the instant until which it is refused and the
    instant until which a strike counts (:meth:`strike`)."""

    def __init__(self, table: MutableSequence[float] | None = None) -> None:
        shared = _offenders if table is None else table
        self.table: MutableSequence[float] = (
            shared if shared is not None else [0.0] * (OFFENDER_FIELDS * OFFENDER_SLOTS)
        )

    def _entry(self, key: float) -> int:
        entries = range(0, len(self.table) - OFFENDER_FIELDS + 1, OFFENDER_FIELDS)
        index = next((i for i in entries if self.table[i] == key), None)
        if index is None:  # a free or expired entry, else the one that expires first
            index = min(entries, key=lambda i: max(self.table[i + 1], self.table[i + 2]))
            self.table[index + 1] = self.table[index + 2] = 0.0
            self.table[index] = key
        return index

    def refuse(self, key: float, now: float, seconds: float) -> None:
        """Refuse the client of ``key`` for ``seconds`` from ``now`` (``time.monotonic()``)."""
        self.table[self._entry(key) + 1] = now + seconds

    def strike(self, key: float, now: float, seconds: float) -> bool:
        """A strike against the client of ``key``: refused for ``seconds`` (and ``True``) when
        its previous strike was less than ``seconds`` ago."""
        index = self._entry(key)
        if self.table[index + 2] > now:
            self.table[index + 1] = now + seconds
            return True
        self.table[index + 2] = now + seconds
        return False

    def refused_for(self, client: str) -> float:
        """Seconds ``client`` is still refused (0 when it is not)."""
        key = client_key(client)
        now = time.monotonic()
        values = list(self.table)
        for i in range(0, len(values) - OFFENDER_FIELDS + 1, OFFENDER_FIELDS):
            if values[i] == key and values[i + 1] > now:
                return values[i + 1] - now
        return 0.0
