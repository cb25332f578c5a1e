"""Module names of each architecture (cfgcheck/memory/modules.py) against transformers' real
models, and the transformers class each shape maps to (cfgcheck/memory/hf_shapes.py)."""

from __future__ import annotations

from typing import Any

import pytest

from cfgcheck.memory.hf_shapes import ShapeNotMappableError, hf_config
from cfgcheck.memory.modules import ARCHITECTURES, architecture_of, lora_names, module_tree
from cfgcheck.memory.params import count_params
from cfgcheck.models.presets import all_presets
from cfgcheck.schema.model import ModelConfig

BASE: dict[str, Any] = {
    "name": "tiny",
    "block_size": 32,
    "vocab_size": 64,
    "n_layer": 2,
    "n_embd": 16,
    "n_head": 4,
    "n_query_groups": 2,
    "intermediate_size": 24,
}
GELU = {"mlp": "gelu", "norm": "layernorm", "bias": True}
LAYOUTS: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": {"sliding_window_size": 8},
    "qwen2": {"attn_bias": True},
    "qwen3": {"norm_qk": True, "head_size": 8},
    "gemma": {"mlp": "geglu", "head_size": 8, "tie_embeddings": True},
    "gemma2": {
        "mlp": "geglu",
        "head_size": 8,
        "tie_embeddings": True,
        "post_attention_norm": True,
        "post_mlp_norm": True,
        "sliding_window_size": 8,
        "sliding_window_pattern": 2,
        "attention_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
    },
    "phi": GELU
    | {
        "lm_head_bias": True,
        "parallel_residual": True,
        "shared_attention_norm": True,
        "rotary_fraction": 0.5,
        "n_query_groups": 4,
    },
    "phi3": {"n_query_groups": 4, "sliding_window_size": 8},
    "gpt2": GELU | {"n_query_groups": 4, "tie_embeddings": True},
}


def tiny(arch: str, explicit: bool = True) -> ModelConfig:
    extra = {"architecture": arch} if explicit else {}
    return ModelConfig.model_validate(BASE | LAYOUTS[arch] | extra)


def kind(module: Any) -> str:
    name = type(module).__name__
    if name in ("Linear", "Conv1D"):
        return "linear"
    if "Embedding" in name and "Rotary" not in name:
        return "embedding"
    return "norm" if "Norm" in name else "other"


def test_every_known_architecture_has_a_layout() -> None:
    assert set(LAYOUTS) == ARCHITECTURES


@pytest.mark.meta
@pytest.mark.parametrize("arch", sorted(LAYOUTS))
def test_module_tree_is_transformers_named_modules(arch: str) -> None:
    """Every path and kind cfgcheck knows is what ``named_modules()`` of the real model gives,
    and the parameter count agrees too."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    m = tiny(arch)
    config = hf_config(m)
    assert config.model_type == arch
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    real = {name: kind(mod) for name, mod in model.named_modules() if name}
    assert module_tree(m) == real
    assert count_params(m).total == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("arch", sorted(set(LAYOUTS) - {"gpt2", "phi3"}))
def test_architecture_is_inferred_from_the_layout(arch: str) -> None:
    assert architecture_of(tiny(arch, explicit=False)) == arch


def test_lora_names_by_architecture() -> None:
    llama = ("embed_tokens", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
             "down_proj", "lm_head")  # fmt: skip
    assert lora_names(tiny("llama")) == llama
    assert set(lora_names(tiny("qwen3"))) == set(llama)  # q_norm / k_norm are not LoRA-able
    assert lora_names(tiny("phi")) == (
        "embed_tokens", "q_proj", "k_proj", "v_proj", "dense", "fc1", "fc2", "lm_head"
    )  # fmt: skip
    assert lora_names(tiny("phi3")) == (
        "embed_tokens", "qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"
    )  # fmt: skip
    assert lora_names(tiny("gpt2")) == ("wte", "wpe", "c_attn", "c_proj", "c_fc", "lm_head")
    assert (
        lora_names(tiny("llama", explicit=False).model_copy(update={"architecture": "rwkv"})) == ()
    )


@pytest.mark.parametrize("preset", all_presets(), ids=lambda p: p.name)
def test_each_preset_builds_the_class_of_its_architecture(preset: Any) -> None:
    pytest.importorskip("transformers")
    m = ModelConfig.model_validate(dict(preset.config))
    assert hf_config(m).model_type == preset.config["architecture"]


@pytest.mark.parametrize(
    ("arch", "change", "needs"),
    [
        ("qwen2", {"head_size": 8, "n_head": 4, "n_embd": 24}, "head_size \\* n_head"),
        ("phi3", {"norm_qk": True}, "norm_qk=False"),
        ("llama", {"post_mlp_norm": True}, "post_attention_norm=False"),
        ("gemma2", {"mlp": "swiglu"}, "gated MLP|MLP activation"),
        ("qwen3", {"attn_bias": True}, "bias"),
        ("gpt2", {"parallel_residual": True}, "parallel_residual=False"),
    ],
)
def test_a_shape_the_class_cannot_express_is_refused(
    arch: str, change: dict[str, Any], needs: str
) -> None:
    pytest.importorskip("transformers")
    m = ModelConfig.model_validate(BASE | LAYOUTS[arch] | {"architecture": arch} | change)
    with pytest.raises(ShapeNotMappableError, match=needs):
        hf_config(m)


def test_sliding_window_layers() -> None:
    gemma2 = tiny("gemma2").model_copy(update={"n_layer": 5})
    assert [gemma2.uses_sliding_window(i) for i in range(5)] == [True, False, True, False, True]
    assert gemma2.n_sliding_layers == 3
    assert tiny("mistral").n_sliding_layers == 2
    assert tiny("llama").n_sliding_layers == 0


@pytest.mark.parametrize("preset", all_presets(), ids=lambda p: p.name)
def test_preset_round_trips_through_a_transformers_config_json(preset: Any) -> None:
    """The config.json transformers writes for a preset's class reads back (models/hf.py) into
    the preset's shape: presets, hf_shapes and the folder reader agree on every key."""
    pytest.importorskip("transformers")
    import json

    from cfgcheck.models.hf import hf_model

    m = ModelConfig.model_validate(dict(preset.config))
    data = json.loads(hf_config(m).to_json_string())
    read = {k: v.value for k, v in hf_model(data, preset.name).items()}
    skip = ("name", "source", "vocab_size", "hf_config")
    shape = {k: v for k, v in preset.config.items() if k not in skip}
    assert {k: read[k] for k in shape} == {k: getattr(m, k) for k in shape}
    assert read["padded_vocab_size"] == m.rows
