"""Eager attention's backward: the moment a layer's backward reaches the softmax.

transformers' ``eager_attention_forward`` (models/llama/modeling_llama.py, the same in the
Llama-like families; models/deepseek_v3/modeling_deepseek_v3.py l.237-259 and deepseek_v2's for
MLA, cfgcheck/memory/mla.py)::

    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    attn_weights = attn_weights + causal_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=self.training)
    attn_output = torch.matmul(attn_weights, value_states)

Its backward runs after the output projection's, the second norm's and the MLP's (and a
mixture-of-experts' router and experts'), which have released what they kept. In order:

* the ``matmul`` with v (``bmm`` once ``torch.matmul`` folds batch and heads) makes the
  gradient of the probabilities (score-sized, compute dtype) and of v (``n_head x head_dim``
  per token, v's width for MLA), and releases the 16-bit probabilities and v it kept; v's
  gradient waits for k's (``repeat_kv``'s backward, MLA's ``kv_b_proj``) and stays alive;
* ``ToCopyBackward`` of ``.to(query.dtype)`` casts the gradient to fp32 (the 16-bit one is
  freed);
* the softmax's backward (``_softmax_backward_data``) makes the scores' gradient while its
  kept output and the output's gradient are alive: **three score-sized tensors in the
  softmax's dtype**, against the softmax output and its 16-bit copy the forward kept. torch
  runs ``softmax(x, dim, dtype=torch.float32)`` of a bf16 ``x`` as ``x.toType(float32)`` then
  an fp32 ``_softmax`` (aten/src/ATen/native/SoftMax.cpp ``softmax(input_, dim_, dtype)``:
  the fused ``half_to_float`` kernel is taken for a CUDA **Half** input only), so the CPU trace
  and CUDA keep the same fp32 tensors; its backward is fp32, cast back after. The dropout
  (``attention_dropout`` 0.0 in the configs cfgcheck reads) returns its input.

What the later steps hold (the scores' 16-bit gradient, the scaling's, ``q @ k``'s gradients)
is smaller. CPU-traced (tests/test_memory_attention_backward.py, tests/test_memory_tracer_moe.py
``test_mla_step_matches_the_trace``): without this moment a tiny Llama at 256 tokens was
8.6-23.6 % under the trace with checkpointing and 2.5-15 % without, DeepSeek-V2/V3 11-19 %
and up to 6.5 %; now within -1.6 % to +2.4 %.
"""

from __future__ import annotations

from cfgcheck.memory import activations as act
from cfgcheck.memory import gpt_oss
from cfgcheck.memory import mla as latent
from cfgcheck.memory.stack import attention, stack
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig


def applies(m: ModelConfig, t: TrainerConfig) -> bool:
    """Eager attention as transformers runs it (gpt-oss's, with its sinks, is gpt_oss.py's)."""
    return (
        stack(m, t).framework == "hf" and attention(m, t) == "eager" and not gpt_oss.is_gpt_oss(m)
    )


def moment_bytes(m: ModelConfig, t: TrainerConfig, batch: int, seq: int, masked: bool) -> int:
    """One layer's bytes at its softmax's backward (see the module doc): what the layer still
    keeps (:func:`activations.layer_activations` ``upto_softmax``), the two score-sized
    gradients in the softmax's dtype, v's gradient and the residual stream's gradient, which
    flows past the block and waits for the attention's input gradient."""
    s = stack(m, t)
    tokens = batch * seq
    softmax = 4 if act.softmax_in_fp32(m, s) else s.act
    x = latent.mla(m)
    v_width = m.n_head * (x.v if x else m.head_dim)
    kept = act.layer_activations(m, t, masked, upto_softmax=True).bytes(tokens, seq)
    per_token = 2 * softmax * m.n_head * seq + s.act * v_width + s.residual * m.n_embd
    return kept + per_token * tokens


def recompute_extra(
    m: ModelConfig, t: TrainerConfig, batch: int, seq: int, masked: bool
) -> int | None:
    """Gradient checkpointing: the recomputed layer at its softmax's backward, beyond its saved
    tensors (:func:`activations.layer_activations`): negative when the MLP's released tensors
    outweigh the softmax's gradients. The block's first norm's saved input is the checkpoint
    itself where no copy is made (:func:`activations.checkpoint_norm_input`). None: no eager
    attention."""
    if not applies(m, t) or not t.gradient_checkpointing:
        return None
    tokens = batch * seq
    layer = act.layer_activations(m, t, masked).bytes(tokens, seq)
    moment = moment_bytes(m, t, batch, seq, masked)
    return moment - layer - act.checkpoint_norm_input(m, t) * tokens


def last_layer_extra(m: ModelConfig, t: TrainerConfig, batch: int, seq: int, masked: bool) -> int:
    """Without checkpointing: the last layer at its softmax's backward, beyond the activations
    of the end of the forward (every layer's saved tensors and the head's, which the final
    norm's and a trained lm_head's backward have released by then); 0 without eager
    attention. The last layer is a mixture-of-experts layer unless DeepSeek's dense layers
    (``first_k_dense_replace``) are all of them."""
    if not applies(m, t) or t.gradient_checkpointing:
        return 0
    tokens = batch * seq
    layer = act.layer_activations(m, t, masked).bytes(tokens, seq)
    if latent.dense_layers(m) >= m.n_layer:
        layer -= act.dense_layer_saving(m, t) * tokens
    moment = moment_bytes(m, t, batch, seq, masked)
    return max(0, moment - layer - act.head_activations(m, t) * tokens)
