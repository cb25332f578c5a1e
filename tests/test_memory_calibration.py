"""Every recorded H100 and H200 run (benchmarks/calibration/) stays inside the accuracy goal,
and the verdict never says "fits" for a run whose measured device peak exceeds the GPU."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import memory_calibration  # noqa: E402

ROWS = memory_calibration.evaluate()


def test_every_recorded_run_is_evaluated() -> None:
    assert len(ROWS) == len(memory_calibration.load()) == 42  # 24 H100 rows, 18 H200 rows


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_device_total_within_the_goal(row: memory_calibration.Row) -> None:
    assert abs(row.error("device_peak")) <= 0.10
    assert abs(row.error("device_peak")) <= row.margin  # inside the error it states


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_no_unsafe_fits(row: memory_calibration.Row) -> None:
    assert row.unsafe() == []


def test_median_device_error() -> None:
    assert statistics.median(abs(r.error("device_peak")) for r in ROWS) <= 0.05
    assert statistics.median(abs(r.error("allocated")) for r in ROWS) <= 0.05
