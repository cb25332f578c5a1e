"""Whose conventions run the config (``trainer.framework``), as the dtypes and saved tensors
the memory estimate needs. One place: activations, weights and the estimate read this.

hf (transformers / PEFT / bitsandbytes / TRL):

* PEFT keeps LoRA weights in fp32 (``LoraConfig(autocast_adapter_dtype=True)``, the default)
  and casts each adapter's input to the adapter dtype (``LoraLayer._cast_input_dtype``,
  huggingface/peft src/peft/tuners/lora/layer.py ``Linear.forward``): every adapter keeps its
  own fp32 copy of its input (or its fp32 dropout output and a 1-byte CUDA dropout mask) and
  its fp32 rank-r output; the adapters' gradients and AdamW states are fp32 too.
* QLoRA as users run it: ``peft.prepare_model_for_kbit_training`` (src/peft/utils/other.py)
  casts every 16-bit parameter that is not ``Params4bit`` (embedding, norms, lm_head, biases)
  to fp32, so the embedding output and therefore the whole residual stream is fp32;
  bitsandbytes' ``Linear4bit.forward`` (bitsandbytes/nn/modules.py) casts its input to the
  ``compute_dtype`` transformers passes (``bnb_4bit_compute_dtype``) and the output back to
  the input dtype, so every activation is fp32; ``MatMul4Bit``
  (bitsandbytes/autograd/_functions.py) keeps ``(None, B)``: nothing of its input, and
  dequantizes the weight again in backward. An int8 load (``Linear8bitLt``) is upcast alike;
  ``MatMul8bitLt`` keeps its input ``A`` (a view, in its own dtype) and the outlier columns
  ``subA`` (``llm_int8_threshold=6.0``; a few columns, left out), and returns the input dtype.
  Their transient buffers: :func:`cfgcheck.memory.weights.dequant_bytes`.
* Phi's MLP activation is ``gelu_new`` (transformers models/phi/configuration_phi.py), the
  tanh formula written out in tensor ops (activations.py ``NewGELUActivation``): autograd keeps
  four intermediate-size tensors (x, tanh output, 0.5 x, 1 + tanh).
* Packed batches (``position_ids`` that restart in a row, no attention mask): transformers'
  masking_utils (``find_packed_sequence_indices``) builds a block-diagonal mask for sdpa and
  eager, so a packed batch pays like a padded one (mask kept, k/v expanded by ``repeat_kv``).
* Loss: the logits upcast to fp32 (``ForCausalLMLoss``, loss/loss_utils.py).
* Mixed precision (fp32 weights + ``torch.autocast``): the embedding output is fp32, so the
  residual stream and the norm outputs are fp32; autocast casts each linear's input to 16-bit
  itself (it caches only the casts of weights), so every linear whose weight trains keeps its
  own 16-bit copy, and every adapter keeps its 16-bit cast (checked on CPU autocast).

litgpt: LoRA weights in the model dtype (litgpt/lora.py), no upcast; the stream stays 16-bit;
quantized linears keep their input (bitsandbytes 0.41/0.42 of its tables); Phi's MLP uses
``gelu(approximate="tanh")`` (one saved tensor); no attention mask, k/v expanded, one dropout per
fused qkv adapter, an untied lm_head that bnb quantizes too, paged AdamW, and quantized inputs
that outlive the step: :func:`litgpt_layout`, :func:`as_built`.
torchtune: LoRA weights in the model dtype (torchtune/modules/peft/lora.py); not calibrated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from cfgcheck.memory.modules import architecture_of, traced
from cfgcheck.memory.traced import text_config
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

FOUR_BIT = ("nf4", "nf4-dq", "fp4")


@dataclass(frozen=True)
class Stack:
    framework: str
    act: int  # bytes per element of what the kernels produce (attention, MLP, linear outputs)
    residual: int  # bytes per element of the residual stream and the norms' outputs
    linear_cast: bool  # each linear casts its (residual-dtype) input itself: a copy each
    adapter: int  # bytes per LoRA weight element (its gradient and optimizer states follow)
    adapter_saved: int  # bytes per element of what an adapter keeps (input, rank-r output)
    adapter_input_copy: bool  # without dropout, each adapter keeps its own cast of its input
    quantized_saves_input: bool  # a quantized block linear keeps its input for backward
    kbit_upcast: bool  # unquantized parameters upcast to fp32 (prepare_model_for_kbit_training)
    gelu_saved: int  # intermediate-size tensors a (non-gated) GELU MLP keeps
    mask_when_packed: bool  # packed rows become a block-diagonal mask
    norm_out: int  # bytes of the normalized tensor a trained norm weight multiplies
    experts: int  # bytes per element of a mixture-of-experts' routed tensors (see stack())
    # LitGPT (see litgpt_layout below); the hf defaults change nothing
    kv_expanded: bool = False  # k/v expanded to n_head heads (copies) before the kernel
    fused_qkv_adapter: bool = False  # one LoRA dropout over the fused qkv input, not one per q/k/v
    split_gate_up: bool = False  # a fused gate_up projection is two linears, an adapter each
    quantized_head: bool = False  # the lm_head is a 4/8-bit linear too
    dequant_bytes: int = 0  # bytes per weight element while a quantized linear runs
    # quantized linears' saved inputs live until the next step's forward ends (see litgpt_layout)
    quantized_inputs_outlive_step: bool = False


def compute_bytes(t: TrainerConfig) -> int:
    """Bytes of an activation element under the precision alone: fp32 only for ``32-true``."""
    return 4 if t.precision == "32-true" else 2


def quantized(t: TrainerConfig) -> bool:
    return t.quantization != "none" and t.finetuning != "full"


def stack(m: ModelConfig, t: TrainerConfig) -> Stack:
    p = compute_bytes(t)
    mixed = t.precision.endswith("-mixed")
    if t.framework == "hf":
        # prepare_model_for_kbit_training upcasts after a 4-bit or an 8-bit load alike, a
        # pre-quantized bitsandbytes checkpoint included (is_loaded_in_4bit / _8bit); not a
        # GPTQ one (peft/utils/other.py skips the cast for gptq, aqlm, eetq, hqq, torchao)
        prequantized = (m.weight_format or "").startswith("bnb-") and t.finetuning != "full"
        upcast = quantized(t) or prequantized
        if upcast:  # fp32 stream, fp32 adapters, nothing cast
            act, residual, cast, saved, copy = 4, 4, False, 4, False
        elif mixed:
            # fp32 weights under autocast: the embedding output and so the residual stream and
            # the norms stay fp32; each linear (and each adapter's lora_A) casts its input to
            # 16-bit itself (autocast caches casts of weights, not of activations)
            act, residual, cast, saved, copy = 2, 4, True, 2, True
        else:  # bf16-true: PEFT casts each adapter's input to fp32; 32-true: nothing to cast
            act, residual, cast, saved, copy = p, p, False, 4, p != 4
        return Stack(
            framework="hf",
            act=act,
            residual=residual,
            linear_cast=cast,
            adapter=4,
            adapter_saved=saved,
            adapter_input_copy=copy,
            quantized_saves_input=t.quantization == "int8",
            kbit_upcast=upcast,
            gelu_saved=_gelu_saved(m),
            mask_when_packed=True,
            # GemmaRMSNorm multiplies in fp32 and casts after ((x * w).to(dtype), transformers
            # models/gemma/modeling_gemma.py), OLMo 2's too; Llama's casts first (x.to(dtype) * w)
            norm_out=4 if fp32_weight_norm(m) else residual,
            # the routed experts run in their weights' dtype: transformers' grouped_mm (and its
            # fallback) is not autocast-enabled and casts its input to the weight dtype
            # (integrations/moe.py ``_grouped_mm``: ``input.to(weight.dtype)``, "not
            # autocast-enabled"), so under autocast the fp32 experts compute and keep fp32
            experts=4 if upcast or mixed else p,
        )
    return Stack(
        framework=t.framework,
        act=p,
        residual=4 if mixed else p,
        linear_cast=mixed,
        adapter=p if t.precision == "bf16-true" else 4,
        adapter_saved=2 if mixed else p,
        adapter_input_copy=mixed,
        # LitGPT's published tables ran bitsandbytes 0.41, whose MatMul4Bit kept its input
        # (``ctx.tensors = (A, B)``); kept here, the safe side for today's releases too
        quantized_saves_input=t.quantization != "none",
        kbit_upcast=False,
        gelu_saved=1,
        mask_when_packed=False,
        norm_out=4 if mixed else p,
        experts=p,
        **litgpt_layout(t, t.framework == "litgpt"),
    )


def _gelu_saved(m: ModelConfig) -> int:
    """Intermediate-size tensors transformers' GELU keeps: four for ``gelu_new``, written out
    in tensor ops (``NewGELUActivation``: ``0.5 * input * (1.0 + torch.tanh(...))``,
    transformers 5.24 activations.py; GPT-2, Phi, GPT-J), one for ``nn.functional.gelu``."""
    if m.architecture in (None, "phi", "gpt2"):
        return 4
    return 4 if hf_activation(m) == "gelu_new" else 1


def hf_activation(m: ModelConfig) -> str | None:
    """The MLP activation of a family read generically: its config.json's
    ``activation_function`` (GPT-J) or ``hidden_act``, else the config class's default, as
    the meta-device trace read it (:attr:`cfgcheck.memory.traced.Trace.activation`: shipped
    or cached for the presets, so no transformers import)."""
    if m.hf_config is None:
        return None
    text = text_config(m.hf_config)
    for key in ("activation_function", "hidden_act", "hidden_activation"):
        if isinstance(text.get(key), str):
            return str(text[key])
    tr = traced(m)
    return tr.activation if tr is not None else None


class LitgptLayout(TypedDict):
    kv_expanded: bool
    fused_qkv_adapter: bool
    split_gate_up: bool
    quantized_head: bool
    dequant_bytes: int
    quantized_inputs_outlive_step: bool


def litgpt_layout(t: TrainerConfig, litgpt: bool = True) -> LitgptLayout:
    """What LitGPT's own code does beyond the dtypes (Lightning-AI/litgpt, the finetune commands
    of the config-hub tables, 04/2024 to 09/2024, and today's):

    * ``CausalSelfAttention.forward`` (litgpt/model.py) expands k and v to ``n_head`` heads for
      training ("training: flash attention requires it") and reshapes them: two copies kept by
      the kernel; it passes no mask in training (``is_causal=mask is None``), so padded
      batches pay nothing for padding.
    * ``LoRAQKVLinear.forward`` (litgpt/lora.py): the fused qkv projection has one
      ``lora_dropout(x)`` for whichever of q, k, v are enabled, and one ``lora_A`` whose output
      is ``r`` wide per enabled projection. Its gated MLPs are ``LLaMAMLP`` (``fc_1``, ``fc_2``,
      ``proj``) also where transformers fuses ``gate_up_proj`` (Phi-3, litgpt/config.py): two
      LoRA layers, two dropouts.
    * quantize=bnb.*: Lightning Fabric's ``BitsandbytesPrecision`` (src/lightning/fabric/plugins/
      precision/bitsandbytes.py) swaps every ``torch.nn.Linear`` for a bitsandbytes one
      (``init_context`` / ``_convert_layers``, no ``ignore_modules`` from LitGPT): the lm_head
      and the base linear inside each LoRA layer included. ``_Linear4bit._quantize_weight``
      quantizes from ``torch.half``, so ``MatMul4Bit`` dequantizes to fp16 and casts to the
      bf16 input (``.to(A.dtype)``, bitsandbytes autograd/_functions.py): 4 bytes per weight
      element while the linear runs (2 in 16-true).
    * quantize=bnb.*: ``bnb.optim.PagedAdamW`` (litgpt/finetune/lora.py ``main``;
      ``instantiate_bnb_optimizer`` in today's litgpt/utils.py): paged states
      (:func:`cfgcheck.memory.weights.paged`).
    * bitsandbytes 0.41/0.42 (the tables' releases) keep ``MatMul4Bit``'s input as a ctx
      *attribute* (``ctx.tensors = (A, B)``), not through ``save_for_backward``: autograd's
      engine frees saved variables after backward, not attributes, which live as long as the
      graph node. ``fit()`` keeps the step's ``logits`` list (its ``grad_fn`` holds the whole
      graph) until ``logits = model(...)`` of the next step returns, so every quantized linear's
      input of the previous step is still allocated when the next forward ends.
    """
    q = quantized(t) and litgpt
    return {
        "kv_expanded": litgpt,
        "fused_qkv_adapter": litgpt,
        "split_gate_up": litgpt,
        "quantized_head": q,
        "dequant_bytes": (2 if t.precision.startswith("16") else 4) if q else 0,
        "quantized_inputs_outlive_step": q,
    }


def as_built(m: ModelConfig, t: TrainerConfig) -> ModelConfig:
    """The model as the framework builds it: LitGPT's ``GPT`` has its own ``lm_head`` even when
    the checkpoint ties it (litgpt/scripts/convert_hf_checkpoint.py copies
    ``transformer.wte.weight`` into ``lm_head.weight``; litgpt/model.py has no tying)."""
    if t.framework == "litgpt" and m.tie_embeddings:
        return m.model_copy(update={"tie_embeddings": False})
    return m


# RMSNorms that multiply their weight in fp32 and cast after, ``(self.weight *
# hidden_states).to(input_dtype)``, besides Gemma's: transformers models/olmo2/modeling_olmo2.py
# ``Olmo2RMSNorm``, olmo3, flex_olmo, gpt_oss ``GptOssRMSNorm`` (the same forward).
FP32_WEIGHT_NORMS = frozenset({"olmo2", "olmo3", "flex_olmo", "gpt_oss"})


def fp32_weight_norm(m: ModelConfig) -> bool:
    """The norms multiply their weight in fp32 before casting back (Gemma's ``(x * (1 +
    w)).to(dtype)``, OLMo 2's ``(w * x).to(dtype)``): a trained weight keeps the fp32
    normalized tensor; Llama's casts first (``w * x.to(dtype)``)."""
    return _gemma_norm(m) or m.architecture in FP32_WEIGHT_NORMS or m.norm == "cohere_layernorm"


