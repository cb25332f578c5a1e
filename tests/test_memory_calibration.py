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

# the recorded runs, read without evaluating them: the evaluation (a composition, an estimate
# and an allocator simulation per run) happens once, when a test of this module first needs it,
# not at collection (nor in a run that deselects these tests)
RUNS = memory_calibration.load()
IDS = [spec["id"] for spec, _ in RUNS]


@pytest.fixture(scope="module")
def rows() -> list[memory_calibration.Row]:
    evaluated = memory_calibration.evaluate()
    assert [r.id for r in evaluated] == IDS  # one row per recorded run, in their order
    return evaluated


def test_every_recorded_run_is_evaluated(rows: list[memory_calibration.Row]) -> None:
    assert len(rows) == len(memory_calibration.load()) == 42  # 24 H100 rows, 18 H200 rows


@pytest.mark.parametrize("index", range(len(RUNS)), ids=IDS)
def test_device_total_within_the_goal(index: int, rows: list[memory_calibration.Row]) -> None:
    row = rows[index]
    assert abs(row.error("device_peak")) <= 0.10
    assert abs(row.error("device_peak")) <= row.margin  # inside the error it states


@pytest.mark.parametrize("index", range(len(RUNS)), ids=IDS)
def test_no_unsafe_fits(index: int, rows: list[memory_calibration.Row]) -> None:
    assert rows[index].unsafe() == []


def test_median_device_error(rows: list[memory_calibration.Row]) -> None:
    assert statistics.median(abs(r.error("device_peak")) for r in rows) <= 0.05
    assert statistics.median(abs(r.error("allocated")) for r in rows) <= 0.05
