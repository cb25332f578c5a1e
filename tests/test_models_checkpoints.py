"""Checkpoints as they come: a pre-quantized config.json (quantization_config) sets the stored
weight format the memory estimate counts; a Hub cache snapshot given as a path is named by its
repo id."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

import cfgcheck
from cfgcheck.memory.params import count_params
from cfgcheck.memory.weights import weight_bytes
from cfgcheck.models.resolve import resolve_pretrained
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig
from tests.conftest import requires
from tests.model_folders import LLAMA2_7B, hub_cache, write_config
from tests.model_folders_recent import RECENT

# https://huggingface.co/TheBloke/Llama-2-7B-GPTQ/blob/main/config.json (quantization_config)
GPTQ = {
    "bits": 4,
    "group_size": 128,
    "damp_percent": 0.01,
    "desc_act": False,
    "sym": True,
    "true_sequential": True,
    "model_file_base_name": "model",
    "quant_method": "gptq",
}
# bitsandbytes' saved 4-bit config (transformers BitsAndBytesConfig.to_dict, unsloth's -bnb-4bit)
BNB4 = {
    "quant_method": "bitsandbytes",
    "load_in_4bit": True,
    "load_in_8bit": False,
    "bnb_4bit_quant_type": "nf4",
    "bnb_4bit_use_double_quant": True,
    "bnb_4bit_compute_dtype": "bfloat16",
}


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def model(folder: Path) -> ModelConfig:
    values = {k: v.value for k, v in resolve_pretrained(str(folder)).values.items()}
    return ModelConfig(name=folder.name, **values)


def run(folder: Path, **trainer: Any) -> dict[str, Any]:
    return {
        "name": "q",
        "model": {"pretrained": str(folder)},
        "tokenizer": {"vocab_size": 32000, "pad_token_id": 0, "eos_token_id": 2},
        "data": {"max_seq_length": 512},
        "trainer": {"micro_batch_size": 1, "lora": {"rank": 8, "alpha": 16}, **trainer},
    }


def test_a_gptq_7b_is_stored_in_4_bits_not_as_fp32(tmp_path: Path) -> None:
    folder = write_config(tmp_path / "Llama-2-7B-GPTQ", {**LLAMA2_7B, "quantization_config": GPTQ})
    m = model(folder)
    assert (m.weight_format, m.quant_group_size) == ("gptq-4bit", 128)
    t = TrainerConfig(
        micro_batch_size=1, finetuning="lora", precision="bf16-true", lora={"rank": 8}
    )
    pc = count_params(m)
    # gptqmodel's QuantLinear (what transformers' GPTQ quantizer loads) per linear of in x out:
    # qweight int32 (in * 4 / 32, out), qzeros int32 (in / 128, out * 4 / 32), scales fp16
    # (in / 128, out)
    linear = 0
    for i, o in [(4096, 4096)] * 4 + [(4096, 11008)] * 2 + [(11008, 4096)]:
        linear += 4 * (i * 4 // 32) * o + 4 * (i // 128) * (o * 4 // 32) + 2 * (i // 128) * o
    assert weight_bytes(m, t) == pytest.approx(32 * linear + 2 * pc.unquantized, rel=1e-6)
    assert weight_bytes(m, t) < 4 * 2**30  # not 12.6 GiB (bf16), nor 25 GiB (fp32)
    result = cfgcheck.validate(run(folder, finetuning="lora", gpu="RTX 4090"))
    assert not result.by_rule("gpu-memory") or all(
        "weights 3." in f.message or "weights" not in f.message
        for f in result.by_rule("gpu-memory")
    )
    full = cfgcheck.validate(run(folder, finetuning="full"))
    found = full.by_rule("prequantized-training")
    assert found and "purely quantized" in found[0].message


def test_bitsandbytes_checkpoint_reads_as_its_storage(tmp_path: Path) -> None:
    folder = write_config(tmp_path / "llama-bnb-4bit", {**LLAMA2_7B, "quantization_config": BNB4})
    m = model(folder)
    assert m.weight_format == "bnb-nf4-dq"
    t = TrainerConfig(
        micro_batch_size=1, finetuning="lora", precision="bf16-true", lora={"rank": 8}
    )
    qlora = TrainerConfig(
        micro_batch_size=1,
        finetuning="qlora",
        quantization="nf4-dq",
        precision="bf16-true",
        lora={"rank": 8},
    )
    base = model(write_config(tmp_path / "llama", LLAMA2_7B))
    # the same storage as bitsandbytes quantizing the 16-bit checkpoint at load (QLoRA)
    assert weight_bytes(m, t) == weight_bytes(base, qlora.model_copy(update={"framework": "hf"}))


@requires("torch", "transformers")
def test_fp8_storage_equals_transformers_fp8_linear(tmp_path: Path) -> None:
    """FineGrainedFP8Config (DeepSeek-V3 style): transformers replaces each linear by FP8Linear
    (1-byte weight, fp32 scale per 128 x 128 block); the block linears' bytes are cfgcheck's."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, FineGrainedFP8Config
    from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear

    shape = {**LLAMA2_7B, "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256}  # fmt: skip
    fp8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    m = model(write_config(tmp_path / "fp8", {**shape, "quantization_config": fp8}))
    assert m.weight_format == "fp8"
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model(**shape))
    built = replace_with_fp8_linear(
        built, ["lm_head"], FineGrainedFP8Config(weight_block_size=[128, 128]), pre_quantized=True
    )
    stored = sum(
        p.numel() * p.element_size()
        for name, p in built.named_parameters()
        if ".layers." in name and ("proj" in name)
    )
    t = TrainerConfig(
        micro_batch_size=1, finetuning="lora", precision="bf16-true", lora={"rank": 8}
    )
    pc = count_params(m)
    assert weight_bytes(m, t) - 2 * pc.unquantized == stored


