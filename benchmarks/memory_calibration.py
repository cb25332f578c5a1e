"""The memory estimate against real H100 and H200 measurements (benchmarks/calibration/), no GPU
needed.

Each recorded run of ``benchmarks/calibration/runs.json`` carries the cfgcheck overrides that
express it on the shipped ``conf/``; ``h100.jsonl`` holds what ``gpu_measure.py`` measured
(torch's peak allocated and reserved bytes, the device-level NVML peak). This script composes
each run exactly as ``cfgcheck memory --format json <overrides> trainer.gpu.name=<its GPU>`` does,
prints estimate vs measurement for the three figures, then the verdict the estimate gives on
six common GPU sizes against the measured device peak: an *unsafe fits* is a "fits" for a run
whose measured peak exceeds the GPU.

    python benchmarks/memory_calibration.py [--data DIR] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "calibration"
GIB = 1024**3
# The six GPU sizes of issue 14 (GiB the driver reports as usable), and the H200's
# (torch.cuda.mem_get_info's total on the H200 rows: 150,109,880,320 bytes).
SIZES_GIB = (15.0, 22.0, 23.5, 40.0, 44.5, 79.6, 139.8)


@dataclass(frozen=True)
class Row:
    id: str
    gpu: str  # the cfgcheck GPU preset it was measured on (H100, H200)
    overrides: tuple[str, ...]
    measured: dict[str, int]  # allocated, reserved, device_peak (bytes)
    estimated: dict[str, int]
    verdicts: dict[float, str]  # GPU size (GiB) -> "fits" | "may not fit" | "does not fit"
    calibrated: bool
    margin: float
    # the allocator simulation (cfgcheck/memory/simulated.py): reserved and device figures,
    # None where its event sequence does not cover the run
    simulated: dict[str, int] | None = None
    # the verdict on the estimate's pattern-based figure alone (cfgcheck/memory/verdict.py
    # ``verdict``), for comparison: ``verdicts`` are ``decide``'s, the simulation's where it
    # covers the run
    pattern_verdicts: dict[float, str] | None = None

    def error(self, key: str) -> float:
        return (self.estimated[key] - self.measured[key]) / self.measured[key]

    def sim_error(self, key: str) -> float | None:
        if self.simulated is None:
            return None
        return (self.simulated[key] - self.measured[key]) / self.measured[key]

    def unsafe(self, pattern: bool = False) -> list[float]:
        """GPU sizes where the verdict is "fits" but the measured peak exceeds the GPU."""
        verdicts = (self.pattern_verdicts or {}) if pattern else self.verdicts
        return [
            s for s, v in verdicts.items() if v == "fits" and self.measured["device_peak"] > s * GIB
        ]

    def false_alarms(self, pattern: bool = False) -> list[float]:
        """GPU sizes where the verdict is "does not fit" but the measured peak fits."""
        verdicts = (self.pattern_verdicts or {}) if pattern else self.verdicts
        return [
            s
            for s, v in verdicts.items()
            if v == "does not fit" and self.measured["device_peak"] <= s * GIB
        ]


def gpu_name(meas: dict[str, Any]) -> str:
    """The cfgcheck GPU preset of a measurement: its ``gpu`` (``torch.cuda.get_device_name``),
    H100 for the first rows, which name none."""
    name = str(meas.get("gpu") or "NVIDIA H100")
    return "H200" if "H200" in name else "H100"


def load(data: Path = DATA) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(run spec, measurement) pairs of every ``ok`` row: the specs of ``runs.json`` and
    ``runs-*.json`` (later batches), the measurements of every ``*.jsonl`` (one file per GPU
    kind: ``h100.jsonl``, ``h200.jsonl``)."""
    specs: dict[str, dict[str, Any]] = {}
    for path in sorted(data.glob("runs*.json")):
        for r in json.loads(path.read_text()):
            if r["id"] in specs:
                raise SystemExit(f"{path.name}: run id {r['id']} is defined twice")
            specs[r["id"]] = r
    out = []
    for path in sorted(data.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            meas = json.loads(line)
            if meas.get("status") == "ok" and meas["id"] in specs:
                out.append((specs[meas["id"]], meas))
    return out


def evaluate(data: Path = DATA) -> list[Row]:
    from cfgcheck import check
    from cfgcheck.memory.estimate import estimate
    from cfgcheck.memory.simulated import simulate_step
    from cfgcheck.memory.verdict import decide, verdict

    rows = []
    for spec, meas in load(data):
        gpu = gpu_name(meas)
        overrides = (*spec["overrides"], f"trainer.gpu.name={gpu}")
        with contextlib.chdir(ROOT):  # model.pretrained folders are relative to the repo
            result = check(ROOT / "conf", "config", overrides)
        cfg = result.config
        if cfg is None:
            raise SystemExit(f"{spec['id']}: the overrides do not validate")
        est = estimate(cfg.model, cfg.data, cfg.trainer)
        sim = simulate_step(cfg.model, cfg.data, cfg.trainer)
        outside = est.get("cuda_context") + est.get("paged_states")
        simulated = (
            None
            if sim is None
            else {
                "allocated": sim.allocated,
                "reserved": sim.reserved,
                "device_peak": sim.reserved + outside,
            }
        )
        rows.append(
            Row(
                id=spec["id"],
                gpu=gpu,
                overrides=tuple(spec["overrides"]),
                measured={k: int(meas[k]) for k in ("allocated", "reserved", "device_peak")},
                estimated={
                    "allocated": est.allocated_bytes,
                    "reserved": est.reserved_bytes,
                    "device_peak": est.total_bytes,
                },
                verdicts={
                    s: decide(cfg.model, cfg.data, cfg.trainer, int(s * GIB), est).verdict
                    for s in SIZES_GIB
                },
                pattern_verdicts={s: verdict(est, int(s * GIB)) for s in SIZES_GIB},
                calibrated=not est.uncalibrated,
                margin=est.margin,
                simulated=simulated,
            )
        )
    return rows


def _summary(rows: list[Row], key: str) -> str:
    errs = [abs(r.error(key)) for r in rows]
    return f"median |error| {statistics.median(errs):.1%}, worst {max(errs):.1%}"


def table(rows: list[Row]) -> str:
    head = (
        "| run | allocated GiB meas / est | err | reserved GiB meas / est | err "
        "| device GiB meas / est | err | margin |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        cells = []
        for key in ("allocated", "reserved", "device_peak"):
            cells.append(
                f"{r.measured[key] / GIB:.2f} / {r.estimated[key] / GIB:.2f} | {r.error(key):+.1%}"
            )
        mark = "" if r.calibrated else " (uncalibrated)"
        lines.append(f"| {r.id} | {' | '.join(cells)} | {r.margin:.0%}{mark} |")
    lines.append("")
    for key, label in (
        ("allocated", "allocated"),
        ("reserved", "reserved"),
        ("device_peak", "device total"),
    ):
        lines.append(f"{label}: {_summary(rows, key)} over {len(rows)} runs")
    sim_rows = [r for r in rows if r.simulated is not None]
    if sim_rows:
        lines.append("")
        lines.append(
            f"allocator simulation (cfgcheck/memory/simulated.py), the {len(sim_rows)} runs "
            "its event sequence covers:"
        )
        lines.append("| run | reserved GiB meas / sim | err | pattern err | device err |")
        lines.append("|---|---:|---:|---:|---:|")
        for r in sim_rows:
            assert r.simulated is not None
            lines.append(
                f"| {r.id} | {r.measured['reserved'] / GIB:.2f} / "
                f"{r.simulated['reserved'] / GIB:.2f} | {r.sim_error('reserved') or 0.0:+.1%} | "
                f"{r.error('reserved'):+.1%} | {r.sim_error('device_peak') or 0.0:+.1%} |"
            )
        for key, label in (("reserved", "reserved"), ("device_peak", "device total")):
            sim = [abs(r.sim_error(key) or 0.0) for r in sim_rows]
            pat = [abs(r.error(key)) for r in sim_rows]
            under = min(r.sim_error(key) or 0.0 for r in sim_rows)
            lines.append(
                f"{label}: simulated median |error| {statistics.median(sim):.1%}, worst "
                f"{max(sim):.1%}, most under {under:+.1%}; pattern on the same runs median "
                f"{statistics.median(pat):.1%}, worst {max(pat):.1%}"
            )
    sizes = ", ".join(f"{s:g}" for s in SIZES_GIB)
    for pattern, label in (
        (False, "verdicts (the simulation's where it covers the run, else the estimate's)"),
        (True, "verdicts on the estimate's pattern-based figure alone"),
    ):
        lines.append("")
        lines.append(f"{label}, over GPU sizes {sizes} GiB:")
        counts: dict[str, int] = {}
        for r in rows:
            for v in ((r.pattern_verdicts or {}) if pattern else r.verdicts).values():
                counts[v] = counts.get(v, 0) + 1
        lines.append("  " + ", ".join(f"{v}: {n}" for v, n in sorted(counts.items())))
        unsafe = [(r.id, s) for r in rows for s in r.unsafe(pattern)]
        lines.append(
            f"  unsafe fits (measured peak > GPU, verdict fits): {len(unsafe)}"
            + ("" if not unsafe else " " + ", ".join(f"{i}@{s:g}" for i, s in unsafe))
        )
        alarms = [(r.id, s) for r in rows for s in r.false_alarms(pattern)]
        lines.append(
            f"  false alarms (measured peak fits, verdict does not fit): {len(alarms)}"
            + ("" if not alarms else " " + ", ".join(f"{i}@{s:g}" for i, s in alarms))
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="runs.json + h100.jsonl folder")
    parser.add_argument("--json", action="store_true", help="one JSON object per run")
    args = parser.parse_args(argv)
    if not (args.data / "runs.json").is_file() or not (args.data / "h100.jsonl").is_file():
        print(f"memory_calibration: no runs.json / h100.jsonl in {args.data}", file=sys.stderr)
        return 2
    rows = evaluate(args.data)
    if args.json:
        for r in rows:
            print(
                json.dumps(
                    {
                        "id": r.id,
                        "measured": r.measured,
                        "estimated": r.estimated,
                        "errors": {k: round(r.error(k), 4) for k in r.measured},
                        "verdicts": {str(k): v for k, v in r.verdicts.items()},
                    }
                )
            )
    else:
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
