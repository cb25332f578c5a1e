"""A transformers config for a model shape, to build the real model (on the meta device for
parameter counts, with random weights for calibration and crash tests). Imports transformers
lazily.

The class follows ``ModelConfig.architecture`` (the Hugging Face ``model_type``) first, else
the layout (:func:`cfgcheck.memory.modules.architecture_of`): llama -> LlamaConfig, mistral ->
MistralConfig, qwen2 -> Qwen2Config, qwen3 -> Qwen3Config, gemma -> GemmaConfig, gemma2 ->
Gemma2Config, phi -> PhiConfig, phi3 -> Phi3Config, gpt2 -> GPT2Config. A shape the class
cannot express (e.g. Qwen2 with a head_size other than n_embd / n_head) is refused, never
built with a silently different shape.
"""

from __future__ import annotations

from typing import Any

from cfgcheck.memory.modules import ARCHITECTURES, architecture_of
from cfgcheck.quiet import quiet_imports
from cfgcheck.schema.model import ModelConfig


class ShapeNotMappableError(ValueError):
    """The shape has no matching transformers architecture."""


def _require(ok: bool, m: ModelConfig, arch: str, what: str) -> None:
    if not ok:
        raise ShapeNotMappableError(f"{m.name}: transformers' {arch} needs {what}")


def _check_layout(m: ModelConfig, arch: str) -> None:
    """The layout facts each class hard-codes."""
    gated = m.mlp in ("swiglu", "geglu")
    if arch in ("phi", "gpt2"):
        _require(m.mlp == "gelu" and m.norm == "layernorm", m, arch, "a gelu MLP and LayerNorm")
        _require(m.bias, m, arch, "bias=true")
        _require(m.lm_head_bias == (arch == "phi"), m, arch, f"lm_head_bias={arch == 'phi'}")
        parallel = arch == "phi"
        _require(
            m.parallel_residual == parallel and m.shared_attention_norm == parallel,
            m,
            arch,
            f"parallel_residual={parallel} and shared_attention_norm={parallel}",
        )
    else:
        _require(gated and m.norm == "rmsnorm", m, arch, "a gated MLP and RMSNorm")
        _require(not (m.parallel_residual or m.shared_attention_norm), m, arch, "sequential norms")
        _require(not m.lm_head_bias, m, arch, "no lm_head bias")
        _require((m.mlp == "geglu") == arch.startswith("gemma"), m, arch, "its MLP activation")
    post = arch == "gemma2"
    _require(
        m.post_attention_norm == post and m.post_mlp_norm == post,
        m,
        arch,
        f"post_attention_norm={post} and post_mlp_norm={post}",
    )
    _require(m.norm_qk == (arch == "qwen3"), m, arch, f"norm_qk={arch == 'qwen3'}")
    if arch not in ("llama", "phi", "gpt2"):
        _require(not m.bias, m, arch, "bias=false")
    if arch != "qwen2":
        _require(not m.attn_bias or m.bias, m, arch, "no q/k/v-only bias (that is qwen2)")
    else:
        _require(m.attn_bias, m, arch, "attn_bias=true")
    if arch in ("qwen2", "phi", "phi3", "gpt2"):
        _require(m.head_dim * m.n_head == m.n_embd, m, arch, "head_size * n_head == n_embd")
    if arch == "gpt2":
        _require(m.kv_heads == m.n_head, m, arch, "n_query_groups == n_head")
        _require(m.rotary_fraction == 1.0, m, arch, "no rotary settings (learned positions)")
    if arch != "phi" and arch != "gpt2":
        _require(m.rotary_fraction == 1.0, m, arch, "rotary_fraction=1")


def hf_config(m: ModelConfig) -> Any:
    """A ``PretrainedConfig`` of the architecture that builds ``m`` exactly."""
    try:
        import transformers as _transformers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "building a model needs transformers: install cfgcheck[transformers]"
        ) from e
    transformers: Any = _transformers  # typed config dataclasses; kwargs are checked at runtime
    if m.hf_config is not None and architecture_of(m) not in ARCHITECTURES:
        # a family read generically: its own config.json (cfgcheck.memory.traced)
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        kind = m.hf_config.get("model_type")
        if not isinstance(kind, str) or kind not in CONFIG_MAPPING:
            raise ShapeNotMappableError(f"{m.name}: transformers has no model_type {kind!r}")
        return CONFIG_MAPPING[kind].from_dict(dict(m.hf_config))
    arch = architecture_of(m)
    if arch is None:
        raise ShapeNotMappableError(f"{m.name}: no transformers architecture with this layout")
    _check_layout(m, arch)
    # No special-token ids: the defaults (e.g. Phi-3's pad 32000) need not fit a tiny vocab.
    ids: dict[str, Any] = {"pad_token_id": None, "bos_token_id": None, "eos_token_id": None}
    if arch == "gpt2":
        return transformers.GPT2Config(
            vocab_size=m.rows,
            n_positions=m.block_size,
            n_embd=m.n_embd,
            n_layer=m.n_layer,
            n_head=m.n_head,
            n_inner=m.mlp_width,
            tie_word_embeddings=m.tie_embeddings,
            **ids,
        )
    common: dict[str, Any] = {
        "vocab_size": m.rows,
        "hidden_size": m.n_embd,
        "intermediate_size": m.mlp_width,
        "num_hidden_layers": m.n_layer,
        "num_attention_heads": m.n_head,
        "num_key_value_heads": m.kv_heads,
        "max_position_embeddings": m.block_size,
        "tie_word_embeddings": m.tie_embeddings,
        **ids,
    }
    window = m.sliding_window_size
    if arch == "phi":
        return transformers.PhiConfig(partial_rotary_factor=m.rotary_fraction, **common)
    if arch == "phi3":
        return transformers.Phi3Config(sliding_window=window, **common)
    if arch == "qwen2":
        return transformers.Qwen2Config(**common)
    if arch == "qwen3":
        return transformers.Qwen3Config(head_dim=m.head_dim, **common)
    if arch == "mistral":
        return transformers.MistralConfig(head_dim=m.head_dim, sliding_window=window, **common)
    if arch == "gemma":
        return transformers.GemmaConfig(head_dim=m.head_dim, **common)
    if arch == "gemma2":
        return transformers.Gemma2Config(
            head_dim=m.head_dim,
            layer_types=[
                "sliding_attention" if m.uses_sliding_window(i) else "full_attention"
                for i in range(m.n_layer)
            ],
            query_pre_attn_scalar=m.head_dim,
            sliding_window=window,
            attn_logit_softcapping=m.attention_logit_softcapping,
            final_logit_softcapping=m.final_logit_softcapping,
            **common,
        )
    if arch == "llama":
        return transformers.LlamaConfig(
            head_dim=m.head_dim, attention_bias=m.bias, mlp_bias=m.bias, **common
        )
    raise ShapeNotMappableError(f"{m.name}: architecture {arch!r} is not one cfgcheck builds")


def meta_param_count(m: ModelConfig) -> int:
    """``sum(numel)`` of the transformers model built on the meta device (no download)."""
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as e:  # pragma: no cover
        raise ImportError("install cfgcheck[torch,transformers] for the meta-device count") from e
    with torch.device("meta"), quiet_imports():
        model = AutoModelForCausalLM.from_config(hf_config(m))  # type: ignore[no-untyped-call]
    return int(sum(p.numel() for p in model.parameters()))
