"""``--from FORMAT FILE``: the commands that validate a config read a native framework file
(LitGPT, Axolotl, TRL) instead of composing ``conf/`` (see :mod:`cfgcheck.sources`)."""

from __future__ import annotations

import argparse

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult

FORMATS = ("litgpt", "axolotl", "trl")


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
