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
