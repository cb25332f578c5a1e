"""``cfgcheck data``: compose the config, then scan the dataset with the real tokenizer.

The verdict is the whole config's: every finding ``cfgcheck check`` reports, plus the scan's.
Exit 0 no error findings, 1 error findings (config or scan), 2 the config, tokenizer or data
could not be read (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cfgcheck.cli._common import say


def register(sub: Any) -> None:
    from cfgcheck.cli._common import add_config_args

    parser = sub.add_parser(
        "data",
        help="scan the dataset with the real tokenizer: lengths, truncation, padding waste",
    )
    add_config_args(parser, ["text", "json"])
    parser.add_argument("--png", metavar="PATH", help="also write a length histogram PNG")
    add_jobs_arg(parser)
    add_scan_args(parser)
    parser.set_defaults(run=run)


def add_scan_args(parser: argparse.ArgumentParser) -> None:
    """The scan's options besides ``--jobs``: ``cfgcheck data`` and ``cfgcheck check
    --scan-data`` share them (read back with :func:`scan_options`)."""
    parser.add_argument(
        "--sample",
        type=_share,
        default=None,
        metavar="SHARE",
        help="scan only this share of the records (e.g. 0.1%% or 0.001), chosen by a seeded "
        "hash: the same records for any --jobs and engine; shares come with a 95%% "
        "Wilson interval",
    )
    parser.add_argument(
        "--seed", type=int, default=0, metavar="N", help="the --sample seed (default 0)"
    )
    parser.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="local: worker processes on this machine (default); ray: actors on a Ray "
        "cluster (pip install 'cfgcheck[ray]'), a local one unless --ray-address is given",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="with --engine ray: the cluster to use (auto, ray://HOST:10001); default: start "
        "Ray on this machine with --jobs CPUs",
    )


def scan_options(args: argparse.Namespace) -> dict[str, Any]:
    """``scan_dataset``'s keyword arguments from :func:`add_scan_args`' options; ValueError
    (one line) when they contradict each other."""
    if args.ray_address and args.engine != "ray":
        raise ValueError("--ray-address needs --engine ray")
    from cfgcheck.data.sample import Sampling

    sample = None if args.sample is None else Sampling(args.sample, args.seed)
    return {"sample": sample, "engine": args.engine, "ray_address": args.ray_address}


def _share(text: str) -> float:
    from cfgcheck.data.sample import parse_rate

    try:
        return parse_rate(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_jobs_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jobs",
        type=_positive,
        default=None,
        metavar="N",
        help="worker processes for the dataset scan (default: all cores; 1: this process, "
        "one tokenizer thread)",
    )


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def run(args: argparse.Namespace) -> int:
    from cfgcheck.cli import EXIT_FINDINGS, EXIT_LOAD, EXIT_OK
    from cfgcheck.cli._common import check_args
    from cfgcheck.data import ScanError, scan_dataset, scan_findings
    from cfgcheck.findings import CheckResult, sort_findings
    from cfgcheck.report import get_reporter

    composed = check_args(args)
    if composed.config is None:
        # The schema rejected the config: show why; there is nothing to scan with.
        get_reporter(args.format)(composed, sys.stdout)
        return EXIT_FINDINGS
    run_cfg = composed.config
    try:
        options = scan_options(args)
    except ValueError as e:
        say(f"error: {e}")
        return EXIT_LOAD
    try:
        report = scan_dataset(run_cfg, jobs=args.jobs, quiet=args.format != "text", **options)
    except ScanError as e:
        say(f"error: {e}")
        return EXIT_LOAD
    # The whole config's verdict: what `cfgcheck check` reports, plus the scan's findings.
    findings = [*composed.findings, *scan_findings(report, run_cfg)]
    result = CheckResult(sort_findings(findings), config=run_cfg)
    if args.format == "json":
        payload = {**result.to_dict(), "scan": report.to_dict()}
        json.dump(payload, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from cfgcheck.data.render import render_text

        d = run_cfg.data
        shown = d.paths or [f"{d.hub_dataset} (Hugging Face cache)"]
        sys.stdout.write(render_text(report, shown) + "\n")
        get_reporter("text")(result, sys.stdout)
    if args.png:
        from cfgcheck.data.render import write_png
        from cfgcheck.plotting import PlotUnavailableError

        try:
            write_png(report, Path(args.png))
        except PlotUnavailableError as e:
            say(str(e))
    return EXIT_OK if result.ok else EXIT_FINDINGS
