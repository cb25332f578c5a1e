"""A launch script's flags parsed against its entry point's parser, as ``HfArgumentParser``
parses them (transformers ``src/transformers/hf_argparser.py``: one ``--field`` per dataclass
field; a ``bool`` field takes an optional value, ``--flag`` alone is True, and a field whose
default is True also gets ``--no_field``; flags no dataclass declares end the run with
"Some specified arguments are not used by the HfArgumentParser: [...]").
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Finding, Location
from cfgcheck.sources.launcher import LaunchConfig
from cfgcheck.sources.launcher.clm import post_init_problems
from cfgcheck.sources.launcher.command import Flag, Launch, find_launches, script_flags
from cfgcheck.sources.launcher.entry import (
    Field,
    inside,
    read_entry,
    refused_since,
    release_checks,
)
from cfgcheck.sources.launcher.shell import Word, read_script

UNKNOWN_FLAG = "launch-unknown-flag"
BOTH_PRECISIONS = "launch-fp16-and-bf16"


class NoTrainingRun(ConfigLoadError):
    """The script launches no training: nothing to check (the hook skips such files)."""


UNKNOWN_VALUE = "launch-unknown-value"
TRUE = ("true", "1", "yes", "y", "t")
FALSE = ("false", "0", "no", "n", "f")
# Flags a transformers release renamed (the installed one refuses the old name):
# evaluation_strategy -> eval_strategy (transformers 4.41 deprecated it, 4.46 removed it);
# warmup_ratio -> warmup_steps, where a float in [0, 1) is the ratio (training_args.py of 5.x).
# Which release refuses the old name comes from the generated tables (entry.refused_since).
RENAMED = {
    "evaluation_strategy": ("eval_strategy", ""),
    "warmup_ratio": ("warmup_steps", "(a float in [0, 1) is the ratio)"),
}


def read_launch(
    text: str, shown: str, script: Path | None, overrides: Sequence[str], opts: dict[str, str]
) -> LaunchConfig:
    # Overrides without "=" are the script's own arguments ($1, $2...); the others are flags
    # appended to the training command.
    given = tuple(overrides)
    args, overrides = split_arguments(overrides)
    parsed = read_script(text, shown, args)
    launches = find_launches(parsed)
    if not launches:
        raise NoTrainingRun(
            f"{shown}: no training command found: no torchrun, deepspeed, accelerate launch "
            "or python command that starts a .py entry point; nothing to check"
        )
    index = int(opts.get("launch_index", "0"))
    if index >= len(launches):
        raise ConfigLoadError(f"{shown}: no training command number {index + 1}")
    launch = launches[index]
    root = Path(opts["cwd"]) if opts.get("cwd") else _root(script, launch)
    entry_path = _entry_path(launch, root, shown)
    from cfgcheck.locations import display_path

    # A script given as text (the service) shows its entry point relative to its folder.
    entry_shown = display_path(entry_path) if script else _relative(entry_path, root)
    boundary = root if opts.get("confined") else None  # the service: nothing above --cwd
    version = opts.get("transformers_version")
    entry = read_entry(entry_path, entry_shown, root, boundary, version)
    native = LaunchConfig("launch", shown, {}, {}, origin=script, text=text)
    native.options = {k: v for k, v in opts.items() if v}
    native.launch, native.entry, native.root = launch, entry, root
    # CUDA_VISIBLE_DEVICES as the command runs with it: a prefix on the command, else the
    # script's own assignment or export (the shell it was run from is not known).
    visible = launch.command.env.get("CUDA_VISIBLE_DEVICES")
    if visible is None and "CUDA_VISIBLE_DEVICES" in parsed.variables:
        visible = parsed.variables["CUDA_VISIBLE_DEVICES"][0]
    native.visible_devices = visible
    native.given = given
    native.launch_flags = [w for f in launch.flags for w in _argv(f)]
    for name, spec in entry.fields.items():
        native.defaults[name] = (spec.default, spec.where)
    for name, flag in launch.launcher_flags.items():  # the process count, when unknown
        word = flag.value_word or flag.word
        counts = ("nproc_per_node", "num_gpus", "num_processes", "nnodes", "num_nodes")
        if word.unknown and name.replace("-", "_") in counts:
            native.unknown[f"launcher.{name}"] = f"{word.unknown} ({shown}:{word.line})"
            native.where[f"launcher.{name}"] = Location(shown, word.line)
    passed = [w for w in launch.command.words if w.unknown and w.text == "$@"]
    if passed:
        native.problems.append(
            Finding(
                UNKNOWN_VALUE,
                "warning",
                ("$@",),
                f'"$@" at line {passed[0].line} passes the script\'s arguments to the entry '
                f"point, and they are {passed[0].unknown}: the flags they hold are not checked",
                "give the script's arguments after --, in a form its argument loop reads",
                locations={"$@": Location(shown, passed[0].line)},
            )
        )
    extra = [Flag(*_override(o)) for o in overrides]
    _parse(native, [*launch.flags, *extra], entry.fields if entry.parser else None)
    native.problems += post_init_problems(native)
    both = native.data.get("fp16") is True and native.data.get("bf16") is True
    if both and "fp16_and_bf16" in release_checks(entry.transformers_version):
        # transformers training_args.py TrainingArguments.__post_init__ (5.24: line 1785)
        native.problems.append(
            Finding(
                BOTH_PRECISIONS,
                "error",
                ("fp16", "bf16"),
                "--fp16 and --bf16 are both True: TrainingArguments refuses it before training "
                'with "ValueError: At most one of fp16 and bf16 can be True, but not both"',
                "keep one: --bf16 False (fp16 autocast), or --fp16 False (bf16, on Ampere or "
                "newer)",
            )
        )
    return native


def split_arguments(given: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the script's arguments, the flags appended to its command): before ``--``, a word
    without ``=`` is an argument (``$1``...) and ``key=value`` / ``--flag=value`` an appended
    flag; every word after ``--`` is an argument as typed (``-m MODEL``, ``--use_lora True``)."""
    words = list(given)
    after = words[words.index("--") + 1 :] if "--" in words else []
    before = words[: words.index("--")] if "--" in words else words
    args = [o for o in before if "=" not in o and not o.startswith("-")]
    return args + after, [o for o in before if o not in args]


