"""The one memory verdict of a run on a GPU, erring safe.

Where the allocator simulation covers the run (:func:`cfgcheck.memory.events.covered`), the
verdict is the simulation's (:func:`decide`):

* ``does not fit`` without simulating when the estimate's allocated peak plus the CUDA context
  already exceeds the GPU (no allocator can hand out more than it holds); else the step is
  replayed on the GPU's memory less the context, and ``does not fit`` when it runs out of
  memory even after freeing its cache;
* ``may not fit`` when it completes only by freeing its cache and retrying ``cudaMalloc``
  (``release_cached_blocks`` in c10/cuda/CUDACachingAllocator.cpp), or when its device peak
  (simulated reserved peak plus context) fits but not with the estimate's stated margin;
* ``fits`` when the simulated device peak with the stated margin fits.

Elsewhere the verdict is the estimate's (:func:`verdict`), on its pattern-based reserved figure:

* ``fits``: the estimate plus its stated margin fits;
* ``does not fit``: what the run cannot do without exceeds the GPU: the estimate less the
  freeable allocator cache, since torch's caching allocator, when ``cudaMalloc`` fails, frees its
  unused cached segments and retries before it raises out-of-memory (``release_cached_blocks``
  in c10/cuda/CUDACachingAllocator.cpp); published runs whose reserved peak would exceed the
  GPU completed that way (fms-acceleration's Mistral-7B full fine-tuning on an A100-80GB);
* ``may not fit``: anything in between (the estimate cannot vouch either way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cfgcheck.memory.estimate import MemoryEstimate, estimate
from cfgcheck.memory.events import covered
from cfgcheck.memory.simulated import Simulation, simulate_step
from cfgcheck.reuse import pinned
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

Verdict = Literal["fits", "may not fit", "does not fit"]
Basis = Literal["simulation", "estimate"]


def required_bytes(est: MemoryEstimate) -> int:
    """What the run cannot do without: allocated, CUDA context, paged states, and the part of
    the allocator cache torch cannot free (:attr:`MemoryEstimate.cache_floor`)."""
    return est.total_bytes - est.get("fragmentation") + est.cache_floor


def verdict(est: MemoryEstimate, capacity: int) -> Verdict:
    """The verdict on the estimate's pattern-based figure (the runs the simulation does not
    cover)."""
    est = est.with_vllm(capacity)  # a colocated vLLM engine's share of this GPU
    if required_bytes(est) > capacity:
        return "does not fit"
    if est.upper_bytes > capacity:
        return "may not fit"
    return "fits"


def outside_bytes(est: MemoryEstimate) -> int:
    """What the GPU holds beside torch's caching allocator: the CUDA context and paged
    optimizer states (no torch counter sees them)."""
    return est.get("cuda_context") + est.get("paged_states") + est.get("ep_buffer")


@dataclass(frozen=True)
class Decision:
    """A verdict, the figure it was taken on and where that figure came from."""

    verdict: Verdict
    basis: Basis
    peak: int  # device bytes: the simulated reserved peak plus context, or the estimate's total
    margin: float  # the estimate's stated error, applied to ``peak`` for "fits"
    simulation: Simulation | None  # None: not covered, or decided before simulating
    retry: bool = False  # "may not fit": the step completes only by freeing its cache
    why: str = ""  # why the estimate decided (no simulation, or none needed)

    @property
    def upper(self) -> int:
        return int(self.peak * (1 + self.margin))

    def describe(self) -> str:
        """Which figure the verdict was taken on, as the output says it."""
        if self.basis == "simulation":
            return "verdict on the allocator simulation's device peak (reserved + context)"
        return f"verdict on the estimate: {self.why}"


def may_fit(est: MemoryEstimate, capacity: int) -> bool:
    """Whether "fits" is still possible before any replay: the simulated device peak is at
    least the estimate's allocated peak plus what lies outside the allocator (the replayed
    sequence's allocated peak is above the estimate's: it adds cuBLAS's workspaces, which the
    estimate counts in the context; tests/test_memory_sim_verdict.py), so when that with the
    stated margin is over the GPU, neither figure can say "fits"."""
    est = est.with_vllm(capacity)
    floor = est.allocated_bytes + outside_bytes(est)
    return int(floor * (1 + est.margin)) <= capacity


def decide(
    m: ModelConfig,
    d: DataConfig,
    t: TrainerConfig,
    capacity: int,
    est: MemoryEstimate | None = None,
) -> Decision:
    """The verdict on a GPU of ``capacity`` bytes (see the module docstring); ``est``: the
    run's estimate when the caller has it."""
    with pinned():  # deciding never changes a section: each is keyed once
        return _decide(m, d, t, capacity, est)


def _decide(
    m: ModelConfig, d: DataConfig, t: TrainerConfig, capacity: int, est: MemoryEstimate | None
) -> Decision:
    est = (est or estimate(m, d, t)).with_vllm(capacity)
    why = ""
    if not covered(m, t):
        why = "the allocator simulation does not cover these settings"
    elif any(c.key == "vllm" for c in est.components):
        why = "the allocator simulation does not model a colocated vLLM engine"
    if why:
        return Decision(
            verdict(est, capacity), "estimate", est.total_bytes, est.margin, None, why=why
        )
    outside = outside_bytes(est)
    if est.allocated_bytes + outside > capacity:
        # sound without replaying: the allocator never holds less than it hands out
        return Decision(
            "does not fit",
            "estimate",
            est.total_bytes,
            est.margin,
            None,
            why="its allocated peak plus the CUDA context exceeds the GPU",
        )
    sim = simulate_step(m, d, t, max(0, capacity - outside))
    if sim is None:  # not reached: covered above
        return Decision(verdict(est, capacity), "estimate", est.total_bytes, est.margin, None)
    peak = sim.reserved + outside
    v: Verdict
    if sim.ooms:
        v = "does not fit"
    elif sim.retries or int(peak * (1 + est.margin)) > capacity:
        v = "may not fit"
    else:
        v = "fits"
    return Decision(
        v, "simulation", peak, est.margin, sim, retry=bool(sim.retries and not sim.ooms)
    )
