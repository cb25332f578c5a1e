"""The optional matplotlib behind every ``--png`` (``cfgcheck data``, ``cfgcheck memory``):
imported on first use, with the headless Agg backend."""

from __future__ import annotations

from typing import Any


class PlotUnavailableError(ValueError):
    """matplotlib is not installed, or the PNG cannot be written."""


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend; raises :class:`PlotUnavailableError` naming
    the extra when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotUnavailableError(
            "--png needs matplotlib, which is not installed: pip install matplotlib "
            "(or cfgcheck[plot])"
        ) from e
    return plt
