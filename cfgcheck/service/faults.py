"""Test-only fault injection: a request that sits in one long C call.

The hard limit of ``cfgcheck serve`` (:mod:`cfgcheck.service.supervisor`) exists for a request
stuck in one C call that the cooperative budget cannot interrupt (a parser, the tokenizers
library, a regex). No such call stays long on input within the size caps, so the tests and
the load benchmark make one: when the server starts with ``CFGCHECK_FAULT_INJECTION=1`` in
its environment (never set in production; nothing a request sends can turn it on), a body
holding ``{"cfgcheck-fault": {"hold-gil": S}}`` calls the C library's ``sleep(S)`` through
``ctypes.PyDLL``, which keeps the GIL for the whole call (so no other thread of the worker,
event loop included, runs), and ``{"cfgcheck-fault": {"release-gil": S}}`` calls it through
``ctypes.CDLL``, which releases the GIL (the event loop keeps answering). Without the
variable the key is an ordinary unknown key of the config.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

ENV = "CFGCHECK_FAULT_INJECTION"
KEY = "cfgcheck-fault"
MAX_S = 600


def enabled() -> bool:
    return os.environ.get(ENV) == "1"


def inject(payload: Any) -> None:
    """Run the fault ``payload`` asks for (only when :func:`enabled`)."""
    if not enabled() or not isinstance(payload, dict):
        return
    fault = payload.get(KEY)
    if not isinstance(fault, dict):
        return
    for kind, library in (("hold-gil", ctypes.PyDLL), ("release-gil", ctypes.CDLL)):
        seconds = fault.get(kind)
        if isinstance(seconds, int) and 0 < seconds <= MAX_S:
            library(None).sleep(ctypes.c_uint(seconds))
