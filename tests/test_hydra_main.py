"""``@cfgcheck.main``: a real Hydra app run as a subprocess. A bad config never reaches the task
function (Hydra callbacks cannot block a job in Hydra 1.3, so only a real run proves it), a good
one hands the task a validated RunConfig, and a sweep with one bad point launches no job."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CONF, REPO

# The task writes one marker file per run it was called for: "<model>-<max_seq_length>".
APP = """
import os
from pathlib import Path

import cfgcheck
from cfgcheck.hydra import current_dictconfig


@cfgcheck.main(config_path="conf", config_name="config", version_base="1.3")
def task(run):
    raw = current_dictconfig()
    marker = Path(os.environ["MARKER_DIR"]) / f"{run.model.name}-{run.data.max_seq_length}"
    kind = type(run)
    marker.write_text(f"{kind.__module__}.{kind.__qualname__} {type(raw).__name__} {raw.seed}")


if __name__ == "__main__":
    task()
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    shutil.copytree(CONF, tmp_path / "conf")
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "markers").mkdir()
    return tmp_path


def run_app(app: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the app; Hydra's flags (``-m``, ``--cfg job``) must come before the overrides."""
    env = {**os.environ, "MARKER_DIR": str(app / "markers"), "NO_COLOR": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    flags = [a for a in args if a.startswith("-") or a == "job"]
    overrides = [a for a in args if a not in flags]
    dirs = [f"hydra.run.dir={app / 'out'}", f"hydra.sweep.dir={app / 'multirun'}"]
    return subprocess.run(
        [sys.executable, "app.py", *flags, *dirs, *overrides],
        cwd=app,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def markers(app: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in (app / "markers").iterdir()}


def test_good_config_runs_the_task_with_a_run_config(app: Path) -> None:
    proc = run_app(app, "seed=7")
    assert proc.returncode == 0, proc.stderr
    assert markers(app) == {
        "tinyllama-1.1b-1024": "cfgcheck.schema.run.RunConfig DictConfig 7",
    }
    assert (app / "out").is_dir()  # Hydra's own output dir handling still applies


def test_bad_config_stops_the_job_before_the_task(app: Path) -> None:
    proc = run_app(app, "data.max_seq_length=3063")
    assert proc.returncode == 1
    assert markers(app) == {}
    assert "error[seq-len-over-block-size]" in proc.stderr
    assert "Cannot attend to 3063, block size is only 2048" in proc.stderr
    assert "the task was not started" in proc.stderr
    assert "Traceback" not in proc.stderr
    # Where the offending values were set: the override and the model group file.
    assert "<override data.max_seq_length=3063>" in proc.stderr
    assert "model/tinyllama-1.1b.yaml:" in proc.stderr


def test_schema_error_stops_the_job(app: Path) -> None:
    proc = run_app(app, "+data.max_seq_lenght=2048")
    assert proc.returncode == 1
    assert markers(app) == {}
    assert "error[unknown-key]" in proc.stderr
    assert "did you mean data.max_seq_length?" in proc.stderr


def test_unresolvable_config_stops_the_job_with_exit_2(app: Path) -> None:
    proc = run_app(app, "data.max_seq_length=${no_such_key}")
    assert proc.returncode == 2
    assert markers(app) == {}
    assert "cfgcheck: error: cannot resolve the config" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_multirun_with_one_bad_point_refuses_the_whole_sweep(app: Path) -> None:
    # Checkpointing keeps llama-2-7b at 4096 tokens inside the default A100-80GB, so the one bad
    # point is TinyLlama's 4096 > 2048 block.
    proc = run_app(
        app,
        "-m",
        "model=tinyllama-1.1b,llama-2-7b",
        "data.max_seq_length=1024,4096",
        "trainer.gradient_checkpointing=true",
    )
    assert proc.returncode == 1
    assert markers(app) == {}  # not even the good points ran
    assert not (app / "multirun").exists()  # Hydra never started the sweep
    assert "point 2/4: model=tinyllama-1.1b data.max_seq_length=4096" in proc.stderr
    assert "error[seq-len-over-block-size]" in proc.stderr
    assert "<override data.max_seq_length=4096>" in proc.stderr
    assert "model/tinyllama-1.1b.yaml:" in proc.stderr
    assert "sweep refused: 1 of 4 points fail; no job was launched" in proc.stderr
    assert "Launching" not in proc.stdout + proc.stderr


def test_multirun_all_good_runs_every_job(app: Path) -> None:
    proc = run_app(app, "-m", "model=tinyllama-1.1b,llama-2-7b", "data.max_seq_length=1024,2048")
    assert proc.returncode == 0, proc.stderr
    assert sorted(markers(app)) == [
        "llama-2-7b-1024",
        "llama-2-7b-2048",
        "tinyllama-1.1b-1024",
        "tinyllama-1.1b-2048",
    ]
    assert all(v.startswith("cfgcheck.schema.run.RunConfig ") for v in markers(app).values())
    assert sorted(p.name for p in (app / "multirun").iterdir() if p.is_dir()) == list("0123")


def test_sweep_declared_in_the_config_is_checked_without_dash_m(app: Path) -> None:
    # hydra.mode=MULTIRUN and hydra.sweeper.params in the primary config: Hydra sweeps
    # without -m, so the pre-launch check must see the config's sweep too.
    config = app / "conf" / "config.yaml"
    config.write_text(
        config.read_text()
        + "\nhydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n"
        + "      data.max_seq_length: 1024,8192\n"
    )
    proc = run_app(app)
    assert proc.returncode == 1
    assert markers(app) == {}
    assert "point 2/2: data.max_seq_length=8192" in proc.stderr


OTHER_SWEEPER = """
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


class OtherSweeper(BasicSweeper):
    \"\"\"Sweeps like the basic sweeper under another name: cfgcheck cannot expand it ahead.\"\"\"
"""


def test_with_another_sweeper_each_job_is_still_gated(app: Path) -> None:
    # Hydra only loads sweepers from the hydra_plugins namespace package.
    (app / "hydra_plugins").mkdir()
    (app / "hydra_plugins" / "other_sweeper.py").write_text(OTHER_SWEEPER)
    proc = run_app(
        app,
        "-m",
        "hydra.sweeper._target_=hydra_plugins.other_sweeper.OtherSweeper",
        "data.max_seq_length=1024,4096,2048",
    )
    assert proc.returncode == 1
    # No pre-launch refusal: the jobs ran one by one, and the bad one never reached the task.
    assert sorted(markers(app)) == ["tinyllama-1.1b-1024", "tinyllama-1.1b-2048"]
    assert "sweep refused" not in proc.stderr
    assert "Cannot attend to 4096, block size is only 2048" in proc.stderr
    assert "cfgcheck.errors.ConfigError" in proc.stderr


def test_hydra_flags_still_work(app: Path) -> None:
    proc = run_app(app, "--cfg", "job", "data.max_seq_length=3063")
    assert proc.returncode == 0, proc.stderr  # --cfg prints, it runs no task
    assert "max_seq_length: 3063" in proc.stdout
    assert markers(app) == {}


def test_import_cfgcheck_does_not_load_the_wrapper() -> None:
    code = (
        "import sys, cfgcheck; assert 'cfgcheck.hydra' not in sys.modules; "
        "import cfgcheck.hydra; assert cfgcheck.main is cfgcheck.hydra.main; print('ok')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_current_dictconfig_outside_a_task_raises() -> None:
    from cfgcheck.hydra import current_dictconfig

    with pytest.raises(RuntimeError, match="only available inside"):
        current_dictconfig()
