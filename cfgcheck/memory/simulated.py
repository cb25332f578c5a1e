"""The reserved peak of a run from the allocator simulation: the step's events
(:mod:`cfgcheck.memory.events`) replayed through PyTorch's caching allocator
(:mod:`cfgcheck.memory.allocsim`) under the run's ``trainer.cuda_alloc_conf``.

The verdict (:func:`cfgcheck.memory.verdict.decide`) takes its figure from here wherever the
event sequence covers the run. Results are cached by the sections' contents
(:mod:`cfgcheck.reuse`), as the estimate is: a sweep that varies what the step does not read
generates each distinct step once; and each replay by the events' own content
(:mod:`cfgcheck.memory.sim_cache`, in the process and on disk): two configs that make the
same events replay once. On disk a step's figures are also kept under its content key and the
package's bytes, so a second run of the same check generates nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from cfgcheck.memory.allocsim import AllocConf, Event, SimResult, parse_alloc_conf
from cfgcheck.memory.estimate import UNREAD_TRAINER_FIELDS
from cfgcheck.memory.events import Order, covered, orders, step_events
from cfgcheck.memory.sim_cache import load_step, replay_cached, store_step
from cfgcheck.reuse import ESTIMATES, Unkeyable, frozen
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


Keys = tuple[Hashable, Hashable | None]

# Trainer fields the step's events never read, beside the estimate's: ``global_batch_size``
# is read only by the batching rules (the step reads the accumulation count it implies).
UNREAD_BY_STEP = UNREAD_TRAINER_FIELDS - {"gpu"} | {"global_batch_size"}


def _keys(m: ModelConfig, d: DataConfig, t: TrainerConfig, order: Order = None) -> Keys:
    """The step's content key: what the estimate's key holds (every trainer field it reads
    but ``global_batch_size``), ``trainer.gpu`` (the events read the cuBLAS workspace of
    the GPU) and the events' ``order`` (:func:`cfgcheck.memory.events.orders`); then the key
    of every ``gradient_accumulation_steps`` >= 2 (the events differ only in the count of the
    repeated micro-batch), None below."""
    trainer = [(k, frozen(getattr(t, k))) for k in type(t).model_fields if k not in UNREAD_BY_STEP]
    head = ("simulation", frozen(m), frozen(d), type(t), order)
    exact = (*head, tuple(trainer))
    if t.gradient_accumulation_steps < 2:
        return exact, None
    shared = [(k, "repeated" if k == "gradient_accumulation_steps" else v) for k, v in trainer]
    return exact, (*head, tuple(shared))


def _replay(
    m: ModelConfig,
    d: DataConfig,
    t: TrainerConfig,
    conf: AllocConf,
    capacity: int | None,
    keys: Keys | None,
    events: Callable[[], list[Event]],
) -> tuple[int, SimResult]:
    """(events, replay) of the step on ``capacity``, cached under ``keys`` (None: uncached). A
    replay whose repeated micro-batch reached a repetition that changed nothing after k
    repetitions is the replay of every accumulation of more than k steps
    (:func:`cfgcheck.memory.allocsim.replay`): a sweep over micro batches that keeps the
    global batch shares it."""

    def run() -> tuple[int, SimResult, int | None]:
        stored = None if keys is None else load_step((keys[0], capacity))
        if stored is not None:
            return stored
        ev = events()
        r, needed = replay_cached(ev, conf, capacity)
        if keys is not None:
            store_step((keys[0], capacity), (len(ev), r, needed))
        return len(ev), r, needed

    if keys is None:
        n, r, _ = run()
        return n, r
    accum = t.gradient_accumulation_steps
    shared = None if keys[1] is None else (keys[1], capacity)

    def compute() -> tuple[int, SimResult]:
        if shared is not None:
            found = ESTIMATES.get(shared)
            if found is not None and found[2] is not None and accum - 1 >= found[2]:
                return found[0], found[1]
        n, r, needed = run()
        if shared is not None and needed is not None:
            ESTIMATES.get_or(shared, lambda: (n, r, needed))
        return n, r

    found: tuple[int, SimResult] = ESTIMATES.get_or((keys[0], capacity), compute)
    return found


Replays = tuple[int, SimResult, SimResult]


def _replays(m: ModelConfig, d: DataConfig, t: TrainerConfig, capacity: int | None) -> Replays:
    """(events, the replay with no memory limit, the replay on ``capacity`` bytes) of the
    step; where a run may make one of several event sequences (Gemma 3's per-type tensors in
    either order, :func:`cfgcheck.memory.events.orders`), the most severe: out of memory,
    then a retry, then the larger reserved peak. So the figure is the same in every process,
    whatever its string hashing, and "fits" holds for either order."""
    found = [_replays_of(m, d, t, capacity, order) for order in orders(m, d, t)]
    return max(found, key=lambda r: (r[2].ooms > 0, r[2].retries > 0, r[1].peak_reserved,
                                     r[2].peak_reserved))  # fmt: skip


def _replays_of(
    m: ModelConfig, d: DataConfig, t: TrainerConfig, capacity: int | None, order: Order
) -> Replays:
    """:func:`_replays` of the events made in ``order``. The replays are cached, not the
    events (a megabyte each): both replays share one generation."""
    conf = alloc_conf(t)
    made: list[list[Event]] = []

    def events() -> list[Event]:
        if not made:
            made.append(step_events(m, d, t, type_order=order))
        return made[0]

    try:
        keys: Keys | None = _keys(m, d, t, order)
    except Unkeyable:
        keys = None
    n, free = _replay(m, d, t, conf, None, keys, events)
    if capacity is None:
        return n, free, free
    if (
        free.peak_reserved <= capacity
        and not conf.expandable_segments
        and conf.memory_fraction is None
    ):
        # The replay on the GPU is the free one: cudaMalloc fails only when reserved + the new
        # segment > capacity (allocsim ``_alloc_block``), and no segment of the free replay
        # took reserved above its peak, so every call succeeds and every later decision is
        # the same. (Expandable segments size their address space by the GPU, and a memory
        # fraction turns garbage collection on: those replay again.)
        return n, free, free
    return n, free, _replay(m, d, t, conf, capacity, keys, events)[1]


def simulate_step(
    m: ModelConfig, d: DataConfig, t: TrainerConfig, capacity: int | None = None
) -> Simulation | None:
    """The simulated peaks of two steps with no memory limit, or None where the event sequence
    does not cover the settings (:func:`cfgcheck.memory.events.covered`). ``capacity``: the
    bytes torch can have (the GPU less the CUDA context): the step is replayed on it for
    :meth:`Simulation.outcome` (frees and retries, out of memory)."""
    if not covered(m, t):
        return None
    n, free, on_gpu = _replays(m, d, t, capacity)
    # expandable segments size their address space by the GPU (allocsim ``_segment``, after
    # ``ExpandableSegment``'s ``max_handles_``): the replay on the GPU is the one whose blocks
    # are the device's (where a block may grow into the unmapped rest changes the best fit)
    shown = on_gpu if capacity is not None and alloc_conf(t).expandable_segments else free
    return Simulation(
        shown.peak_reserved, shown.peak_allocated, n, on_gpu.retries, on_gpu.ooms, capacity
    )
