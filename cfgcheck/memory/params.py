"""Exact parameter counts from a model shape (no torch, no weights).

The layout follows the Llama / Mistral / Qwen2 / Gemma / Phi decoder blocks of transformers
and LitGPT: per layer q/k/v/o attention projections, a gated (SwiGLU/GeGLU: gate, up, down)
or plain (GELU: fc1, fc2) MLP and one or two norms; then a final norm, the embedding and the
lm_head (absent when tied). A norm is a weight (RMSNorm) or a weight and a bias (LayerNorm).
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.schema.model import ModelConfig

# LoRA target names accepted in trainer.lora.targets, with their LitGPT / GPT-NeoX aliases.
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


@dataclass(frozen=True)
class Linear:
    """One linear layer of a transformer block: ``out_features x in_features`` (+ bias)."""

    name: str
    in_features: int
    out_features: int
    bias: bool
    # Which activation feeds it: "attn_in" (attention norm output), "attn_out" (attention
    # output), "mlp_in" (MLP norm output), "mlp_act" (MLP hidden after the activation).
    source: str

    @property
    def params(self) -> int:
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)


def block_linears(m: ModelConfig) -> list[Linear]:
    """The linear layers of one transformer block, in forward order."""
    h, q_out, kv_out, inter = m.n_embd, m.n_head * m.head_dim, m.kv_heads * m.head_dim, m.mlp_width
    qkv_bias = m.bias or m.attn_bias
    mlp_src = "attn_in" if m.shared_attention_norm else "mlp_in"
    layers = [
        Linear("q_proj", h, q_out, qkv_bias, "attn_in"),
        Linear("k_proj", h, kv_out, qkv_bias, "attn_in"),
        Linear("v_proj", h, kv_out, qkv_bias, "attn_in"),
        Linear("o_proj", q_out, h, m.bias, "attn_out"),
    ]
    if m.mlp == "gelu":
        layers += [
            Linear("up_proj", h, inter, m.bias, mlp_src),
            Linear("down_proj", inter, h, m.bias, "mlp_act"),
        ]
    else:
        layers += [
            Linear("gate_proj", h, inter, m.bias, mlp_src),
            Linear("up_proj", h, inter, m.bias, mlp_src),
            Linear("down_proj", inter, h, m.bias, "mlp_act"),
        ]
    return layers


def norm_params(m: ModelConfig) -> int:
    """Parameters of one norm: a weight, plus a bias for LayerNorm."""
    return m.n_embd * (2 if m.norm == "layernorm" else 1)


def norms_per_block(m: ModelConfig) -> int:
    return 1 if m.shared_attention_norm else 2


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

    @property
    def per_block(self) -> int:
        return self.block_linear + self.block_norms

    @property
    def blocks(self) -> int:
        return self.per_block * self.n_layer

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.blocks + self.final_norm

    @property
    def linear_weights(self) -> int:
        """Elements of the block linear weight matrices (what 4/8-bit quantization stores)."""
        return self.block_linear_weight_elems * self.n_layer

    @property
    def unquantized(self) -> int:
        """Parameters that stay in the compute dtype when the block linears are quantized:
        embedding, lm_head, norms and biases."""
        return self.total - self.linear_weights


def count_params(m: ModelConfig) -> ParamCount:
    """Exact parameter count of a model shape."""
    linears = block_linears(m)
    head = 0 if m.tie_embeddings else m.rows * m.n_embd + (m.rows if m.lm_head_bias else 0)
    return ParamCount(
        embedding=m.rows * m.n_embd,
        lm_head=head,
        block_linear=sum(x.params for x in linears),
        block_linear_weight_elems=sum(x.in_features * x.out_features for x in linears),
        block_norms=norms_per_block(m) * norm_params(m),
        final_norm=norm_params(m),
        n_layer=m.n_layer,
    )


def canonical_target(name: str) -> str:
    """``q`` / ``fc2`` / ``q_proj`` -> the canonical transformers name (``q_proj``)."""
    return TARGET_ALIASES.get(name, name)


def lora_params(m: ModelConfig, rank: int, targets: list[str]) -> int:
    """Trainable LoRA parameters: ``rank * (in + out)`` per adapted linear, ``lm_head`` included
    when targeted."""
    wanted = {canonical_target(t) for t in targets}
    per_block = sum(
        rank * (x.in_features + x.out_features) for x in block_linears(m) if x.name in wanted
    )
    head = rank * (m.n_embd + m.rows) if "lm_head" in wanted else 0
    return per_block * m.n_layer + head
