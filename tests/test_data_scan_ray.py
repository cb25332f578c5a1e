"""The Ray engine (``--engine ray``): the real Ray engine started locally gives the
local engine's report, bad input is located the same way, a crashed worker is reported and
not retried into a hang, and without Ray the missing extra is one line.

Ray is the optional ``ray`` extra, not in ``all`` (see pyproject.toml): the tests that run it
skip where it is not installed."""

from __future__ import annotations

import gzip
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.data import ScanError, scan_dataset
from cfgcheck.data.records import Shard
from cfgcheck.data.sample import Sampling
from cfgcheck.data.summary import Summary
from tests.test_data_scan import make_run, records, write_jsonl
from tests.test_data_scan_jobs import _comparable

NO_RAY = "Ray is not installed: the optional extra cfgcheck[ray] (part of .[all])"


@pytest.fixture
def tok_dir(tmp_path: Path) -> Path:
    from tests.factories import bpe, save_folder

    return save_folder(bpe(), tmp_path / "tok", pad_token="<unk>")


def test_without_ray_the_missing_extra_is_one_line(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    run = make_run(cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", records(5)))
    with pytest.raises(ScanError, match=r"^--engine ray needs Ray: pip install 'cfgcheck\[ray\]'$"):
        scan_dataset(run, engine="ray", jobs=1)


def test_the_command_line_without_ray_exits_2_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cfgcheck.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)
    assert main(["data", "tokenizer=demo-bpe", "--engine", "ray", "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "cfgcheck: error: --engine ray needs Ray: pip install 'cfgcheck[ray]'"
    assert main(["data", "tokenizer=demo-bpe", "--ray-address", "auto"]) == 2
    assert "--ray-address needs --engine ray" in capsys.readouterr().err


@pytest.mark.slow
def test_an_unreachable_cluster_is_one_line(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    """Runs before the module's local Ray starts: ``auto`` finds no cluster."""
    ray = pytest.importorskip("ray", reason=NO_RAY)
    if ray.is_initialized() or os.environ.get("RAY_ADDRESS"):
        pytest.skip("a Ray instance is running here")
    run = make_run(cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", records(5)))
    with pytest.raises(ScanError, match=r"^cannot start or reach the Ray cluster at auto: ") as e:
        scan_dataset(run, engine="ray", ray_address="auto")
    assert "\n" not in str(e.value)


def _priority(shard: Shard) -> tuple[Summary, int]:
    raise RuntimeError(f"niceness {os.getpriority(os.PRIO_PROCESS, 0)}")


@pytest.mark.slow
def test_a_local_ray_runs_its_actors_at_normal_priority(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs before the module's local Ray starts, so the scan starts its own: Ray starts
    workers at nice 15 (worker_niceness), where other work on the machine would starve them;
    the scan's local Ray runs them at the local engine's priority."""
    ray = pytest.importorskip("ray", reason=NO_RAY)
    if ray.is_initialized() or os.environ.get("RAY_ADDRESS"):
        pytest.skip("a Ray instance is running here")
    root = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    run = make_run(cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", records(5)))
    with pytest.raises(ScanError, match=r"RuntimeError: niceness 0$"):
        scan_dataset(run, engine="ray", jobs=1, _work=_priority)
    assert not ray.is_initialized()  # the scan's own Ray is shut down after it


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray = pytest.importorskip("ray", reason=NO_RAY)
    # The workers unpickle this module's _fail/_die by reference: they import it from the
    # repository, whatever directory Ray starts them in.
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    try:
        yield
    finally:
        ray.shutdown()


def _die(shard: Shard) -> tuple[Summary, int]:
    os._exit(3)  # an actor killed mid-shard (out of memory, a segfault in a library)


def _fail(shard: Shard) -> tuple[Summary, int]:
    raise RuntimeError("boom")


@pytest.mark.slow
def test_ray_gives_the_local_report_and_locates_bad_input(
    local_ray: None, cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = records(120)
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.jsonl").write_text(
        "".join(json.dumps(r) + ("\n\n" if i % 9 == 0 else "\n") for i, r in enumerate(rows))
    )  # blank lines: line numbers skip them
    with gzip.open(folder / "b.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows[:40])
    pq.write_table(pa.Table.from_pylist(rows[40:90]), folder / "c.parquet", row_group_size=13)
    cfg["trainer"]["micro_batch_size"] = 3
    run = make_run(cfg, tok_dir, folder, max_seq_length=40)

    local = scan_dataset(run, jobs=2, shard_bytes=2000)
    ray = scan_dataset(run, jobs=2, shard_bytes=2000, engine="ray")
    assert ray.engine == "ray" and local.engine == "local"
    assert _comparable(ray) | {"engine": "-"} == _comparable(local) | {"engine": "-"}
    assert ray.samples == 210 and ray.truncated > 0

    sample = Sampling(0.3, seed=1)
    a = scan_dataset(run, jobs=2, shard_bytes=2000, sample=sample)
    b = scan_dataset(run, jobs=2, shard_bytes=2000, sample=sample, engine="ray")
    assert _comparable(a) | {"engine": "-"} == _comparable(b) | {"engine": "-"}

    with (folder / "a.jsonl").open("a") as f:
        f.write("{not json\n")
    with pytest.raises(ScanError, match=r"a\.jsonl:135: not valid JSON"):
        scan_dataset(run, jobs=2, shard_bytes=2000, engine="ray")


@pytest.mark.slow
def test_a_crashed_or_failing_ray_worker_is_reported_not_retried(
    local_ray: None, cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    run = make_run(cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", records(40)))
    with pytest.raises(ScanError, match=r"a scan worker failed on .*d\.jsonl: RuntimeError: boom"):
        scan_dataset(run, jobs=2, shard_bytes=500, engine="ray", _work=_fail)
    with pytest.raises(ScanError, match=r"a Ray scan worker failed \(.*\) on .*d\.jsonl"):
        scan_dataset(run, jobs=2, shard_bytes=500, engine="ray", _work=_die)


@pytest.mark.slow
def test_a_2_gb_line_in_ray_is_one_located_error(
    local_ray: None, cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    from cfgcheck.data.records import MAX_LINE_BYTES
    from tests.test_data_scan_bad_input import sparse_line

    run = make_run(cfg, tok_dir, sparse_line(tmp_path / "huge.jsonl"))
    with pytest.raises(
        ScanError, match=rf"huge\.jsonl:2: the line is longer than {MAX_LINE_BYTES:,}"
    ):
        scan_dataset(run, jobs=2, engine="ray")
