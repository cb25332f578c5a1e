"""A transformers config for a model shape, to build the real model (on the meta device for
parameter counts, with random weights for calibration). Imports transformers lazily."""

from __future__ import annotations

from typing import Any

from cfgcheck.schema.model import ModelConfig


class ShapeNotMappableError(ValueError):
    """The shape has no matching transformers architecture."""


def hf_config(m: ModelConfig) -> Any:
    """A ``PretrainedConfig`` of the architecture that has ``m``'s layout.

    gelu MLP + LayerNorm -> Phi; GeGLU -> Gemma; q/k/v bias only -> Qwen2; else Llama.
    """
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "building a model needs transformers: install cfgcheck[transformers]"
        ) from e
    common: dict[str, Any] = {
        "vocab_size": m.rows,
        "hidden_size": m.n_embd,
        "intermediate_size": m.mlp_width,
        "num_hidden_layers": m.n_layer,
        "num_attention_heads": m.n_head,
        "num_key_value_heads": m.kv_heads,
        "max_position_embeddings": m.block_size,
        "tie_word_embeddings": m.tie_embeddings,
    }
    if m.mlp == "gelu":
        if not (m.norm == "layernorm" and m.bias and m.shared_attention_norm):
            raise ShapeNotMappableError(
                f"{m.name}: a gelu MLP maps to Phi only with layernorm, bias and a shared norm"
            )
        phi: Any = transformers.PhiConfig
        return phi(partial_rotary_factor=m.rotary_fraction, **common)
    if m.norm != "rmsnorm" or m.lm_head_bias or m.parallel_residual:
        raise ShapeNotMappableError(f"{m.name}: no transformers architecture with this layout")
    if m.mlp == "geglu":
        return transformers.GemmaConfig(head_dim=m.head_dim, **common)
    if m.attn_bias and not m.bias:
        if m.head_dim * m.n_head != m.n_embd:
            raise ShapeNotMappableError(f"{m.name}: Qwen2 needs head_size * n_head == n_embd")
        return transformers.Qwen2Config(**common)
    return transformers.LlamaConfig(
        head_dim=m.head_dim, attention_bias=m.bias, mlp_bias=m.bias, **common
    )


def meta_param_count(m: ModelConfig) -> int:
    """``sum(numel)`` of the transformers model built on the meta device (no download)."""
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as e:  # pragma: no cover
        raise ImportError("install cfgcheck[torch,transformers] for the meta-device count") from e
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config(m))  # type: ignore[no-untyped-call]
    return int(sum(p.numel() for p in model.parameters()))
