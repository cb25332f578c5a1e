"""The one memory verdict of a run on a GPU, erring safe.

* ``fits``: the estimate plus its stated margin fits;
* ``may not fit``: the estimate fits, but not with its margin (the estimate cannot vouch);
* ``does not fit``: the estimate alone exceeds the GPU.
"""

from __future__ import annotations

from typing import Literal

from cfgcheck.memory.estimate import MemoryEstimate

Verdict = Literal["fits", "may not fit", "does not fit"]


def verdict(est: MemoryEstimate, capacity: int) -> Verdict:
    if est.total_bytes > capacity:
        return "does not fit"
    if est.upper_bytes > capacity:
        return "may not fit"
    return "fits"
