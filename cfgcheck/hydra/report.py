"""Text report of a whole-sweep check: the failing points, their overrides and findings."""

from __future__ import annotations

from typing import TextIO

from cfgcheck.hydra.sweep import SweepResult
from cfgcheck.report.text import format_finding

# Failing points shown with every finding in full; the rest are listed one line each.
DETAILED_POINTS = 10


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def summary(result: SweepResult) -> str:
    n, bad = len(result.points), len(result.failing)
    if not bad:
        return f"sweep OK: {n} point{'' if n == 1 else 's'}, none with errors"
    return f"sweep has errors: {bad} of {n} point{'' if n == 1 else 's'} fail"


def report_sweep_text(result: SweepResult, out: TextIO, *, detailed: int = DETAILED_POINTS) -> None:
    """One block per failing point (overrides, then its error findings), then a summary line."""
    total = len(result.points)
    failing = [(i, p) for i, p in enumerate(result.points, 1) if not p.ok]
    for shown, (index, point) in enumerate(failing):
        overrides = " ".join(point.overrides) or "(no overrides)"
        errors = [] if point.result is None else point.result.errors
        if shown < detailed:
            out.write(f"point {index}/{total}: {overrides}\n")
            if point.error is not None:
                out.write(f"    cannot compose: {point.error}\n")
            for f in errors:
                out.write(_indent(format_finding(f)) + "\n")
            out.write("\n")
        else:
            what = point.error or ", ".join(sorted({f.rule for f in errors}))
            out.write(f"point {index}/{total}: {overrides}  [{what}]\n")
    if len(failing) > detailed:
        out.write("\n")
    out.write(summary(result) + "\n")