def with_flags(given: Sequence[str], flags: Sequence[str]) -> list[str]:
    """``given`` (overrides, then ``--`` and the script's arguments) with ``flags`` appended
    as overrides, before the ``--``."""
    words = list(given)
    cut = words.index("--") if "--" in words else len(words)
    return [*words[:cut], *flags, *words[cut:]]


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.name


def _argv(flag: Flag) -> list[str]:
    return [f"--{flag.name}"] + ([] if flag.value is None else [flag.value])


def _override(text: str) -> tuple[str, str | None, Word]:
    """A fix or ``key=value`` override as a flag appended to the command (the last wins)."""
    body = text.lstrip("-")
    name, sep, value = body.partition("=") if "=" in body else body.partition(" ")
    return name, value if sep else None, Word(text, 0)


def _root(script: Path | None, launch: Launch) -> Path:
    """The project folder the entry point is found in: the script's folder or one above it
    (published scripts live in ``scripts/`` and run from the repository's root)."""
    if script is None:
        return Path.cwd()
    folder = script.resolve().parent
    rel = launch.entry.replace(".", "/") + ".py" if launch.module else launch.entry
    for candidate in (folder, *list(folder.parents)[:3]):
        if (candidate / rel).is_file():
            return candidate
    return folder


def _entry_path(launch: Launch, root: Path, shown: str) -> Path:
    where = f"{shown}:{launch.entry_word.line}"
    if launch.entry_word.unknown:
        raise ConfigLoadError(
            f"{where}: the entry point {launch.entry} is {launch.entry_word.unknown}: "
            "give it with -- SCRIPT_ARGS or --cwd"
        )
    rel = launch.entry.replace(".", "/") + ".py" if launch.module else launch.entry
    path = (root / rel).resolve()
    if not inside(path, root):
        raise ConfigLoadError(
            f"{where}: the entry point {launch.entry} lies outside the project ({root}): "
            "cfgcheck reads only the project's own files"
        )
    if not path.is_file():
        raise ConfigLoadError(
            f"{where}: the entry point {launch.entry} is not found (looked in {root}; "
            "give the folder the script runs from with --cwd)"
        )
    return path


