"""Peak GPU memory estimate of a training run, and the GPUs it is checked against."""

from cfgcheck.memory.estimate import GIB, Component, MemoryEstimate, estimate
from cfgcheck.memory.params import ParamCount, count_params

__all__ = ["GIB", "Component", "MemoryEstimate", "ParamCount", "count_params", "estimate"]
