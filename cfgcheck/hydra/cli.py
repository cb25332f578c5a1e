"""``cfgcheck check --sweep``: expand a Hydra sweep and validate every point.

Exit 0 when every point passes, 1 when any fails, 2 when the config or the sweep is unreadable.
``--format json`` keeps ``ok`` and ``findings`` (every distinct finding over all points) at the
top level and adds ``points``: one ``{"overrides", "ok", "error", "findings"}`` per point.
Other formats render the distinct findings of all points with that format's reporter.
"""

from __future__ import annotations

import argparse
import json
import sys

from cfgcheck.findings import CheckResult
from cfgcheck.hydra.report import report_sweep_text
from cfgcheck.hydra.sweep import check_sweep


def run_sweep(args: argparse.Namespace) -> int:
    from cfgcheck.cli import EXIT_FINDINGS, EXIT_OK
    from cfgcheck.report import get_reporter

    result = check_sweep(args.config_dir, args.config_name, args.overrides)
    if args.format == "text":
        report_sweep_text(result, sys.stdout)
    elif args.format == "json":
        json.dump(result.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        get_reporter(args.format)(CheckResult(result.findings()), sys.stdout)
    return EXIT_OK if result.ok else EXIT_FINDINGS
