"""Ground truth for the seed failure of a launch script, on CPU with the real libraries: the
FastChat-style entry point (tests/sources/native/launch/seed/train.py: a lazy dataset that
tokenizes one conversation per ``__getitem__`` with ``padding=True``, the Trainer's default
collator) run with the flags cfgcheck reads from train.sh raises the real exception; with
cfgcheck's fix flag, or with ``padding="max_length"`` (the code fix its hint names, which
cfgcheck then clears), it trains a step.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cfgcheck.sources import check_native
from cfgcheck.sources.launcher.flags import read_launch
from tests.conftest import requires
from tests.sources.test_python_seeds_real import _save_weights
from tests.sources.test_python_source import tiny_model

pytestmark = pytest.mark.slow
SEED = Path(__file__).resolve().parent / "native" / "launch" / "seed"
# What a CPU test adds to the script's own flags: one step, no bf16 autocast, no saving.
CPU = ["--use_cpu", "True", "--bf16", "False", "--max_steps", "1", "--report_to", "none"]
CPU += ["--save_strategy", "no", "--gradient_checkpointing", "False"]


def _project(tmp: Path) -> Path:
    _save_weights(tiny_model(tmp))
    for name in ("train.py", "train.sh"):
        shutil.copy(SEED / name, tmp / name)
    lengths = (1, 4, 2, 7)  # conversations of unequal length
    raw = [
        {"conversations": [{"from": "human", "value": "a b " * n}, {"from": "gpt", "value": "c"}]}
        for n in lengths
    ]
    (tmp / "data.json").write_text(json.dumps(raw))
    return tmp


def _run(project: Path, extra: list[str]) -> subprocess.CompletedProcess[str]:
    """The entry point with the flags cfgcheck read from train.sh (the test's own fixture)."""
    native = read_launch(
        (project / "train.sh").read_text(), "train.sh", project / "train.sh", [], {}
    )
    assert native.launch is not None
    argv = [w for f in native.launch.flags for w in [f"--{f.name}", f.value or "True"]]
    return subprocess.run(
        [sys.executable, "train.py", *argv, *CPU, *extra],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(project)},
    )


@requires("transformers", "torch", "accelerate")
def test_seed_raises_and_the_fixes_train_a_step(tmp_path: Path) -> None:
    project = _project(tmp_path)
    failed = _run(project, [])
    assert failed.returncode != 0
    assert "stack expects each tensor to be equal size" in failed.stderr, failed.stderr[-2000:]

    result = check_native(project / "train.sh", "launch")
    (finding,) = result.by_rule("ragged-batch")
    (fix,) = finding.fixes
    ran = _run(project, list(fix.flags))
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "train_runtime" in ran.stdout + ran.stderr

    code = (project / "train.py").read_text()
    (project / "train.py").write_text(code.replace("padding=True", 'padding="max_length"'))
    assert not check_native(project / "train.sh", "launch").by_rule("ragged-batch")
    padded = _run(project, [])
    assert padded.returncode == 0, padded.stderr[-3000:]
    assert "train_runtime" in padded.stdout + padded.stderr
