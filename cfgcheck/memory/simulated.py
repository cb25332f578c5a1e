"""The reserved peak of a run from the allocator simulation: the step's events
(:mod:`cfgcheck.memory.events`) replayed through PyTorch's caching allocator
(:mod:`cfgcheck.memory.allocsim`) under the run's ``trainer.cuda_alloc_conf``.

Shown next to the estimate by ``cfgcheck memory``; the verdict stays on the estimate's
pattern-based reserved figure, which errs safe on every calibrated run where the simulation of
the coarse event sequence does not yet (docs/memory.md, "Allocator simulation").
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory.allocsim import AllocConf, parse_alloc_conf, simulate
from cfgcheck.memory.events import covered, step_events
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig


@dataclass(frozen=True)
class Simulation:
    reserved: int
    allocated: int
    events: int
    retries: int  # allocations that needed the cache freed and cudaMalloc retried
    ooms: int  # allocations that failed even then (capacity given)
    capacity: int | None

    @property
    def fragmentation(self) -> int:
        return self.reserved - self.allocated

    def outcome(self) -> str:
        if self.capacity is None:
            return ""
        if self.ooms:
            return "runs out of memory"
        if self.retries:
            return "fits only by freeing its cache and retrying (may not fit)"
        return "fits without freeing its cache"

    def to_dict(self) -> dict[str, object]:
        gib = 1024**3
        return {
            "reserved_gib": round(self.reserved / gib, 3),
            "allocated_gib": round(self.allocated / gib, 3),
            "fragmentation_gib": round(self.fragmentation / gib, 3),
            "events": self.events,
            "retries": self.retries,
            "ooms": self.ooms,
            "outcome": self.outcome() or None,
        }


def alloc_conf(t: TrainerConfig) -> AllocConf:
    return parse_alloc_conf(t.cuda_alloc_conf) if t.cuda_alloc_conf else AllocConf()


def simulate_step(
    m: ModelConfig, d: DataConfig, t: TrainerConfig, capacity: int | None = None
) -> Simulation | None:
    """The simulated peaks of two steps with no memory limit, or None where the event sequence
    does not cover the settings (:func:`cfgcheck.memory.events.covered`). ``capacity``: the
    bytes torch can have (the GPU less the CUDA context): the step is replayed again on it
    for :meth:`Simulation.outcome` (frees and retries, out of memory)."""
    if not covered(m, t):
        return None
    ev = step_events(m, d, t)
    conf = alloc_conf(t)
    r = simulate(ev, conf)  # the figures: what the step takes with room to spare
    on_gpu = r if capacity is None else simulate(ev, conf, capacity)  # the path it takes
    return Simulation(
        r.peak_reserved, r.peak_allocated, len(ev), on_gpu.retries, on_gpu.ooms, capacity
    )
