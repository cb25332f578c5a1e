"""Ground truth for the two seed failures that live in code, on CPU with the real libraries:
the script cfgcheck flags raises the real exception, and the script with cfgcheck's own fix
edits applied runs a training step.

- Unsloth seed (shared/seeds 002): a real tokenizer (built with ``tokenizers``), ``datasets``'
  ``map(batched=True, batch_size=2)`` with ``padding=True``, transformers' ``Trainer`` with its
  default collator at batch 4: "expected sequence of length N at dim 1 (got M)".
- Lightning + torchtune seed (shared/seeds 004): torch's real ``default_collate`` over ragged
  token lists with a batch above 1, inside a real Lightning ``Trainer.fit``: "each element in
  list of batch should be of equal size"; ``collate_fn=padded_collate_sft`` fixes it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.sources import check_native
from cfgcheck.sources.python.edits import apply
from tests.conftest import requires
from tests.sources.test_python_source import HERE, edits_of, seed_script

pytestmark = pytest.mark.slow


def run_script(path: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a test's own fixture script (never a user's file) in a fresh process."""
    return subprocess.run(
        [sys.executable, path.name],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={
            "PATH": "/usr/bin:/bin",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HOME": str(path.parent),
        },
    )


@requires("transformers", "datasets", "torch", "accelerate")
def test_trainer_seed_raises_and_each_fix_runs_a_step(tmp_path: Path) -> None:
    script = seed_script(tmp_path)
    _save_weights(tmp_path / "tiny-llama")
    text = script.read_text()
    failed = run_script(script)
    assert failed.returncode != 0
    assert "expected sequence of length" in failed.stderr, failed.stderr[-2000:]
    result = check_native(script, "python")
    (finding,) = result.by_rule("ragged-batch")
    assert len(finding.fixes) == 2
    for fix in finding.fixes:
        fixed = tmp_path / "fixed.py"
        fixed.write_text(apply(text, list(fix.edits)))
        ran = run_script(fixed)
        assert ran.returncode == 0, (fix.summary, ran.stderr[-3000:])
        assert "train_runtime" in ran.stdout + ran.stderr


def _save_weights(folder: Path) -> None:
    """Random weights for the tiny Llama of the folder's config.json (no download)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(folder)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)


def _ragged_samples() -> list[dict[str, list[int]]]:
    """What torchtune's text_completion_dataset yields: unpadded tokens and labels."""
    return [
        {"tokens": list(range(3, 3 + n)), "labels": list(range(3, 3 + n))} for n in (5, 9, 7, 12)
    ]


@requires("torch", "torchtune")
def test_default_collate_refuses_ragged_samples_and_padded_collate_sft_stacks() -> None:
    import torch
    from torch.utils.data import DataLoader
    from torchtune.data import padded_collate_sft

    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        next(iter(DataLoader(_ragged_samples(), batch_size=4)))  # type: ignore[arg-type]
    batch: Any = next(
        iter(DataLoader(_ragged_samples(), batch_size=4, collate_fn=padded_collate_sft))
    )  # type: ignore[arg-type]
    assert batch["tokens"].shape == torch.Size([4, 12])


LIGHTNING_SCRIPT = """
import lightning as L
import torch
from torch.utils.data import DataLoader

BATCH_SIZE = 4
LENGTHS = (5, 9, 7, 12)
SAMPLES = [{"tokens": list(range(3, 3 + n)), "labels": list(range(3, 3 + n))} for n in LENGTHS]


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 8)
        self.head = torch.nn.Linear(8, 32)

    def training_step(self, batch, batch_idx):
        logits = self.head(self.embed(batch["tokens"]))
        return torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100
        )

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Data(L.LightningDataModule):
    def __init__(self, batch_size=BATCH_SIZE):
        super().__init__()
        self.batch_size = batch_size

    def train_dataloader(self):
        return DataLoader(SAMPLES, batch_size=self.batch_size)


model = torch.nn.Module()
trainer = L.Trainer(
    max_steps=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False,
)
trainer.fit(Tiny(), Data())
print("STEP DONE")
"""


@requires("torch", "torchtune", "lightning")
def test_lightning_fit_raises_and_cfgcheck_fix_runs(tmp_path: Path) -> None:
    script = tmp_path / "lit.py"
    script.write_text(LIGHTNING_SCRIPT)
    failed = run_script(script)
    assert failed.returncode != 0
    assert "each element in list of batch should be of equal size" in failed.stderr, failed.stderr[
        -2000:
    ]
    # cfgcheck reads the published seed (its model is a torchtune builder) and proposes the
    # collate_fn edit; the same edit on this runnable script makes the step run.
    seed = HERE / "lightning_torchtune_seed.py"
    (finding,) = check_native(seed, "python").by_rule("ragged-batch")
    (fix,) = finding.fixes
    loader = next(e for e in fix.edits if e.old == "")
    assert loader.new == ", collate_fn=padded_collate_sft"
    text = script.read_text().replace(
        "DataLoader(SAMPLES, batch_size=self.batch_size)",
        "DataLoader(SAMPLES, batch_size=self.batch_size" + loader.new + ")",
    )
    fixed = tmp_path / "fixed.py"
    fixed.write_text("from torchtune.data import padded_collate_sft\n" + text)
    ran = run_script(fixed)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "STEP DONE" in ran.stdout


def test_fix_edits_in_json_are_the_applied_ones(tmp_path: Path) -> None:
    script = seed_script(tmp_path)
    (finding,) = check_native(script, "python").by_rule("ragged-batch")
    as_json = json.loads(json.dumps([f.to_dict() for f in finding.fixes]))
    for fix, data in zip(finding.fixes, as_json, strict=True):
        assert edits_of(data) == list(fix.edits)
