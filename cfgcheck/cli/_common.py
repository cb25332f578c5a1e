"""Options shared by the commands that compose a config."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import TYPE_CHECKING

from cfgcheck.compose import DEFAULT_CONFIG_DIR, DEFAULT_CONFIG_NAME

if TYPE_CHECKING:
    from cfgcheck.findings import CheckResult
    from cfgcheck.project.context import Project

EXIT_CODES = """exit status:
  0  no error finding (warnings and infos allowed)
  1  at least one error finding
  2  the config could not be read or composed (one line on stderr, no traceback)"""

OVERRIDES = """overrides (Hydra syntax, before or after the options):
  key=value          set any schema key, spelled in the YAML or not: trainer.lora.rank=16,
                     tokenizer.path=assets/demo-tokenizer, data.paths=[a.jsonl,b.jsonl]
  group=option       pick a config group option: model=llama-3-8b, trainer=qlora
  +group=option      add a group the primary does not select (+experiment=long for
                     conf/experiment/long.yaml)
  +key=value         Hydra's append, for a schema key no YAML file spells (plain key=value
                     already does that); a key the YAML spells exits 2 ("Could not append"),
                     and a key outside the schema is an unknown-key error, never a new setting
  ++key=value        set, or add like +; ~key removes a key
  a value with characters Hydra reads itself is quoted for Hydra inside shell quotes:
                     "tokenizer.pad_token='<|end_of_text|>'"
  each "fix:" line cfgcheck prints is such overrides, quoted for the shell: paste it after
  the same command"""


def help_epilog(*, gpus: bool = False) -> str:
    """The end of a command's ``--help``: exit codes, override syntax, where the rules are
    listed, and (for commands that check memory) the GPU names cfgcheck knows."""
    parts = [
        EXIT_CODES,
        OVERRIDES,
        "rules: `cfgcheck rules` lists every rule id; `cfgcheck explain RULE` explains one.",
    ]
    if gpus:
        from cfgcheck.memory.devices import ambiguous_names, known_names

        parts.append(
            "GPU names for trainer.gpu.name (memory as the driver reports it, see "
            "docs/rules.md#gpu-name):\n  "
            + textwrap.fill(", ".join(known_names()), 96, subsequent_indent="  ")
            + f"\n  ambiguous, cfgcheck asks which: {', '.join(ambiguous_names())}"
        )
    return "\n\n".join(parts)


def _ids(text: str) -> list[str]:
    return [i.strip() for i in text.split(",") if i.strip()]


def add_project_args(parser: argparse.ArgumentParser) -> None:
    """``--select`` / ``--ignore`` (win over the project's settings) and ``--schema``."""
    parser.add_argument(
        "--select",
        type=_ids,
        metavar="IDS",
        help="report only these rule ids (comma-separated; replaces the settings' select)",
    )
    parser.add_argument(
        "--ignore",
        type=_ids,
        metavar="IDS",
        help="drop these rule ids (comma-separated; replaces the settings' ignore)",
    )
    parser.add_argument(
        "--schema",
        metavar="PKG.MOD:CLASS",
        help="a team's cfgcheck.RunConfig subclass to validate with (imports that module)",
    )


def project_of(args: argparse.Namespace) -> Project:
    """The project of a command: settings found from --config-dir (else the current
    directory), the command line winning (see :mod:`cfgcheck.project.context`)."""
    from cfgcheck.project.context import project

    return project(
        getattr(args, "config_dir", None),
        getattr(args, "config_name", None),
        schema=getattr(args, "schema", None),
        select=getattr(args, "select", None),
        ignore=getattr(args, "ignore", None),
    )


def add_config_args(parser: argparse.ArgumentParser, formats: list[str]) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = help_epilog(gpus=True)
    parser.add_argument(
        "--config-dir",
        default=None,
        help=f"Hydra config directory (default: config-dir of [tool.cfgcheck], else "
        f"./{DEFAULT_CONFIG_DIR})",
    )
    parser.add_argument(
        "--config-name",
        default=None,
        help=f"primary config (default: config-name of [tool.cfgcheck], else "
        f"{DEFAULT_CONFIG_NAME})",
    )
    add_project_args(parser)
    parser.add_argument("--format", choices=formats, default="text", help="output format")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="OVERRIDE",
        help="overrides: key=value for any schema key, group=option (see below)",
    )


def say(message: str) -> None:
    """``cfgcheck: <message>`` as one line on stderr: white space folded (a library's
    multi-line message, a newline in a file name), other control characters shown as escapes
    (:func:`cfgcheck.report.escape.printable`), so no line of it is written by the input."""
    from cfgcheck.report.escape import printable

    line = printable(" ".join(message.split()))
    print(f"cfgcheck: {line or 'unknown error'}", file=sys.stderr)


def check_args(args: argparse.Namespace) -> CheckResult:
    """:func:`cfgcheck.check` of the config the command line names (tree, overrides, team
    schema, rule selection), as every command that composes a config runs it."""
    from cfgcheck import check

    return check(
        args.config_dir,
        args.config_name,
        args.overrides,
        schema=args.schema,
        select=args.select,
        ignore=args.ignore,
    )
