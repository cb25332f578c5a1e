"""Findings and the result of a check.

A :class:`Finding` is one problem (or remark) about a run config: a stable
kebab-case ``rule`` id, a ``severity``, the dotted config ``paths`` involved, a
``message`` that names the offending values and a ``hint`` with the concrete fix.
A :class:`CheckResult` collects every finding of one check; reporters render it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

Severity = Literal["error", "warning", "info"]

SEVERITY_ORDER: Mapping[Severity, int] = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Location:
    """Where a config value was set: a YAML file and line, or a command-line override."""

    file: str
    line: int | None = None

    def __str__(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Fix:
    """A machine-readable fix: Hydra overrides that, pasted together on the same command line
    (plain ``key=value``, no ``+``), remove the finding and introduce no new error.

    ``overrides`` are the arguments as the program receives them (a value Hydra's grammar
    would misread is quoted for Hydra: ``tokenizer.pad_token='<|end_of_text|>'``); ``flags``
    are command-line options that go with them (``--gpu H100`` for a native config, whose
    format has no key for the GPU). :attr:`shell` is the whole fix as one fragment quoted for
    POSIX shells, what the text report prints."""

    overrides: tuple[str, ...]
    summary: str
    flags: tuple[str, ...] = ()

    @property
    def argv(self) -> tuple[str, ...]:
        """The fix's command-line arguments, flags first."""
        return (*self.flags, *self.overrides)

    @property
    def shell(self) -> str:
        """:attr:`argv` quoted for a POSIX shell, ready to paste after the command."""
        return " ".join(shell_quote(a) for a in self.argv)

    def combined(self, other: Fix) -> Fix:
        """Both fixes on one command line. A saving the second one states is relative to a
        peak the finding never showed, so only its resulting figure is kept."""
        second = _SAVES.sub("(-> ", other.summary)
        return Fix(
            tuple(dict.fromkeys((*self.overrides, *other.overrides))),
            f"{self.summary}, and {second}",
            tuple(dict.fromkeys((*self.flags, *other.flags))) if other.flags else self.flags,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "overrides": list(self.overrides),
            "summary": self.summary,
            "flags": list(self.flags),
            "shell": self.shell,
        }


_SAVES = re.compile(r"saves [\d.]+ GiB \(-> ")

# Characters a POSIX shell reads as themselves outside quotes (shlex.quote's safe set).
_SHELL_SAFE = re.compile(r"^[\w@%+=:,./-]+$", re.ASCII)


def shell_quote(arg: str) -> str:
    """``arg`` as one POSIX shell word: as it is when nothing in it is special, in single
    quotes when it holds no single quote, in double quotes when it holds nothing a double
    quote expands (``$``, backquote, ``\\``, ``"``, ``!``), else :func:`shlex.quote`."""
    if _SHELL_SAFE.match(arg):
        return arg
    if "'" not in arg:
        return f"'{arg}'"
    if not any(c in arg for c in '$`\\"!'):
        return f'"{arg}"'
    import shlex

    return shlex.quote(arg)


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    paths: tuple[str, ...]
    message: str
    hint: str
    # Source location of each path after composition (filled by the Hydra layer when known).
    locations: Mapping[str, Location | None] = field(default_factory=dict)
    # Machine-readable fixes, each one complete on its own (see :class:`Fix`).
    fixes: tuple[Fix, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "paths": list(self.paths),
            "message": self.message,
            "hint": self.hint,
            # Parallel to "paths": where each value was set, or null when unknown.
            "locations": [_location_dict(self.locations.get(p)) for p in self.paths],
            "fixes": [fix.to_dict() for fix in self.fixes],
            # What the rule checks and how to fix it (docs/rules.md, `cfgcheck explain`).
            "doc": _doc_link(self.rule),
        }


def _doc_link(rule: str) -> str:
    from cfgcheck.rules.explanations import doc_link

    return doc_link(rule)


def _location_dict(location: Location | None) -> dict[str, Any] | None:
    return None if location is None else {"file": location.file, "line": location.line}


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then infos; stable within a severity."""
    return sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])


@dataclass
class CheckResult:
    """Every finding of one check, plus the validated config when the schema accepted it."""

    findings: list[Finding]
    config: RunConfig | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def by_rule(self, rule: str) -> list[Finding]:
        return [f for f in self.findings if f.rule == rule]

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "findings": [f.to_dict() for f in self.findings]}

    def raise_for_errors(self) -> None:
        """Raise :class:`~cfgcheck.errors.ConfigError` carrying every error finding."""
        from cfgcheck.errors import ConfigError

        if not self.ok:
            raise ConfigError(self.errors)
