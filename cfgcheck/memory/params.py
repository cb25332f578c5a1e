"""Exact parameter counts from a model shape (no torch, no weights), and LoRA's share.

The layout follows the decoder blocks of transformers and LitGPT (the linears of each
architecture, by their real names, are in :mod:`cfgcheck.memory.modules`): per layer the
attention projections (separate q/k/v/o, or Phi-3's fused qkv_proj: the same count), a gated
(SwiGLU/GeGLU: gate, up, down; Phi-3's fused gate_up_proj) or plain (GELU: fc1, fc2) MLP and
one or two norms, plus Qwen3's per-head q/k norms (``norm_qk``: two ``head_size``-wide norms)
and Gemma 2's post-attention / post-MLP norms; then a final norm, the embedding, GPT-2's
learned position embedding and the lm_head (absent when tied). A norm is a weight (RMSNorm)
or a weight and a bias (LayerNorm). Soft-capping and sliding windows have no parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory.modules import (
    LINEAR,
    Linear,
    architecture_of,
    block_linears,
    matches,
    module_tree,
)
from cfgcheck.schema.model import ModelConfig

__all__ = ["Linear", "ParamCount", "block_linears", "count_params", "lora_params"]

# LitGPT's LoRA switches (litgpt/lora.py, the booleans ``Config.lora_query`` ... ``lora_head``)
# and the llama names each switch adapts: with ``trainer.framework=litgpt`` targets name switches.
LITGPT_SWITCHES: dict[str, tuple[str, ...]] = {
    "query": ("q_proj",),
    "key": ("k_proj",),
    "value": ("v_proj",),
    "projection": ("o_proj",),
    "mlp": ("gate_proj", "up_proj", "down_proj"),
    "head": ("lm_head",),
}

# Aliases of the llama names, for a shape whose architecture cfgcheck does not know (module
# names cannot be checked there): LitGPT / GPT-NeoX / Phi spellings of the same projections.
TARGET_ALIASES: dict[str, str] = {
    "q": "q_proj",
    "k": "k_proj",
    "v": "v_proj",
    "o": "o_proj",
    "proj": "o_proj",
    "dense": "o_proj",
    "fc1": "up_proj",
    "fc_1": "gate_proj",
    "fc_2": "up_proj",
    "fc2": "down_proj",
    "mlp.proj": "down_proj",
}


def norm_params(m: ModelConfig, width: int | None = None) -> int:
    """Parameters of one norm over ``width`` (default: hidden) features: a weight, plus a bias
    for LayerNorm."""
    return (width or m.n_embd) * (2 if m.norm == "layernorm" else 1)


def norms_per_block(m: ModelConfig) -> int:
    """Hidden-wide norms of one block: input norm(s) plus Gemma 2's post norms."""
    base = 1 if m.shared_attention_norm else 2
    return base + int(m.post_attention_norm) + int(m.post_mlp_norm)


def block_norm_params(m: ModelConfig) -> int:
    """All norm parameters of one block (Qwen3's head_size-wide q/k norms included)."""
    qk = 2 * norm_params(m, m.head_dim) if m.norm_qk else 0
    return norms_per_block(m) * norm_params(m) + qk


@dataclass(frozen=True)
class ParamCount:
    """Parameters by place; ``total`` is what ``sum(p.numel() for p in model.parameters())``
    returns for the transformers model of the same shape."""

    embedding: int
    lm_head: int
    block_linear: int
    block_linear_weight_elems: int
    block_norms: int
    final_norm: int
    n_layer: int
    position_embedding: int = 0  # GPT-2's learned positions (wpe); RoPE models have none

    @property
    def per_block(self) -> int:
        return self.block_linear + self.block_norms

    @property
    def blocks(self) -> int:
        return self.per_block * self.n_layer

    @property
    def total(self) -> int:
        embeddings = self.embedding + self.position_embedding
        return embeddings + self.lm_head + self.blocks + self.final_norm

    @property
    def linear_weights(self) -> int:
        """Elements of the block linear weight matrices (what 4/8-bit quantization stores)."""
        return self.block_linear_weight_elems * self.n_layer

    @property
    def unquantized(self) -> int:
        """Parameters that stay in the compute dtype when the block linears are quantized:
        embeddings, lm_head, norms and biases."""
        return self.total - self.linear_weights


