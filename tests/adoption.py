"""A small team training project written its own way (its own sections and names, a
``cfgcheck:`` mapping node into them), for the adoption tests (docs/adoption.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import COMMAND, REPO

TRAIN = """\
defaults:
  - training: base
  - _self_

optimizer:
  _target_: torch.optim.AdamW
  lr: 2.0e-4
scheduler: {name: cosine, warmup: 100}
logger:
  wandb: {project: team-llm}
paths:
  out: ${oc.env:TEAM_OUT,/tmp/team-out}

cfgcheck:
  name: team-run
  model:
    name: tinyllama-1.1b
    block_size: 2048
    vocab_size: 32000
    n_layer: 22
    n_embd: 2048
    n_head: 32
    n_query_groups: 4
    intermediate_size: 5632
    architecture: llama
  tokenizer:
    vocab_size: ${tok.size}
    pad_token: <unk>
    pad_token_id: 0
  data:
    max_seq_length: ${training.seq}
    padding: longest
    collator: padded
  trainer:
    micro_batch_size: ${training.batch}
    learning_rate: ${optimizer.lr}
    finetuning: lora
    lora: {rank: 8}
    gpu: {name: A100-80GB}

tok:
  size: 32000
"""

# training/base.yaml: ``seq`` is a relative interpolation to ``max_len`` (a chain).
BASE = """\
max_len: 1024
seq: ${.max_len}
batch: 4
"""

LONG = """\
max_len: 4096
seq: ${.max_len}
batch: 4
"""


def team_tree(root: Path) -> Path:
    """Write the team's project under ``root``; returns its config directory."""
    conf = root / "conf"
    (conf / "training").mkdir(parents=True)
    (conf / "train.yaml").write_text(TRAIN)
    (conf / "training" / "base.yaml").write_text(BASE)
    (conf / "training" / "long.yaml").write_text(LONG)
    return conf


def line_of(path: Path, text: str) -> int:
    """The 1-based line of ``path`` that starts (after indentation) with ``text``."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip().startswith(text):
            return number
    raise AssertionError(f"{text!r} not in {path}")


def run_in(cwd: Path, *args: str, extra_path: str = "") -> subprocess.CompletedProcess[str]:
    """The real ``cfgcheck`` command run in ``cwd`` (this checkout importable)."""
    env = {**os.environ, "NO_COLOR": "1"}
    paths = [str(REPO), extra_path, env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    command = COMMAND if COMMAND[0] != sys.executable else [sys.executable, "-m", "cfgcheck"]
    return subprocess.run(
        [*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, nothing on stdout, one ``cfgcheck: error:`` line naming ``needles``."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cfgcheck: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
