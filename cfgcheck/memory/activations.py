"""Activation memory: the tensors autograd saves for backward, per transformer layer.

Starts from Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", sbh(34 + 5as/h) bytes per layer in 16-bit) and replaces its fixed coefficients with
the tensors PyTorch actually keeps, for the layout of the model and the stack that runs it
(:mod:`cfgcheck.memory.stack`: element sizes, adapter dtype, what quantized linears keep):

* GQA: k and v are ``n_query_groups * head_size`` wide; eager attention and sdpa with a mask
  (transformers' ``repeat_kv``) save them expanded to ``n_head`` heads; flash and unmasked sdpa
  (``enable_gqa``) do not.
* sdpa with a mask (padding, block-diagonal packing, or a sliding window shorter than the
  sequence): torch converts transformers' boolean (batch, 1, s, s) mask to the compute dtype in
  every layer and the kernel keeps it.
* SwiGLU/GeGLU keep three ``intermediate_size`` tensors (gate, activation, up); GELU one
  (``gelu``/``gelu_pytorch_tanh``: its input) or four (``gelu_new``, written out in tensor ops).
* RMSNorm keeps an fp32 copy of its input (4 bytes x hidden); LayerNorm keeps its input and
  two fp32 statistics per token. q/k norms (Qwen3) keep their per-head inputs (and, trained,
  their normalized tensors); Gemma 2's post-attention / post-MLP norms are two more norms;
  each Gemma norm also keeps its fp32 ``1 + weight`` (per layer, not per token).
* eager attention keeps the s x s softmax output in fp32 and its 16-bit copy per head (and the
  tanh output of attention-logit soft-capping); sdpa/flash keep only q, k, v, the output and a
  log-sum-exp per head and token (their output is laid out as (batch, seq, heads, dim), so it
  is also the o_proj input, not a copy; not so after Phi's partial-rotary ``torch.cat``).
  GPT-2's eager softmax stays in the compute dtype. With a fused qkv projection (Phi-3,
  GPT-2) sdpa keeps views of its output, so the whole output. transformers has no sdpa path
  for Gemma 2 (eager).
* A frozen 16-bit linear keeps nothing of its input (autograd saves ``x`` only when the weight
  needs a gradient); a trained one keeps its input; bitsandbytes 4-bit keeps nothing
  (``MatMul4Bit``: ``ctx.tensors = (None, B)``), int8 (``MatMul8bitLt``) keeps it.
* LoRA adapters keep, in the adapter dtype, their dropout output (+ a 1-byte CUDA dropout mask)
  or, without dropout, their input (a copy per adapter when the input is cast), and the rank-r
  output.
* Gradient checkpointing keeps each layer's input and recomputes one layer at a time.
No dropout outside LoRA and GPT-2 (transformers' GPT-2 default 0.1; the presets' models use
none). Checked to the byte per layer on CPU for every architecture cfgcheck builds
(tests/test_memory_layers_arch.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory import gpt_oss, llama4
from cfgcheck.memory import mla as latent
from cfgcheck.memory.modules import Linear, architecture_of, traced
from cfgcheck.memory.params import adapted_modules, block_linears
from cfgcheck.memory.stack import (
    Stack,
    attention,
    compute_bytes,
    fp32_weight_norm,
    quantized,
    sdpa_math,
    stack,
)
from cfgcheck.memory.traced import text_config
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

# LitGPT's fit(): model(input_ids, lm_head_chunk_size=128) and chunked_cross_entropy's
# chunk_size=128 (litgpt/finetune/lora.py, litgpt/utils.py)
LM_HEAD_CHUNK = 128


def act_bytes(t: TrainerConfig, m: ModelConfig | None = None) -> int:
    """Bytes per activation element (fp32 for ``32-true`` and hf QLoRA's upcast stream)."""
    return compute_bytes(t) if m is None else stack(m, t).act


@dataclass(frozen=True)
class LayerActivations:
    """Bytes one layer keeps for ``tokens`` tokens of sequences of length ``seq``."""

    per_token: int
    attention_scores: int  # eager / masked sdpa: bytes per (token x key position)
    per_layer: int = 0  # independent of the tokens (Gemma's fp32 ``1 + weight`` per norm)

    def bytes(self, tokens: int, seq: int) -> int:
        return tokens * (self.per_token + self.attention_scores * seq) + self.per_layer


def _norm_bytes(m: ModelConfig, s: Stack, weight_trained: bool) -> int:
    """What one norm keeps per token: its input (an fp32 copy for RMSNorm, the residual for
    LayerNorm) and, when its weight trains, the normalized tensor that multiplies it.
    ``CohereLayerNorm`` (transformers models/cohere/modeling_cohere.py lines 58-65) runs op by
    op in fp32: ``pow(2)`` keeps one ``hidden_states - mean``, the multiply by ``rsqrt`` keeps
    the other (a second subtraction) and the fp32 statistic, and a trained weight keeps the
    fp32 normalized tensor it multiplies (``s.norm_out``, :func:`stack.fp32_weight_norm`)."""
    h = m.n_embd
    if m.norm == "layernorm":
        return s.residual * h + 8
    centred = 2 if m.norm == "cohere_layernorm" else 1
    return 4 * h * centred + 4 + (s.norm_out * h if weight_trained else 0)


def _norm_fixed(m: ModelConfig, s: Stack) -> int:
    """What one hidden-wide norm keeps whatever the tokens: GemmaRMSNorm multiplies by
    ``1.0 + self.weight.float()``, a new fp32 vector autograd keeps even for a frozen weight
    (transformers models/gemma/modeling_gemma.py, gemma2 the same); CohereLayerNorm's
    ``self.weight.to(torch.float32)`` is one too while the weight is 16-bit (an fp32 weight's
    ``to`` returns the weight itself)."""
    if m.norm == "cohere_layernorm":
        return 4 * m.n_embd if s.residual < 4 else 0
    return 4 * m.n_embd if (architecture_of(m) or "").startswith("gemma") else 0


def _transformers_attention(m: ModelConfig, s: Stack) -> tuple[bool, bool, bool]:
    """How transformers' attention code lays out what the kernel keeps, by architecture:

    * ``softmax_fp32``: eager softmax in fp32 and cast back (``softmax(..., dtype=float32)``
      in Llama-like eager_attention_forward); GPT-2's eager softmax runs in the compute dtype
      (models/gpt2/modeling_gpt2.py) unless autocast runs it in fp32 (softmax is on its fp32
      list) before GPT-2 casts it to v's dtype.
    * ``rope_cat``: Phi / Phi-3 rotate only part of each head and ``torch.cat`` the rotated and
      passed halves (``apply_rotary_pos_emb``, models/phi*/modeling_phi*.py): q is a fresh
      (batch, heads, seq, dim) tensor, and a CPU sdpa kernel lays its output out like q, so
      ``reshape(...).contiguous()`` before the output projection copies it (the projection's
      input is then not the saved kernel output). CUDA's memory-efficient kernel allocates its
      output as (batch, seq, heads, dim) whatever q is; counted on the safe side.
    * ``rope``: False for GPT-2 (learned positions): its q and k stay views of ``c_attn``'s
      output.
    """
    if s.framework != "hf":
        return True, False, True
    arch = architecture_of(m)
    # linear_cast: fp32 weights + autocast; gpt-oss softmaxes in the scores' dtype (gpt_oss.py)
    softmax_fp32 = arch not in ("gpt2", "gpt_oss") or s.linear_cast
    # partial rotary elsewhere concatenates alike (GPT-NeoX, StableLM ``apply_rotary_pos_emb``:
    # ``torch.cat([q_embed, q_pass], dim=-1)``)
    # but GPT-J concatenates in (batch, seq, heads, dim) and transposes after (models/gptj/
    # modeling_gptj.py lines 146-161): the kernel's output is laid out for the projection
    rope_cat = arch in ("phi", "phi3") or (m.rotary_fraction < 1 and arch != "gptj")
    return softmax_fp32, rope_cat, arch != "gpt2"


def softmax_in_fp32(m: ModelConfig, s: Stack) -> bool:
    """Eager attention softmaxes in fp32 (:func:`_transformers_attention`)."""
    return _transformers_attention(m, s)[0]


def _gpt2_dropout(m: ModelConfig, s: Stack) -> bool:
    """GPT-2 trains with dropout: transformers' ``GPT2Config`` defaults (and GPT-2's released
    configs) set ``resid_pdrop = embd_pdrop = attn_pdrop = 0.1``, which the model built from
    this shape keeps (models/gpt2/modeling_gpt2.py: ``resid_dropout`` after the attention,
    ``dropout`` after the MLP, ``drop`` after the embeddings, ``dropout=attn_dropout.p`` in
    the attention). On CUDA each keeps a 1-byte mask (``native_dropout``, torch
    aten/src/ATen/native/Dropout.cpp); the memory-efficient and flash sdpa kernels keep only
    their RNG seed and offset. The other presets' architectures train without dropout."""
    return s.framework == "hf" and architecture_of(m) == "gpt2"


def _adapter_bytes(s: Stack, in_features: int, rank: int, dropout: bool) -> tuple[int, bool]:
    """Bytes one LoRA adapter keeps per token, and whether it keeps its (shared) input."""
    a = s.adapter_saved
    if dropout:  # the 1-byte CUDA dropout mask and what lora_A keeps of the dropout output
        return (a + 1) * in_features + a * rank, False
    if s.adapter_input_copy:
        return a * in_features + a * rank, False
    return a * rank, True


def _zero_pad_width(m: ModelConfig, adapted: frozenset[str]) -> int:
    """LitGPT's ``LoRAQKVLinear.zero_pad`` (litgpt/lora.py): unless all of q, k, v are adapted,
    the adapter output is placed into a zero qkv-wide tensor by ``index_copy``, whose autograd
    node keeps its ``source``: the enabled projections' widths per token."""
    widths = {"q_proj": m.n_head * m.head_dim, "k_proj": m.kv_heads * m.head_dim}
    widths["v_proj"] = widths["k_proj"]
    enabled = {
        role
        for lin in block_linears(m)
        if lin.name in adapted
        for role in lin.roles
        if role in widths
    }
    return 0 if len(enabled) in (0, 3) else sum(widths[r] for r in enabled)


def layer_activations(
    m: ModelConfig, t: TrainerConfig, masked: bool = True, upto_softmax: bool = False
) -> LayerActivations:
    """Saved-for-backward bytes of one transformer block, without checkpointing.

    ``masked``: the attention kernel gets a mask (see :func:`stack.sdpa_masked`).
    ``upto_softmax``: only what the block still keeps when backward reaches eager attention's
    softmax (:mod:`cfgcheck.memory.attention_backward`): the input norm, what the q/k/v (and
    MLA's latent) projections keep, q, k and the softmax output; not v, the 16-bit copy of the
    probabilities, the output projection's input, the second norm, the MLP or the router,
    whose backward has run and released them.
    """
    s = stack(m, t)
    p = s.act
    kernel = attention(m, t)
    h, a, d, inter = m.n_embd, m.n_head, m.head_dim, m.mlp_width
    full = t.finetuning == "full"
    quant = quantized(t)
    adapted = frozenset() if full else adapted_modules(m, t.lora.targets, t.framework).names
    rank = t.lora.rank or 0
    dropout = t.lora.dropout > 0
    x = latent.mla(m)
    sizes = {"attn_in": h, "attn_out": a * (x.v if x else d), "mlp_in": h, "mlp_act": inter}
    if m.n_expert:  # the shared experts' down projection reads their own width
        sizes["mlp_act"] = max(
            (lin.in_features for lin in block_linears(m) if lin.source == "mlp_act"), default=0
        )
    # the norms' outputs are in the residual dtype; the attention / MLP outputs in act's
    width = {"attn_in": s.residual, "mlp_in": s.residual, "attn_out": p, "mlp_act": p}
    saved: set[str] = set()
    total = 0
    qkv_dropout = False  # LitGPT: the fused qkv's one dropout is counted once
    qkv_zero_pad_done = False
    for lin in block_linears(m):
        if upto_softmax and (lin.source != "attn_in" or _mlp_role(lin)):
            continue  # a shared norm's MLP linears read attn_in too: released by then
        if x and lin.name in latent.LATENT_INPUTS:
            # MLA's q_b_proj / kv_b_proj read a latent norm's output (its own cast under
            # autocast), kept once by the trained linear or its adapter (mla.py)
            if full:
                total += p * lin.in_features
            elif lin.name in adapted and rank:
                kept, shares_input = _adapter_bytes(s, lin.in_features, rank, dropout)
                total += kept + (p * lin.in_features if shares_input else 0)
            continue
        if full or (quant and s.quantized_saves_input):
            if s.linear_cast and width[lin.source] != p:
                total += p * lin.in_features  # its own 16-bit cast of the fp32 input
            else:
                saved.add(lin.source)
        if lin.name in adapted and rank and s.fused_qkv_adapter and lin.source == "attn_in":
            # LoRAQKVLinear: one dropout output (+ mask) of the shared input, and lora_A's
            # output, r wide per enabled projection (litgpt/lora.py)
            n_qkv = sum(r in ("q_proj", "k_proj", "v_proj") for r in lin.roles) or 1
            kept, shares_input = _adapter_bytes(s, lin.in_features, rank * n_qkv, dropout)
            if qkv_dropout:
                kept, shares_input = s.adapter_saved * rank * n_qkv, False
            qkv_dropout = qkv_dropout or dropout
            total += kept
            if not qkv_zero_pad_done:
                total += p * _zero_pad_width(m, adapted)
                qkv_zero_pad_done = True
            if shares_input:
                saved.add(lin.source)
        elif lin.name in adapted and rank:
            kept, shares_input = _adapter_bytes(s, lin.in_features, rank, dropout)
            if s.split_gate_up and {"gate_proj", "up_proj"} <= set(lin.roles):
                kept *= 2  # LitGPT's fc_1 and fc_2: an adapter and a dropout each
            total += kept
            if shares_input:
                saved.add(lin.source)
    softmax_fp32, rope_cat, _ = _transformers_attention(m, s)
    if kernel != "eager" and not rope_cat and not x:
        saved.discard("attn_out")  # the kernel's output, counted below, is the o_proj input
    total += sum(width[x] * sizes[x] for x in saved)
    # norms
    n_norms = (1 if m.shared_attention_norm else 2) + m.post_attention_norm + m.post_mlp_norm
    n_norms = 1 if upto_softmax else n_norms
    total += _norm_bytes(m, s, full) * n_norms
    if upto_softmax:
        core = _attention_core(m, t, s, masked)
        total += core.per_token - _eager_v_bytes(m, t, s) + _latent_norms(m, s, full)
        if m.norm_qk:
            total += _qk_norm_bytes(m, p, full)
        return LayerActivations(total, _softmax_bytes(m, s), _norm_fixed(m, s) + _qk_fixed(m, s))
    if m.parallel_residual and not m.shared_attention_norm and m.norm == "layernorm":
        # a parallel block's two LayerNorms read the same block input, kept once (GPT-NeoX
        # ``mlp(post_attention_layernorm(hidden_states))``, models/gpt_neox/modeling_gpt_neox.py
        # GPTNeoXLayer.forward; LitGPT's Block ``mlp(norm_2(x))``, litgpt/model.py)
        total -= s.residual * h
    if m.norm_qk:
        total += _qk_norm_bytes(m, p, full)
    core = _attention_core(m, t, s, masked)
    total += _latent_norms(m, s, full)
    total += core.per_token + _mlp_bytes(m, s) + _router_bytes(m, t, s)
    scores = core.attention_scores
    if _gpt2_dropout(m, s):  # masks of the two residual dropouts; eager attention's dropout
        total += 2 * h  # keeps its mask, and the matmul with v keeps its output instead of
        # the probabilities (a new tensor, unless that was a 16-bit copy of an fp32 softmax)
        copy = softmax_fp32 and p == 2
        scores += a * (1 + (0 if copy else p)) if kernel == "eager" else 0
    fixed = _norm_fixed(m, s) * n_norms + _expert_share(m, t, _expert_lora_weights(m, t, s))
    fixed += _qk_fixed(m, s)
    return LayerActivations(per_token=total, attention_scores=scores, per_layer=fixed)


def _mlp_role(lin: Linear) -> bool:
    return bool({"gate_proj", "up_proj", "down_proj"} & set(lin.roles))


def _qk_norm_bytes(m: ModelConfig, p: int, full: bool) -> int:
    """RMSNorm per q and k head: fp32 input and one statistic per head, and when its weight
    trains the normalized tensor (in the q/k dtype) that multiplies it; Cohere's q/k
    ``CohereLayerNorm`` keeps two fp32 centred copies instead of the input (:func:`_norm_bytes`)."""
    stats, normalized = _qk_norm_layout(m, p)
    a, kv, d = m.n_head, m.kv_heads, m.head_dim
    centred = 2 if m.norm == "cohere_layernorm" else 1
    return 4 * centred * (a + kv) * d + 4 * stats + (normalized * (a + kv) * d if full else 0)


def _qk_fixed(m: ModelConfig, s: Stack) -> int:
    """Cohere's q/k norms' fp32 copies of their 16-bit ``(heads, head_dim)`` weights
    (:func:`_norm_fixed`); 0 for other q/k norms."""
    if not (m.norm_qk and m.norm == "cohere_layernorm"):
        return 0
    return _norm_fixed(m, s) // m.n_embd * (m.n_head + m.kv_heads) * m.head_dim


def _latent_norms(m: ModelConfig, s: Stack, full: bool) -> int:
    """MLA's q and kv latent norms (mla.py), 0 for other attentions."""
    x = latent.mla(m)
    return latent.latent_norms(x, s.act, full) if x else 0


def _softmax_bytes(m: ModelConfig, s: Stack) -> int:
    """Eager attention, per token and key position: the softmax output autograd keeps (fp32,
    or the compute dtype where transformers softmaxes in it, :func:`_transformers_attention`),
    and the tanh output of attention-logit soft-capping, which comes before it."""
    softmax_fp32 = _transformers_attention(m, s)[0]
    tanh = s.act if m.attention_logit_softcapping else 0
    return m.n_head * ((4 if softmax_fp32 else s.act) + tanh)


def _eager_v_bytes(m: ModelConfig, t: TrainerConfig, s: Stack) -> int:
    """Per token, the v that eager attention's second ``matmul`` keeps and its backward
    releases: transformers' ``repeat_kv`` expands it to every head, or MLA's (mla.py); 0 where
    it is a view of a fused qkv output that q or k keep too (one row)."""
    x = latent.mla(m)
    if x:
        return latent.eager_v_bytes(x, m.n_head, s.act, t.micro_batch_size == 1)
    if sdpa_math(m, t):
        return 4 * m.n_head * m.head_dim  # the math kernel's fp32 v, broadcast to every head
    fused = any(len(lin.roles) == 3 for lin in block_linears(m))
    if s.kv_expanded or (fused and t.micro_batch_size == 1):
        return 0
    return s.act * m.n_head * m.head_dim


def _expert_params_adapted(m: ModelConfig, t: TrainerConfig) -> frozenset[str]:
    """The expert / router parameters PEFT adapts with ``lora.ParamWrapper`` (the target names
    it converts, :data:`cfgcheck.memory.traced.PEFT_MOE_NAMES`)."""
    if t.finetuning == "full" or not t.lora.rank or t.framework != "hf" or not m.n_expert:
        return frozenset()
    # target_parameters adapting a few layers only are counted in every MoE layer (the safe
    # side: the activation model is one representative layer)
    return adapted_modules(m, t.lora.targets, t.framework, t.lora.target_parameters).param_names


def _experts_trained(m: ModelConfig, t: TrainerConfig) -> frozenset[str]:
    """The expert and router parameters that need a gradient: all of them in full
    fine-tuning, else those PEFT's ``ParamWrapper`` adapts."""
    if t.finetuning == "full":
        return frozenset({"gate_up_proj", "down_proj", "gate.weight"})
    return _expert_params_adapted(m, t)


def _expert_share(m: ModelConfig, t: TrainerConfig, per_layer: int) -> int:
    """``per_layer`` bytes of the expert LoRA terms, as the average over the MoE layers when
    ``target_parameters`` adapt some of them only and every layer keeps its activations (no
    checkpointing: the layers' sum is then exact). With checkpointing the recomputed layer
    may be an adapted one: counted whole (the safe side)."""
    if not per_layer or t.gradient_checkpointing or t.finetuning == "full":
        return per_layer
    tr = traced(m)
    adapted = adapted_modules(m, t.lora.targets, t.framework, t.lora.target_parameters)
    if tr is None or adapted.param_layers is None or not tr.experts:
        return per_layer
    return -(-per_layer * adapted.param_layers // len(tr.experts))


def _expert_lora_weights(
    m: ModelConfig, t: TrainerConfig, s: Stack, only: frozenset[str] | None = None
) -> int:
    """Per MoE layer: PEFT's ``ParamWrapper`` runs the experts with a parametrization
    ``W + scaling * lora_B @ lora_A`` (peft/tuners/lora/layer.py 0.21 ``_activate_lora``,
    ``_LoraFactorsProxy.forward``: ``torch.baddbmm``), a new tensor the size of the whole
    adapted expert parameter, in the weights' dtype, which the grouped matmul keeps for its
    input gradient (CPU-traced on DeepSeek-V2). ``only``: those of these parameters."""
    names = _expert_params_adapted(m, t)
    names = names if only is None else names & only
    tr = traced(m)
    if not names or tr is None or not tr.experts:
        return 0
    e = tr.experts[-1]
    h = m.n_embd
    per = {"gate_up_proj": 2 * e.width * h, "down_proj": e.width * h}
    return sum(s.experts * e.n_expert * per.get(n, 0) for n in names)


def _qk_norm_layout(m: ModelConfig, p: int) -> tuple[int, int]:
    """q/k norms: the fp32 statistics per token, and the bytes per element of the normalized
    tensor a trained weight multiplies. Qwen3's norm each head (``Qwen3RMSNorm(head_dim)``,
    ``n_head + n_query_groups`` statistics) and cast before the weight (q/k dtype); OLMo 2's
    norm the whole projection (``Olmo2RMSNorm(num_attention_heads * head_dim)`` on
    ``q_proj``'s output, transformers models/olmo2/modeling_olmo2.py ``Olmo2Attention``: two
    statistics) and multiply in fp32 (:func:`stack.fp32_weight_norm`). The width is read off
    the traced model (the q norm's parameters). Cohere's ``CohereLayerNorm((num_heads,
    head_dim))`` owns a weight per head and element but normalizes each head
    (models/cohere/modeling_cohere.py ``CohereAttention.__init__``)."""
    per_head = m.n_head + m.kv_heads
    tr = traced(m)
    if tr is not None and m.norm != "cohere_layernorm":
        q_norm = next((n for path, n in tr.params.items() if path.endswith(".q_norm")), None)
        if q_norm == m.n_head * m.head_dim and m.head_dim > 1:
            per_head = 2
    return per_head, 4 if fp32_weight_norm(m) else p


def _attention_core(m: ModelConfig, t: TrainerConfig, s: Stack, masked: bool) -> LayerActivations:
    """What the attention between the projections keeps: q, k, v and the kernel's tensors."""
    p, kernel = s.act, attention(m, t)
    a, kv, d = m.n_head, m.kv_heads, m.head_dim
    softmax_fp32, _, rope = _transformers_attention(m, s)
    x = latent.mla(m)
    if x:  # DeepSeek's latent attention (mla.py)
        per_token, scores = latent.kernel_bytes(
            x, a, p, kernel, t.micro_batch_size == 1, softmax_fp32
        )
        masked_sdpa = kernel == "sdpa" and masked
        return LayerActivations(per_token=per_token, attention_scores=scores or p * masked_sdpa)
    if sdpa_math(m, t):
        # torch's math kernel (stack.sdpa_math): fp32 q, k and v, k and v broadcast to every
        # head, and the fp32 softmax output (no 16-bit copy: its matmul with v runs in fp32)
        return LayerActivations(per_token=4 * 3 * a * d, attention_scores=4 * a)
    total = 0
    expanded = kernel == "eager" or (kernel == "sdpa" and masked) or s.kv_expanded
    kv_width = a * d if expanded else kv * d
    fused = any(len(x.roles) == 3 for x in block_linears(m))  # one qkv projection
    if s.kv_expanded:
        total += p * a * d + 2 * p * kv_width  # q, k (after RoPE), v
        if kv in (a, 1):
            # LitGPT: with one query per group (MHA) or one group (MQA, expand with stride 0),
            # ``v.reshape`` is a view of the fused qkv output, so the kernel's v keeps all of it
            total += p * (a + 2 * kv) * d - p * kv_width
    elif fused and (kernel != "eager" or t.micro_batch_size == 1):
        # sdpa / flash keep q, k, v as passed, and eager's matmuls keep views of them when one
        # row lets torch.matmul fold (batch, heads) without a copy: a slice of the fused output (v
        # unless repeat_kv copied it, q and k too without RoPE) keeps that whole output alive
        # repeat_kv copies only when heads are grouped; with one k/v head its expand is a view
        # (measured on CPU), so k stays counted expanded, on the safe side
        copied_kv = expanded and 1 < kv < a
        total += p * a * d if rope else 0  # q
        total += p * kv_width if rope or copied_kv else 0  # k
        total += p * kv_width if copied_kv else 0  # v
        if not rope or not copied_kv:  # a view: the fused output
            total += p * (a * d + 2 * kv * d)
    else:
        total += p * a * d + 2 * p * kv_width  # q, k (after RoPE), v
    scores = 0
    if kernel == "eager":
        # fp32 softmax output + its 16-bit copy, or one softmax output in the compute dtype
        scores = a * (4 + (p if p == 2 else 0)) if softmax_fp32 else a * p
        if m.attention_logit_softcapping:
            scores += a * p  # tanh output of the soft-capping
        if s.framework == "hf" and architecture_of(m) == "gptj" and not s.linear_cast:
            # ``torch.matmul(query.to(torch.float32), key.to(torch.float32)...)`` keeps fp32
            # q and k instead of the 16-bit ones (models/gptj/modeling_gptj.py line 91)
            total += (4 - p) * (a * d + kv_width)
        if s.framework == "hf" and gpt_oss.is_gpt_oss(m):
            total += gpt_oss.sink_bytes(m, s)  # the sink column, the row maximum's indices
    else:
        total += p * a * d + 4 * a  # kernel output + log-sum-exp
        if kernel == "sdpa" and masked:
            scores = p  # the mask in the compute dtype, broadcast over heads
    return LayerActivations(per_token=total, attention_scores=scores)


def _mlp_bytes(m: ModelConfig, s: Stack) -> int:
    """What the MLP keeps between its projections, per token (a mixture-of-experts' routed
    part in the experts' dtype, :attr:`Stack.experts`)."""
    n = 3 if m.mlp in ("swiglu", "geglu") else s.gelu_saved
    if llama4.every_expert(m):  # the shared expert; llama4.moe_bytes counts the experts
        return n * s.act * llama4.shared_width(m)
    routed = _routed_width(m)
    # gpt-oss's clamped SwiGLU keeps six expert widths per routed token (gpt_oss.py)
    n_routed = gpt_oss.ROUTED_SAVED if gpt_oss.is_gpt_oss(m) else n
    return n * s.act * (m.mlp_width - routed) + n_routed * s.experts * routed


def _routed_width(m: ModelConfig) -> int:
    """``top_k`` times one routed expert's width: the routed part of ``mlp_width`` (0 for a
    dense model, and for Llama 4, whose experts are counted by :func:`llama4.moe_bytes`; a
    shared expert is the rest)."""
    k = m.n_expert_per_token
    if not m.n_expert or not k or llama4.every_expert(m):
        return 0
    tr = traced(m)
    width = tr.experts[-1].width if tr is not None and tr.experts else m.mlp_width // k
    return min(m.mlp_width, k * width)


# Routers that cast the renormalised top-k weights back to the logits' dtype:
# ``router_top_value.to(router_logits.dtype)`` (transformers models/qwen2_moe, qwen3_moe, olmoe
# modeling_*.py ``*TopKRouter.forward``), gpt-oss's ``softmax(router_top_value, dtype=
# router_top_value.dtype)``. Mixtral's (``softmax(router_logits.float())``, kept) and the
# families not read here weigh in fp32 (the safe side): the weighted outputs are then fp32.
ROUTER_WEIGHTS_IN_LOGITS_DTYPE = frozenset({"qwen2_moe", "qwen3_moe", "olmoe", "gpt_oss"})


def _weighted_bytes(m: ModelConfig, s: Stack) -> int:
    """Bytes per element of the experts' outputs scaled by their routing weights
    (``proj_out * sample_weights_g``, integrations/moe.py): type promotion of the experts'
    dtype and the routing weights'."""
    weights = s.act if m.architecture in ROUTER_WEIGHTS_IN_LOGITS_DTYPE else 4
    return max(s.experts, weights)


def dispatch_backward_bytes(m: ModelConfig, t: TrainerConfig, tokens: int, seq: int = 0) -> int:
    """Gradient checkpointing of a mixture-of-experts layer: backward reaches the layer at
    the experts' output and recomputes the layer when it first needs a saved tensor, the
    un-permutation's indices (``weighted_out[inv_perm]`` in ``grouped_mm_experts_forward``,
    transformers integrations/moe.py). By then the incoming gradient has been cast to the
    weighted outputs' dtype and expanded to ``top_k`` copies per token (the backward of
    ``.view(tokens, top_k, hidden).sum(dim=1)``), and it stays alive while the recomputation
    runs, which itself peaks at its last step with the weighted outputs (``proj_out *
    sample_weights_g``) live: two routed, hidden-wide tensors beyond the layer's saved ones.
    The forward's locals are alive too where nothing saves them: the routed copies
    (``hidden_states[perm // top_k]``, saved only when the experts train) and the MoE input
    (the norm's output, saved by the router only when it trains on the same dtype)
    (CPU-traced, tests/test_memory_tracer_moe.py). gpt-oss (``seq``: the sequence length)
    and Llama 4 peak elsewhere in the recomputation, their moments counted here whole
    (:func:`_gpt_oss_recompute_bytes`, :func:`llama4.recompute_bytes`). The weighting's
    backward, after the recomputation, holds three routed tensors instead (the larger counts).
    DeepSeek's shared experts are not alive at either (:func:`mla.shared_experts_last`)."""
    k = m.n_expert_per_token
    if not m.n_expert or not k or not t.gradient_checkpointing:
        return 0
    s, h = stack(m, t), m.n_embd
    if gpt_oss.is_gpt_oss(m):
        return _gpt_oss_recompute_bytes(m, t, s, tokens, seq)
    if llama4.every_expert(m):  # every token through every expert (llama4.py)
        return llama4.recompute_bytes(m, s, t.finetuning == "full", tokens)
    routed = k * _weighted_bytes(m, s) * h
    total = 2 * routed
    full = t.finetuning == "full"
    # the routed copies, unless the experts' gate_up keeps them (trained, or PEFT's
    # ParamWrapper on it: :func:`_router_bytes` counts them then)
    copies_kept = full or "gate_up_proj" in _expert_params_adapted(m, t)
    total += 0 if copies_kept else k * s.experts * h
    # the MoE input; DeepSeek's router keeps it (or its fp32 copy) and its shared experts'
    # linears keep it (or their casts) whenever they train (mla.py)
    kept = full and (s.residual == s.act or latent.router_bytes(m, full) > 0)
    total += 0 if kept else s.residual * h
    # then the layer's own backward, once the recomputation's locals are gone:
    # ``IndexBackward`` of the un-permutation accumulates the expanded gradient into
    # ``grad.new_zeros(...)`` in place (derivatives.yaml ``index.Tensor``, FunctionsManual.cpp
    # ``index_backward``), and the routing weights' ``MulBackward`` of ``proj_out *
    # sample_weights_g`` makes the gradients of both factors (the weights' before autograd's
    # ``sum_to`` reduces it to one per routed token) while that gradient is alive: three routed
    # tensors (CPU-traced on Mixtral, full: -4 % without it)
    total = max(total, 3 * routed)
    if latent.shared_experts_last(m):
        # DeepSeek's shared experts run after the routed ones (mla.py): at this moment their
        # saved tensors are released (their backward ran first) or not yet recomputed; their
        # own backward (three expert-wide gradients, the 16-bit gradient of their output) is
        # the other moment
        shared = m.mlp_width - _routed_width(m)
        saved = 3 * s.act * shared
        if full:  # what their trained linears keep: the down projection's input, and each
            # gate/up's own 16-bit cast of an fp32 input (their shared input is kept anyway)
            for lin in block_linears(m):
                cast = lin.source == "mlp_in" and s.linear_cast and s.residual != s.act
                saved += s.act * lin.in_features if lin.source == "mlp_act" or cast else 0
        total = max(total - saved, 3 * s.act * shared + s.act * h)
    return total * tokens


def _gpt_oss_recompute_bytes(
    m: ModelConfig, t: TrainerConfig, s: Stack, tokens: int, seq: int
) -> int:
    """gpt-oss's recomputed layer beyond its saved tensors and two hidden-size gradients, at
    the larger of its moments (gpt_oss.py): inside the experts (their bias gathers and the
    locals no linear saves) or at the attention's softmax, where what the layer saves after
    the attention (the second norm, the router, the experts; PEFT's parametrized expert
    weights) is not made yet and the incoming gradient is already expanded to the experts."""
    k = m.n_expert_per_token or 0
    trained = _experts_trained(m, t)
    down = _expert_lora_weights(m, t, s, frozenset({"down_proj"}) & trained)
    width, weighted = _routed_width(m) // max(k, 1), _weighted_bytes(m, s)
    experts = gpt_oss.recompute_bytes(m, s, tokens, trained, weighted, width, down)
    if attention(m, t) != "eager" or not seq:
        return experts
    full = t.finetuning == "full"
    later = (_norm_bytes(m, s, full) + _mlp_bytes(m, s) + _router_bytes(m, t, s)) * tokens
    later += _expert_lora_weights(m, t, s)
    expanded = k * weighted * m.n_embd * tokens
    softmax = gpt_oss.recompute_attention_bytes(m, s, tokens, seq) + expanded - later
    return max(experts, softmax)


def _router_bytes(m: ModelConfig, t: TrainerConfig, s: Stack) -> int:
    """A mixture-of-experts layer's router and token dispatch, per token, as transformers 5
    runs them (models/mixtral/modeling_mixtral.py, the same in qwen2_moe, qwen3_moe, olmoe,
    deepseek_v2/v3, gpt_oss): ``MixtralTopKRouter.forward`` keeps the fp32
    ``softmax(router_logits.float())`` (n_expert wide) and the router logits, ``topk`` its
    indices and renormalised weights (top_k wide). The experts run through
    ``integrations/moe.py`` ``grouped_mm_experts_forward`` (the default
    ``experts_implementation``, ``PreTrainedModel.get_correct_experts_implementation``; the
    per-expert loop of ``MixtralExperts.forward`` is the eager fallback and keeps the same
    shapes): the routed copies of each token sorted by expert (``hidden_states[perm //
    top_k]``), two grouped linears, and each output scaled by its routing weight (kept, hidden
    wide, top_k per token). When the experts train (full fine-tuning) the linears also keep
    their inputs: the router's (the MoE input, hidden wide), each routed token's gathered copy
    (hidden wide) and the down projection's input (one expert width). The gate/up output and
    its activation are the MLP term over ``intermediate_size = top_k * expert width``.
    CPU-traced on tiny Mixtral, Qwen3-MoE and OLMoE (tests/test_memory_tracer_moe.py), not
    measured on a GPU: the estimate carries the uncalibrated margin."""
    e, k = m.n_expert, m.n_expert_per_token
    if not e or not k:
        return 0
    p, h, x = s.act, m.n_embd, s.experts
    full = t.finetuning == "full"
    if llama4.every_expert(m):  # every token through every expert (llama4.py)
        return llama4.moe_bytes(m, s, full)
    if gpt_oss.is_gpt_oss(m):  # top-k of the logits, softmax of the top k (gpt_oss.py)
        router = gpt_oss.router_bytes(m, s) + (p * h if full else 0)
    else:  # DeepSeek's sigmoid / softmax and group-limited choice (mla.py), else Mixtral's
        router = latent.router_bytes(m, full) or e * (p + 4) + k * 12 + (p * h if full else 0)
    total = router + k * x * h
    if _aux_loss(m):
        # output_router_logits: load_balancing_loss_func's softmax over each layer's returned
        # router logits is kept for its backward: one more n_expert-wide tensor per token
        # and layer (the logits themselves are the router's, already counted; CPU-traced)
        total += e * p
    # the experts' inputs, kept when their weights train (full fine-tuning, or PEFT's
    # ParamWrapper on them: a parametrized weight requires grad): the routed copies for
    # gate_up_proj, the down projection's input; the router's input for its weight
    names = _experts_trained(m, t)
    kept = k * x * h if "gate_up_proj" in names else 0
    kept += x * _routed_width(m) if "down_proj" in names else 0
    total += kept if full else _expert_share(m, t, kept)
    if not full and "gate.weight" in names:
        total += latent.router_bytes(m, True) - latent.router_bytes(m, False) or p * h
    return total


def _aux_loss(m: ModelConfig) -> bool:
    """The router's auxiliary load-balancing loss is on (``output_router_logits`` in the
    config.json: transformers' MoE ``*ForCausalLM.forward`` then adds
    ``router_aux_loss_coef * load_balancing_loss_func(...)``)."""
    return bool(m.hf_config and text_config(m.hf_config).get("output_router_logits"))


def first_layer_without_grad(m: ModelConfig, t: TrainerConfig) -> frozenset[str]:
    """Parts of the first block whose inputs carry no gradient, so autograd saves nothing
    there: PEFT LoRA without checkpointing leaves the embedding output without a gradient
    (``enable_input_require_grads`` runs only with checkpointing: transformers'
    ``gradient_checkpointing_enable``, peft's ``prepare_model_for_kbit_training``), so the
    first layer keeps nothing upstream of its first adapter. Parts: ``norm`` (the input norm),
    ``post_norm`` (the second norm of a sequential block), ``attention`` (the core between
    the projections), ``mlp`` (between the MLP projections), and ``<source>_base`` for the
    frozen base linears whose input has no gradient (their autocast weight casts are not
    kept). Empty where it does not apply (CPU-traced, tests/test_memory_tracer.py)."""
    s = stack(m, t)
    if (
        s.framework != "hf"
        or t.finetuning == "full"
        or t.gradient_checkpointing
        or t.quantization != "none"
        or not t.lora.rank
    ):
        return frozenset()
    adapted = adapted_modules(m, t.lora.targets, t.framework)
    if adapted.embedding_rows or any(0 < n < m.n_layer for _, n in adapted.linears):
        return frozenset()  # an adapted embedding, or layer-specific targets
    hit = {_stage(x) for x, n in adapted.linears if n}
    attn = "attn_in" in hit
    parts = {"norm", "attn_in_base"}  # the input norm and what reads it see no gradient
    if m.parallel_residual:  # attention and MLP both read the shared norm
        parts.add("mlp_in_base")
        if not attn:
            parts |= {"attention", "attn_out_base"}
        if "mlp_in" not in hit:
            parts |= {"mlp", "mlp_act_base"}
        return frozenset(parts)
    if not attn:
        parts |= {"attention", "attn_out_base"}
    if not (attn or "attn_out" in hit):
        parts |= {"post_norm", "mlp_in_base"}
        if "mlp_in" not in hit:
            parts |= {"mlp", "mlp_act_base"}
    return frozenset(parts)


def _stage(x: Linear) -> str:
    """Where a block linear sits in the forward order, by the llama roles it computes (Phi's
    fc1 reads the shared norm like q/k/v, but is the MLP's input projection)."""
    if "o_proj" in x.roles:
        return "attn_out"
    if "down_proj" in x.roles:
        return "mlp_act"
    if {"gate_proj", "up_proj"} & set(x.roles):
        return "mlp_in"
    return "attn_in"


def first_layer_frozen_linears(m: ModelConfig, t: TrainerConfig) -> list[Linear]:
    """The first layer's base linears whose input has no gradient: autograd keeps nothing of
    them, not even the 16-bit weight cast autocast makes (:func:`first_layer_without_grad`)."""
    parts = first_layer_without_grad(m, t)
    return [x for x in block_linears(m) if f"{_stage(x)}_base" in parts]


def first_layer_unsaved(m: ModelConfig, t: TrainerConfig, masked: bool) -> LayerActivations:
    """What :func:`layer_activations` counts that the first layer does not keep
    (:func:`first_layer_without_grad`)."""
    parts = first_layer_without_grad(m, t)
    if not parts:
        return LayerActivations(0, 0)
    s = stack(m, t)
    norms = ("norm" in parts) + ("post_norm" in parts and not m.shared_attention_norm)
    total = _norm_bytes(m, s, False) * norms
    scores = 0
    if "attention" in parts:
        core = _attention_core(m, t, s, masked)
        total += core.per_token
        scores = core.attention_scores
    if "mlp" in parts:
        total += _mlp_bytes(m, s)
    return LayerActivations(per_token=total, attention_scores=scores)


def quantized_input_bytes(m: ModelConfig, t: TrainerConfig, tokens: int) -> int:
    """The inputs that quantized linears keep (each distinct input once: the norm outputs, the
    attention output, the MLP activation; the lm_head's when it is quantized), for ``tokens``
    tokens: what outlives a step when bitsandbytes keeps them as ctx attributes
    (:func:`stack.litgpt_layout`)."""
    s = stack(m, t)
    if not (quantized(t) and s.quantized_inputs_outlive_step):
        return 0
    width = {"attn_in": s.residual, "mlp_in": s.residual, "attn_out": s.act, "mlp_act": s.act}
    sources = {lin.source: lin.in_features for lin in block_linears(m)}
    per_layer = sum(width[src] * n for src, n in sources.items())
    head = s.residual * m.n_embd if s.quantized_head else 0
    return (m.n_layer * per_layer + head) * tokens


def checkpoint_bytes(m: ModelConfig, t: TrainerConfig, tokens: int) -> int:
    """Gradient checkpointing: each layer's input, kept for the recomputation. Offloaded
    (Axolotl's activation_offloading: src/axolotl/core/trainers/mixins/
    activation_checkpointing.py ActivationOffloadingMixin; torchtune's OffloadActivations),
    they go to CPU memory as the forward leaves each layer
    and come back one layer ahead of the backward: two layers' inputs are on the GPU."""
    layers = min(m.n_layer, 2) if t.activation_offloading else m.n_layer
    return layers * stack(m, t).residual * m.n_embd * tokens


# fp32, hidden-wide tensors autograd's backward of an RMSNorm written in tensor ops holds at
# once (transformers' *RMSNorm.forward: ``x.float()``, ``pow(2).mean``, ``rsqrt``, two ``mul``):
# the gradient cast to fp32, through the weight's ``mul``, and the pow / rsqrt branch's
# products before they are summed into the input's gradient (CPU-traced)
NORM_BACKWARD_TEMPORARIES = 5


def checkpoint_norm_input(m: ModelConfig, t: TrainerConfig) -> int:
    """Gradient checkpointing, per token: what :func:`layer_activations` counts for the block's
    first norm that is the checkpoint itself. The recomputed layer's input norm is its first op
    (``input_layernorm``), and an RMSNorm's ``hidden_states.to(torch.float32)`` returns its
    input when the residual stream is already fp32 (fp32 weights under autocast, ``32-true``,
    the QLoRA upcast stream: :mod:`cfgcheck.memory.stack`), so the fp32 input it keeps is the
    layer input torch.utils.checkpoint keeps (CPU-traced: a tiny Llama or DeepSeek under
    autocast had no other copy of it alive in the recomputation). transformers' models only;
    a block without an input norm (OLMo 2) reads its input in the attention."""
    s = stack(m, t)
    if not t.gradient_checkpointing or s.framework != "hf" or m.norm != "rmsnorm":
        return 0
    if gpt_oss.is_gpt_oss(m) or llama4.every_expert(m):  # their recomputed layers' moments
        return 0  # are modelled in gpt_oss.py / llama4.py
    tr = traced(m)
    if tr is not None and not any(p.endswith(".input_layernorm") for p in tr.tree):
        return 0
    return 4 * m.n_embd if s.residual == 4 else 0


def recompute_backward_bytes(m: ModelConfig, t: TrainerConfig, tokens: int) -> int:
    """Gradient checkpointing: what the backward of the recomputed layer holds beyond its
    saved tensors, at the larger of its moments: the MLP's backward (three intermediate-size
    tensors in the kernels' dtype while the gate, activation and up outputs are still kept, as
    in :func:`last_layer_backward_bytes`; dense MLPs) or, for a block ending in a norm, that
    norm's (:func:`post_norm_backward_bytes`), less the first norm's saved input where it is
    the checkpoint (:func:`checkpoint_norm_input`). CPU-traced: without the MLP's, a
    checkpointed tiny Llama with an MLP 3.5 x the hidden size was 20 % under the trace (LoRA);
    with the norm's input counted twice, 4-8 % over under autocast."""
    if not t.gradient_checkpointing:
        return 0
    s = stack(m, t)
    mlp = 0
    k = 3 if m.mlp in ("swiglu", "geglu") or s.gelu_saved > 1 else 2
    if not m.n_expert:
        mlp = k * s.act * m.mlp_width * tokens
    # gpt-oss and Llama 4 peak in the recomputation itself: dispatch_backward_bytes
    own = checkpoint_norm_input(m, t) * tokens  # counted in the layer, kept as its input
    return max(mlp, post_norm_backward_bytes(m, t, tokens)) - own


def post_norm_backward_bytes(m: ModelConfig, t: TrainerConfig, tokens: int) -> int:
    """Gradient checkpointing of a block that ends with a norm on the MLP's output (OLMo 2's
    ``post_feedforward_layernorm`` in place of the pre-norms, models/olmo2/modeling_olmo2.py
    ``Olmo2DecoderLayer.forward``; Gemma 2/3's sandwich): the first backward op of the block
    is that norm's, so the block is recomputed whole and the norm's backward temporaries
    (:data:`NORM_BACKWARD_TEMPORARIES` fp32 hidden-wide tensors) come on top of it; a
    Llama-like block's backward starts at the MLP's down projection instead, within what the
    recomputed layer frees."""
    if not t.gradient_checkpointing or stack(m, t).framework != "hf":
        return 0
    tr = traced(m)
    ends = m.post_mlp_norm or (
        tr is not None and any(p.endswith(".post_feedforward_layernorm") for p in tr.tree)
    )
    return NORM_BACKWARD_TEMPORARIES * 4 * m.n_embd * tokens if ends else 0


def checkpoint_mask_bytes(m: ModelConfig, t: TrainerConfig, seq: int, masked: bool) -> int:
    """Gradient checkpointing with a materialised attention mask, per sequence of ``seq``
    tokens (multiply by the batch): transformers builds the (batch, 1, seq, seq) mask once per
    forward (masking_utils ``sdpa_mask``: boolean; ``eager_mask``: the embeddings' dtype,
    ``create_causal_mask``'s ``dtype = inputs_embeds.dtype``, fp32 under autocast) and
    hands it to every decoder layer; a checkpointed layer keeps its inputs for the
    recomputation (torch.utils.checkpoint), so the mask lives until the first layer's backward
    (CPU-traced). flash-attention gets no 4D mask; LitGPT passes none in training."""
    if not t.gradient_checkpointing or stack(m, t).framework != "hf":
        return 0
    # a model with sliding and full layers gets one mask of each kind, both layer inputs
    # (:func:`_mask_kinds`; CPU-traced on gpt-oss)
    kinds = _mask_kinds(m, seq)
    if sdpa_math(m, t):
        # Falcon's boolean sdpa mask, built padded or not (``allow_is_causal_skip=False``,
        # models/falcon/modeling_falcon.py line 760), not an eager mask
        return kinds * seq * seq
    if not masked:
        return 0
    kernel = attention(m, t)
    if kernel == "sdpa":
        return kinds * seq * seq
    return kinds * stack(m, t).residual * seq * seq if kernel == "eager" else 0


def head_activations(m: ModelConfig, t: TrainerConfig) -> int:
    """Per-token bytes kept around the lm_head: the final norm and, when the lm_head trains,
    its input."""
    s = stack(m, t)
    full = t.finetuning == "full"
    head_input = (s.act if s.linear_cast else s.residual) * m.n_embd
    total = _norm_bytes(m, s, full) + (head_input if full else 0)
    total += m.n_embd if _gpt2_dropout(m, s) else 0  # the embedding dropout's 1-byte mask
    rank = t.lora.rank or 0
    if not full and rank and adapted_modules(m, t.lora.targets, t.framework).lm_head:
        # a LoRA lm_head keeps what any adapter keeps (its rank-r output included)
        kept, shares_input = _adapter_bytes(s, m.n_embd, rank, t.lora.dropout > 0)
        total += kept + (head_input if shares_input else 0)
    return total


def activation_bytes(
    m: ModelConfig, t: TrainerConfig, batch: int, seq: int, masked: bool = True
) -> int:
    """Activations kept at the end of the forward pass of one micro-batch (with
    checkpointing: the layer inputs and the head, the recomputed layer is separate)."""
    tokens = batch * seq
    head = head_activations(m, t) * tokens
    if t.gradient_checkpointing:
        mask = batch * checkpoint_mask_bytes(m, t, seq, masked)
        return checkpoint_bytes(m, t, tokens) + head + mask
    layers = m.n_layer * layer_activations(m, t, masked).bytes(tokens, seq)
    layers -= latent.dense_layers(m) * dense_layer_saving(m, t) * tokens
    first = first_layer_unsaved(m, t, masked).bytes(tokens, seq)
    return layers - first + head + _norm_fixed(m, stack(m, t))  # the final norm's fixed part


def dense_layer_saving(m: ModelConfig, t: TrainerConfig) -> int:
    """Per token, what one of DeepSeek's dense layers (``first_k_dense_replace``, mla.py)
    keeps less than a mixture-of-experts layer (:func:`layer_activations` counts the latter):
    its ``DeepseekV3MLP`` of ``intermediate_size`` keeps the gate, activation and up outputs
    (and, trained, the down projection's input) in place of the router, the dispatch and the
    routed and shared experts' tensors. Negative where the dense MLP is the wider."""
    if not latent.dense_layers(m):
        return 0
    s = stack(m, t)
    full = t.finetuning == "full"
    shared_down = max(
        (lin.in_features for lin in block_linears(m) if lin.source == "mlp_act"), default=0
    )
    moe = _mlp_bytes(m, s) + _router_bytes(m, t, s) + (s.act * shared_down if full else 0)
    width = latent.dense_width(m)
    dense = 3 * s.act * width + (s.act * width if full else 0)
    return moe - dense


def logits_bytes(m: ModelConfig, t: TrainerConfig, batch: int, seq: int) -> int:
    """Peak bytes of logits and loss.

    ``none``: at the start of backward the fp32 log-probabilities, the dense fp32 gradient of
    the NLL and the fp32 gradient of the upcast logits (12 bytes per token and vocab row); a
    training loop that holds the logits (LitGPT, torchtune) adds them in the compute dtype,
    while transformers' output object is gone by then (``model(**batch).loss``). Gemma 2's
    final soft-capping keeps its tanh output. ``chunked`` (LitGPT): inside backward, all the
    loop's logits (:func:`held_logits_bytes`) and their gradients, and one chunk's
    log-probabilities and NLL gradient. ``fused`` (Liger): see :func:`fused_loss_bytes`.
    """
    s = stack(m, t)
    p = s.act
    tokens = batch * seq
    v = m.head_rows
    if t.loss_chunking == "fused":
        return fused_loss_bytes(m, s, tokens)
    if t.loss_chunking == "chunked":
        # LitGPT: while backward runs through the lm_head chunks, their logits (held by the
        # training loop, in the dtype the loop sees: :func:`held_logits_bytes`) and the logits'
        # gradients; a quantized lm_head is dequantized then (stack.litgpt_layout); final
        # soft-capping keeps its tanh output per chunk (inside the model, compute dtype).
        # Backward runs every chunk's loss before any lm_head chunk (autograd's ready queue
        # takes the latest node first), so one chunk's log-probabilities and NLL gradient are
        # alive next to all logits and all their gradients (CPU-traced on LitGPT's loop).
        q = held_logits_bytes(t, s)
        capped = p if m.final_logit_softcapping else 0
        head = s.dequant_bytes * m.head_rows * m.n_embd if s.quantized_head else 0
        chunk = 2 * q * v * batch * min(seq, LM_HEAD_CHUNK)
        return (2 * q + capped) * v * tokens + chunk + head
    held = 0 if s.framework == "hf" else p
    capped = p if m.final_logit_softcapping else 0
    return (12 + held + capped) * v * tokens


def held_logits_bytes(t: TrainerConfig, s: Stack) -> int:
    """Bytes per element of the logits a LitGPT training loop holds: Lightning Fabric's
    ``_FabricModule.forward`` passes every floating output through the precision plugin's
    ``convert_output``, which casts to ``torch.get_default_dtype()`` (fp32) for ``bf16-true``
    / ``16-true`` (lightning/fabric/plugins/precision/half.py) and bitsandbytes
    (``bitsandbytes.py``) alike; LitGPT never changes the default dtype."""
    return 4 if s.framework == "litgpt" else s.act


def litgpt_forward_end_bytes(m: ModelConfig, t: TrainerConfig, batch: int, seq: int) -> int:
    """LitGPT's loop at the end of a forward (``logits = model(input_ids, lm_head_chunk_size=
    128)`` in finetune/lora.py ``fit``): the previous step's converted logits are still held
    by ``logits`` until the assignment, next to this step's chunk outputs in the compute dtype
    and their converted copies (Fabric's ``convert_output``, :func:`held_logits_bytes`)."""
    s = stack(m, t)
    q = held_logits_bytes(t, s)
    capped = s.act if m.final_logit_softcapping else 0
    return (2 * q + s.act + capped) * m.head_rows * batch * seq


def liger_chunk_size(vocab: int, hidden: int, tokens: int) -> int:
    """Rows of one chunk of Liger's fused linear cross-entropy
    (liger_kernel/ops/fused_linear_cross_entropy.py ``fused_linear_cross_entropy_forward``):
    ``next_power_of_2(ceil(BT / ceil(V / H)))``, so a chunk of logits is about the size of the
    hidden states."""
    inc_factor = -(-vocab // hidden)
    rows = -(-tokens // inc_factor)
    return 1 << max(0, rows - 1).bit_length()


def fused_loss_bytes(m: ModelConfig, s: Stack, tokens: int) -> int:
    """Peak of Liger's fused linear cross-entropy (``LigerFusedLinearCrossEntropyFunction``,
    the gradients computed in the forward): ``grad_input`` (``zeros_like`` the hidden states,
    kept for backward), one chunk of logits in the matmul's dtype (the cross-entropy kernel
    writes their gradient in place), that chunk's input gradient before it is copied into
    ``grad_input``, the fp32 per-token loss, the ignore mask and the shifted int64 labels
    (liger_kernel/transformers/model/loss_utils.py). A trained lm_head's ``grad_weight`` is the
    gradient counted with the others."""
    v, h = m.head_rows, m.n_embd
    chunk = min(liger_chunk_size(v, h, tokens), tokens)
    logits = s.act  # the lm_head matmul's dtype (autocast: 16-bit)
    return s.residual * h * tokens + logits * chunk * (v + h) + (4 + 1 + 2 * 8) * tokens


def last_layer_backward_bytes(m: ModelConfig, t: TrainerConfig, tokens: int) -> int:
    """Bytes beyond the kept block activations when backward (without checkpointing) reaches
    the last layer's MLP: the final norm (and a trained lm_head) have run their backward and
    freed what they kept, the gradient of the residual stream flows in, and the MLP's backward
    holds three intermediate-size tensors in the kernels' dtype at once (the down projection's
    input gradient, then ``MulBackward``'s two products for a gated MLP or ``gelu_new``'s
    product; a plain GELU two). A LoRA adapter on the down projection adds its own path while
    the base's input gradient waits: the gradient of its input in the adapter dtype (and of its
    dropout) and its cast back. The loss moment is larger unless the loss is chunked or fused
    (Liger's fused loss keeps about a hidden state's worth)."""
    s = stack(m, t)
    k = 3 if m.mlp in ("swiglu", "geglu") or s.gelu_saved > 1 else 2
    per_inter = k * s.act
    if t.finetuning != "full" and t.lora.rank:
        adapted = adapted_modules(m, t.lora.targets, t.framework)
        if any(x.source == "mlp_act" for x, n in adapted.linears if n):
            a = s.adapter_saved
            path = a * (2 if t.lora.dropout > 0 else 1) + (s.act if a != s.act else 0)
            per_inter = max(per_inter, s.act + path)
    flowing = s.residual * m.n_embd + per_inter * m.mlp_width
    if llama4.every_expert(m):  # its experts' backward, every expert for every token
        flowing += llama4.backward_bytes(m, s)
    return max(0, (flowing - head_activations(m, t)) * tokens)


def attention_forward_bytes(m: ModelConfig, t: TrainerConfig, batch: int, seq: int) -> int:
    """gpt-oss's eager attention in the last layer's forward, beyond what it saves
    (:func:`gpt_oss.attention_forward_bytes`), less what :func:`activation_bytes` counts that
    is not kept yet at that moment (the last layer's MLP and router, the head's): 0 for other
    models and kernels (CPU-traced on gpt-oss: 8 % under at the forward peak without it, LoRA
    under autocast)."""
    s = stack(m, t)
    if s.framework == "hf" and llama4.every_expert(m):
        # the last MoE layer at its experts' second bmm; its shared expert not yet run
        later = 3 * s.act * llama4.shared_width(m) + head_activations(m, t)
        full = t.finetuning == "full"
        return max(0, (llama4.forward_bytes(m, s, full) - later) * batch * seq)
    if s.framework != "hf" or not gpt_oss.is_gpt_oss(m) or attention(m, t) != "eager":
        return 0
    transient = gpt_oss.attention_forward_bytes(m, s, batch, seq, _mask_kinds(m, seq))
    # not yet kept at that moment: the last layer's MLP and router, and the head's tensors
    later = _mlp_bytes(m, s) + _router_bytes(m, t, s) + head_activations(m, t)
    return max(0, transient - later * batch * seq)


def _mask_kinds(m: ModelConfig, seq: int) -> int:
    """Masks transformers builds per forward: one of each kind when the model has sliding and
    full layers and the window is shorter than the sequence (``causal_mask_mapping``:
    ``create_causal_mask`` and ``create_sliding_window_causal_mask``, e.g.
    models/gpt_oss/modeling_gpt_oss.py ``GptOssModel.forward``)."""
    if llama4.every_expert(m):
        return llama4.mask_kinds(m, seq)
    window = m.sliding_window_size
    sliding = 0 < m.n_sliding_layers < m.n_layer
    return 2 if window is not None and window < seq and sliding else 1


def logits_forward_bytes(m: ModelConfig, t: TrainerConfig, batch: int, seq: int) -> int:
    """Logits and loss at their forward peak (the log-softmax, still inside the model's
    forward): transformers' 16-bit logits, their fp32 upcast and the fp32 log-probabilities,
    ``p + 8`` bytes per token and vocabulary row; other paths peak in backward
    (:func:`logits_bytes`)."""
    s = stack(m, t)
    if t.loss_chunking != "none" or s.framework != "hf":
        return logits_bytes(m, t, batch, seq)
    capped = s.act if m.final_logit_softcapping else 0
    return (s.act + 8 + capped) * m.head_rows * batch * seq
