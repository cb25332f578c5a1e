"""cfgcheck's model presets: published shapes by name and by Hugging Face Hub id.

One source of truth: this registry. ``conf/model/<name>.yaml`` files are *generated* from it
(``python -m cfgcheck.models.presets conf/model``) and a test checks every file equals its
rendering, so a hand edit of a YAML file fails CI instead of drifting.

Each preset, LitGPT-style (``litgpt/config.py``), lists only what differs from the
:class:`~cfgcheck.schema.model.ModelConfig` defaults and links the ``config.json`` it was read
from. ``hub_ids`` are the repositories that share the shape (official base and instruct repos
and common mirrors): ``find_preset("NousResearch/Llama-3.2-1B")`` resolves offline.

Conventions (those of ``ModelConfig``): ``vocab_size`` is ``len(tokenizer)`` (base vocabulary
plus added tokens), ``padded_vocab_size`` the embedding rows (``config.json``'s ``vocab_size``)
where they differ; ``block_size`` is ``max_position_embeddings``; ``architecture`` is the
config's ``model_type``. Importing this module imports nothing but the standard library.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class Preset:
    """A published model shape: its ``model`` section (``name`` and ``source`` included)."""

    name: str
    source: str
    hub_ids: tuple[str, ...]
    config: Mapping[str, Any]


class DuplicatePresetError(ValueError):
    """A preset name or Hub id registered twice (the registry never overwrites)."""


class _Registry:
    def __init__(self) -> None:
        self._presets: list[Preset] = []
        self._by_key: dict[str, Preset] = {}
        self._notes: dict[str, str] = {}

    def add(self, hub_ids: tuple[str, ...], note: str, config: dict[str, Any]) -> None:
        name, source = config.get("name"), config.get("source")
        if not isinstance(name, str) or not isinstance(source, str):
            raise ValueError(f"preset {config!r}: needs a str name and source")
        preset = Preset(name, source, hub_ids, MappingProxyType(dict(config)))
        keys = [name, *hub_ids]
        for key in keys:
            if key.casefold() in self._by_key or keys.count(key) > 1:
                other = self._by_key.get(key.casefold(), preset).name
                raise DuplicatePresetError(f"preset key {key!r} of {name} already names {other}")
        for key in keys:
            self._by_key[key.casefold()] = preset
        self._presets.append(preset)
        self._notes[name] = note

    def find(self, key: str) -> Preset | None:
        return self._by_key.get(key.strip().casefold())

    def all(self) -> tuple[Preset, ...]:
        return tuple(self._presets)

    def note(self, name: str) -> str:
        return self._notes.get(name, "")


_REGISTRY = _Registry()


def find_preset(name_or_hub_id: str) -> Preset | None:
    """The preset named ``name_or_hub_id`` or listing it as a Hub id (case-insensitive)."""
    return _REGISTRY.find(name_or_hub_id)


def all_presets() -> tuple[Preset, ...]:
    """Every preset, in registration order."""
    return _REGISTRY.all()


def preset_note(name: str) -> str:
    """The human note on a preset (what is special about its shape), or ``""``."""
    return _REGISTRY.note(name)


def _hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


def _add(hub_ids: tuple[str, ...], note: str = "", **config: Any) -> None:
    _REGISTRY.add(hub_ids, note, config)


# --- Llama 2 / TinyLlama ----------------------------------------------------------------------
_add(
    ("TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", "TinyLlama/TinyLlama-1.1B-Chat-v1.0"),
    "TinyLlama-1.1B (Llama-2 architecture, GQA with 4 KV heads).",
    name="tinyllama-1.1b",
    source=_hf("TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"),
    block_size=2048,
    vocab_size=32000,
    n_layer=22,
    n_embd=2048,
    n_head=32,
    n_query_groups=4,
    intermediate_size=5632,
    architecture="llama",
)
_add(
    (
        "meta-llama/Llama-2-7b-hf",
        "meta-llama/Llama-2-7b-chat-hf",
        "NousResearch/Llama-2-7b-hf",
        "NousResearch/Llama-2-7b-chat-hf",
        "unsloth/llama-2-7b",
        "unsloth/llama-2-7b-chat",
    ),
    name="llama-2-7b",
    source=_hf("meta-llama/Llama-2-7b-hf"),
    block_size=4096,
    vocab_size=32000,
    n_layer=32,
    n_embd=4096,
    n_head=32,
    intermediate_size=11008,
    architecture="llama",
)
_add(
    (
        "meta-llama/Llama-2-13b-hf",
        "meta-llama/Llama-2-13b-chat-hf",
        "NousResearch/Llama-2-13b-hf",
        "NousResearch/Llama-2-13b-chat-hf",
    ),
    name="llama-2-13b",
    source=_hf("meta-llama/Llama-2-13b-hf"),
    block_size=4096,
    vocab_size=32000,
    n_layer=40,
    n_embd=5120,
    n_head=40,
    intermediate_size=13824,
    architecture="llama",
)

# --- Llama 3 ----------------------------------------------------------------------------------
_add(
    (
        "meta-llama/Meta-Llama-3-8B",
        "meta-llama/Meta-Llama-3-8B-Instruct",
        "NousResearch/Meta-Llama-3-8B",
        "NousResearch/Meta-Llama-3-8B-Instruct",
        "unsloth/llama-3-8b",
        "unsloth/llama-3-8b-Instruct",
    ),
    name="llama-3-8b",
    source=_hf("meta-llama/Meta-Llama-3-8B"),
    block_size=8192,
    vocab_size=128256,
    n_layer=32,
    n_embd=4096,
    n_head=32,
    n_query_groups=8,
    intermediate_size=14336,
    architecture="llama",
)
_add(
    (
        "meta-llama/Llama-3.2-3B",
        "meta-llama/Llama-3.2-3B-Instruct",
        "unsloth/Llama-3.2-3B",
        "unsloth/Llama-3.2-3B-Instruct",
    ),
    "max_position_embeddings is 131072 (RoPE scaled); lm_head is tied to the embedding.",
    name="llama-3.2-3b",
    source=_hf("meta-llama/Llama-3.2-3B"),
    block_size=131072,
    vocab_size=128256,
    n_layer=28,
    n_embd=3072,
    n_head=24,
    n_query_groups=8,
    head_size=128,
    intermediate_size=8192,
    tie_embeddings=True,
    architecture="llama",
)

# --- Mistral ----------------------------------------------------------------------------------
_add(
    ("mistralai/Mistral-7B-v0.1", "mistralai/Mistral-7B-Instruct-v0.1", "unsloth/mistral-7b"),
    "max_position_embeddings is 32768; attention uses a 4096-token sliding window.",
    name="mistral-7b-v0.1",
    source=_hf("mistralai/Mistral-7B-v0.1"),
    block_size=32768,
    vocab_size=32000,
    n_layer=32,
    n_embd=4096,
    n_head=32,
    n_query_groups=8,
    intermediate_size=14336,
    sliding_window_size=4096,
    architecture="mistral",
)
_add(
    ("unsloth/Mistral-7B-v0.2", "mistral-community/Mistral-7B-v0.2"),
    "v0.1's shape without the sliding window (rope_theta 1e6, 32768 positions); LitGPT's "
    "Mistral-7B-v0.2 (litgpt/config.py) is this checkpoint.",
    name="mistral-7b-v0.2",
    source=_hf("unsloth/Mistral-7B-v0.2"),
    block_size=32768,
    vocab_size=32000,
    n_layer=32,
    n_embd=4096,
    n_head=32,
    n_query_groups=8,
    intermediate_size=14336,
    architecture="mistral",
)

# --- Qwen -------------------------------------------------------------------------------------
_add(
    ("Qwen/Qwen1.5-7B", "Qwen/Qwen1.5-7B-Chat"),
    "len(tokenizer) is 151646 (151643 BPE tokens + 3 special); the embedding has 151936 rows.",
    name="qwen1.5-7b",
    source=_hf("Qwen/Qwen1.5-7B"),
    block_size=32768,
    vocab_size=151646,
    padded_vocab_size=151936,
    n_layer=32,
    n_embd=4096,
    n_head=32,
    intermediate_size=11008,
    attn_bias=True,
    architecture="qwen2",
)

# --- Gemma ------------------------------------------------------------------------------------
_add(
    ("google/gemma-2b", "google/gemma-2b-it", "unsloth/gemma-2b", "unsloth/gemma-2b-it"),
    "head_dim 256 with 8 heads: q/o projections are 2048 x 2048; one KV head (multi-query).",
    name="gemma-2b",
    source=_hf("google/gemma-2b"),
    block_size=8192,
    vocab_size=256000,
    n_layer=18,
    n_embd=2048,
    n_head=8,
    n_query_groups=1,
    head_size=256,
    intermediate_size=16384,
    mlp="geglu",
    tie_embeddings=True,
    architecture="gemma",
)
_add(
    ("google/gemma-7b", "google/gemma-7b-it", "unsloth/gemma-7b", "unsloth/gemma-7b-it"),
    "head_dim 256 with 16 heads: q/o projections are 3072 x 4096; 16 KV heads (no GQA).",
    name="gemma-7b",
    source=_hf("google/gemma-7b"),
    block_size=8192,
    vocab_size=256000,
    n_layer=28,
    n_embd=3072,
    n_head=16,
    n_query_groups=16,
    head_size=256,
    intermediate_size=24576,
    mlp="geglu",
    tie_embeddings=True,
    architecture="gemma",
)

# --- Phi --------------------------------------------------------------------------------------
_PHI_LAYOUT: dict[str, Any] = {
    "mlp": "gelu",
    "norm": "layernorm",
    "bias": True,
    "lm_head_bias": True,
    "parallel_residual": True,
    "shared_attention_norm": True,
}
_add(
    ("microsoft/phi-1_5",),
    "Phi-1.5 (same layout as phi-2: parallel residual, one shared LayerNorm, partial rotary). "
    "len(tokenizer) is 50295 (the CodeGen BPE + added tokens); the embedding has 51200 rows.",
    name="phi-1.5",
    source=_hf("microsoft/phi-1_5"),
    block_size=2048,
    vocab_size=50295,
    padded_vocab_size=51200,
    n_layer=24,
    n_embd=2048,
    n_head=32,
    intermediate_size=8192,
    **_PHI_LAYOUT,
    rotary_fraction=0.5,
    architecture="phi",
)
_add(
    ("microsoft/phi-2",),
    "len(tokenizer) is 50295 (50257 BPE + added tokens); the embedding has 51200 rows.",
    name="phi-2",
    source=_hf("microsoft/phi-2"),
    block_size=2048,
    vocab_size=50295,
    padded_vocab_size=51200,
    n_layer=32,
    n_embd=2560,
    n_head=32,
    intermediate_size=10240,
    **_PHI_LAYOUT,
    rotary_fraction=0.4,
    architecture="phi",
)


# --- Today's architectures ---------------------------------------------------------------------
# Shapes from each config.json (LitGPT's litgpt/config.py holds the same ones); parameter totals
# are checked against transformers on the meta device (tests/test_memory_params.py) and, where
# published, against benchmarks/reference/param-counts.csv.
_add(
    (
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-8B",
        "meta-llama/Meta-Llama-3.1-8B-Instruct",
        "NousResearch/Meta-Llama-3.1-8B",
        "NousResearch/Meta-Llama-3.1-8B-Instruct",
        "unsloth/Meta-Llama-3.1-8B",
        "unsloth/Meta-Llama-3.1-8B-Instruct",
    ),
    "Llama 3 8B's shape with a 131072-token context (RoPE scaled, factor 8).",
    name="llama-3.1-8b",
    source=_hf("meta-llama/Llama-3.1-8B"),
    block_size=131072,
    vocab_size=128256,
    n_layer=32,
    n_embd=4096,
    n_head=32,
    n_query_groups=8,
    intermediate_size=14336,
    architecture="llama",
)
_add(
    ("meta-llama/Llama-3.3-70B-Instruct", "unsloth/Llama-3.3-70B-Instruct"),
    "Llama 3.1 70B's shape: 80 layers, 8192 wide, 8 KV heads; 131072-token context (RoPE scaled).",
    name="llama-3.3-70b",
    source=_hf("meta-llama/Llama-3.3-70B-Instruct"),
    block_size=131072,
    vocab_size=128256,
    n_layer=80,
    n_embd=8192,
    n_head=64,
    n_query_groups=8,
    intermediate_size=28672,
    architecture="llama",
)
_add(
    ("microsoft/phi-4", "unsloth/phi-4"),
    "Phi3ForCausalLM (fused qkv_proj and gate_up_proj) with 40 heads, 10 KV heads, no sliding "
    "window; 100352 embedding rows.",
    name="phi-4",
    source=_hf("microsoft/phi-4"),
    block_size=16384,
    vocab_size=100352,
    n_layer=40,
    n_embd=5120,
    n_head=40,
    n_query_groups=10,
    intermediate_size=17920,
    architecture="phi3",
)
_add(
    (
        "meta-llama/Llama-3.2-1B",
        "meta-llama/Llama-3.2-1B-Instruct",
        "NousResearch/Llama-3.2-1B",
        "unsloth/Llama-3.2-1B",
        "unsloth/Llama-3.2-1B-Instruct",
    ),
    "head_dim 64; lm_head tied to the embedding; 131072-token context (RoPE scaled, factor 32).",
    name="llama-3.2-1b",
    source=_hf("meta-llama/Llama-3.2-1B"),
    block_size=131072,
    vocab_size=128256,
    n_layer=16,
    n_embd=2048,
    n_head=32,
    n_query_groups=8,
    intermediate_size=8192,
    tie_embeddings=True,
    architecture="llama",
)
_add(
    (
        "mistralai/Mistral-7B-v0.3",
        "mistralai/Mistral-7B-Instruct-v0.3",
        "unsloth/mistral-7b-v0.3",
        "unsloth/mistral-7b-instruct-v0.3",
    ),
    "v0.1's shape with a 32768-token vocabulary (v3 tokenizer) and no sliding window.",
    name="mistral-7b-v0.3",
    source=_hf("mistralai/Mistral-7B-v0.3"),
    block_size=32768,
    vocab_size=32768,
    n_layer=32,
    n_embd=4096,
    n_head=32,
    n_query_groups=8,
    intermediate_size=14336,
    architecture="mistral",
)
_QWEN25 = "len(tokenizer) is 151665 (151643 BPE + 22 special); the embedding has {rows} rows."
_add(
    ("Qwen/Qwen2.5-0.5B", "unsloth/Qwen2.5-0.5B"),
    _QWEN25.format(rows=151936) + " lm_head tied to the embedding.",
    name="qwen2.5-0.5b",
    source=_hf("Qwen/Qwen2.5-0.5B"),
    block_size=32768,
    vocab_size=151665,
    padded_vocab_size=151936,
    n_layer=24,
    n_embd=896,
    n_head=14,
    n_query_groups=2,
    intermediate_size=4864,
    attn_bias=True,
    tie_embeddings=True,
    architecture="qwen2",
)
_add(
    ("Qwen/Qwen2.5-1.5B", "unsloth/Qwen2.5-1.5B"),
    _QWEN25.format(rows=151936) + " lm_head tied to the embedding.",
    name="qwen2.5-1.5b",
    source=_hf("Qwen/Qwen2.5-1.5B"),
    block_size=131072,
    vocab_size=151665,
    padded_vocab_size=151936,
    n_layer=28,
    n_embd=1536,
    n_head=12,
    n_query_groups=2,
    intermediate_size=8960,
    attn_bias=True,
    tie_embeddings=True,
    architecture="qwen2",
)
_add(
    ("Qwen/Qwen2.5-7B", "unsloth/Qwen2.5-7B"),
    _QWEN25.format(rows=152064),
    name="qwen2.5-7b",
    source=_hf("Qwen/Qwen2.5-7B"),
    block_size=131072,
    vocab_size=151665,
    padded_vocab_size=152064,
    n_layer=28,
    n_embd=3584,
    n_head=28,
    n_query_groups=4,
    intermediate_size=18944,
    attn_bias=True,
    architecture="qwen2",
)
_QWEN3 = (
    "RMSNorm over each query and key head (q_norm, k_norm); no q/k/v bias. len(tokenizer) is "
    "151669 (151643 BPE + 26 special); the embedding has 151936 rows."
)
_add(
    ("Qwen/Qwen3-0.6B", "unsloth/Qwen3-0.6B"),
    _QWEN3 + " head_dim 128 with 16 heads: q_proj is 1024 -> 2048. lm_head tied.",
    name="qwen3-0.6b",
    source=_hf("Qwen/Qwen3-0.6B"),
    block_size=40960,
    vocab_size=151669,
    padded_vocab_size=151936,
    n_layer=28,
    n_embd=1024,
    n_head=16,
    n_query_groups=8,
    head_size=128,
    intermediate_size=3072,
    tie_embeddings=True,
    norm_qk=True,
    architecture="qwen3",
)
_add(
    ("Qwen/Qwen3-8B", "unsloth/Qwen3-8B"),
    _QWEN3,
    name="qwen3-8b",
    source=_hf("Qwen/Qwen3-8B"),
    block_size=40960,
    vocab_size=151669,
    padded_vocab_size=151936,
    n_layer=36,
    n_embd=4096,
    n_head=32,
    n_query_groups=8,
    intermediate_size=12288,
    norm_qk=True,
    architecture="qwen3",
)
_GEMMA2: dict[str, Any] = {
    "mlp": "geglu",
    "tie_embeddings": True,
    "post_attention_norm": True,
    "post_mlp_norm": True,
    "sliding_window_size": 4096,
    "sliding_window_pattern": 2,
    "attention_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "architecture": "gemma2",
}
_GEMMA2_NOTE = (
    "Four norms per layer (input, post-attention, pre- and post-feedforward); layers 0, 2, 4, "
    "... attend through a 4096-token sliding window, the others globally; attention scores "
    "soft-capped at 50, logits at 30; head_dim 256 (query_pre_attn_scalar 256)."
)
_add(
    ("google/gemma-2-2b", "google/gemma-2-2b-it", "unsloth/gemma-2-2b", "unsloth/gemma-2-2b-it"),
    _GEMMA2_NOTE,
    name="gemma-2-2b",
    source=_hf("google/gemma-2-2b"),
    block_size=8192,
    vocab_size=256000,
    n_layer=26,
    n_embd=2304,
    n_head=8,
    n_query_groups=4,
    head_size=256,
    intermediate_size=9216,
    **_GEMMA2,
)
_add(
    ("google/gemma-2-9b", "google/gemma-2-9b-it", "unsloth/gemma-2-9b", "unsloth/gemma-2-9b-it"),
    _GEMMA2_NOTE,
    name="gemma-2-9b",
    source=_hf("google/gemma-2-9b"),
    block_size=8192,
    vocab_size=256000,
    n_layer=42,
    n_embd=3584,
    n_head=16,
    n_query_groups=8,
    head_size=256,
    intermediate_size=14336,
    **_GEMMA2,
)
_add(
    ("microsoft/Phi-3-mini-4k-instruct", "unsloth/Phi-3-mini-4k-instruct"),
    "Fused qkv_proj (3072 -> 9216) and gate_up_proj (3072 -> 16384): LoRA targets those "
    "names. sliding_window 2047 in every layer (config.json; LitGPT rounds it to 2048). "
    "len(tokenizer) is 32011 (32000 SentencePiece + 11 added); the embedding has 32064 rows.",
    name="phi-3-mini-4k",
    source=_hf("microsoft/Phi-3-mini-4k-instruct"),
    block_size=4096,
    vocab_size=32011,
    padded_vocab_size=32064,
    n_layer=32,
    n_embd=3072,
    n_head=32,
    intermediate_size=8192,
    sliding_window_size=2047,
    architecture="phi3",
)
_SMOL = "Llama architecture; lm_head tied to the embedding; 49152-token BPE."
_add(
    ("HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    _SMOL + " 9 heads of 64 over a 576-wide stream, 3 KV heads.",
    name="smollm2-135m",
    source=_hf("HuggingFaceTB/SmolLM2-135M"),
    block_size=8192,
    vocab_size=49152,
    n_layer=30,
    n_embd=576,
    n_head=9,
    n_query_groups=3,
    intermediate_size=1536,
    tie_embeddings=True,
    architecture="llama",
)
_add(
    ("HuggingFaceTB/SmolLM2-360M", "HuggingFaceTB/SmolLM2-360M-Instruct"),
    _SMOL + " 15 heads of 64 over a 960-wide stream, 5 KV heads.",
    name="smollm2-360m",
    source=_hf("HuggingFaceTB/SmolLM2-360M"),
    block_size=8192,
    vocab_size=49152,
    n_layer=32,
    n_embd=960,
    n_head=15,
    n_query_groups=5,
    intermediate_size=2560,
    tie_embeddings=True,
    architecture="llama",
)
_add(
    ("HuggingFaceTB/SmolLM2-1.7B", "HuggingFaceTB/SmolLM2-1.7B-Instruct"),
    _SMOL + " Plain multi-head attention (32 KV heads).",
    name="smollm2-1.7b",
    source=_hf("HuggingFaceTB/SmolLM2-1.7B"),
    block_size=8192,
    vocab_size=49152,
    n_layer=24,
    n_embd=2048,
    n_head=32,
    intermediate_size=8192,
    tie_embeddings=True,
    architecture="llama",
)

# --- Recent families, read generically (hf_config: transformers builds them on the meta device)
# Shapes from each config.json (URL in source), cross-checked with LitGPT's litgpt/config.py
# (Lightning-AI/litgpt @ 26857050fe3f) where it has the model; counts checked in
# tests/test_models_recent.py.
_add(
    (
        "mistralai/Mixtral-8x7B-v0.1",
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "unsloth/Mixtral-8x7B-v0.1",
    ),
    "8 experts of width 14336 per layer, 2 per token (intermediate_size is what a token runs "
    "through: 2 x 14336); 46.7B parameters, 12.9B active. transformers 5 fuses the experts "
    "(MixtralExperts): PEFT adapts them through the names w1/w3/w2 and the router through gate.",
    name="mixtral-8x7b",
    source=_hf("mistralai/Mixtral-8x7B-v0.1"),
    n_embd=4096,
    n_head=32,
    n_layer=32,
    padded_vocab_size=32000,
    vocab_size=32000,
    block_size=32768,
    n_query_groups=8,
    intermediate_size=28672,
    n_expert=8,
    n_expert_per_token=2,
    architecture="mixtral",
    hf_config={
        "hidden_act": "silu",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "max_position_embeddings": 32768,
        "model_type": "mixtral",
        "num_attention_heads": 32,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.02,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "vocab_size": 32000,
    },
)
_add(
    (
        "mistral-community/Mixtral-8x22B-v0.1",
        "mistralai/Mixtral-8x22B-v0.1",
        "mistralai/Mixtral-8x22B-Instruct-v0.1",
        "HuggingFaceH4/zephyr-orpo-141b-A35b-v0.1",
    ),
    "8 experts of width 16384 per layer, 2 per token, 56 layers; 140.6B parameters, 39.2B "
    "active; the v3 tokenizer's 32768-token vocabulary (pair with tokenizer=mistral-v0.3). "
    "Zephyr-141B (HuggingFaceH4/zephyr-orpo-141b-A35b-v0.1) is this model ORPO-tuned. Shape from "
    "litgpt/config.py Mixtral-8x22B-v0.1 (Lightning-AI/litgpt @ 26857050fe3f, citing "
    "mistralai/Mixtral-8x22B-Instruct-v0.1's config.json).",
    name="mixtral-8x22b",
    source=_hf("mistralai/Mixtral-8x22B-v0.1"),
    n_embd=6144,
    n_head=48,
    n_layer=56,
    padded_vocab_size=32768,
    vocab_size=32768,
    block_size=65536,
    n_query_groups=8,
    intermediate_size=32768,
    n_expert=8,
    n_expert_per_token=2,
    architecture="mixtral",
    hf_config={
        "hidden_act": "silu",
        "hidden_size": 6144,
        "intermediate_size": 16384,
        "max_position_embeddings": 65536,
        "model_type": "mixtral",
        "num_attention_heads": 48,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 56,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "vocab_size": 32768,
    },
)
_add(
    ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-Base", "unsloth/Qwen3-30B-A3B"),
    "128 experts of width 768 per layer, 8 per token; 30.5B parameters, 3.3B active. PEFT adapts "
    "the fused experts through gate_proj+up_proj / down_proj and the router through gate.",
    name="qwen3-30b-a3b",
    source=_hf("Qwen/Qwen3-30B-A3B"),
    n_embd=2048,
    n_head=32,
    n_layer=48,
    padded_vocab_size=151936,
    vocab_size=151669,
    block_size=40960,
    n_query_groups=4,
    head_size=128,
    intermediate_size=6144,
    norm_qk=True,
    n_expert=128,
    n_expert_per_token=8,
    architecture="qwen3_moe",
    hf_config={
        "decoder_sparse_step": 1,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "max_position_embeddings": 40960,
        "mlp_only_layers": [],
        "model_type": "qwen3_moe",
        "moe_intermediate_size": 768,
        "norm_topk_prob": True,
        "num_attention_heads": 32,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 48,
        "num_key_value_heads": 4,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "vocab_size": 151936,
    },
)
_add(
    ("openai/gpt-oss-20b", "unsloth/gpt-oss-20b", "unsloth/gpt-oss-20b-BF16"),
    "32 experts of width 2880, 4 per token; layers 0, 2, 4, ... attend through a 128-token window;"
    " attention sinks; 20.9B parameters, 4.2B active (3.6B without the input embedding, as OpenAI "
    "counts). The released checkpoint stores experts in MXFP4; no target name reaches its fused "
    "experts in PEFT. len(tokenizer) 200019 (o200k_harmony: 199998 BPE tokens and 21 special, "
    "199998-200018) of 201088 embedding rows.",
    name="gpt-oss-20b",
    source=_hf("openai/gpt-oss-20b"),
    n_embd=2880,
    n_head=64,
    n_layer=24,
    padded_vocab_size=201088,
    vocab_size=200019,
    block_size=131072,
    n_query_groups=8,
    head_size=64,
    intermediate_size=11520,
    sliding_window_size=128,
    sliding_window_pattern=2,
    n_expert=32,
    n_expert_per_token=4,
    architecture="gpt_oss",
    hf_config={
        "attention_bias": True,
        "experts_per_token": 4,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "layer_types": [
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
        ],
        "max_position_embeddings": 131072,
        "model_type": "gpt_oss",
        "num_attention_heads": 64,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 24,
        "num_key_value_heads": 8,
        "num_local_experts": 32,
        "rms_norm_eps": 1e-05,
        "rope_theta": 150000,
        "router_aux_loss_coef": 0.9,
        "sliding_window": 128,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "vocab_size": 201088,
    },
)
_add(
    ("google/gemma-3-1b-it", "google/gemma-3-1b-pt", "unsloth/gemma-3-1b-it"),
    "Five local layers (512-token window) for every global one; q/k norms; four norms per layer; "
    "262k vocabulary, tied lm_head. Its tokenizer's <image_soft_token> (id 262144, len(tokenizer) "
    "262145) is one past the 262144 rows: a text that spells it crashes the embedding.",
    name="gemma-3-1b",
    source=_hf("google/gemma-3-1b-it"),
    n_embd=1152,
    n_head=4,
    n_layer=26,
    padded_vocab_size=262144,
    vocab_size=262144,
    block_size=32768,
    n_query_groups=1,
    head_size=256,
    intermediate_size=6912,
    mlp="geglu",
    tie_embeddings=True,
    norm_qk=True,
    post_attention_norm=True,
    post_mlp_norm=True,
    sliding_window_size=512,
    sliding_window_pattern=6,
    architecture="gemma3_text",
    hf_config={
        "head_dim": 256,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 1152,
        "intermediate_size": 6912,
        "max_position_embeddings": 32768,
        "model_type": "gemma3_text",
        "num_attention_heads": 4,
        "num_hidden_layers": 26,
        "num_key_value_heads": 1,
        "query_pre_attn_scalar": 256,
        "rope_local_base_freq": 10000,
        "rope_theta": 1000000,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
        "vocab_size": 262144,
    },
)
_add(
    ("google/gemma-3-4b-it", "google/gemma-3-4b-pt", "unsloth/gemma-3-4b-it"),
    "Gemma3ForConditionalGeneration: the language model under text_config and a SigLIP vision "
    "tower (counted: 4.3B parameters); five local layers (1024-token window) for every global one. "
    "len(tokenizer) 262145 (<image_soft_token> 262144 included) of 262208 rows: the conversion "
    "adds 64 rows.",
    name="gemma-3-4b",
    source=_hf("google/gemma-3-4b-it"),
    n_embd=2560,
    n_head=8,
    n_layer=34,
    padded_vocab_size=262208,
    vocab_size=262145,
    block_size=131072,
    n_query_groups=4,
    head_size=256,
    intermediate_size=10240,
    mlp="geglu",
    tie_embeddings=True,
    norm_qk=True,
    post_attention_norm=True,
    post_mlp_norm=True,
    sliding_window_size=1024,
    sliding_window_pattern=6,
    architecture="gemma3",
    hf_config={
        "boi_token_index": 255999,
        "eoi_token_index": 256000,
        "image_token_index": 262144,
        "mm_tokens_per_image": 256,
        "model_type": "gemma3",
        "text_config": {
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "model_type": "gemma3_text",
            "num_attention_heads": 8,
            "num_hidden_layers": 34,
            "num_key_value_heads": 4,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024,
        },
        "vision_config": {
            "hidden_size": 1152,
            "image_size": 896,
            "intermediate_size": 4304,
            "model_type": "siglip_vision_model",
            "num_attention_heads": 16,
            "num_hidden_layers": 27,
            "patch_size": 14,
            "vision_use_head": False,
        },
    },
)
_add(
    ("google/gemma-3-12b-it", "google/gemma-3-12b-pt", "unsloth/gemma-3-12b-it"),
    "Gemma3ForConditionalGeneration (language model and SigLIP vision tower, 12.2B parameters); "
    "five local layers (1024-token window) for every global one. len(tokenizer) 262145 of 262208 "
    "rows, as for gemma-3-4b.",
    name="gemma-3-12b",
    source=_hf("google/gemma-3-12b-it"),
    n_embd=3840,
    n_head=16,
    n_layer=48,
    padded_vocab_size=262208,
    vocab_size=262145,
    block_size=131072,
    n_query_groups=8,
    head_size=256,
    intermediate_size=15360,
    mlp="geglu",
    tie_embeddings=True,
    norm_qk=True,
    post_attention_norm=True,
    post_mlp_norm=True,
    sliding_window_size=1024,
    sliding_window_pattern=6,
    architecture="gemma3",
    hf_config={
        "boi_token_index": 255999,
        "eoi_token_index": 256000,
        "image_token_index": 262144,
        "mm_tokens_per_image": 256,
        "model_type": "gemma3",
        "text_config": {
            "hidden_size": 3840,
            "intermediate_size": 15360,
            "model_type": "gemma3_text",
            "num_attention_heads": 16,
            "num_hidden_layers": 48,
            "num_key_value_heads": 8,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024,
        },
        "vision_config": {
            "hidden_size": 1152,
            "image_size": 896,
            "intermediate_size": 4304,
            "model_type": "siglip_vision_model",
            "num_attention_heads": 16,
            "num_hidden_layers": 27,
            "patch_size": 14,
            "vision_use_head": False,
        },
    },
)
_add(
    ("HuggingFaceTB/SmolLM3-3B", "HuggingFaceTB/SmolLM3-3B-Base"),
    "Llama-like with GQA (4 KV heads); every 4th layer has no RoPE (no_rope_layer_interval); tied "
    "lm_head.",
    name="smollm3-3b",
    source=_hf("HuggingFaceTB/SmolLM3-3B"),
    n_embd=2048,
    n_head=16,
    n_layer=36,
    padded_vocab_size=128256,
    vocab_size=128256,
    block_size=65536,
    n_query_groups=4,
    intermediate_size=11008,
    tie_embeddings=True,
    architecture="smollm3",
    hf_config={
        "hidden_act": "silu",
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "max_position_embeddings": 65536,
        "model_type": "smollm3",
        "no_rope_layer_interval": 4,
        "num_attention_heads": 16,
        "num_hidden_layers": 36,
        "num_key_value_heads": 4,
        "rope_theta": 5000000.0,
        "tie_word_embeddings": True,
        "vocab_size": 128256,
    },
)
_add(
    ("allenai/OLMo-2-1124-7B", "allenai/OLMo-2-1124-7B-Instruct"),
    "Norms after attention and MLP (no input norms), q/k RMSNorm over the whole projection; "
    "len(tokenizer) 100278, 100352 embedding rows.",
    name="olmo-2-7b",
    source=_hf("allenai/OLMo-2-1124-7B"),
    n_embd=4096,
    n_head=32,
    n_layer=32,
    padded_vocab_size=100352,
    vocab_size=100278,
    block_size=4096,
    n_query_groups=32,
    intermediate_size=11008,
    norm_qk=True,
    architecture="olmo2",
    hf_config={
        "hidden_act": "silu",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "max_position_embeddings": 4096,
        "model_type": "olmo2",
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 32,
        "rms_norm_eps": 1e-06,
        "rope_theta": 500000,
        "tie_word_embeddings": False,
        "vocab_size": 100352,
    },
)


# --- conf/model/<name>.yaml, generated ----------------------------------------------------------
_SCHEMA_LINE = "# yaml-language-server: $schema=../../schemas/model.schema.json"
_GENERATED_LINE = "# Generated from cfgcheck/models/presets.py: edit there, then run the module."
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_.:/+-]*\Z")


def _scalar(value: Any) -> str:
    if isinstance(value, dict):  # hf_config: a YAML flow mapping
        items = (f"{json.dumps(k)}: {_flow(v)}" for k, v in sorted(value.items()))
        return "{" + ", ".join(items) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    plain = _PLAIN.match(text) and text.lower() not in {"true", "false", "null", "yes", "no"}
    return text if plain else json.dumps(text)


def _flow(value: Any) -> str:
    """JSON, except floats as YAML 1.1 reads them (``1.0e-05``: a dot and a signed exponent)."""
    if isinstance(value, dict):
        return _scalar(value)
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, float):
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exp = text.split("e")
            text = f"{mantissa}.0e{exp if exp[0] in '+-' else '+' + exp}"
        return text
    return json.dumps(value)


def _comment(text: str, width: int = 98) -> list[str]:
    lines: list[str] = []
    line = "#"
    for word in text.split():
        if len(line) + 1 + len(word) > width and line != "#":
            lines.append(line)
            line = "#"
        line += " " + word
    return [*lines, line] if line != "#" else lines


def render_yaml(preset: Preset) -> str:
    """The ``conf/model/<name>.yaml`` text of a preset (flat scalars; notes as comments)."""
    body = [f"{key}: {_scalar(value)}" for key, value in preset.config.items()]
    note = preset_note(preset.name)
    tail = _comment(note) if note else []
    tail += _comment("Hub ids with this shape: " + ", ".join(preset.hub_ids))
    return "\n".join([_SCHEMA_LINE, _GENERATED_LINE, *body, *tail]) + "\n"


def write_conf(directory: Path) -> list[Path]:
    """Write every preset's YAML file into ``directory``; returns the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for preset in all_presets():
        path = directory / f"{preset.name}.yaml"
        path.write_text(render_yaml(preset), encoding="utf-8")
        written.append(path)
    return written


def _main(argv: list[str]) -> int:
    usage = "usage: python -m cfgcheck.models.presets CONF_MODEL_DIR"
    if len(argv) == 1 and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print(usage, file=sys.stderr)
        return 2
    for path in write_conf(Path(argv[0])):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
