"""Benchmark: validating a 1,000-point Hydra sweep, per-point compose vs the fast path.

    python benchmarks/sweep.py [--sample 50]

The sweep is model (2) x data.max_seq_length (5) x trainer.learning_rate (10) x seed (10) on
the shipped conf/. The fast path (one Hydra compose per model choice, value overrides applied
to copies) is timed on all 1,000 points. Composing every point is timed on an evenly spaced
sample of points and extrapolated to 1,000 (stated in the table), to keep the run short;
the sample's verdicts are compared with the fast path's. The composition cache is off, so
the per-point rows measure composing (and nothing is written to the user's cache).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ["CFGCHECK_NO_CACHE"] = "1"

import cfgcheck
from cfgcheck.errors import ConfigLoadError
from cfgcheck.hydra.sweep import Point, PointVerdict, SweepChecker, plan_sweep

CONF = Path(__file__).resolve().parent.parent / "conf"
SWEEP = [
    "model=tinyllama-1.1b,llama-2-7b",
    "data.max_seq_length=512,1024,2048,4096,8192",
    "trainer.learning_rate=" + ",".join(f"{k}e-5" for k in range(1, 11)),
    "seed=range(0,10)",
]


def public_check(point: Point) -> tuple[object, ...]:
    """``cfgcheck.check`` on one point: a fresh Hydra initialisation and compose each time."""
    try:
        return PointVerdict(point, result=cfgcheck.check(CONF, "config", point)).signature()
    except ConfigLoadError as e:
        return (False, str(e), ())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=50, help="points composed one by one")
    args = parser.parse_args()

    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="bench"):
        hydra_app = GlobalHydra.instance().hydra
        assert hydra_app is not None
        t0 = time.perf_counter()
        plan = plan_sweep(hydra_app, "config", SWEEP)
        assert plan is not None
        checker = SweepChecker(hydra_app, "config", plan.hydra_overrides)
        fast = checker.check_all(plan.points)
        fast_s = time.perf_counter() - t0
        composes = checker.compositions
        n = len(plan.points)
        step = max(1, n // args.sample)
        sample = plan.points[::step][: args.sample]

        t0 = time.perf_counter()
        composed = [checker.check_composed(p) for p in sample]
        compose_s = time.perf_counter() - t0
    GlobalHydra.instance().clear()

    t0 = time.perf_counter()
    public = [public_check(p) for p in sample]
    public_s = time.perf_counter() - t0

    by_point = {v.overrides: v.signature() for v in fast.points}
    same = sum(by_point[v.overrides] == v.signature() for v in composed)
    same_public = sum(by_point[p] == s for p, s in zip(sample, public, strict=True))
    k = len(sample)
    rows = [
        ("cfgcheck.check per point", f"{k}, extrapolated", public_s / k, public_s / k * n),
        ("Hydra compose per point", f"{k}, extrapolated", compose_s / k, compose_s / k * n),
        ("fast path", f"all {n}", fast_s / n, fast_s),
    ]
    print(f"sweep: {' '.join(SWEEP)}")
    print(f"{n} points, {len(fast.failing)} failing; the fast path composed {composes} times")
    print()
    print(f"| {'path':<24} | {'points timed':<17} | {'per point':>10} | {'1,000 points':>12} |")
    print(f"|{'-' * 26}|{'-' * 19}|{'-' * 11}:|{'-' * 13}:|")
    for name, timed, per, total in rows:
        print(f"| {name:<24} | {timed:<17} | {per * 1e3:>7.2f} ms | {total:>10.2f} s |")
    print()
    print(f"speedup vs cfgcheck.check per point: {public_s / k * n / fast_s:.1f}x")
    print(f"speedup vs Hydra compose per point:  {compose_s / k * n / fast_s:.1f}x")
    print(f"same verdicts on the sample: {same}/{k} (Hydra compose), {same_public}/{k} (check)")


if __name__ == "__main__":
    main()