def _parse(native: LaunchConfig, flags: list[Flag], fields: dict[str, Field] | None) -> None:
    unknown: list[Flag] = []
    for flag in flags:
        name = flag.name.replace("-", "_")
        where = _located(native, flag)
        spec = fields.get(name) if fields is not None else None
        value: Any = flag.value
        if fields is not None and spec is None and name.startswith("no_"):
            positive = fields.get(name[3:])
            if positive is not None and positive.is_bool and positive.default is True:
                name, spec, value = name[3:], positive, "false"
        if fields is not None and spec is None:
            unknown.append(flag)
            continue
        word = flag.value_word or flag.word
        if word.unknown:
            native.unknown[name] = f"{word.unknown} ({native.file}:{word.line})"
            native.data.pop(name, None)
            native.where[name] = where
            continue
        native.unknown.pop(name, None)
        native.data[name] = _typed(value, spec)
        native.where[name] = where
    if unknown and fields is not None:
        native.problems.append(_unknown_flags(native, unknown, fields))
    for name, why in native.unknown.items():
        native.problems.append(
            Finding(
                UNKNOWN_VALUE,
                "warning",
                (name,),
                f"--{name.removeprefix('launcher.')} is {why}: cfgcheck reads the script "
                "without running it, so the "
                "checks that need it are left out",
                f"give the value in the script, or pass the script's arguments after --: "
                f"--{name.removeprefix('launcher.')} VALUE",
            )
        )


def _located(native: LaunchConfig, flag: Flag) -> Location:
    """The script's line of ``flag``; a flag passed through ``"$@"`` is where the user typed
    it (``<script argument 3: --lr>``), an override or a fix the override."""
    if flag.word.arg:
        return Location(f"<script argument {flag.word.arg}: {flag.word.text}>", None)
    if flag.word.line:
        return Location(native.file, flag.word.line)
    return Location(f"<override {flag.word.text}>", None)


def _typed(value: str | None, spec: Field | None) -> Any:
    kind = (spec.type if spec else "").replace(" ", "")
    if value is None:
        return True  # --flag alone: a bool field, or argparse's store_true
    if spec is not None and (spec.is_bool or kind == "flag"):
        low = value.lower()
        if low in TRUE:
            return True
        if low in FALSE:
            return False
        return value
    base = kind.replace("Optional[", "").replace("]", "").replace("|None", "")
    try:
        if base == "int":
            return int(value)
        if base == "float":
            return float(value)
    except ValueError:
        return value
    return value


def _unknown_flags(native: LaunchConfig, flags: list[Flag], fields: dict[str, Field]) -> Finding:
    names = [f"--{f.name}" for f in flags]
    hints = []
    for flag in flags:
        renamed = RENAMED.get(flag.name)
        entry = native.entry
        version = entry.transformers_version if entry else ""
        if renamed is not None and renamed[0] in fields:
            since = refused_since(flag.name, version) or f"refused by transformers {version}"
            note = f" {renamed[1]}" if renamed[1] else ""
            hints.append(
                f"--{flag.name} is --{renamed[0]}{note}: {since}; this check is against "
                f"transformers {version or 'unknown'}"
            )
            continue
        removed = refused_since(flag.name, version) if version else ""
        if removed:  # a field an older release declares (--overwrite_output_dir, gone in 5.0)
            hints.append(
                f"--{flag.name}: {removed}; remove it, or check against the release the "
                "script was written for (--transformers-version)"
            )
            continue
        close = difflib.get_close_matches(flag.name, list(fields), n=1)
        if close:
            hints.append(f"--{flag.name}: did you mean --{close[0]}?")
    first = flags[0]
    parser = native.entry.parser if native.entry else "the parser"
    for f in flags:
        native.where.setdefault(f.name, _located(native, f))
    refusal = (
        f'the run stops with "error: unrecognized arguments: {" ".join(names)}" (argparse)'
        if parser == "argparse"
        else 'the run stops with "ValueError: Some specified arguments are not used by the '
        f'HfArgumentParser: {names}"'
    )
    at = f" (first at line {first.word.line})" if first.word.line and not first.word.arg else ""
    return Finding(
        UNKNOWN_FLAG,
        "error",
        tuple(f.name for f in flags),
        f"{parser} refuses {', '.join(names)}: the entry point "
        f"{native.entry.file if native.entry else ''} declares no such "
        f"{'option' if parser == 'argparse' else 'field'}, and {refusal}{at}",
        "; ".join(hints) or "remove the flag, or declare it in one of the parser's dataclasses",
    )


__all__ = ["read_launch", "script_flags", "split_arguments", "with_flags"]
