"""``--from FORMAT FILE``: the commands that validate a config read a native framework file
(LitGPT, Axolotl, TRL) instead of composing ``conf/`` (see :mod:`cfgcheck.sources`)."""

from __future__ import annotations

import argparse

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult

FORMATS = ("litgpt", "axolotl", "trl", "llamafactory")


def add_source_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from",
        dest="source",
        choices=FORMATS,
        default=None,
        metavar="{" + ",".join(FORMATS) + "}",
        help="read a native framework config: the first OVERRIDE is the FILE, the rest are "
        "KEY=VALUE in that format's keys (sequence_len=4096, train.max_seq_length=3063)",
    )
    parser.add_argument(
        "--gpu",
        default=None,
        metavar="NAME|GIB",
        help="with --from: the GPU the run is meant for (H100, A100-80GB, or GiB per GPU)",
    )


def native_result(args: argparse.Namespace) -> CheckResult:
    """The check of ``--from FORMAT FILE [KEY=VALUE ...]``."""
    from cfgcheck.sources import check_native

    if not args.overrides:
        raise ConfigLoadError(
            f"--from {args.source} needs the config FILE: cfgcheck {args.command} --from "
            f"{args.source} FILE [KEY=VALUE ...]"
        )
    file, *overrides = args.overrides
    return check_native(file, args.source, overrides, gpu=args.gpu)


def run_native_hook(args: argparse.Namespace) -> int:
    """``cfgcheck hook --from FORMAT FILE...``: check each changed native config file."""
    import sys

    from cfgcheck.cli import EXIT_FINDINGS, EXIT_LOAD, EXIT_OK
    from cfgcheck.report import get_reporter
    from cfgcheck.report.escape import printable
    from cfgcheck.sources import check_native

    report = get_reporter(args.format)
    code = EXIT_OK
    for file in args.files:
        try:
            result = check_native(file, args.source, gpu=getattr(args, "gpu", None))
        except ConfigLoadError as e:
            print(f"{printable(file)}: cannot check: {printable(str(e))}")
            code = EXIT_LOAD
            continue
        if result.findings:
            print(f"== {printable(file)}")
            report(result, sys.stdout)
        if not result.ok and code == EXIT_OK:
            code = EXIT_FINDINGS
    verdict = "OK" if code == EXIT_OK else "failed"
    print(f"cfgcheck hook: {len(args.files)} {args.source} config(s) checked: {verdict}")
    return code
