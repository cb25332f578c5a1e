"""``--format text``: one block per finding, errors first, then a summary line.

A block ends with the ``hint:`` (prose: what to change and why) and one ``fix:`` line per
machine-checked fix: the fix as one shell-quoted command-line fragment (:attr:`Fix.shell`),
to paste after the same command, with what it does on the line below.
"""

from __future__ import annotations

import os
from typing import TextIO

from cfgcheck.findings import CheckResult, Finding
from cfgcheck.report import register
from cfgcheck.report.escape import printable

FIX_LABEL = "fix:"  # a line "  fix: FRAGMENT" holds a pasteable fix and nothing else

_COLORS = {"error": "31", "warning": "33", "info": "36", "ok": "32", "dim": "2"}


def _use_color(out: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    return bool(os.environ.get("FORCE_COLOR")) or (hasattr(out, "isatty") and out.isatty())


def _paint(text: str, style: str, color: bool) -> str:
    return f"\033[{_COLORS[style]}m{text}\033[0m" if color else text


def format_finding(f: Finding, color: bool = False) -> str:
    head = _paint(f"{f.severity}[{f.rule}]", f.severity, color)
    lines = [f"{head} {printable(', '.join(f.paths))}"]
    # Compiler-style `file:line: path` lines (column 0), so editors and terminals link them.
    lines += [
        f"{printable(str(loc))}: {printable(path)} {_paint('set here', 'dim', color)}"
        for path, loc in f.locations.items()
        if loc is not None
    ]
    lines.append(f"  {printable(f.message)}")
    if f.hint:
        lines.append(f"  {_paint('hint:', 'dim', color)} {printable(f.hint)}")
    for fix in f.fixes:
        lines.append(f"  {_paint(FIX_LABEL, 'dim', color)} {printable(fix.shell)}")
        lines.append(f"  {' ' * len(FIX_LABEL)} {_paint(printable(fix.summary), 'dim', color)}")
    return "\n".join(lines)


def summary(result: CheckResult) -> str:
    counts = {s: sum(f.severity == s for f in result.findings) for s in _COLORS if s != "ok"}
    parts = [f"{n} {s}{'' if n == 1 else 's'}" for s, n in counts.items() if s != "dim"]
    verdict = "config OK" if result.ok else "config has errors"
    return f"{verdict}: {', '.join(parts)}"


@register("text")
def report_text(result: CheckResult, out: TextIO) -> None:
    color = _use_color(out)
    for f in result.findings:
        out.write(format_finding(f, color) + "\n\n")
    out.write(_paint(summary(result), "ok" if result.ok else "error", color) + "\n")
