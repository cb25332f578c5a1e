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


def check_model_config_gptq(cfg: Any, model_config: Any) -> None:
    """axolotl-ai-cloud/axolotl at 067b021c, src/axolotl/loaders/utils.py check_model_config
    lines 110-120, the gptq check, copied."""
    quant_config_exists = (
        hasattr(model_config, "quantization_config") and model_config.quantization_config
    )
    quant_config_method_is_gptq = (
        quant_config_exists
        and "quant_method" in model_config.quantization_config
        and model_config.quantization_config["quant_method"] == "gptq"
    )
    if cfg.gptq and not quant_config_method_is_gptq:
        raise ValueError(
            "model_config.quantization_config is not set or quant_method is not set to gptq. "
            "Please make sure to point to a GPTQ model."
        )


@pytest.mark.parametrize("quantized", [False, True])
def test_gptq_needs_a_gptq_checkpoint(tmp_path: Path, quantized: bool) -> None:
    import json

    from transformers import AutoConfig

    folder = _folder(tmp_path, "llama")
    if quantized:  # as a GPTQ export writes it (quant_method, bits, group_size)
        config = json.loads((folder / "config.json").read_text())
        config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
        (folder / "config.json").write_text(json.dumps(config))
    file = write(
        tmp_path,
        "gptq.yml",
        f"base_model: {folder}\ngptq: true\nadapter: lora\nlora_r: 8\nlora_target_linear: true\n"
        "sequence_len: 32\nmicro_batch_size: 1\n",
    )
    result = check_native(file, "axolotl")
    try:
        check_model_config_gptq(SimpleNamespace(gptq=True), AutoConfig.from_pretrained(folder))
        refused = None
    except ValueError as e:
        refused = str(e)
    if quantized:
        assert refused is None and not result.by_rule("axolotl-gptq-not-gptq-model")
    else:
        assert refused is not None
        found = one(result, "axolotl-gptq-not-gptq-model")
        assert refused.split(".")[0] in found.message and found.severity == "error"
        assert found.fixes[0].overrides == ("~gptq",)


def test_hybrid_sharding(tmp_path: Path) -> None:
    from cfgcheck.sources import load_native

    base = "base_model: meta-llama/Llama-3.2-1B\nsequence_len: 512\nmicro_batch_size: 1\n"
    text = base + "fsdp_version: 2\nfsdp_config:\n  reshard_after_forward: true\n"
    shard = load_native(write(tmp_path, "a.yml", text + "dp_shard_size: 4\n"), "axolotl")
    assert shard.config["trainer"]["shard_group"] == 4
    hybrid = load_native(write(tmp_path, "b.yml", base + "fsdp: [hybrid_shard]\n"), "axolotl")
    assert hybrid.config["trainer"]["shard_group"] == 1  # one node of the launcher's devices
