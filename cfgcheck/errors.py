"""Exceptions. Both are ``ValueError`` subclasses so callers can catch either generically."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cfgcheck.findings import Finding


class ConfigLoadError(ValueError):
    """The config could not be read or composed (missing dir, malformed YAML, bad override).

    The message is one line, fit for a terminal. The CLI exits 2 on it.
    """


class ConfigError(ValueError):
    """A config failed validation; carries *every* error finding, not just the first."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        self.findings = list(findings)
        lines = [f"{len(self.findings)} config error(s):"]
        lines += [f"  [{f.rule}] {f.message}" for f in self.findings]
        super().__init__("\n".join(lines))
