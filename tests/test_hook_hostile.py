"""``cfgcheck hook`` given thousands of changed files (a pull request that adds 3,000 group
options): each one was composed into every primary and checked, hours of work. The hook now
counts the compositions first and refuses, in one line and exit 2, more than
``--max-compositions``. Run in a subprocess with a timeout, so a regression fails, not hangs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cfgcheck.cli.hook import MAX_COMPOSITIONS, Target, targets
from cfgcheck.errors import ConfigLoadError
from tests.conftest import CONF, REPO


@pytest.fixture
def crowded(tmp_path: Path) -> list[str]:
    """A config dir whose model group gained 3,000 options; their paths, relative."""
    shutil.copytree(CONF, tmp_path / "conf")
    names = []
    for i in range(3000):
        name = f"conf/model/added-{i}.yaml"
        (tmp_path / name).write_text("n_layer: 2\n")
        names.append(name)
    return names


def hook(cwd: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "cfgcheck", "hook", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_3000_changed_files_are_refused_before_any_composition(
    tmp_path: Path, crowded: list[str]
) -> None:
    done = hook(tmp_path, *crowded, *crowded[:100])  # repeats count once
    assert done.returncode == 2, done.stdout + done.stderr
    out = (done.stdout + done.stderr).strip()
    assert len(out.splitlines()) == 1, out
    assert "3000 changed config file(s)" in out
    assert f"more than the limit of {MAX_COMPOSITIONS}" in out
    assert "--max-compositions" in out
    assert "Traceback" not in out


@pytest.mark.slow
def test_the_limit_is_a_flag(tmp_path: Path, crowded: list[str]) -> None:
    done = hook(tmp_path, "--max-compositions", "3", *crowded[:3])
    assert done.returncode == 2
    assert "make 4 compositions to check, more than the limit of 3" in done.stderr
    done = hook(tmp_path, "--max-compositions", "4", *crowded[:3], timeout=300)
    assert "4 composition(s) checked" in done.stdout, done.stdout + done.stderr


def test_targets_within_the_limit_are_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    found = targets(CONF, ["conf/model/phi-2.yaml", "conf/model/phi-2.yaml"])
    assert found.count(Target("config", ("model=phi-2",), "model")) == 1
    with pytest.raises(ConfigLoadError, match="more than the limit of 1"):
        targets(CONF, ["conf/model/phi-2.yaml"], max_compositions=1)
