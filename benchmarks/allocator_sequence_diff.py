"""Where the generated event sequence (cfgcheck/memory/events.py) first parts from the real op
sequence of the same step, for the tensors of at least a threshold size: the next thing to
model for op-by-op equality (issue 24).

The real sequence is gpu_measure.py's loop at the H100 run's full size on meta tensors
(benchmarks/allocator_meta_trace.py), as the CUDA allocator sees it (cuBLAS's workspaces,
tests/alloc_tracer.py ``cuda_events``). Both are reduced to the allocations (+MiB) and frees
(-MiB) of tensors of at least ``--min-mib`` MiB, and ``R`` where the peaks are reset; the
first index where they differ (:func:`first_difference`) is printed with the events around
it. ``--min-mib 1.01``: the large pool (``kSmallSize``, 1 MiB), which
cfgcheck/memory/layer_ops.py generates op by op. Needs torch,
transformers, peft.

    python benchmarks/allocator_sequence_diff.py RUN_ID [--min-mib 40]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # PYTHONPATH first
MIB = 2**20


def reduced(events: list[tuple[int, int]], threshold: int) -> list[float | str]:
    """The allocations and frees of the tensors of at least ``threshold`` bytes, in MiB."""
    from cfgcheck.memory.allocsim import END, FREE, REPEAT, RESET

    flat: list[tuple[int, int]] = []
    i = 0
    while i < len(events):  # the repeated micro-batch blocks written out
        if events[i][1] == REPEAT:
            j = events.index((0, END), i)
            flat += events[i + 1 : j] * events[i][0]
            i = j + 1
        else:
            flat.append(events[i])
            i += 1
    live: dict[int, int] = {}
    out: list[float | str] = []
    for key, n in flat:
        if n == RESET:
            out.append("R")
        elif n >= 0:
            live[key] = n
            if n >= threshold:
                out.append(round(n / MIB, 1))
        elif n == FREE:
            size = live.pop(key, 0)
            if size >= threshold:
                out.append(-round(size / MIB, 1))
    return out


def first_difference(gen: list[float | str], real: list[float | str]) -> int | None:
    """Where the step's events (after the reset) first differ, None when the sequences are
    equal. The build is compared as a multiset: the tracer registers the built tensors in
    ``model.parameters()`` order (PEFT's adapters beside their base weights), while the GPU
    allocates them as they are made (the model, then PEFT's adapters in module order). The
    frees that follow the second step in the trace (the model and the optimizer torn down
    when the traced function returns) are not part of the step."""
    gi, ri = gen.index("R"), real.index("R")
    if sorted(map(str, gen[:gi])) != sorted(map(str, real[:ri])):
        return 0
    g, r = gen[gi + 1 :], real[ri + 1 :]
    i = 0
    while i < min(len(g), len(r)) and g[i] == r[i]:
        i += 1
    if i == len(g) and all(isinstance(x, float) and x < 0 for x in r[i:]):
        return None
    return gi + 1 + i


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--min-mib", type=float, default=40.0)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    from benchmarks.allocator_meta_trace import install_meta_tracing

    install_meta_tracing()
    from benchmarks.memory_calibration import DATA
    from cfgcheck import check
    from cfgcheck.memory.event_seq import blas_workspace
    from cfgcheck.memory.events import covered, step_events
    from tests.alloc_tracer import cuda_events, traced_step

    runs = {r["id"]: r for r in json.loads((DATA / "runs.json").read_text())}
    spec = runs[args.run]
    cfg = check(ROOT / "conf", "config", (*spec["overrides"], "trainer.gpu.name=H100")).config
    if cfg is None or not covered(cfg.model, cfg.trainer):
        print(f"{args.run}: not covered by the generated sequence")
        return 1
    threshold = int(args.min_mib * MIB)
    real = reduced(
        cuda_events(traced_step(spec, record=True), blas_workspace(cfg.trainer)), threshold
    )
    gen = reduced(step_events(cfg.model, cfg.data, cfg.trainer), threshold)
    at = first_difference(gen, real)
    print(f"events of tensors >= {args.min_mib:g} MiB: generated {len(gen):,}, real {len(real):,}")
    if at is None:
        print("equal (the build as a multiset, the two steps in order)")
        return 0
    i = at
    print(f"first difference at {i:,} (MiB, - a free, R the peaks reset):")
    print("generated:", " ".join(map(str, gen[max(0, i - 5) : i + 20])))
    print("real:     ", " ".join(map(str, real[max(0, i - 5) : i + 20])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
