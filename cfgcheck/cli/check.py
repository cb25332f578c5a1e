"""``cfgcheck check``: compose, validate, report. Exit 0 ok, 1 error findings, 2 unreadable."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    from cfgcheck.cli._common import add_config_args
    from cfgcheck.cli._native import add_source_args
    from cfgcheck.report import formats

    parser = sub.add_parser("check", help="validate a Hydra-composed run config")
    add_config_args(parser, formats())
    add_source_args(parser)
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="the overrides are a Hydra sweep (model=a,b x=range(1,4)): check every point",
    )
    parser.add_argument(
        "--jobs",
        type=_jobs,
        default=None,
        metavar="N",
        help="processes, 0: one per core. With --sweep: check the points in N processes "
        "(default 1; the output is the same, in the same order). With --scan-data: the "
        "dataset scan's worker processes (default: one per core)",
    )
    parser.add_argument(
        "--scan-data",
        action="store_true",
        help="also tokenize data.paths with the real tokenizer and add the scan's findings "
        "(see `cfgcheck data`)",
    )
    from cfgcheck.cli.data import add_scan_args

    add_scan_args(parser)
    parser.set_defaults(run=run)


def _jobs(text: str) -> int:
    import os

    try:
        n = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from e
    if n < 0:
        raise argparse.ArgumentTypeError("--jobs must be 0 (one per core) or more")
    return n or os.cpu_count() or 1


def run(args: argparse.Namespace) -> int:
    from cfgcheck.cli import EXIT_FINDINGS, EXIT_LOAD, EXIT_OK
    from cfgcheck.cli._common import check_args
    from cfgcheck.report import get_reporter

    scanning = getattr(args, "scan_data", False)
    if not scanning and (args.sample is not None or args.engine != "local" or args.ray_address):
        from cfgcheck.errors import ConfigLoadError

        raise ConfigLoadError("--sample, --engine and --ray-address need --scan-data")
    if getattr(args, "sweep", False) and getattr(args, "source", None):
        from cfgcheck.errors import ConfigLoadError

        raise ConfigLoadError("--sweep works on conf/ compositions, not with --from")
    if getattr(args, "sweep", False):
        from cfgcheck.hydra.cli import run_sweep

        return run_sweep(args)
    if getattr(args, "source", None):
        from cfgcheck.cli._native import native_result
        from cfgcheck.project.settings import find_settings

        # A native file has no config directory: the project's rule selection still applies.
        settings = find_settings().with_cli(args.select, args.ignore)
        result = native_result(args)
        from cfgcheck.sources.launcher.commands import ScriptResult, report_text

        if isinstance(result, ScriptResult):  # a launch script: one verdict per command
            script = result.with_each(settings.apply)
            if args.format == "text":
                report_text(script, get_reporter("text"), sys.stdout)
            else:
                get_reporter(args.format)(script, sys.stdout)
            return EXIT_LOAD if script.unreadable else EXIT_OK if script.ok else EXIT_FINDINGS
        result = settings.apply(result)
    else:
        result = check_args(args)
    if scanning:
        from cfgcheck.cli.data import scan_options
        from cfgcheck.data.check import with_scan_findings
        from cfgcheck.data.report import EngineError
        from cfgcheck.errors import ConfigLoadError

        try:
            options = scan_options(args)
        except ValueError as e:  # options that contradict each other
            raise ConfigLoadError(str(e)) from e
        try:
            result = with_scan_findings(
                result, jobs=args.jobs, quiet=args.format != "text", **options
            )
        except EngineError as e:  # Ray missing, its cluster unreachable
            raise ConfigLoadError(str(e)) from e
    get_reporter(args.format)(result, sys.stdout)
    return EXIT_OK if result.ok else EXIT_FINDINGS
