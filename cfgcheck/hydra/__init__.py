"""Hydra-launched runs: a validating drop-in for ``@hydra.main`` and whole-sweep checks.

``cfgcheck.main`` (this package's :func:`main`) is imported lazily by ``cfgcheck`` so that
``import cfgcheck`` stays light.
"""

from cfgcheck.hydra._main import current_dictconfig, main
from cfgcheck.hydra.sweep import PointVerdict, SweepChecker, SweepResult, check_sweep, plan_sweep

__all__ = [
    "PointVerdict",
    "SweepChecker",
    "SweepResult",
    "check_sweep",
    "current_dictconfig",
    "main",
    "plan_sweep",
]
