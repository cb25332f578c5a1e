"""How long the allocator simulation takes: the event sequence of two training steps
(cfgcheck/memory/events.py) and its replay through the caching-allocator model
(cfgcheck/memory/allocsim.py), for runs of benchmarks/calibration/runs.json (7B ones among them).

    python benchmarks/allocator_sim.py [RUN_ID ...]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # PYTHONPATH first


def main(argv: list[str]) -> int:
    from benchmarks.memory_calibration import DATA, ROOT, load
    from cfgcheck import check
    from cfgcheck.memory.allocsim import simulate
    from cfgcheck.memory.events import covered, step_events

    want = set(argv)
    print("| run | events | generate ms | simulate ms |")
    print("|---|---:|---:|---:|")
    for spec, _ in load(DATA):
        if want and spec["id"] not in want:
            continue
        cfg = check(ROOT / "conf", "config", tuple(spec["overrides"])).config
        if cfg is None or not covered(cfg.model, cfg.trainer):
            continue
        gen, sim = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            ev = step_events(cfg.model, cfg.data, cfg.trainer)
            t1 = time.perf_counter()
            simulate(ev)
            gen.append(t1 - t0)
            sim.append(time.perf_counter() - t1)
        print(
            f"| {spec['id']} | {len(ev):,} | {1000 * statistics.median(gen):.1f} | "
            f"{1000 * statistics.median(sim):.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