def _gemma_norm(m: ModelConfig) -> bool:
    if m.architecture is not None:
        return m.architecture.startswith("gemma")
    return m.mlp == "geglu" and m.norm == "rmsnorm"


def attention(m: ModelConfig, t: TrainerConfig) -> str:
    """The attention kernel that really runs: transformers has no sdpa path for attention-logit
    soft-capping, and none for Gemma 2 at all (``_supports_sdpa = False``,
    models/gemma2/modeling_gemma2.py; asking for sdpa raises), so such a model runs eager
    attention; flash-attention 2 takes the soft-cap. LitGPT computes soft-capped attention in
    tensor ops ("with softcapping we cannot use SDPA", litgpt/model.py
    CausalSelfAttention.scaled_dot_product_attention)."""
    if t.attention != "sdpa":
        return t.attention
    if t.framework == "hf":
        if m.attention_logit_softcapping or architecture_of(m) == "gemma2":
            return "eager"
        tr = traced(m)
        if tr is not None and not tr.supports_sdpa:  # gpt-oss: _supports_sdpa = False
            return "eager"
        if sdpa_math(m, t):
            return "eager"
    if t.framework == "litgpt" and m.attention_logit_softcapping:
        return "eager"
    return t.attention


def sdpa_math(m: ModelConfig, t: TrainerConfig) -> bool:
    """sdpa that runs torch's math kernel, an eager attention in fp32: Falcon-7B's layout
    (``new_decoder_architecture=False`` with ``multi_query``) hands sdpa one k/v head against
    ``n_head`` query heads, without ``enable_gqa``, and always a materialized mask
    (transformers 5.24 models/falcon/modeling_falcon.py lines 313-345: ``num_kv_heads =
    self.num_heads if self.new_decoder_architecture else self.num_kv_heads``,
    ``scaled_dot_product_attention(query_layer, key_layer, value_layer,
    attn_mask=attention_mask, ...)``; line 760 ``allow_is_causal_skip=False``). torch's fused
    kernels need as many k/v heads as query heads unless ``enable_gqa`` (aten
    native/transformers/sdp_utils_cpp.h ``check_batch_size_and_num_heads_dense``; on CPU
    ``torch._fused_sdp_choice`` picks the math backend for these shapes, the flash one for
    equal heads), so the math kernel runs: it casts a 16-bit q, k and v to fp32, broadcasts k
    and v to every head in its matmuls and keeps the fp32 softmax (measured on CPU,
    tests/test_memory_layers_arch.py ``test_parallel_block_layer_bytes_equal_transformers``;
    not measured on a GPU, which coverage.py says)."""
    if t.framework != "hf" or t.attention != "sdpa" or architecture_of(m) != "falcon":
        return False
    hf = m.hf_config or {}
    return not hf.get("new_decoder_architecture", False) and m.kv_heads < m.n_head


def sdpa_masked(m: ModelConfig, d: DataConfig, t: TrainerConfig, s: Stack, seq: int) -> bool:
    """Whether the attention kernel gets a mask: padded batches, packed rows turned into a
    block-diagonal mask (transformers), or a sliding window shorter than the sequence
    (transformers' masking_utils cannot use ``is_causal`` then)."""
    if s.framework == "hf" and m.sliding_window_size is not None and m.sliding_window_size < seq:
        return True
    if s.framework == "litgpt":
        return False  # LitGPT never hands sdpa a mask in training (see litgpt_layout)
    if d.collator == "packed":
        return s.mask_when_packed
    return padded_batches(d, t)


def padded_batches(d: DataConfig, t: TrainerConfig) -> bool:
    """Whether batches carry padding (so transformers hands sdpa an attention mask)."""
    return Pipeline.from_sections(d, t).carries_padding
