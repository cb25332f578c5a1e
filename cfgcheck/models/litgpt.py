"""A LitGPT checkpoint's ``model_config.yaml`` read as cfgcheck's ``model`` keys.

LitGPT writes the whole ``litgpt.config.Config`` dataclass to the checkpoint folder
(``Config.from_checkpoint`` reads it back with ``yaml.safe_load``), so cfgcheck's keys, which
are LitGPT's names, mostly carry over. A key the file leaves out takes the default of
``Config`` (Lightning-AI/litgpt, litgpt/config.py), which differs from cfgcheck's own
defaults (LayerNorm, parallel residual, bias, 25 % rotary, GptNeoxMLP, padding multiple 512).
Unlike a Hugging Face config.json, ``vocab_size`` here is the tokenizer vocabulary the model
was built for and ``padded_vocab_size`` the embedding rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cfgcheck.models.files import ModelFolderError
from cfgcheck.models.hf import Value
from cfgcheck.schema.model import find_multiple

# litgpt/config.py, class Config: the defaults of the keys cfgcheck reads.
LITGPT_DEFAULTS: dict[str, Any] = {
    "block_size": 4096,
    "n_layer": 16,
    "n_embd": 4096,
    "vocab_size": 50254,
    "padding_multiple": 512,
    "padded_vocab_size": None,
    "norm_class_name": "LayerNorm",
    "norm_qk": False,
    "post_attention_norm": False,
    "post_mlp_norm": False,
    "parallel_residual": True,
    "shared_attention_norm": False,
    "n_head": 32,
    "head_size": None,
    "n_query_groups": None,
    "attn_bias": False,
    "sliding_window_size": None,
    "attention_logit_softcapping": None,
    "rotary_percentage": 0.25,
    "intermediate_size": None,
    "bias": True,
    "mlp_class_name": "GptNeoxMLP",
    "lm_head_bias": False,
    "final_logit_softcapping": None,
    "n_expert": 0,
}
_MLP = {"LLaMAMLP": "swiglu", "GemmaMLP": "geglu", "GptNeoxMLP": "gelu"}
_NORM = {"RMSNorm": "rmsnorm", "LayerNorm": "layernorm"}
# Keys whose name and meaning are the same in LitGPT and cfgcheck.
_SAME = (
    "block_size",
    "n_layer",
    "n_embd",
    "n_head",
    "vocab_size",
    "bias",
    "attn_bias",
    "lm_head_bias",
    "parallel_residual",
    "shared_attention_norm",
    "norm_qk",
    "post_attention_norm",
    "post_mlp_norm",
    "sliding_window_size",
    "attention_logit_softcapping",
    "final_logit_softcapping",
)


def litgpt_model(data: Mapping[str, Any], where: str) -> dict[str, Value]:
    """cfgcheck ``model`` keys from a model_config.yaml mapping. ``where`` names the file."""

    def get(key: str) -> Value:
        if key in data:
            return Value(data[key], key)
        return Value(LITGPT_DEFAULTS[key], key, f"litgpt Config.{key}")

    if int(get("n_expert").value or 0) > 0:
        raise ModelFolderError(f"{where}: mixture-of-experts checkpoints are not modelled")
    out: dict[str, Value] = {k: get(k) for k in _SAME}
    for key in ("block_size", "n_layer", "n_embd", "n_head", "vocab_size"):
        v = out[key].value
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ModelFolderError(f"{where}: {key} must be a positive integer, not {v!r}")
    n_embd, n_head, vocab = out["n_embd"], out["n_head"], out["vocab_size"]
    padded = get("padded_vocab_size")
    if padded.value is None:
        multiple = get("padding_multiple")
        rows = find_multiple(vocab.value, int(multiple.value))
        out["padded_vocab_size"] = Value(rows, f"{vocab.key} rounded to {multiple.key}")
    else:
        out["padded_vocab_size"] = padded
        # Config.__post_init__: vocab_size = min(vocab_size, padded_vocab_size)
        out["vocab_size"] = Value(min(vocab.value, padded.value), vocab.key, vocab.default_of)
    head = get("head_size")
    out["head_size"] = (
        head
        if head.value is not None
        else Value(n_embd.value // n_head.value, f"{n_embd.key} // {n_head.key}")
    )
    groups = get("n_query_groups")
    out["n_query_groups"] = groups if groups.value is not None else Value(n_head.value, "n_head")
    mlp = get("mlp_class_name")
    if mlp.value not in _MLP:
        raise ModelFolderError(f"{where}: mlp_class_name {mlp.value!r} is not modelled")
    out["mlp"] = Value(_MLP[mlp.value], mlp.key, mlp.default_of)
    width = get("intermediate_size")
    out["intermediate_size"] = (
        width if width.value is not None else Value(4 * n_embd.value, f"4 * {n_embd.key}")
    )
    norm = get("norm_class_name")
    if norm.value not in _NORM:
        raise ModelFolderError(f"{where}: norm_class_name {norm.value!r} is not modelled")
    out["norm"] = Value(_NORM[norm.value], norm.key, norm.default_of)
    out["rotary_fraction"] = get("rotary_percentage")
    name = data.get("name")
    if isinstance(name, str) and name:
        out["name"] = Value(name, "name")
    return out
