"""``cfgcheck hook FILE...``: the pre-commit entry point.

pre-commit passes the changed files as arguments (``cfgcheck check`` would read them as
overrides). The hook maps them to the compositions they take part in and checks each:

- every primary config (``*.yaml`` at the root of the config dir), as it stands;
- each changed group option that a primary does not select by default, selected into that
  primary (``model=llama-2-7b``, or ``+group=option`` when the primary has no such group),
  reported as ``cfgcheck check model=llama-2-7b`` reports it, keeping the findings that
  involve the option (a path in its package). A finding that also involves another group is
  the option's fault unless some option of that other group clears it: a phi-2 model with
  the default Llama-2 tokenizer is a vocab mismatch that ``tokenizer=phi-2`` clears (a
  pairing the primary does not make, not a defect of phi-2.yaml), while ``block_size: 1000``
  in llama-2-7b.yaml fails against every ``data`` option's ``max_seq_length``;
- each experiment config (a group file with ``# @package _global_``) that changed, or whose
  composition with a primary includes a changed file, added to that primary
  (``+experiment=long``).

Exit 0 when every composition is clean, 1 when one has an error finding, 2 when one cannot
be composed.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfgcheck.compose import compose_errors

if TYPE_CHECKING:
    from cfgcheck.findings import Finding
    from cfgcheck.project.context import Project

_HEADER = re.compile(r"^\s*#\s*@(\S+)\s+(\S+)\s*$")


@dataclass(frozen=True)
class Target:
    """One composition to check: a primary config and the overrides that select files."""

    primary: str
    overrides: tuple[str, ...] = ()
    # Only findings whose paths all lie under this package count (None: every finding).
    scope: str | None = None

    def inside(self, path: str) -> bool:
        scope = self.scope
        return scope is None or scope == "" or path == scope or path.startswith(scope + ".")

    def involves(self, finding: Finding) -> bool:
        return any(self.inside(p) for p in finding.paths)

    def label(self, config_dir: Path) -> str:
        from cfgcheck.locations import display_path

        shown = display_path(config_dir.resolve() / f"{self.primary}.yaml")
        return " ".join([shown, *self.overrides])


def package_header(file: Path) -> str | None:
    """The ``# @package`` of a config file, read as Hydra does (leading ``# @`` lines)."""
    from cfgcheck.errors import ConfigLoadError
    from cfgcheck.safeio import read_text

    try:  # bounded: a FIFO or a link to /dev/zero committed under conf/ is never opened
        lines = read_text(file).splitlines()
    except ConfigLoadError:
        return None
    for line in lines:
        if not line.strip():
            continue
        match = _HEADER.match(line)
        if match is None:
            return None
        if match.group(1) == "package":
            return match.group(2)
    return None


def _config_path(config_dir: Path, file: str) -> str | None:
    """``model/phi-2`` for ``conf/model/phi-2.yaml``; None outside the dir or not YAML."""
    try:
        path = Path(file).resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte
        return None
    if path.suffix != ".yaml":
        return None
    try:
        return path.relative_to(config_dir).with_suffix("").as_posix()
    except ValueError:
        return None


def _select(group: str, option: str, choices: dict[str, str | None]) -> str:
    return f"{group}={option}" if group in choices else f"+{group}={option}"


# Compositions one hook run may try (each primary with each changed group option and with
# each experiment). A composition costs about a tenth of a second to a second, and every
# one screens the whole config dir: 3,000 changed files would take hours.
MAX_COMPOSITIONS = 256


def targets(
    config_dir: Path, changed: Sequence[str], max_compositions: int = MAX_COMPOSITIONS
) -> list[Target]:
    """The compositions that the changed files take part in (see the module docstring).
    Raises :class:`ConfigLoadError` before composing anything when they would be more than
    ``max_compositions``."""
    from cfgcheck.locations import composed_files

    directory = config_dir.resolve()
    changed_paths = {p for f in changed if (p := _config_path(directory, f)) is not None}
    primaries = sorted(p.stem for p in directory.glob("*.yaml"))
    experiments = sorted(
        p.relative_to(directory).with_suffix("").as_posix()
        for p in directory.glob("*/**/*.yaml")
        if package_header(p) == "_global_"
    )
    options = sum(1 for p in changed_paths if "/" in p and p not in experiments)
    planned = len(primaries) * (1 + options + len(experiments))
    if planned > max_compositions:
        from cfgcheck.errors import ConfigLoadError

        raise ConfigLoadError(
            f"{len(changed_paths)} changed config file(s) with {len(primaries)} primary "
            f"config(s) and {len(experiments)} experiment(s) make {planned} compositions to "
            f"check, more than the limit of {max_compositions}; check a smaller change, or "
            f"raise the limit with --max-compositions"
        )
    changed_files = {directory / f"{p}.yaml" for p in changed_paths}
    out: list[Target] = []
    for primary in primaries:
        out.append(Target(primary))
        try:
            base = composed_files(directory, primary)
        except compose_errors(OSError, ValueError):
            continue  # the base target reports the composition error
        in_base = {file for file, _ in base.files}
        for path in sorted(changed_paths):
            if "/" not in path or path in experiments or directory / f"{path}.yaml" in in_base:
                continue
            group, option = path.rsplit("/", 1)
            overrides = (_select(group, option, base.choices),)
            file = directory / f"{path}.yaml"
            package = group.replace("/", ".")  # Hydra's default package of a group
            try:
                composed = composed_files(directory, primary, overrides)
            except compose_errors(OSError, ValueError):
                pass  # the target reports the error
            else:
                package = next((pkg for f, pkg in composed.files if f == file), package)
            out.append(Target(primary, overrides, package))
        for path in experiments:
            group, option = path.rsplit("/", 1)
            target = Target(primary, (_select(group, option, base.choices),))
            if path in changed_paths:
                out.append(target)
                continue
            try:
                composed = composed_files(directory, primary, target.overrides)
            except compose_errors(OSError, ValueError):
                continue  # checked (and reported) only when the experiment itself changed
            if {file for file, _ in composed.files} & changed_files:
                out.append(target)
    return list(dict.fromkeys(out))


