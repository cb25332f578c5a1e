"""gpt-oss's own tensors, as transformers 5 trains it (models/gpt_oss/modeling_gpt_oss.py, 5.24;
line numbers of that file):

* Attention sinks, eager (``eager_attention_forward``, l.227-256; transformers has no sdpa path,
  ``_supports_sdpa = False`` l.380): the scores are concatenated with one learned sink logit per
  head (``torch.cat([attn_weights, sinks])``), shifted by their row maximum (``max(dim=-1)``
  keeps its int64 indices, one per head and query) and softmaxed **in their own dtype**
  (``softmax(..., dtype=combined_logits.dtype)``), not fp32 as the Llama-like eager path; the
  sink column is dropped by a view (``probs[..., :-1]``), so the matmul with v keeps the
  softmax output itself: ``n_head x (seq + 1)`` elements per query in the scores' dtype. Under
  autocast the fp32 sinks promote the concatenation to fp32 and the matmul keeps its 16-bit
  cast as well. The sliding layers (``sliding_window`` on ``layer_types``) differ only by the
  mask.
  While the softmax runs, the masked scores (``attn_weights + attention_mask``) and the shifted
  logits (``combined_logits - max``) are still held by the function's locals: a forward moment
  of the last layer (:func:`attention_forward_bytes`), with the model's masks (the sliding and
  the full one, in the model's dtype) alive since ``GptOssModel.forward`` built them.
* The clamped SwiGLU of the experts (``GptOssExperts._apply_gate``, l.82-88, which
  ``integrations/moe.py`` ``grouped_mm_experts_forward`` calls between the two grouped
  linears): ``gate.clamp(max=limit)`` and ``up.clamp(-limit, limit)`` keep the interleaved
  gate/up output (two expert widths, the slices ``[..., ::2]`` / ``[..., 1::2]`` are views),
  ``gate * sigmoid(gate * alpha)`` keeps the clamped gate and the sigmoid output, ``(up + 1) *
  glu`` keeps ``up + 1`` and ``glu``: six expert widths per routed token (the Llama-like SwiGLU
  keeps three); the down projection's input (the product) is kept when the experts train.
* The router (``GptOssTopKRouter.forward``, l.126-131): ``topk`` of the logits keeps its int64
  indices and the softmax runs over the top-k values only, in the logits' dtype (kept, top_k
  wide); no softmax over every expert.

* The recomputed layer under gradient checkpointing (:func:`recompute_bytes`). The experts
  have biases, and ``integrations/moe.py`` ``grouped_mm_experts_forward`` (l.424-520) gathers
  them per routed token into a local, ``selected_biases = self.gate_up_proj_bias[expert_ids_g]``
  (l.480), which ``_grouped_linear`` adds in place and nothing saves; the local lives until it
  is reassigned to the down projection's gather (l.508). So the recomputation's largest moment
  is inside the experts, not in the layer's backward: at the clamped SwiGLU's last product,
  the gate/up bias gather (two expert widths per routed token) and the clamped ``up`` (a local
  of ``_apply_gate``, one width) are alive beside what the layer saves so far; a moment later,
  at the down projection's bias gather (hidden wide), the clamped ``up`` is gone. What no
  linear saves is alive as a local too: the product (the down projection's input, saved only
  when ``down_proj`` trains), the routed copies (``hidden_states[perm // num_top_k]``, saved
  only when ``gate_up_proj`` trains) and the MoE input (saved only when the router trains).
  The expanded incoming gradient (``sum(dim=1)``'s backward, top_k hidden-wide rows) is alive
  where the down projection's output, which the routing-weight product saves, is not made yet.
  The layer's backward peaks lower (the index backward's ``new_zeros`` and ``index_put`` of
  the weighted outputs beside the expanded gradient), unless the experts are much narrower
  than the hidden size. Under PEFT's ``ParamWrapper`` on ``down_proj`` its delta-merged weight
  (counted with the layer's saved tensors) is made only when the experts read it
  (``selected_weights = self.down_proj``, l.507), after the SwiGLU.
  The other candidate is the recomputed attention's softmax (:func:`recompute_attention_bytes`):
  the masked scores and the shifted logits (the forward moment above, the masks being layer
  inputs already counted), with the incoming gradient expanded to the experts alive and
  nothing after the attention saved yet; the RoPE outputs are locals there (k when
  ``repeat_kv`` copies it; under autocast q, k and the expanded k are fp32, the cos / sin being
  fp32, and the matmul saves their 16-bit casts). With real sizes (64 heads, thousands of
  tokens) that moment is the larger one; on the tiny traced model it is under autocast (fp32
  scores). CPU-traced step by step (tests/test_memory_tracer_moe.py); counting the SwiGLU's
  backward (three expert widths of gradients) on top of the dispatch instead was 4 % to 8 %
  over with LoRA on the experts, 3 % to 4 % under with LoRA on q/v under autocast.

The MXFP4 experts do not train quantized (quantizers/quantizer_mxfp4.py ``is_trainable`` is
False and asks for ``Mxfp4Config(dequantize=True)``, as the TRL / OpenAI fine-tuning recipe
passes; without triton and the ``kernels`` package, and on CPU without ``use_kernels``, the
quantizer dequantizes to bf16 itself): training runs bf16 experts, which these terms count
(weights.py for their storage).
"""

