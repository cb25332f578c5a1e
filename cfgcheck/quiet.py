"""Import-time log lines of optional libraries, kept out of a check's output.

Building a transformers model on the meta device can import torchao (installed with the
``frameworks`` extra), which logs ``Failed to load .../torchao/_C_*.so`` for each CUDA-only
extension it cannot load on a CPU machine (``torchao/__init__.py``, ``logger.warning``), and
its Enum registrations make torch log a deprecation (``torch/utils/_pytree.py``
``register_constant``). Neither says anything about the config being checked, and a check's
output is one line per problem: these loggers are held at ERROR while the model is built.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

NOISY = ("torchao", "torch.utils._pytree")


@contextmanager
def quiet_imports(names: tuple[str, ...] = NOISY) -> Iterator[None]:
    """Hold ``names``' loggers at ERROR inside the block, then restore their levels."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
