"""The one memory verdict of a run on a GPU, erring safe.

* ``fits``: the estimate plus its stated margin fits;
* ``does not fit``: what the run cannot do without exceeds the GPU: the estimate less the
  freeable allocator cache, since torch's caching allocator, when ``cudaMalloc`` fails, frees its
  unused cached segments and retries before it raises out-of-memory (``release_cached_blocks``
  in c10/cuda/CUDACachingAllocator.cpp); published runs whose reserved peak would exceed the
  GPU completed that way (fms-acceleration's Mistral-7B full fine-tuning on an A100-80GB);
* ``may not fit``: anything in between (the estimate cannot vouch either way).
"""

from __future__ import annotations

from typing import Literal

from cfgcheck.memory.estimate import MemoryEstimate

Verdict = Literal["fits", "may not fit", "does not fit"]


def required_bytes(est: MemoryEstimate) -> int:
    """What the run cannot do without: allocated, CUDA context, paged states, and the part of
    the allocator cache torch cannot free (:attr:`MemoryEstimate.cache_floor`)."""
    return est.total_bytes - est.get("fragmentation") + est.cache_floor


def verdict(est: MemoryEstimate, capacity: int) -> Verdict:
    est = est.with_vllm(capacity)  # a colocated vLLM engine's share of this GPU
    if required_bytes(est) > capacity:
        return "does not fit"
    if est.upper_bytes > capacity:
        return "may not fit"
    return "fits"
