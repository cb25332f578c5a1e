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
    from cfgcheck.memory.verdict import verdict

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
    }
    if avail is not None:
        out["available"] = {
            "gib": round(avail.bytes / GIB, 3),
            "source": avail.device.source,
            "device": avail.device.name,
            "where": avail.where,
        }
        # "fits" only when the estimate with its stated margin fits (the verdict errs safe);
        # the figures shown are those on this GPU (a full GPU makes torch free its cache)
        out["verdict"] = verdict(est, avail.bytes)
        est = est.on_gpu(avail.bytes)
        out["estimate"] = est.to_dict()
        out["fits"] = out["verdict"] == "fits"
        out["share"] = round(est.total_bytes / avail.bytes, 4) if avail.bytes > 0 else None
    out["simulation"] = _simulation(cfg, est, None if avail is None else avail.bytes)
    return out, (est, avail)


def _simulation(cfg: Any, est: Any, available: int | None) -> dict[str, Any] | None:
    """The allocator simulation's figures (cfgcheck/memory/simulated.py), on the GPU's
    capacity less the CUDA context when the GPU is known; None where it does not cover the run."""
    from cfgcheck.memory.simulated import simulate_step

    context = est.get("cuda_context") + est.get("paged_states")
    cap = None if available is None else max(0, available - context)
    sim = simulate_step(cfg.model, cfg.data, cfg.trainer, cap)
    return None if sim is None else sim.to_dict()


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
    lines.append(
        f"torch max_memory_allocated ~ {e['allocated_gib']:.2f} GiB, "
        f"max_memory_reserved ~ {e['reserved_gib']:.2f} GiB"
    )
    sim = p.get("simulation")
    if sim is not None:
        outcome = f"; on this GPU it {sim['outcome']}" if sim["outcome"] else ""
        lines.append(
            f"allocator simulation ~ reserved {sim['reserved_gib']:.2f} GiB, allocated "
            f"{sim['allocated_gib']:.2f} GiB, cache {sim['fragmentation_gib']:.2f} GiB "
            f"(replayed from {sim['events']:,} allocation events){outcome}"
        )
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
    margin = f"stated error +/-{e['margin']:.0%}: up to {e['upper_gib']:.2f} GiB"
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
        lines.append(
            f"available: {a['gib']:.2f} GiB ({a['where']}): {e['total_gib']:.2f} GiB is "
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