from __future__ import annotations

from cfgcheck.memory.stack import Stack
from cfgcheck.schema.model import ModelConfig

# expert-width tensors one routed token keeps in the clamped SwiGLU (frozen experts)
ROUTED_SAVED = 6


def is_gpt_oss(m: ModelConfig) -> bool:
    return m.architecture == "gpt_oss"


def sink_bytes(m: ModelConfig, s: Stack) -> int:
    """Per token (query), beyond the scores per key position: the sink column of the softmax
    output and the row maximum's int64 indices, per head."""
    softmax = 4 if s.linear_cast else s.act
    return m.n_head * (softmax + (s.act if s.linear_cast else 0) + 8)


def recompute_bytes(
    m: ModelConfig,
    s: Stack,
    tokens: int,
    trained: frozenset[str],
    weighted: int,
    expert_width: int,
    down_weight: int,
) -> int:
    """The recomputed MoE layer's largest moment beyond its saved tensors and the two
    hidden-size gradients the estimate counts for every recomputed layer (the incoming one and
    the residual stream's local), for ``tokens`` tokens (module doc).
    ``trained``: the expert / router parameters that need a gradient (``gate_up_proj``,
    ``down_proj``, ``gate.weight``); ``weighted``: bytes per element of the weighted outputs
    and the gradient expanded to them; ``down_weight``: the bytes of ``down_proj``'s
    ParamWrapper weight, not made yet at the SwiGLU."""
    k, h, w, x = m.n_expert_per_token or 0, m.n_embd, expert_width, s.experts
    locals_ = w * x * ("down_proj" not in trained) + h * x * ("gate_up_proj" not in trained)
    locals_ *= k
    # the MoE input: a local unless the router's trained linear keeps it (same dtype)
    locals_ += 0 if "gate.weight" in trained and s.residual == s.act else s.residual * h
    # the expanded gradient alive, the down projection's output (saved later) not yet made
    locals_ += k * h * (weighted - x)
    # the residual stream's local, one of the two hidden-size gradients, is the second norm's
    # saved input itself when the stream is fp32 (RMSNorm's ``.to(torch.float32)`` returns it)
    locals_ -= s.residual * h if s.residual == 4 else 0
    swiglu = 3 * k * w * x + locals_  # the bias gather, the clamped up
    down_bias = 2 * k * w * x + k * h * x + locals_  # the bias gathers
    # the backward: the weighted outputs' index backward (new_zeros, index_put) beside the
    # expanded gradient, the locals freed with the forward's frame
    backward = 3 * k * h * weighted - s.residual * h
    return max(swiglu * tokens - down_weight, down_bias * tokens, backward * tokens)


def recompute_attention_bytes(m: ModelConfig, s: Stack, tokens: int, seq: int) -> int:
    """The recomputed layer at its attention's softmax, ``tokens`` tokens of sequences of
    ``seq``: the masked scores and the shifted logits, the RoPE outputs no matmul saves
    (module doc), beyond the layer's tensors saved up to there."""
    a, kv, d = m.n_head, m.kv_heads, m.head_dim
    if s.linear_cast:  # fp32 q, k and expanded k; the matmul keeps their 16-bit casts
        rope = 4 * (a * d + kv * d + (a * d if kv < a else 0))
    else:  # k before repeat_kv's copy
        rope = s.act * kv * d if kv < a else 0
    return tokens * (attention_forward_bytes(m, s, 1, seq, 0) // seq + rope)


def router_bytes(m: ModelConfig, s: Stack) -> int:
    """Per token: the top-k indices and the top-k softmax output (logits' dtype)."""
    k = m.n_expert_per_token or 0
    return k * (8 + s.act)


def attention_forward_bytes(m: ModelConfig, s: Stack, batch: int, seq: int, masks: int) -> int:
    """The eager attention's forward moment beyond the saved tensors: the masked scores
    (``n_head x seq``) and the shifted logits with the sink (``n_head x (seq + 1)``) per token,
    in the scores' dtype (fp32 under autocast: the fp32 mask and sinks promote them), and
    ``masks`` (batch, 1, seq, seq) masks in the model's dtype."""
    q = 4 if s.linear_cast else s.act
    return batch * seq * (m.n_head * (2 * seq + 1) * q + masks * seq * q)
