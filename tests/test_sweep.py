"""Whole-sweep checks: expansion as Hydra's BasicSweeper does it, the fast path (one compose per
group choice) agreeing with composing every point with Hydra, and ``cfgcheck check --sweep``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cfgcheck
from cfgcheck.errors import ConfigLoadError
from cfgcheck.hydra.sweep import (
    Point,
    PointVerdict,
    SweepChecker,
    SweepPlan,
    check_sweep,
    plan_sweep,
)
from tests.conftest import COMMAND, CONF


@pytest.fixture
def hydra_app() -> Iterator[Any]:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="test"):
        yield GlobalHydra.instance().hydra
    GlobalHydra.instance().clear()


def plan(hydra_app: Any, *overrides: str) -> SweepPlan:
    result = plan_sweep(hydra_app, "config", overrides)
    assert result is not None
    return result


def reference(point: Point) -> tuple[Any, ...]:
    """The verdict of composing the point with Hydra from scratch, through the public API."""
    try:
        result = cfgcheck.check(CONF, "config", point)
    except ConfigLoadError as e:
        return (False, str(e), ())
    return PointVerdict(point, result=result).signature()


def test_expansion_follows_hydra_sweep_syntax(hydra_app: Any) -> None:
    p = plan(
        hydra_app,
        "model=tinyllama-1.1b,llama-2-7b",
        "data.max_seq_length=range(1024,4097,1024)",
        "trainer.learning_rate=choice(1e-4,3e-4)",
        "seed=3",
    )
    assert len(p.points) == 2 * 4 * 2
    assert p.points[0] == (
        "model=tinyllama-1.1b",
        "data.max_seq_length=1024",
        "trainer.learning_rate=0.0001",
        "seed=3",
    )
    assert p.points[-1][:2] == ("model=llama-2-7b", "data.max_seq_length=4096")
    assert {pt[1] for pt in p.points} == {
        f"data.max_seq_length={n}" for n in (1024, 2048, 3072, 4096)
    }


def test_glob_over_a_group_expands_to_its_options(hydra_app: Any) -> None:
    p = plan(hydra_app, "trainer=glob(*lora)")
    assert sorted(p.points) == [("trainer=lora",), ("trainer=qlora",)]


@pytest.mark.slow
def test_fast_path_gives_the_verdicts_of_composing_every_point(hydra_app: Any) -> None:
    # Group changes, ints, floats vs quoted strings, booleans, lists, null, +/++ keys and a
    # value override that Hydra rejects (+ on an existing key) or the schema rejects.
    p = plan(
        hydra_app,
        "model=tinyllama-1.1b,llama-3-8b",
        "tokenizer=llama-2,llama-3",
        "data.max_seq_length=1024,4096",
        "trainer.learning_rate=2e-4,'3e-4'",
        "++data.pad_to_multiple_of=null,8",
        "trainer.lora.targets=[q_proj,k_proj],null",
        "+data.max_length=512,null",
    )
    assert len(p.points) == 2**7
    checker = SweepChecker(hydra_app, "config", p.hydra_overrides)
    fast = checker.check_all(p.points)
    assert checker.compositions == 4  # one per (model, tokenizer) choice
    # Composing all 128 points from scratch is slow: compare every point of a stride-3 sample
    # (covers every value of every dimension) plus all failing kinds.
    sample = p.points[::3]
    by_point = {v.overrides: v for v in fast.points}
    for point in sample:
        assert by_point[point].signature() == reference(point), point
    kinds = {(v.error is not None, tuple(f.rule for f in v.findings)) for v in fast.points}
    assert len(kinds) > 4  # the sweep really mixes verdicts
    assert any(v.ok for v in fast.points) and not fast.ok


# A sweep where most points fail: memory (with memory fixes to verify), sequence length, a
# schema error and a fix shared by many seeds. Used by the two tests below.
FAILING_SWEEP = (
    "model=tinyllama-1.1b,llama-2-7b",
    "data.max_seq_length=1024,2049,8192",
    "trainer.micro_batch_size=4,32",
    "trainer.learning_rate=1e-5,-1",
    "seed=0,1",
)


def test_shared_work_gives_the_verdicts_of_checking_each_point_alone(hydra_app: Any) -> None:
    # check_all shares rule results, memory estimates and fix verifications between points;
    # check() on each point alone shares nothing but the composition. Every finding, with its
    # fixes and locations, must be the same.
    from cfgcheck.reuse import ESTIMATES

    p = plan(hydra_app, *FAILING_SWEEP)
    checker = SweepChecker(hydra_app, "config", p.hydra_overrides)
    shared = checker.check_all(p.points)
    assert len(shared.failing) > len(p.points) * 3 // 4  # most points fail
    rules = {f.rule for f in shared.findings()}
    assert {"gpu-memory", "seq-len-over-block-size", "invalid-value"} <= rules
    assert any(f.fixes for f in shared.findings() if f.rule == "gpu-memory")
    for verdict in shared.points:
        ESTIMATES.clear()  # nothing shared with the sweep, not even an estimate
        alone = checker.check(verdict.overrides)
        assert alone.to_dict() == verdict.to_dict(), verdict.overrides


@pytest.mark.slow
def test_fast_path_agrees_with_composing_on_a_failing_sweep(hydra_app: Any) -> None:
    p = plan(hydra_app, *FAILING_SWEEP)
    fast = SweepChecker(hydra_app, "config", p.hydra_overrides).check_all(p.points)
    by_point = {v.overrides: v for v in fast.points}
    for point in p.points[::4]:
        assert by_point[point].signature() == reference(point), point


def test_fast_path_handles_delete_and_a_group_delete(hydra_app: Any) -> None:
    p = plan(hydra_app, "~data.ignore_index", "~seed", "data.max_seq_length=1024,3000")
    checker = SweepChecker(hydra_app, "config", p.hydra_overrides)
    for point in p.points:
        assert checker.check(point).signature() == reference(point), point
    p = plan(hydra_app, "+data.max_seq_length=1024,3000")  # + on an existing key: Hydra refuses
    for point in p.points:
        verdict = checker.check(point)
        assert verdict.signature() == reference(point), point
        assert verdict.error is not None and "Could not append to config" in verdict.error
    p = plan(hydra_app, "~tokenizer", "data.max_seq_length=1024,3000")
    for point in p.points:
        verdict = checker.check(point)
        assert verdict.signature() == reference(point), point
        assert "missing-key" in {f.rule for f in verdict.findings}


def test_composed_reference_path_agrees_too(hydra_app: Any) -> None:
    p = plan(hydra_app, "model=phi-2,gemma-2b", "data.max_seq_length=2048,9000")
    checker = SweepChecker(hydra_app, "config", p.hydra_overrides)
    fast = checker.check_all(p.points)
    slow = checker.check_all(p.points, fast=False)
    assert [v.signature() for v in fast.points] == [v.signature() for v in slow.points]


def test_another_sweeper_is_not_expanded(hydra_app: Any) -> None:
    # A sweeper whose points only exist while it runs (Optuna, Ax...): no guessing.
    other = "hydra.sweeper._target_=hydra_plugins.hydra_optuna_sweeper.OptunaSweeper"
    assert plan_sweep(hydra_app, "config", [other, "data.max_seq_length=1024,2048"]) is None
    assert plan_sweep(hydra_app, "config", ["data.max_seq_length=1024,2048"]) is not None


def test_check_sweep_refuses_another_sweeper() -> None:
    other = "hydra.sweeper._target_=hydra_plugins.hydra_optuna_sweeper.OptunaSweeper"
    with pytest.raises(ConfigLoadError, match="sweeper other than Hydra's basic sweeper"):
        check_sweep(CONF, "config", [other])


def test_check_sweep_result_shape() -> None:
    result = check_sweep(CONF, "config", ["model=tinyllama-1.1b", "data.max_seq_length=1024,3063"])
    assert not result.ok
    assert [p.ok for p in result.points] == [True, False]
    assert [f.rule for f in result.findings()] == ["seq-len-over-block-size"]
    d = result.to_dict()
    assert d["ok"] is False and d["findings"][0]["rule"] == "seq-len-over-block-size"
    assert d["points"][1]["overrides"] == ["model=tinyllama-1.1b", "data.max_seq_length=3063"]


def test_check_sweep_unreadable_config_raises_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigLoadError, match="config directory not found"):
        check_sweep(tmp_path / "nope", "config", [])
    with pytest.raises(ConfigLoadError) as e:
        check_sweep(CONF, "config", ["model=a,"])
    assert "\n" not in str(e.value)


# --- the real `cfgcheck check --sweep` command -------------------------------------------


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, "check", "--config-dir", str(CONF), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_sweep_all_good_exits_0(tmp_path: Path) -> None:
    proc = cli(
        tmp_path, "--sweep", "model=tinyllama-1.1b,llama-2-7b", "data.max_seq_length=1024,2048"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "sweep OK: 4 points, none with errors"
    assert list(tmp_path.iterdir()) == []  # nothing written in the working directory


def test_cli_sweep_bad_point_exits_1_and_names_it(tmp_path: Path) -> None:
    proc = cli(
        tmp_path,
        "--sweep",
        "model=tinyllama-1.1b,llama-2-7b",
        "data.max_seq_length=1024,4096",
        "trainer.gradient_checkpointing=true",  # llama-2-7b at 4096 fits the A100-80GB
    )
    assert proc.returncode == 1
    assert "point 2/4: model=tinyllama-1.1b data.max_seq_length=4096" in proc.stdout
    assert "error[seq-len-over-block-size]" in proc.stdout
    assert "sweep has errors: 1 of 4 points fail" in proc.stdout


def test_cli_sweep_json(tmp_path: Path) -> None:
    proc = cli(
        tmp_path,
        "--format",
        "json",
        "--sweep",
        "data.max_seq_length=1024,4096",
        "model=tinyllama-1.1b",
    )
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["ok"] is False
    assert [f["rule"] for f in report["findings"]] == ["seq-len-over-block-size"]
    assert [(p["overrides"], p["ok"]) for p in report["points"]] == [
        (["data.max_seq_length=1024", "model=tinyllama-1.1b"], True),
        (["data.max_seq_length=4096", "model=tinyllama-1.1b"], False),
    ]
    assert report["points"][1]["findings"][0]["paths"] == [
        "data.max_seq_length",
        "model.block_size",
    ]
    located = report["points"][1]["findings"][0]["locations"]
    assert located[0] == {"file": "<override data.max_seq_length=4096>", "line": None}
    assert located[1]["file"].endswith("model/tinyllama-1.1b.yaml")
    assert isinstance(located[1]["line"], int)


def test_cli_sweep_uncomposable_point_fails_it(tmp_path: Path) -> None:
    proc = cli(tmp_path, "--format", "json", "--sweep", "model=tinyllama-1.1b,no-such-model")
    assert proc.returncode == 1
    points = json.loads(proc.stdout)["points"]
    assert points[0]["ok"] is True and points[0]["error"] is None
    assert points[1]["ok"] is False and "Could not find 'model/no-such-model'" in points[1]["error"]


def test_cli_sweep_bad_syntax_exits_2(tmp_path: Path) -> None:
    proc = cli(tmp_path, "--sweep", "model=tinyllama-1.1b,")
    assert proc.returncode == 2
    assert proc.stderr.startswith("cfgcheck: error: ")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_sweep_text_lists_every_failing_point(tmp_path: Path) -> None:
    # 12 failing points: the first 10 in full, the rest one line each with their rule ids.
    proc = cli(tmp_path, "--sweep", "data.max_seq_length=range(2049,2061)")
    assert proc.returncode == 1
    out = proc.stdout
    assert out.count("error[seq-len-over-block-size]") == 10
    assert "point 10/12: data.max_seq_length=2058\n" in out
    assert "point 11/12: data.max_seq_length=2059  [seq-len-over-block-size]" in out
    assert "point 12/12: data.max_seq_length=2060  [seq-len-over-block-size]" in out
    assert out.rstrip().endswith("sweep has errors: 12 of 12 points fail")


# --- --jobs and progress -------------------------------------------------------------------

JOBS_SWEEP = (
    "--sweep",
    "model=tinyllama-1.1b,llama-2-7b",
    "data.max_seq_length=1024,2049,8192",
    "trainer.micro_batch_size=4,32",
    "seed=0,1",
)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_cli_sweep_jobs_gives_byte_identical_ordered_output(tmp_path: Path, fmt: str) -> None:
    one = cli(tmp_path, "--format", fmt, "--jobs", "1", *JOBS_SWEEP)
    two = cli(tmp_path, "--format", fmt, "--jobs", "2", *JOBS_SWEEP)
    assert one.returncode == two.returncode == 1, one.stderr + two.stderr
    assert one.stdout == two.stdout
    assert one.stderr == two.stderr == ""  # no progress on a pipe
    if fmt == "json":
        points = [tuple(p["overrides"]) for p in json.loads(two.stdout)["points"]]
        assert len(points) == 24 and points == sorted(points, key=points.index)
        assert points[0][:2] == ("model=tinyllama-1.1b", "data.max_seq_length=1024")


def test_check_parallel_keeps_the_points_order(hydra_app: Any) -> None:
    p = plan(hydra_app, "data.max_seq_length=range(2040,2060)")
    checker = SweepChecker(hydra_app, "config", p.hydra_overrides)
    seen: list[int] = []
    parallel = checker.check_parallel(p.points, 2, seen.append)
    alone = checker.check_all(p.points)
    assert [v.overrides for v in parallel.points] == p.points
    assert [v.to_dict() for v in parallel.points] == [v.to_dict() for v in alone.points]
    assert sum(seen) == len(p.points)


def test_cli_sweep_shows_progress_on_a_terminal_only(tmp_path: Path) -> None:
    import os
    import pty

    controller, terminal = pty.openpty()
    with open(os.devnull, "w") as out:
        proc = subprocess.run(
            [*COMMAND, "check", "--config-dir", str(CONF), *JOBS_SWEEP],
            cwd=tmp_path,
            stdout=out,
            stderr=terminal,
            timeout=120,
            check=False,
        )
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    assert proc.returncode == 1
    assert b"checked 24/24 points" in shown
    assert shown.endswith(b"\r\x1b[K")  # the line is cleared before the report
