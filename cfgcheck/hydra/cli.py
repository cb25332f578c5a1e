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
from pathlib import Path

from cfgcheck.findings import CheckResult
from cfgcheck.hydra.report import DETAILED_POINTS, report_sweep_text
from cfgcheck.hydra.sweep import SweepResult, check_sweep

# Source locations cost a Hydra defaults-list walk per point (~15 ms): JSON gets them for the
# first LOCATED_POINTS failing points, text for the points it shows in full.
LOCATED_POINTS = 100


def locate_failing(
    result: SweepResult, config_dir: str | Path, config_name: str, limit: int
) -> SweepResult:
    """``result`` with source locations on the findings of its first ``limit`` failing points."""
    from cfgcheck.locations import with_locations

    todo = {id(p) for p in result.failing[:limit]}
    points = [
        dataclasses.replace(
            p, result=with_locations(p.result, config_dir, config_name, p.overrides)
        )
        if id(p) in todo and p.result is not None
        else p
        for p in result.points
    ]
    return SweepResult(points)


def run_sweep(args: argparse.Namespace) -> int:
    from cfgcheck.cli import EXIT_FINDINGS, EXIT_OK
    from cfgcheck.report import get_reporter

    result = check_sweep(args.config_dir, args.config_name, args.overrides)
    limit = DETAILED_POINTS if args.format == "text" else LOCATED_POINTS
    result = locate_failing(result, args.config_dir, args.config_name, limit)
    if args.format == "text":
        report_sweep_text(result, sys.stdout)
    elif args.format == "json":
        json.dump(result.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        get_reporter(args.format)(CheckResult(result.findings()), sys.stdout)
    return EXIT_OK if result.ok else EXIT_FINDINGS
