"""``cfgcheck memory``: the per-GPU peak memory estimate of a run, by component, against the
live or declared GPU, then the whole config's verdict (the findings of ``cfgcheck check``).
Exit 0 no error finding, 1 an error finding (over the GPU, an unknown GPU, any other rule),
2 unreadable config."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cfgcheck.cli._common import say

GIB = 1024**3


def register(sub: Any) -> None:
    from cfgcheck.cli._common import add_config_args

    parser = sub.add_parser("memory", help="estimate peak GPU memory per component")
    add_config_args(parser, ["text", "json"])
    parser.add_argument(
        "--png", metavar="PATH", help="also write the breakdown against the GPU as a PNG"
    )
    from cfgcheck.cli._native import add_source_args

    add_source_args(parser)
    parser.set_defaults(run=run)


def _payload(result: Any) -> tuple[dict[str, Any], Any]:
    from cfgcheck.memory import devices
    from cfgcheck.memory.estimate import estimate
    from cfgcheck.memory.verdict import decide

    cfg = result.config
    est = estimate(cfg.model, cfg.data, cfg.trainer)
    try:
        avail = devices.available(cfg.trainer.gpu, cfg.trainer.devices)
    except devices.GpuNameError:
        avail = None
    out: dict[str, Any] = {
        "estimate": est.to_dict(),
        "available": None,
        "fits": None,
        "verdict": None,
        "verdict_basis": None,
    }
    peak = None
    if avail is not None:
        out["available"] = {
            "gib": round(avail.bytes / GIB, 3),
            "source": avail.device.source,
            "device": avail.device.name,
            "where": avail.where,
        }
        # the simulation's verdict where it covers the run, else the estimate's; "fits" only
        # with the stated margin (the verdict errs safe); the estimate's figures shown are
        # those on this GPU (a full GPU makes torch free its cache)
        dec = decide(cfg.model, cfg.data, cfg.trainer, avail.bytes, est)
        out["verdict"] = dec.verdict
        out["verdict_basis"] = dec.basis
        out["verdict_note"] = dec.describe()
        est = est.on_gpu(avail.bytes)
        out["estimate"] = est.to_dict()
        out["fits"] = out["verdict"] == "fits"
        peak = dec.peak if dec.basis == "simulation" else est.total_bytes
        out["share"] = round(peak / avail.bytes, 4) if avail.bytes > 0 else None
    out["simulation"] = _simulation(cfg, est, None if avail is None else avail.bytes)
    out["memory"] = _memory(est, out["simulation"])
    return out, (est, avail)


def _simulation(cfg: Any, est: Any, available: int | None) -> dict[str, Any] | None:
    """The allocator simulation's figures (cfgcheck/memory/simulated.py), on the GPU's
    capacity less the CUDA context when the GPU is known; None where it does not cover the run."""
    from cfgcheck.memory.simulated import simulate_step
    from cfgcheck.memory.verdict import outside_bytes

    cap = None if available is None else max(0, available - outside_bytes(est))
    sim = simulate_step(cfg.model, cfg.data, cfg.trainer, cap)
    return None if sim is None else sim.to_dict()


def _memory(est: Any, sim: dict[str, Any] | None) -> dict[str, Any]:
    """What the GPU holds at the peak, term by term: torch's allocated and reserved peaks (the
    simulation's where it covers the run, else the estimate's), their difference, and what
    no torch counter sees (CUDA context, paged states, expert-parallel buffers)."""
    from cfgcheck.memory.verdict import outside_bytes

    outside = outside_bytes(est) / GIB
    if sim is not None:
        allocated, reserved = sim["allocated_gib"], sim["reserved_gib"]
    else:
        allocated, reserved = est.allocated_bytes / GIB, est.reserved_bytes / GIB
    return {
        "source": "simulation" if sim is not None else "estimate",
        "allocated_gib": round(allocated, 3),
        "reserved_gib": round(reserved, 3),
        "fragmentation_gib": round(reserved - allocated, 3),
        "context_gib": round(est.get("cuda_context") / GIB, 3),
        "outside_gib": round(outside, 3),
        "device_gib": round(reserved + outside, 3),
    }


def _memory_lines(e: dict[str, Any], mem: dict[str, Any], sim: dict[str, Any] | None) -> list[str]:
    if sim is not None:
        source = f"allocator simulation, {sim['events']:,} allocation events"
        alloc_note = f"torch max_memory_allocated ({source}; estimate {e['allocated_gib']:.2f})"
        resv_note = f"torch max_memory_reserved ({source}; estimate {e['reserved_gib']:.2f})"
    else:
        alloc_note = "torch max_memory_allocated (estimate)"
        resv_note = (
            "torch max_memory_reserved (estimate, allocator cache from patterns: "
            "the allocator simulation does not cover these settings)"
        )
    rows = [
        ("allocated", mem["allocated_gib"], alloc_note),
        ("reserved", mem["reserved_gib"], resv_note),
        ("fragmentation", mem["fragmentation_gib"], "reserved - allocated: cached, not in use"),
        ("CUDA context", mem["context_gib"], "outside torch's counters"),
    ]
    other = mem["outside_gib"] - mem["context_gib"]
    if other > 0.0005:
        rows.append(("other", other, "paged states / dispatch buffers, outside torch's counters"))
    device = "reserved + outside torch's counters"
    if sim is not None and sim["outcome"]:
        device += f"; on this GPU the step {sim['outcome']}"
    rows.append(("device peak", mem["device_gib"], device))
    w = max(len(r[0]) for r in rows)
    return [f"{name:<{w}}  {gib:6.2f} GiB  {note}" for name, gib, note in rows]


def _text(p: dict[str, Any]) -> str:
    e = p["estimate"]
    rows = [("component", "GiB", "share", "note")]
    rows += [
        (c["label"], f"{c['gib']:.2f}", f"{c['share']:.1%}", c["note"]) for c in e["components"]
    ]
    rows.append(("total per GPU", f"{e['total_gib']:.2f}", "100.0%", f"peak at {e['phase']}"))
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"{r[0]:<{w[0]}}  {r[1]:>{w[1]}}  {r[2]:>{w[2]}}  {r[3]}".rstrip() for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    active = e.get("active_params", e["params"])
    moe = f"active {active:,}, " if active != e["params"] else ""
    head = (
        f"parameters {e['params']:,} ({moe}trainable {e['trainable_params']:,}), "
        f"{e['world_size']} GPU(s), sequence length {e['seq_len']}"
    )
    lines.insert(0, head)
    mem, sim = p["memory"], p.get("simulation")
    lines += _memory_lines(e, mem, sim)
    host = e.get("host")
    if host:
        parts = ", ".join(
            f"{c['label']} {c['bytes'] / GIB:.2f}" for c in host["components"] if c["bytes"]
        )
        lines.append(
            f"host (CPU) memory for the offload ~ {host['per_process_gib']:.2f} GiB per process "
            f"({parts}), {host['per_node_gib']:.2f} GiB per node of "
            f"{host['processes_per_node']} process(es)"
        )
    simulated = p.get("verdict_basis") == "simulation" or (p["available"] is None and sim)
    device = mem["device_gib"] if simulated else e["total_gib"]
    upper = device * (1 + e["margin"]) if simulated else e["upper_gib"]
    margin = f"stated error +/-{e['margin']:.0%}: up to {upper:.2f} GiB"
    if not e["calibrated"]:
        margin += " (not calibrated on measured runs: " + ", ".join(e["uncalibrated"]) + ")"
    lines.append(margin)
    a = p["available"]
    if a is None:
        lines.append("available: unknown (no GPU visible, or trainer.gpu not usable): see below")
    else:
        verdict = {"fits": "fits", "may not fit": "MAY NOT FIT", "does not fit": "DOES NOT FIT"}[
            p["verdict"]
        ]
        lines.append(p["verdict_note"])
        lines.append(
            f"available: {a['gib']:.2f} GiB ({a['where']}): {device:.2f} GiB is "
            f"{p['share'] or float('inf'):.0%}, {verdict}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from cfgcheck.cli import EXIT_FINDINGS, EXIT_OK
    from cfgcheck.cli._common import check_args
    from cfgcheck.report import get_reporter

    if getattr(args, "source", None):
        from cfgcheck.cli._native import native_result

        result = native_result(args)
    else:
        result = check_args(args)
    if result.config is None:
        print("cfgcheck memory: the config does not validate:", file=sys.stderr)
        get_reporter("text")(result, sys.stderr)
        return EXIT_FINDINGS
    payload, (est, avail) = _payload(result)
    if args.png:
        from pathlib import Path

        from cfgcheck.memory.plot import write_png
        from cfgcheck.plotting import PlotUnavailableError

        try:
            write_png(
                est,
                Path(args.png),
                None if avail is None else avail.bytes,
                "GPU" if avail is None else avail.device.name,
                payload["verdict"],
            )
        except PlotUnavailableError as e:
            say(str(e))
    if args.format == "json":
        # The estimate, and the whole config's verdict ("ok", "findings" as `check` gives).
        json.dump({**payload, **result.to_dict()}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(_text(payload) + "\n")
        get_reporter("text")(result, sys.stdout)
    return EXIT_OK if result.ok else EXIT_FINDINGS
