"""The page's memory panel: the per-GPU estimate by component on the chosen GPU, the verdict
on every known GPU, and the memory fixes that make the run fit on the chosen one.

Every figure comes from :mod:`cfgcheck.memory` as ``cfgcheck memory`` states it: the estimate
(:func:`~cfgcheck.memory.estimate.estimate`) on the GPU (``MemoryEstimate.on_gpu``), the
verdict (:func:`~cfgcheck.memory.verdict.decide`) and the fixes
(:func:`~cfgcheck.memory.fixes.fixes`), written in the pasted format's own keys when it is a
native one (:func:`cfgcheck.sources.native.rewrite`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cfgcheck.memory import devices
from cfgcheck.memory.devices import MIB
from cfgcheck.memory.estimate import MemoryEstimate, estimate
from cfgcheck.memory.verdict import Verdict, decide
from cfgcheck.schema.run import RunConfig


@dataclass(frozen=True)
class GpuRow:
    name: str
    capacity: int
    total: int  # the estimate on this GPU (its allocator cache capped by the GPU)
    verdict: Verdict
    note: str


@dataclass(frozen=True)
class FixRow:
    overrides: tuple[str, ...]
    summary: str
    total: int
    saved: int


@dataclass(frozen=True)
class Panel:
    """What the memory panel shows."""

    estimate: MemoryEstimate  # on the chosen GPU when there is one
    gpu: str | None  # the chosen GPU's name
    capacity: int | None
    where: str  # where the chosen GPU came from
    verdict: Verdict | None
    rows: tuple[GpuRow, ...]
    fixes: tuple[FixRow, ...]


def _chosen(config: RunConfig, gpu: str) -> tuple[str | None, int | None, str]:
    """The GPU the panel is about: the one picked on the page, else the live or declared GPU
    (as ``cfgcheck memory`` picks it), else none."""
    if gpu:
        spec = devices.lookup(gpu)
        if spec is not None:
            return spec.name, spec.memory_mib * MIB, "picked on this page"
    try:
        avail = devices.available(config.trainer.gpu, config.trainer.devices)
    except devices.GpuNameError:
        avail = None
    if avail is None:
        return None, None, "no GPU picked, none visible and trainer.gpu not set"
    return avail.device.name, avail.bytes, avail.where


def panel(config: RunConfig, gpu: str, fmt: str | None) -> Panel:
    """The panel for a validated run config; ``fmt`` is the native format the fixes are
    written in (None: cfgcheck's own keys)."""
    from cfgcheck.memory.fixes import fixes

    m, d, t = config.model, config.data, config.trainer
    base = estimate(m, d, t)
    rows = tuple(
        GpuRow(
            spec.name,
            spec.memory_mib * MIB,
            base.on_gpu(spec.memory_mib * MIB).total_bytes,
            decide(m, d, t, spec.memory_mib * MIB, base).verdict,
            spec.note,
        )
        for spec in devices.GPUS
    )
    name, capacity, where = _chosen(config, gpu)
    if capacity is None:
        return Panel(base, None, None, where, None, rows, ())
    v = decide(m, d, t, capacity, base).verdict
    found: tuple[FixRow, ...] = ()
    if v != "fits":
        write = _writer(fmt)
        allowed = None if write is None else (lambda o: write(o) is not None)
        kept = fixes(config.model, config.data, config.trainer, capacity, allowed=allowed)
        found = tuple(
            FixRow(
                tuple(o for o in (_say(write, o) for o in f.overrides) if o),
                f.summary,
                f.total_bytes,
                f.saved_bytes,
            )
            for f in kept
        )
    return Panel(base.on_gpu(capacity), name, capacity, where, v, rows, found)


def _say(write: Callable[[str], str | None] | None, override: str) -> str:
    return override if write is None else write(override) or ""


def _writer(fmt: str | None) -> Callable[[str], str | None] | None:
    """``override -> the same change in the format's keys`` (None when it cannot say it)."""
    if fmt is None:
        return None
    from cfgcheck.sources.native import get_format, rewrite

    spec = get_format(fmt)
    return lambda o: rewrite(o, spec)