def test_gpt_oss_mxfp4_experts_must_be_dequantized_to_train(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    folder = write_config(tmp_path / "gpt-oss-20b", RECENT["openai/gpt-oss-20b"])
    m = model(folder)
    assert m.weight_format == "mxfp4"
    found = cfgcheck.validate(run(folder, finetuning="lora")).by_rule("prequantized-training")
    assert found and "Mxfp4Config(dequantize=True)" in found[0].hint
    plain = copy.deepcopy(RECENT["openai/gpt-oss-20b"])
    del plain["quantization_config"]
    ok = cfgcheck.validate(run(write_config(tmp_path / "bf16", plain), finetuning="lora"))
    assert not ok.by_rule("prequantized-training")


def test_a_hub_snapshot_folder_is_named_by_its_repo_id(
    tmp_path: Path, empty_hub_cache: Path
) -> None:
    snapshot = hub_cache(empty_hub_cache, "meta-llama/Llama-2-7b-hf", LLAMA2_7B, "c" * 40)
    result = cfgcheck.validate(run(snapshot, finetuning="lora"))
    assert result.config is not None
    assert result.config.model.name == "meta-llama/Llama-2-7b-hf"


# --- PEFT adapter folders --------------------------------------------------------------------


def peft_adapter(folder: Path, base: str, **lora: Any) -> Path:
    """adapter_config.json as PEFT itself writes it (LoraConfig.save_pretrained)."""
    from peft import LoraConfig

    config = LoraConfig(base_model_name_or_path=base, task_type="CAUSAL_LM", **lora)
    config.save_pretrained(str(folder))
    return folder


@requires("peft")
def test_an_adapter_folder_resolves_its_base_and_fills_lora(
    tmp_path: Path, empty_hub_cache: Path
) -> None:
    hub_cache(empty_hub_cache, "meta-llama/Llama-2-7b-hf", LLAMA2_7B, "d" * 40)
    adapter = peft_adapter(
        tmp_path / "my-adapter",
        "meta-llama/Llama-2-7b-hf",
        r=32,
        lora_alpha=64,
        lora_dropout=0.1,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    )
    cfg = run(adapter)
    del cfg["trainer"]["lora"]
    result = cfgcheck.validate(cfg)
    assert result.config is not None, [f.message for f in result.errors]
    m, lora = result.config.model, result.config.trainer.lora
    assert (m.n_layer, m.n_embd, m.rows) == (32, 4096, 32000)
    assert (lora.rank, lora.alpha, lora.dropout) == (32, 64, 0.1)
    assert lora.targets == ["k_proj", "o_proj", "q_proj", "v_proj"]  # PEFT saves a set
    assert result.config.trainer.finetuning == "lora"
    assert m.name == "my-adapter"
    # the config's own settings win
    mine = run(adapter, finetuning="lora")
    mine["trainer"]["lora"] = {"rank": 8}
    kept = cfgcheck.validate(mine)
    assert kept.config is not None and kept.config.trainer.lora.rank == 8
    assert kept.config.trainer.lora.alpha == 64


@requires("peft")
def test_an_adapter_on_a_preset_base_and_one_without_a_base(tmp_path: Path) -> None:
    adapter = peft_adapter(tmp_path / "a", "Qwen/Qwen3-30B-A3B", r=16, target_modules="all-linear")
    cfg = run(adapter)
    del cfg["trainer"]["lora"]
    result = cfgcheck.validate(cfg)
    assert result.config is not None
    assert result.config.model.n_expert == 128 and result.config.trainer.lora.targets == [
        "all-linear"
    ]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "adapter_config.json").write_text('{"r": 8}')
    with pytest.raises(cfgcheck.ConfigLoadError, match="base_model_name_or_path"):
        cfgcheck.validate(run(tmp_path / "b"))