MAX_COMPANIONS = 16  # options of another group tried per finding


def _cleared_elsewhere(
    config_dir: Path, target: Target, finding: Finding, project: Project | None = None
) -> bool:
    """Whether an option of another group the finding involves makes it disappear (then the
    finding is about the pairing, not about the selected option); see the module docstring."""
    from cfgcheck import check
    from cfgcheck.errors import ConfigLoadError

    if target.scope is None or finding.severity == "info":
        return False
    directory = config_dir.resolve()
    groups = {p.split(".")[0] for p in finding.paths if not target.inside(p)}
    for group in sorted(g for g in groups if (directory / g).is_dir()):
        options = sorted(p.stem for p in (directory / group).glob("*.yaml"))[:MAX_COMPANIONS]
        for option in options:
            try:
                other = check(
                    directory,
                    target.primary,
                    [*target.overrides, f"{group}={option}"],
                    **_check_args(project),
                )
            except ConfigLoadError:
                continue
            if not any((f.rule, f.paths) == (finding.rule, finding.paths) for f in other.findings):
                return True
    return False


def _check_args(project: Project | None) -> dict[str, Any]:
    """The project's schema and settings, for :func:`cfgcheck.check`."""
    if project is None:
        return {}
    return {"schema": project.schema, "settings": project.settings}


def register(sub: Any) -> None:
    from cfgcheck.cli._common import EXIT_CODES, add_project_args
    from cfgcheck.compose import DEFAULT_CONFIG_DIR
    from cfgcheck.report import formats

    parser = sub.add_parser(
        "hook",
        help="pre-commit hook: check the configs that the changed files take part in",
        description="Check every composition a changed file takes part in: each primary "
        "config, each changed group option selected into each primary (group=option), and "
        "each experiment that includes a changed file.",
        epilog=EXIT_CODES + "\n\nrules: `cfgcheck rules` lists every rule id; "
        "`cfgcheck explain RULE` explains one.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config-dir",
        default=None,
        help=f"Hydra config directory (default: config-dir of [tool.cfgcheck], else "
        f"./{DEFAULT_CONFIG_DIR})",
    )
    add_project_args(parser)
    parser.add_argument("--format", choices=formats(), default="text", help="output format")
    parser.add_argument(
        "--max-compositions",
        type=_positive,
        default=MAX_COMPOSITIONS,
        metavar="N",
        help="refuse (exit 2) a change whose compositions to check are more than N "
        f"(default {MAX_COMPOSITIONS})",
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="changed files")
    from cfgcheck.cli._native import add_source_args

    add_source_args(parser)
    parser.set_defaults(run=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from cfgcheck import check
    from cfgcheck.cli import EXIT_FINDINGS, EXIT_LOAD, EXIT_OK
    from cfgcheck.errors import ConfigLoadError
    from cfgcheck.report import get_reporter
    from cfgcheck.report.escape import printable

    if getattr(args, "source", None):  # native framework files (--from FORMAT)
        from cfgcheck.cli._native import run_native_hook

        return run_native_hook(args)
    from cfgcheck.cli._common import project_of

    project = project_of(args)
    config_dir = Path(project.config_dir)
    if not config_dir.is_dir():
        raise ConfigLoadError(f"config directory not found: {project.config_dir}")
    # Every composition screens every config file first (cfgcheck.compose.hydra_session): a
    # FIFO, a link to /dev/zero, an alias bomb or a non-UTF-8 file is "cannot compose", exit 2.
    report = get_reporter(args.format)
    code = EXIT_OK
    checked = targets(config_dir, args.files, args.max_compositions)
    for target in checked:
        label = printable(target.label(config_dir))  # file names may hold line breaks
        try:
            result = check(
                config_dir, target.primary, list(target.overrides), **_check_args(project)
            )
        except ConfigLoadError as e:
            print(f"{label}: cannot compose: {printable(str(e))}")
            code = EXIT_LOAD
            continue
        kept = [
            f
            for f in result.findings
            if target.involves(f) and not _cleared_elsewhere(config_dir, target, f, project)
        ]
        result = dataclasses.replace(result, findings=kept)
        if result.findings:
            print(f"== {label}")
            report(result, sys.stdout)
        if not result.ok and code == EXIT_OK:
            code = EXIT_FINDINGS
    verdict = "OK" if code == EXIT_OK else "failed"
    print(f"cfgcheck hook: {len(checked)} composition(s) checked: {verdict}")
    return code
