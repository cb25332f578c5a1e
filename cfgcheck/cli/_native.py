"""``--from FORMAT FILE``: the commands that validate a config read a native framework file
(LitGPT, Axolotl, TRL, LLaMA-Factory, torchtune, Python) instead of composing ``conf/`` (see
:mod:`cfgcheck.sources`). ``--from torchtune FILE [RECIPE]`` also takes the recipe ``tune run``
would run."""

from __future__ import annotations

import argparse

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult

FORMATS = (
    "litgpt",
    "axolotl",
    "trl",
    "llamafactory",
    "llamafactory-v1",
    "python",
    "torchtune",
    "launch",
)


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
    for flag, text in NATIVE_OPTIONS.items():
        parser.add_argument(flag, default=None, help=text)
    parser.add_argument(
        "--command",
        dest="launch_command",
        default=None,
        metavar="TEXT",
        help="with --from launch: the training command as text instead of a script FILE "
        '("torchrun --nproc_per_node 4 train.py --bf16 True"), read the same way, never run',
    )


# What the command line states about a native run that the file itself does not spell.
NATIVE_OPTIONS = {
    "--trainer": "with --from trl: the trainer (sft, dpo, grpo, kto, reward, rloo, orpo, ...); "
    "default: from the file's name or folders, else from its keys",
    "--framework-version": "with --from: the framework version the run uses (default: the "
    "installed one, else a `# requires: trl==X` comment, else the recipe's pin, else newest; "
    "torchtune: a `# requires: torchtune==X` comment, else the installed one or main, read "
    "as not stated)",
    "--recipe": "with --from trl: the recipe whose script reads the file (alignment-handbook, "
    "open-r1); default: inferred from its script-only keys. With --from torchtune: the recipe "
    "`tune run` runs (also FILE RECIPE); default: the file's `tune run` comment",
    "--nproc-per-node": "with --from torchtune: the processes `tune run --nproc_per_node N` "
    "starts; default: the file's `tune run` comment, else 1",
    "--script-args": "with --from trl: FILE.py:Class, the dataclass the training script adds "
    "to TRL's (read with ast, never run)",
    "--cwd": "with --from launch: the folder the launch script runs from (where its entry point "
    "and --deepspeed JSON are found); default: the script's folder or the first one above it "
    "that holds the entry point",
    "--transformers-version": "with --from launch: the transformers release the entry point "
    "runs with (e.g. 4.37.2); its TrainingArguments fields come from the tables "
    "scripts/training_args_versions.py generates; default: the installed one",
    "--accelerate-config": "with --from trl: the accelerate config YAML the run is launched "
    "with (num_processes, DeepSpeed ZeRO stage, FSDP)",
}


def native_options(args: argparse.Namespace) -> dict[str, str]:
    out: dict[str, str] = {}
    for flag in NATIVE_OPTIONS:
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        if value:
            out[flag.lstrip("-").replace("-", "_")] = str(value)
    return out


def native_result(args: argparse.Namespace) -> CheckResult:
    """The check of ``--from FORMAT FILE [KEY=VALUE ...]``."""
    from cfgcheck.sources import check_native

    if args.source == "launch" and getattr(args, "launch_command", None):
        from cfgcheck.sources.launcher.commands import check_text

        return check_text(
            args.launch_command,
            "<--command>",
            None,
            list(args.overrides),
            args.gpu,
            native_options(args),
        )
    if not args.overrides:
        raise ConfigLoadError(
            f"--from {args.source} needs the config FILE: cfgcheck {args.command} --from "
            f"{args.source} FILE [KEY=VALUE ...]"
        )
    if args.source == "torchtune" and len(args.overrides) > 1:
        # `--from torchtune FILE RECIPE`: the recipe as `tune run RECIPE --config FILE` names it
        second = args.overrides[1]
        if "=" not in second and not second.startswith("~") and not args.recipe:
            args.recipe = second
            del args.overrides[1]
    file, *overrides = args.overrides
    return check_native(file, args.source, overrides, gpu=args.gpu, options=native_options(args))


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
    elif args.source == "launch":  # shell scripts; one that launches no training is skipped
        files = [f for f in files if f.endswith(".sh")]
    checked = len(files)
    for file in files:
        try:
            result = check_native(
                file,
                args.source,
                gpu=getattr(args, "gpu", None),
                options=native_options(args),
            )
        except ConfigLoadError as e:
            if type(e).__name__ == "NoTrainingRun":  # Python that only mentions a trainer
                checked -= 1
                continue
            print(f"{printable(file)}: cannot check: {printable(str(e))}")
            code = EXIT_LOAD
            continue
        from cfgcheck.sources.launcher.commands import ScriptResult, report_text

        if isinstance(result, ScriptResult):  # a launch script with several commands
            print(f"== {printable(file)}")
            report_text(result, get_reporter("text"), sys.stdout)
            if result.unreadable:
                code = EXIT_LOAD
        elif result.findings:
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
