"""The accuracy benchmark against published measurements, and the calibration dry run."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MEASURED = REPO / "benchmarks" / "reference" / "measured-memory.csv"
sys.path.insert(0, str(REPO / "benchmarks"))


def test_published_peaks_within_the_accuracy_goal() -> None:
    import memory_accuracy

    results = memory_accuracy.evaluate(MEASURED)
    assert len(results) == len(memory_accuracy.read_rows(MEASURED)) > 0
    errors = [abs(r["error"]) for r in results]
    assert statistics.median(errors) <= 0.07
    assert max(errors) <= 0.15


def test_every_source_has_one_mapping_and_a_metric() -> None:
    import memory_accuracy

    assert {s["metric"] for s in memory_accuracy.SOURCES.values()} <= {"allocated", "reserved"}


def test_calibration_dry_run_lists_every_configuration() -> None:
    import memory_calibration

    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "memory_calibration.py"), "--dry-run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for run in memory_calibration.RUNS:
        assert run.label in proc.stdout
