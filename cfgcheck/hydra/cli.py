"""``cfgcheck check --sweep``: expand a Hydra sweep and validate every point.

Exit 0 when every point passes, 1 when any fails, 2 when the config or the sweep is unreadable.
``--format json`` keeps ``ok`` and ``findings`` (every distinct finding over all points) at the
top level and adds ``points``: one ``{"overrides", "ok", "error", "findings"}`` per point.
Other formats render the distinct findings of all points with that format's reporter.
Findings of the first failing points carry source locations (see ``LOCATED_POINTS``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import TextIO

from cfgcheck.findings import CheckResult
from cfgcheck.hydra.report import DETAILED_POINTS, report_sweep_text
from cfgcheck.hydra.sweep import SweepResult, check_sweep
from cfgcheck.project.settings import Settings

# Source locations cost a Hydra defaults-list walk per point (~15 ms): JSON gets them for the
# first LOCATED_POINTS failing points, text for the points it shows in full.
LOCATED_POINTS = 100


def locate_failing(
    result: SweepResult,
    config_dir: str | Path,
    config_name: str,
    limit: int,
    settings: Settings | None = None,
) -> SweepResult:
    """``result`` with source locations on the findings of its first ``limit`` failing points,
    then the project's inline suppressions and ``settings`` applied to every point. A tree
    with suppressions has every point with findings located (a suppression needs the line)."""
    from cfgcheck.locations import with_locations
    from cfgcheck.project.suppressions import apply_suppressions, marked_files

    marked = bool(marked_files(config_dir))
    todo = {id(p) for p in result.failing[:limit]}
    points = []
    for p in result.points:
        r = p.result
        if r is not None and (id(p) in todo or (marked and r.findings)):
            r = with_locations(r, config_dir, config_name, p.overrides)
            if marked:
                r = apply_suppressions(r, config_dir, config_name, p.overrides)
        if r is not None and settings is not None:
            r = settings.apply(r)
        points.append(p if r is p.result else dataclasses.replace(p, result=r))
    return SweepResult(points)


class _Progress:
    """``checked 120/1000 points`` on one terminal line, redrawn at most every 0.1 s (only
    when stderr is a terminal: a pipe or a CI log gets the report alone)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        self._drawn = True
        self._stream.write(f"\rchecked {done}/{total} points")
        self._stream.flush()

    def close(self) -> None:
        if self._drawn:
            self._stream.write("\r\x1b[K")  # clear the line before the report
            self._stream.flush()


def run_sweep(args: argparse.Namespace) -> int:
    from cfgcheck.cli import EXIT_FINDINGS, EXIT_OK
    from cfgcheck.cli._common import project_of
    from cfgcheck.report import get_reporter

    p = project_of(args)
    progress = _Progress(sys.stderr) if sys.stderr.isatty() else None
    try:
        result = check_sweep(
            p.config_dir,
            p.config_name,
            args.overrides,
            schema=p.schema,
            gpu=p.settings.default_gpu,
            jobs=getattr(args, "jobs", None) or 1,
            progress=progress,
        )
    finally:
        if progress is not None:
            progress.close()
    limit = DETAILED_POINTS if args.format == "text" else LOCATED_POINTS
    result = locate_failing(result, p.config_dir, p.config_name, limit, p.settings)
    if args.format == "text":
        report_sweep_text(result, sys.stdout)
    elif args.format == "json":
        json.dump(result.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        get_reporter(args.format)(CheckResult(result.findings()), sys.stdout)
    return EXIT_OK if result.ok else EXIT_FINDINGS
