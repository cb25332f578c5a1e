"""One verdict per training command: a script that starts several (DeepSpeed-Chat's steps,
SFT then DPO, a learning-rate loop) gets each command checked on its own, the findings grouped
under the command's line, and the worst verdict as the whole script's (an error in one command
fails the script; a command that cannot be read at all makes it unreadable, exit 2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult

INDEX = "launch_index"  # the option that picks one command (0-based) of the script


@dataclass
class CommandVerdict:
    """One training command of a script: its check, or the one line why it cannot be read."""

    file: str
    line: int
    launcher: str
    entry: str
    result: CheckResult | None = None
    error: str | None = None

    @property
    def title(self) -> str:
        return f"{self.file}:{self.line}: {self.launcher} {self.entry}"

    @property
    def verdict(self) -> str:
        if self.result is None:
            return "cannot check"
        return "OK" if self.result.ok else "errors"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": self.file,
            "line": self.line,
            "launcher": self.launcher,
            "entry": self.entry,
            "ok": self.result is not None and self.result.ok,
        }
        if self.result is not None:
            out["findings"] = [f.to_dict() for f in self.result.findings]
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass
class ScriptResult(CheckResult):
    """The script's verdicts, one per command; ``findings`` holds all of them, each message
    led by the command it belongs to (for the reporters that list findings flat)."""

    commands: list[CommandVerdict] = field(default_factory=list)

    @property
    def unreadable(self) -> bool:
        return any(c.result is None for c in self.commands)

    @property
    def ok(self) -> bool:
        return not self.errors and not self.unreadable

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "findings": [f.to_dict() for f in self.findings],
            "commands": [c.to_dict() for c in self.commands],
        }

    def with_each(self, change: Any) -> ScriptResult:
        """``change`` (a CheckResult -> CheckResult, e.g. the project's rule selection)
        applied to every command's result, and the flat list rebuilt."""
        commands = [
            c if c.result is None else dataclasses.replace(c, result=change(c.result))
            for c in self.commands
        ]
        return _combined(commands)


def _combined(commands: list[CommandVerdict]) -> ScriptResult:
    findings = []
    for c in commands:
        if c.result is None:
            continue
        for f in c.result.findings:
            lead = f"[command at {c.file}:{c.line}, {c.entry}] "
            findings.append(dataclasses.replace(f, message=lead + f.message))
    return ScriptResult(findings, None, commands)


def check_script(
    path: str | Path,
    overrides: Sequence[str] = (),
    gpu: str | None = None,
    options: Mapping[str, str] | None = None,
) -> CheckResult:
    """The check of a launch script: a plain :class:`CheckResult` when it starts one training
    command, else a :class:`ScriptResult` with one verdict per command."""
    from cfgcheck import safeio
    from cfgcheck.locations import display_path

    script = Path(path)
    text = safeio.read_text(script)
    return check_text(text, display_path(script), script, overrides, gpu, options)


def check_text(
    text: str,
    shown: str,
    script: Path | None,
    overrides: Sequence[str] = (),
    gpu: str | None = None,
    options: Mapping[str, str] | None = None,
) -> CheckResult:
    """:func:`check_script` of a script's text (the service's requests), ``shown`` as its
    name; ``script`` (its path, when it has one) places the project folder."""
    from cfgcheck.sources.launcher import _loaded
    from cfgcheck.sources.launcher.command import find_launches
    from cfgcheck.sources.launcher.flags import read_launch, split_arguments
    from cfgcheck.sources.launcher.shell import read_script
    from cfgcheck.sources.native import check_loaded

    opts = dict(options or {})
    args, _flags = split_arguments(overrides)
    launches = find_launches(read_script(text, shown, args))

    def check(index: int | None) -> CheckResult:
        chosen = opts if index is None else {**opts, INDEX: str(index)}
        return check_loaded(_loaded(read_launch(text, shown, script, overrides, chosen), gpu))

    if len(launches) <= 1 or INDEX in opts:
        return check(None)
    commands = []
    for i, launch in enumerate(launches):
        verdict = CommandVerdict(shown, launch.line, launch.launcher, launch.entry)
        try:
            verdict.result = check(i)
        except ConfigLoadError as e:
            verdict.error = str(e)
        commands.append(verdict)
    return _combined(commands)


def report_text(result: ScriptResult, report: Any, out: TextIO) -> None:
    """Each command under a ``== file:line: launcher entry`` header, then the script's
    verdict: how many commands are OK, have errors, cannot be checked."""
    from cfgcheck.report.escape import printable

    for c in result.commands:
        out.write(f"== {printable(c.title)}: {c.verdict}\n")
        if c.result is None:
            out.write(f"cannot check: {printable(c.error or '')}\n\n")
            continue
        report(c.result, out)
        out.write("\n")
    n = len(result.commands)
    counts = {
        v: sum(c.verdict == v for c in result.commands) for v in ("OK", "errors", "cannot check")
    }
    parts = ", ".join(f"{v}: {k}" for v, k in counts.items() if k)
    out.write(f"{n} training commands: {parts}\n")
