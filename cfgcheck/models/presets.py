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

# --- conf/model/<name>.yaml, generated ----------------------------------------------------------
_SCHEMA_LINE = "# yaml-language-server: $schema=../../schemas/model.schema.json"
_GENERATED_LINE = "# Generated from cfgcheck/models/presets.py: edit there, then run the module."
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_.:/+-]*\Z")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    plain = _PLAIN.match(text) and text.lower() not in {"true", "false", "null", "yes", "no"}
    return text if plain else json.dumps(text)


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
