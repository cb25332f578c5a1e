"""The in-flight table of one worker process: a slot per running validation, holding the
``time.monotonic()`` instant it started (0.0 when free).

Under ``cfgcheck serve`` the table lives in shared memory that the supervisor created for this
worker (:mod:`cfgcheck.service.supervisor`) and reads every half second: a request running
past the hard limit gets its worker killed and replaced, whatever the request is doing (the
cooperative budget, :mod:`cfgcheck.budget`, cannot stop one long C call; a watchdog thread in
the worker cannot either while that call holds the GIL). ``CLOCK_MONOTONIC`` is one clock for
every process of the machine, so the supervisor compares the instants with its own clock.
The worker reads the table too: while a request has outlived its deadline it stops taking
new validations (:meth:`Slots.stuck`), so few requests share the fate of a killed worker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import MutableSequence
from typing import Any

# The supervisor's table for this process, attached before the app is built (None outside a
# supervised worker: tests, the library).
_shared: MutableSequence[float] | None = None


def slot_count(threads: int) -> int:
    """Slots a worker of ``threads`` threads needs: its threads, and as many again for threads
    of a pool the app released while their requests still ran (see ``WorkerPool``)."""
    return 2 * threads


def attach(table: MutableSequence[float]) -> None:
    """Use ``table`` (the supervisor's shared array) for this process's slots."""
    global _shared
    _shared = table


def shared() -> Any:
    return _shared


class Slots:
    """Claim a slot when a validation starts, release it when it ends."""

    def __init__(self, threads: int) -> None:
        size = slot_count(threads)
        table = _shared
        self.table: MutableSequence[float] = (
            table if table is not None and len(table) >= size else [0.0] * size
        )
        self.supervised = table is not None
        self._free = list(range(len(self.table) - 1, -1, -1))
        self._lock = threading.Lock()

    def claim(self) -> int | None:
        """A slot stamped with now; ``None`` when every slot is taken (not recorded then)."""
        with self._lock:
            if not self._free:
                return None
            index = self._free.pop()
        self.table[index] = time.monotonic()
        return index

    def release(self, index: int | None) -> None:
        if index is None:
            return
        self.table[index] = 0.0
        with self._lock:
            self._free.append(index)

    def oldest(self) -> float | None:
        """Seconds the longest-running validation has run (``None`` when none runs)."""
        starts = [t for t in self.table if t > 0.0]
        return time.monotonic() - min(starts) if starts else None

    def stuck(self, after_s: float) -> bool:
        """Whether a validation has run longer than ``after_s`` seconds."""
        age = self.oldest()
        return age is not None and age > after_s
