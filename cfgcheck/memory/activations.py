"""Activation memory: the tensors autograd saves for backward, per transformer layer.

Starts from Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", sbh(34 + 5as/h) bytes per layer in 16-bit) and replaces its fixed coefficients with
the tensors PyTorch actually keeps, for the layout of the model:

* GQA: k and v are ``n_query_groups * head_size`` wide; eager attention and sdpa with a
  padding mask (transformers' ``repeat_kv``) save them expanded to ``n_head`` heads; flash and
  unmasked sdpa (``enable_gqa``) do not.
* sdpa with a padding mask: torch converts transformers' boolean (batch, 1, s, s) mask to the
  compute dtype in every layer and the kernel keeps it.
* SwiGLU/GeGLU keep three ``intermediate_size`` tensors (gate, activation, up), GELU one.
* RMSNorm in 16-bit keeps an fp32 copy of its input (4 bytes x hidden); LayerNorm keeps its
  input and two fp32 statistics per token.
* eager attention keeps the s x s softmax output in fp32 and its 16-bit copy per head;
  sdpa/flash keep only q, k, v, the output and a log-sum-exp per head and token (their output
  is laid out as (batch, seq, heads, dim), so it is also the o_proj input, not a copy).
* A frozen linear keeps nothing of its input (autograd saves ``x`` only when the weight needs
  a gradient); a trained or bitsandbytes-quantized one keeps its input.
* LoRA adapters keep their dropout mask (1 byte) and dropped-out input, and the rank-r output.
* Gradient checkpointing keeps each layer's input and recomputes one layer at a time.
No dropout outside LoRA (the presets' models use none).
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory.params import adapted_modules, block_linears
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

QUANTIZED = ("int8", "nf4", "nf4-dq", "fp4")


def act_bytes(t: TrainerConfig) -> int:
    """Bytes per activation element: fp32 only for ``32-true``."""
    return 4 if t.precision == "32-true" else 2


@dataclass(frozen=True)
class LayerActivations:
    """Bytes one layer keeps for ``tokens`` tokens of sequences of length ``seq``."""

    per_token: int
    attention_scores: int  # eager / masked sdpa: bytes per (token x key position)

    def bytes(self, tokens: int, seq: int) -> int:
        return tokens * (self.per_token + self.attention_scores * seq)


def _norm_bytes(m: ModelConfig, p: int, weight_trained: bool) -> int:
    """What one norm keeps per token: its input (fp32 copy for RMSNorm) and, when its weight
    trains, the normalized tensor that multiplies the weight."""
    h = m.n_embd
    if m.norm == "layernorm":
        return p * h + 8
    return 4 * h + 4 + (p * h if weight_trained else 0)


def layer_activations(m: ModelConfig, t: TrainerConfig, masked: bool = True) -> LayerActivations:
    """Saved-for-backward bytes of one transformer block, without checkpointing.

    ``masked``: batches are padded, so transformers passes sdpa an attention mask.
    """
    p = act_bytes(t)
    h, a, kv, d, inter = m.n_embd, m.n_head, m.kv_heads, m.head_dim, m.mlp_width
    full = t.finetuning == "full"
    quantized = t.quantization in QUANTIZED and not full
    adapted = frozenset() if full else adapted_modules(m, t.lora.targets, t.framework).names
    rank = t.lora.rank or 0
    dropout = t.lora.dropout > 0
    sizes = {"attn_in": h, "attn_out": a * d, "mlp_in": h, "mlp_act": inter}
    saved: set[str] = set()
    total = 0
    for lin in block_linears(m):
        if full or quantized:
            saved.add(lin.source)
        if lin.name in adapted and rank:
            if dropout:
                total += (1 + p) * lin.in_features  # mask + dropped-out input
            else:
                saved.add(lin.source)
            total += p * rank  # lora_A output, saved by lora_B
    if t.attention != "eager":
        saved.discard("attn_out")  # the kernel's output, counted below, is the o_proj input
    total += sum(p * sizes[s] for s in saved)
    # norms
    total += _norm_bytes(m, p, full) * (1 if m.shared_attention_norm else 2)
    # attention core
    expanded = t.attention == "eager" or (t.attention == "sdpa" and masked)
    kv_width = a * d if expanded else kv * d
    total += p * a * d + 2 * p * kv_width  # q, k (after RoPE), v
    scores = 0
    if t.attention == "eager":
        scores = a * (4 + (p if p == 2 else 0))  # fp32 softmax output + its 16-bit copy
    else:
        total += p * a * d + 4 * a  # kernel output + log-sum-exp
        if t.attention == "sdpa" and masked:
            scores = p  # the mask in the compute dtype, broadcast over heads
    # MLP
    total += p * inter * (3 if m.mlp in ("swiglu", "geglu") else 1)
    return LayerActivations(per_token=total, attention_scores=scores)


def head_activations(m: ModelConfig, t: TrainerConfig) -> int:
    """Per-token bytes kept around the lm_head: the final norm and, when the lm_head trains,
    its input."""
    p = act_bytes(t)
    trained_head = t.finetuning == "full" or adapted_modules(m, t.lora.targets, t.framework).lm_head
    return _norm_bytes(m, p, t.finetuning == "full") + (p * m.n_embd if trained_head else 0)


def activation_bytes(
    m: ModelConfig, t: TrainerConfig, batch: int, seq: int, masked: bool = True
) -> int:
    """Activations kept at the end of the forward pass of one micro-batch."""
    tokens = batch * seq
    layer = layer_activations(m, t, masked).bytes(tokens, seq)
    head = head_activations(m, t) * tokens
    if t.gradient_checkpointing:
        # each layer's input, plus one layer recomputed during backward
        return m.n_layer * act_bytes(t) * m.n_embd * tokens + layer + head
    return m.n_layer * layer + head


def logits_bytes(m: ModelConfig, t: TrainerConfig, batch: int, seq: int) -> int:
    """Peak bytes of logits and loss.

    ``none`` (transformers): the logits in the compute dtype held by the model output, and at
    the start of backward the fp32 log-probabilities, the dense fp32 gradient of the NLL and
    the fp32 gradient of the upcast logits: ``p + 12`` bytes per token and vocab row.
    ``chunked`` (LitGPT): every chunk's logits and log-probabilities in the compute dtype,
    no upcast: ``2p``. ``fused``: one 1024-token chunk of fp32 logits and their gradient.
    """
    p = act_bytes(t)
    tokens = batch * seq
    v = m.rows
    if t.loss_chunking == "fused":
        return 8 * v * min(tokens, 1024)
    if t.loss_chunking == "chunked":
        return 2 * p * v * tokens
    return (p + 12) * v * tokens
