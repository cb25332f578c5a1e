"""A per-request CPU budget, enforced cooperatively where the work loops.

The service runs each request in a worker (a thread of a pool, or a thread of a worker
process: the budget is per *thread*, so it works with both). :func:`cpu_budget` opens a budget
for the current thread: CPU seconds (``time.thread_time``: what this request burned, not the
wall time other requests or other processes took) and, optionally, a wall-clock deadline.
The loops that can run long on hostile input call :func:`check`: every rule run (so a fix
check that revalidates is checked too), the interpolation counter, the override screen and
the stages of a service request. Past the budget, :class:`BudgetExceeded` (a one-line
:class:`~cfgcheck.errors.ConfigLoadError`) unwinds the request and the worker is free again.

Outside a budget (the CLI, the hook, the library) :func:`check` costs one attribute lookup
and never raises. Work inside one C call (a parser, the tokenizers library) is not
interrupted: those are bounded by size before they are called (:mod:`cfgcheck.safeio`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from cfgcheck.errors import ConfigLoadError


class BudgetExceeded(ConfigLoadError):
    """The request used its CPU budget (or passed its deadline). One line."""


_local = threading.local()


@contextmanager
def cpu_budget(seconds: float | None, deadline: float | None = None) -> Iterator[None]:
    """Run the ``with`` block under ``seconds`` of this thread's CPU time and, with
    ``deadline`` (a ``time.monotonic()`` instant), until then. Nested budgets keep the
    tighter one."""
    outer = getattr(_local, "budget", None)
    limit = None if seconds is None else time.thread_time() + seconds
    if outer is not None:
        limit = outer[0] if limit is None or (outer[0] is not None and outer[0] < limit) else limit
        if outer[1] is not None and (deadline is None or outer[1] < deadline):
            deadline = outer[1]
    _local.budget = (limit, deadline, seconds)
    try:
        yield
    finally:
        _local.budget = outer


def check(where: str) -> None:
    """Raise :class:`BudgetExceeded` when this thread's budget is spent."""
    budget = getattr(_local, "budget", None)
    if budget is None:
        return
    limit, deadline, seconds = budget
    if limit is not None and time.thread_time() > limit:
        raise BudgetExceeded(
            f"the request used its CPU budget of {seconds:g} s while {where}; stopped"
        )
    if deadline is not None and time.monotonic() > deadline:
        raise BudgetExceeded(f"the request passed its deadline while {where}; stopped")


def remaining() -> float | None:
    """CPU seconds left in this thread's budget (``None`` outside one)."""
    budget = getattr(_local, "budget", None)
    if budget is None or budget[0] is None:
        return None
    return float(budget[0] - time.thread_time())