# --- classification heads ----------------------------------------------------------------------


@requires("torch", "transformers")
@pytest.mark.parametrize("kind", ["ForSequenceClassification", "ForTokenClassification"])
@pytest.mark.parametrize("family", ["qwen3", "stablelm"])
def test_a_classification_head_is_counted_as_that_head(
    tmp_path: Path, kind: str, family: str
) -> None:
    """Qwen3 (a tied lm_head) and a traced family (StableLM) as classifiers: the score layer has
    num_labels rows (bias only for token classification), not the vocabulary; the count is
    transformers' own for that class."""
    import torch
    import transformers

    shape = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 151936,
             "max_position_embeddings": 512, "tie_word_embeddings": family == "qwen3",
             "model_type": family, "pad_token_id": 0}  # fmt: skip
    name = {"qwen3": "Qwen3", "stablelm": "StableLm"}[family] + kind
    data = {**shape, "architectures": [name], "id2label": {"0": "neg", "1": "neu", "2": "pos"}}
    m = model(write_config(tmp_path / family, data))
    assert m.head_rows == 3 and m.head != "causal_lm"
    config = transformers.AutoConfig.for_model(**data)
    with torch.device("meta"):
        built = getattr(transformers, f"AutoModel{kind}").from_config(config)
    assert count_params(m).total == sum(p.numel() for p in built.parameters())
    causal = model(write_config(tmp_path / "lm", {**shape, "tie_word_embeddings": False}))
    score = 3 * 256 + (3 if kind == "ForTokenClassification" else 0)
    assert count_params(causal).total - count_params(m).total == 151936 * 256 - score


@requires("peft")
def test_an_adapter_hub_id_in_the_cache_resolves(tmp_path: Path, empty_hub_cache: Path) -> None:
    """An adapter repo in the Hub cache (snapshots/<commit>/adapter_config.json) names its
    base, itself in the cache."""
    hub_cache(empty_hub_cache, "meta-llama/Llama-2-7b-hf", LLAMA2_7B, "e" * 40)
    repo = empty_hub_cache / "models--someone--llama2-lora"
    snapshot = repo / "snapshots" / ("f" * 40)
    peft_adapter(snapshot, "meta-llama/Llama-2-7b-hf", r=4, target_modules=["q_proj"])
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("f" * 40)
    source = resolve_pretrained("someone/llama2-lora")
    assert source.adapter is not None and source.adapter.values["rank"].value == 4
    assert source.values["n_layer"].value == 32
