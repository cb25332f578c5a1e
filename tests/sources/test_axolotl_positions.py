"""``sequence_len`` past the model's positions under Axolotl: the finding quotes what Axolotl
does (cfgcheck/sources/axolotl_rules.py), and the real failure or run is reproduced on CPU
with Axolotl's own adjustment applied to tiny models saved with ``save_pretrained``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cfgcheck.sources import check_native
from tests.conftest import requires
from tests.model_folders import tokenizer_files
from tests.sources.support import one, write

pytestmark = requires("torch", "transformers")
POSITIONS = 64


def adjust_model_config(model: Any, cfg: Any) -> None:
    """axolotl-ai-cloud/axolotl at 067b021c, src/axolotl/loaders/model.py lines 393-404
    (``ModelLoader._adjust_model_config``, its first branch; LOG.warning left out), copied:
    Axolotl does not install here without changing pinned packages."""
    if (
        hasattr(model, "config")
        and hasattr(model.config, "max_position_embeddings")
        and model.config.max_position_embeddings
        and cfg.sequence_len > model.config.max_position_embeddings
    ):
        model.config.max_position_embeddings = cfg.sequence_len


def _folder(root: Path, arch: str) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    folder = root / arch
    if arch == "llama":
        config: Any = LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=POSITIONS,
        )
        LlamaForCausalLM(config).save_pretrained(folder)
    else:
        config = GPT2Config(vocab_size=64, n_positions=POSITIONS, n_embd=32, n_layer=1, n_head=4)
        GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer_files(folder, 64)
    return folder


def _trains(folder: Path, length: int) -> str | None:
    """One step on a packed row of ``length`` tokens after Axolotl's adjustment: None, or the
    error it raised."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    adjust_model_config(model, SimpleNamespace(sequence_len=length))
    ids = torch.randint(3, 64, (1, length))
    try:
        model(input_ids=ids, labels=ids).loss.backward()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_sequence_len_past_the_positions(tmp_path: Path, arch: str) -> None:
    folder = _folder(tmp_path, arch)
    length = 2 * POSITIONS
    file = write(
        tmp_path,
        "config.yml",
        f"base_model: {folder}\nsequence_len: {length}\nsample_packing: true\n"
        "micro_batch_size: 1\n",
    )
    result = check_native(file, "axolotl")
    found = one(result, "axolotl-positions-past-context")
    assert not result.by_rule("seq-len-over-block-size")  # LitGPT's guard is not Axolotl's
    assert "Cannot attend" not in found.message
    assert f"from {POSITIONS} to {length}" in found.message
    failed = _trains(folder, length)
    if arch == "llama":  # RoPE: Axolotl trains on
        assert failed is None
        assert found.severity == "warning"
    else:  # a learned table of 64 rows: every packed row fails
        assert failed is not None and "index out of range in self" in failed
        assert found.severity == "error" and "index out of range in self" in found.message
    # the fix stays within the positions, and that trains
    assert found.fixes[0].overrides == (f"sequence_len={POSITIONS}",)
    assert _trains(folder, POSITIONS) is None
