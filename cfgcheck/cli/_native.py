"""``--from FORMAT FILE``: the commands that validate a config read a native framework file
(LitGPT, Axolotl, TRL, LLaMA-Factory, torchtune) instead of composing ``conf/`` (see
:mod:`cfgcheck.sources`). ``--from torchtune FILE [RECIPE]`` also takes the recipe ``tune run``
would run."""

from __future__ import annotations

import argparse

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult

FORMATS = ("litgpt", "axolotl", "trl", "llamafactory", "python", "torchtune")


def add_source_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from",
        dest="source",
        choices=FORMATS,
        default=None,
        metavar="{" + ",".join(FORMATS) + "}",
        help="read a native framework config: the first OVERRIDE is the FILE, the rest are "
        "KEY=VALUE in that format's keys (sequence_len=4096, train.max_seq_length=3063); "
        "torchtune: FILE [RECIPE] KEY=VALUE ...",
    )
    parser.add_argument(
        "--gpu",
        default=None,
        metavar="NAME|GIB",
        help="with --from: the GPU the run is meant for (H100, A100-80GB, or GiB per GPU)",
    )
    parser.add_argument(
        "--nproc-per-node",
        dest="nproc_per_node",
        type=int,
        default=None,
        metavar="N",
        help="with --from torchtune: the processes `tune run --nproc_per_node N` starts "
        "(default: the file's `tune run` comment, else 1)",
    )


def native_result(args: argparse.Namespace) -> CheckResult:
    """The check of ``--from FORMAT FILE [KEY=VALUE ...]``."""
    from cfgcheck.sources import check_native

    if not args.overrides:
        raise ConfigLoadError(
            f"--from {args.source} needs the config FILE: cfgcheck {args.command} --from "
            f"{args.source} FILE [KEY=VALUE ...]"
        )
    launch = launch_args(args)
    file, *overrides = args.overrides
    return check_native(file, args.source, overrides, gpu=args.gpu, launch=launch)


def launch_args(args: argparse.Namespace) -> dict[str, object]:
    """``--from torchtune FILE [RECIPE]``: the recipe ``tune run`` would run (a second
    argument without ``=``), and ``--nproc-per-node``."""
    launch: dict[str, object] = {}
    if getattr(args, "nproc_per_node", None) is not None:
        launch["nproc_per_node"] = args.nproc_per_node
    if args.source == "torchtune" and len(args.overrides) > 1:
        second = args.overrides[1]
        if "=" not in second and not second.startswith("~"):
            launch["recipe"] = second
            del args.overrides[1]
    return launch


def run_native_hook(args: argparse.Namespace) -> int:
    """``cfgcheck hook --from FORMAT FILE...``: check each changed native config file."""
    import sys

    from cfgcheck.cli import EXIT_FINDINGS, EXIT_LOAD, EXIT_OK
    from cfgcheck.report import get_reporter
    from cfgcheck.report.escape import printable
    from cfgcheck.sources import check_native

    report = get_reporter(args.format)
    code = EXIT_OK
    files = list(args.files)
    if args.source == "python":
        files = python_files(files)
    checked = len(files)
    for file in files:
        try:
            launch = {"nproc_per_node": args.nproc_per_node} if args.nproc_per_node else None
            result = check_native(file, args.source, gpu=getattr(args, "gpu", None), launch=launch)
        except ConfigLoadError as e:
            if type(e).__name__ == "NoTrainingRun":  # Python that only mentions a trainer
                checked -= 1
                continue
            print(f"{printable(file)}: cannot check: {printable(str(e))}")
            code = EXIT_LOAD
            continue
        if result.findings:
            print(f"== {printable(file)}")
            report(result, sys.stdout)
        if not result.ok and code == EXIT_OK:
            code = EXIT_FINDINGS
    verdict = "OK" if code == EXIT_OK else "failed"
    print(f"cfgcheck hook: {checked} {args.source} config(s) checked: {verdict}")
    return code


def python_files(files: list[str]) -> list[str]:
    """The ``*.py`` / ``*.ipynb`` files that build a trainer; every other file is skipped
    after a bounded read and a text search, without parsing."""
    from cfgcheck import safeio
    from cfgcheck.sources.code.text import MAX_BYTES
    from cfgcheck.sources.python import trains_text

    kept = []
    for file in files:
        if not file.endswith((".py", ".ipynb")):
            continue
        try:
            text = safeio.read_text(file, MAX_BYTES)
        except ConfigLoadError:
            kept.append(file)  # reported as unreadable by the check
            continue
        if trains_text(text):
            kept.append(file)
    return kept