def count_params(m: ModelConfig) -> ParamCount:
    """Exact parameter count of a model shape."""
    linears = block_linears(m)
    head = 0 if m.tie_embeddings else m.rows * m.n_embd + (m.rows if m.lm_head_bias else 0)
    positions = m.block_size * m.n_embd if architecture_of(m) == "gpt2" else 0
    return ParamCount(
        embedding=m.rows * m.n_embd,
        lm_head=head,
        block_linear=sum(x.params for x in linears),
        block_linear_weight_elems=sum(x.in_features * x.out_features for x in linears),
        block_norms=block_norm_params(m),
        final_norm=norm_params(m),
        n_layer=m.n_layer,
        position_embedding=positions,
    )


ALL_LINEAR = "all-linear"


def canonical_target(name: str) -> str:
    """``q`` / ``fc2`` / ``q_proj`` -> the llama name (``q_proj``) of an alias."""
    return TARGET_ALIASES.get(name, name)


@dataclass(frozen=True)
class Adapted:
    """What a LoRA target list adapts: each block linear with the number of layers in which
    it gets an adapter, and whether the lm_head / the token embedding get one."""

    linears: tuple[tuple[Linear, int], ...]
    lm_head: bool
    embedding: bool

    @property
    def names(self) -> frozenset[str]:
        """Names of the block linears adapted in at least one layer (plus ``lm_head``)."""
        names = {x.name for x, n in self.linears if n}
        return frozenset(names | ({"lm_head"} if self.lm_head else set()))


def _by_roles(m: ModelConfig, targets: list[str], litgpt: bool) -> Adapted:
    """LitGPT switches, or llama names and aliases for a shape of unknown architecture."""
    roles: set[str] = set()
    for t in targets:
        name = t.removeprefix("lora_") if litgpt else t
        roles.update(LITGPT_SWITCHES.get(name, (canonical_target(name),)) if litgpt else ())
        roles.add(canonical_target(name))
    if ALL_LINEAR in targets:
        roles.update(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
    picked = tuple((x, m.n_layer if roles & {x.name, *x.roles} else 0) for x in block_linears(m))
    return Adapted(picked, "lm_head" in roles, "embed_tokens" in roles)


def adapted_modules(m: ModelConfig, targets: list[str], framework: str = "hf") -> Adapted:
    """The modules ``trainer.lora.targets`` adapts, as the framework resolves the names.

    ``hf`` (PEFT): an entry matches a module whose path equals it or ends with ``"." +`` it
    (:func:`cfgcheck.memory.modules.matches`); ``[all-linear]`` adapts every block linear and
    not the lm_head (PEFT's ``_maybe_include_all_linear_layers`` drops the output embedding).
    ``litgpt``: entries are LoRA switches (``query`` ... ``head``, see ``LITGPT_SWITCHES``) or
    the llama names they stand for. A shape of unknown architecture: llama names and aliases.
    """
    tree = module_tree(m) if framework == "hf" else None
    if tree is None:
        return _by_roles(m, targets, litgpt=framework == "litgpt")
    linears = block_linears(m)
    if targets == [ALL_LINEAR]:
        return Adapted(tuple((x, m.n_layer) for x in linears), False, False)
    layers = "transformer.h" if architecture_of(m) == "gpt2" else "model.layers"
    counts = []
    for x in linears:
        paths = [f"{layers}.{i}.{x.path}" for i in range(m.n_layer)]
        counts.append((x, sum(any(matches(p, t) for t in targets) for p in paths)))
    embed = [p for p, kind in tree.items() if kind != LINEAR and p.endswith(("wte", "tokens"))]
    return Adapted(
        tuple(counts),
        any(matches("lm_head", t) for t in targets),
        any(matches(p, t) for p in embed for t in targets),
    )


def lora_params(m: ModelConfig, rank: int, targets: list[str], framework: str = "hf") -> int:
    """Trainable LoRA parameters: ``rank * (in + out)`` per adapted linear (a fused projection
    gets one adapter), the lm_head and the token embedding included when targeted."""
    adapted = adapted_modules(m, targets, framework)
    total = sum(rank * (x.in_features + x.out_features) * n for x, n in adapted.linears)
    if adapted.lm_head:
        total += rank * (m.n_embd + m.rows)
    if adapted.embedding:
        total += rank * (m.n_embd + m.rows)
    return total
