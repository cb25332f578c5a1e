#!/usr/bin/env python
"""Fail when a performance ratio the docs quote no longer matches its benchmark.

    python scripts/check-figures.py [--list] [--only TEXT] [FILE ...]

Every figure block in README.md and docs/*.md is a benchmark's printed output pasted between
two markers, the first naming the command that printed it, what makes the command quick, and
the noise margin the block allows:

    <!-- figures: python benchmarks/sweep.py | quick: --quick | margin: 40% -->
    (the benchmark's output: the machine it ran on, then its markdown table)
    <!-- /figures -->

The docs and the check share one source, the benchmark's table: this script reruns each
command with its quick options (from the repository root), finds the table of the output with
the documented table's header, and compares every *ratio* cell (a number followed by ``x``:
``28.1x``), row by row (rows keyed by their first cell): a measured ratio off the documented
one by more than the margin (relative) fails. Absolute cells (ms, req/s) depend on the
machine and its load and are not compared. Exit 0: every ratio within its margin; 1: some
drifted; 2: a block is malformed or its benchmark failed or printed no matching table.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"<!-- figures: (?P<spec>[^\n]*?) -->\n(?P<body>.*?)<!-- /figures -->", re.S)
SPEC = re.compile(r"^(?P<command>[^|]+?) \| quick: (?P<quick>[^|]*?) \| margin: (?P<margin>\d+)%$")
RATIO = re.compile(r"^(\d+(?:\.\d+)?)x$")
TIMEOUT_S = 1800


def shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


class FigureError(Exception):
    """A block that cannot be checked (exit 2)."""


@dataclass(frozen=True)
class Block:
    file: Path
    line: int
    command: str
    quick: str
    margin: float  # relative, 0.4 for 40 %
    table: list[list[str]]  # header row first, separator row dropped

    def where(self) -> str:
        return f"{shown(self.file)}:{self.line}"

    def argv(self) -> list[str]:
        argv = shlex.split(self.command) + shlex.split(self.quick)
        return [sys.executable, *argv[1:]] if argv and argv[0] == "python" else argv


def tables(text: str) -> list[list[list[str]]]:
    """Every markdown table in ``text``: rows of cells, the separator row dropped."""
    found: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        line = line.strip()
        if line.startswith("|") and line.endswith("|"):
            cells = [c.strip() for c in line[1:-1].split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def _outside_fences(text: str) -> str:
    """``text`` with the lines of fenced code blocks blanked (line numbers kept): a marker
    shown as an example in a code block is not a figure block."""
    lines = text.split("\n")
    fence: str | None = None
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            lines[i] = ""
        elif fence is not None:
            if stripped.startswith(fence):
                fence = None
            lines[i] = ""
    return "\n".join(lines)


def blocks(path: Path) -> list[Block]:
    text = _outside_fences(path.read_text(encoding="utf-8"))
    out = []
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        spec = SPEC.match(m["spec"].strip())
        if spec is None:
            raise FigureError(
                f"{shown(path)}:{line}: a figures marker must read "
                "'<!-- figures: COMMAND | quick: OPTIONS | margin: N% -->'"
            )
        found = tables(m["body"])
        if len(found) != 1:
            raise FigureError(
                f"{shown(path)}:{line}: a figures block holds one table (found {len(found)})"
            )
        out.append(
            Block(
                path,
                line,
                spec["command"].strip(),
                spec["quick"].strip(),
                int(spec["margin"]) / 100,
                found[0],
            )
        )
    return out


def ratios(table: list[list[str]]) -> dict[tuple[str, str], float]:
    """(row key, column header) -> ratio, for every ratio cell of the table."""
    header, *rows = table
    out = {}
    for row in rows:
        for column, cell in zip(header[1:], row[1:], strict=False):
            m = RATIO.match(cell)
            if m:
                out[(row[0], column)] = float(m[1])
    return out


def compare(block: Block, output: str) -> list[str]:
    """The drifts of ``output`` (the benchmark's stdout) against the block; raises
    :class:`FigureError` when it printed no table with the block's header."""
    documented = ratios(block.table)
    if not documented:
        raise FigureError(f"{block.where()}: the block's table has no ratio cell (like 2.5x)")
    measured_table = next((t for t in tables(output) if t[0] == block.table[0]), None)
    if measured_table is None:
        raise FigureError(
            f"{block.where()}: `{block.command} {block.quick}` printed no table with the "
            f"header {' | '.join(block.table[0])}"
        )
    measured = ratios(measured_table)
    problems = []
    for (row, column), value in documented.items():
        got = measured.get((row, column))
        if got is None:
            problems.append(
                f"{block.where()}: {row} / {column}: documented {value:g}x, not measured"
            )
        elif abs(got / value - 1) > block.margin:
            problems.append(
                f"{block.where()}: {row} / {column}: documented {value:g}x, measured {got:g}x "
                f"(off by {abs(got / value - 1):.0%}, margin {block.margin:.0%})"
            )
    return problems


def run(block: Block) -> str:
    proc = subprocess.run(
        block.argv(), cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise FigureError(
            f"{block.where()}: `{shlex.join(block.argv())}` exited {proc.returncode}: "
            + " / ".join(tail)
        )
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="default: README.md and docs/*.md")
    parser.add_argument("--list", action="store_true", help="list the blocks; run nothing")
    parser.add_argument("--only", metavar="TEXT", help="only blocks whose command holds TEXT")
    args = parser.parse_args(argv)
    files = [p.resolve() for p in args.files] or [
        REPO / "README.md",
        *sorted((REPO / "docs").glob("*.md")),
    ]
    try:
        found = [b for f in files for b in blocks(f) if args.only is None or args.only in b.command]
        if args.list:
            for b in found:
                ratio_cells = ", ".join(
                    f"{r} / {c}: {v:g}x" for (r, c), v in ratios(b.table).items()
                )
                print(f"{b.where()}: {b.command} {b.quick} (margin {b.margin:.0%}): {ratio_cells}")
            return 0
        problems = []
        for b in found:
            print(f"{b.where()}: {shlex.join(b.argv()[1:])} ...", flush=True)
            drift = compare(b, run(b))
            problems += drift
            print("  " + ("; ".join(drift) if drift else "every ratio within the margin"))
    except FigureError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if problems:
        print(f"{len(problems)} figure(s) drifted:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print(f"{len(found)} figure block(s) checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
