"""The garbage collector's settings while a batch of checks runs (a sweep's points).

A sweep allocates millions of short-lived objects (each step's allocator events are a list of
tuples, a megabyte a step) that form no cycles. With CPython's default thresholds (700
allocations a young collection, 10 of those a middle one) the collector then runs thousands of
times a sweep, and each full collection traverses everything alive: 10 % of a 1,000-point
sweep's CPU. While a batch runs, :func:`batch_collection`:

* freezes the objects alive before it (``gc.freeze``: Hydra's, the compositions, the imported
  modules) out of the collections, unless the process froze objects itself;
* raises the young generation's threshold to :data:`YOUNG` allocations, as mypy's ``main``
  does for a whole run (``gc.set_threshold(200 * 1000, 30, 30)``), never lowering one the
  process raised itself.

Both are process-wide, so batches running at once on several threads share them: the first
to enter sets them, the last to leave restores what it found. Cycles are still collected, only
less often.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 100_000

_lock = threading.Lock()
_active = 0
_saved: tuple[tuple[int, int, int], bool] | None = None  # thresholds, and whether we froze


@contextmanager
def batch_collection() -> Iterator[None]:
    """Collector settings for a batch of checks (see the module docstring)."""
    global _active, _saved
    with _lock:
        if _active == 0:
            thresholds = gc.get_threshold()
            froze = gc.get_freeze_count() == 0
            if froze:
                gc.freeze()
            if thresholds[0] < YOUNG:
                gc.set_threshold(YOUNG, thresholds[1], thresholds[2])
            _saved = (thresholds, froze)
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _saved is not None:
                (young, middle, old), froze = _saved
                gc.set_threshold(young, middle, old)
                if froze:
                    gc.unfreeze()
                _saved = None
