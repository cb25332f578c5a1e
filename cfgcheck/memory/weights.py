"""Bytes of weights, gradients and optimizer states, from the parameter count and settings."""

from __future__ import annotations

from cfgcheck.memory.activations import first_layer_frozen_linears
from cfgcheck.memory.modules import traced
from cfgcheck.memory.params import (
    ParamCount,
    adapted_modules,
    block_linears,
    count_params,
    lora_params,
    norm_params,
    norms_per_block,
)
from cfgcheck.memory.stack import compute_bytes, quantized, stack
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

# Bytes per quantized weight element (bitsandbytes 0.50, bitsandbytes/nn/modules.py and
# functional.py): int8 (``Int8Params._quantize``: ``int8_vectorwise_quant``) stores the int8
# matrix CB with one fp32 absmax (SCB) per output row, added separately; 4-bit
# (``quantize_4bit``, ``Params4bit`` defaults blocksize=64, quant_storage=uint8) packs two
# values per byte with one fp32 absmax per block of 64; nf4 and fp4 differ only in the 16-entry
# code; double quantization (``compress_statistics``) re-quantizes the absmax to uint8 in blocks
# of 256 with an fp32 absmax per block (``quantize_blockwise(absmax - offset, blocksize=256)``).
# The per-linear code tables and offset (about 1 KiB) are left out.
QUANT_BYTES: dict[str, float] = {
    "int8": 1.0,
    "nf4": 0.5 + 4 / 64,
    "fp4": 0.5 + 4 / 64,
    "nf4-dq": 0.5 + 1 / 64 + 4 / (64 * 256),
}


def prequantized_bytes(m: ModelConfig) -> float | None:
    """Bytes per block linear weight element of a pre-quantized checkpoint
    (``model.weight_format``), as the layers that load it store it; None when its linears
    are 16/32-bit (MXFP4 is dequantized to train: transformers' Mxfp4HfQuantizer.is_trainable
    is False, so the run loads it with ``Mxfp4Config(dequantize=True)``).

    * GPTQ / AWQ of ``b`` bits, group ``g`` (gptqmodel's QuantLinear buffers, which
      transformers' GPTQ and AWQ quantizers load): ``qweight`` packs ``b`` bits per element in
      int32, ``scales`` one fp16 and ``qzeros`` ``b`` bits per group of ``g`` inputs and
      output: ``b/8 + (2 + b/8)/g``;
    * bitsandbytes 4-bit / 8-bit: :data:`QUANT_BYTES` (the same storage as a run's own
      bitsandbytes quantization), the int8 row scales added by the caller;
    * FP8 (``FineGrainedFP8Config``, transformers/integrations/finegrained_fp8.py): one byte
      per element and an fp32 scale per 128 x 128 block; fbgemm FP8: one byte, a row scale.
    """
    fmt = m.weight_format
    if fmt is None or fmt == "mxfp4":
        return None
    if fmt.startswith(("gptq", "awq")):
        bits = int(fmt.split("-")[1].removesuffix("bit"))
        g = m.quant_group_size or 128
        return bits / 8 + (2 + bits / 8) / g
    if fmt.startswith("bnb-"):
        return QUANT_BYTES[fmt.removeprefix("bnb-")]
    return 1 + 4 / (128 * 128) if fmt == "fp8" else 1.0


def master_bytes(t: TrainerConfig) -> int:
    """Bytes per stored (trainable) parameter: fp32 unless ``bf16-true``."""
    return 2 if t.precision == "bf16-true" else 4


def trainable_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """Bytes per trainable parameter (and per gradient element): the master dtype for full
    fine-tuning, the adapter dtype for LoRA (fp32 under PEFT, see :mod:`stack`)."""
    if t.finetuning == "full":
        return master_bytes(t)

    return stack(m, t).adapter


def trainable_params(m: ModelConfig, t: TrainerConfig) -> int:
    if t.finetuning == "full":
        return count_params(m).total
    lora = t.lora
    return lora_params(m, lora.rank or 0, lora.targets, t.framework, lora.target_parameters)


def weight_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """The base model's weights (adapters not included), quantized block linears included."""
    pc = count_params(m)
    stored = master_bytes(t)
    per = prequantized_bytes(m)
    if per is not None and t.quantization == "none":  # a GPTQ / AWQ / bnb / FP8 checkpoint
        quant = pc.linear_weights * per
        if m.weight_format in ("bnb-int8", "fbgemm-fp8"):  # one fp32 scale per output row
            quant += 4 * m.n_layer * sum(x.out_features for x in block_linears(m))

        if stack(m, t).kbit_upcast:  # prepare_model_for_kbit_training: 16-bit params to fp32
            stored = 4
        return int(quant) + pc.unquantized * stored
    if t.quantization not in QUANT_BYTES or t.finetuning == "full":
        return pc.total * stored

    st = stack(m, t)
    # LitGPT under Fabric's bitsandbytes plugin quantizes the (untied) lm_head too
    head = m.head_rows * m.n_embd if st.quantized_head and pc.lm_head else 0
    quant = (pc.linear_weights + head) * QUANT_BYTES[t.quantization]
    if t.quantization == "int8":
        quant += 4 * m.n_layer * sum(x.out_features for x in block_linears(m))
        quant += 4 * m.head_rows if head else 0
    if st.kbit_upcast:  # prepare_model_for_kbit_training: 16-bit params to fp32
        stored = 4
    return int(quant) + (pc.unquantized - head) * stored


def autocast_copy_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """Mixed precision: the 16-bit casts of fp32 linear weights that autocast makes and
    autograd keeps for backward (every unquantized linear, lm_head included, except the first
    layer's frozen linears whose input has no gradient: ``first_layer_frozen_linears``)."""
    if not t.precision.endswith("-mixed"):
        return 0

    pc: ParamCount = count_params(m)
    # a traced model's other matmul weights (routers: F.linear on an fp32 parameter) are cast
    # the same way; not the routed experts (:func:`_uncast_experts`)
    linear = 0 if quantized(t) else pc.linear_weights + pc.other - _uncast_experts(m)
    head = m.head_rows * m.n_embd
    adapters = 0 if t.finetuning == "full" else trainable_params(m, t)
    uncast = sum(x.in_features * x.out_features for x in first_layer_frozen_linears(m, t))
    return 2 * (linear + head + adapters - uncast)


def _uncast_experts(m: ModelConfig) -> int:
    """The routed experts' parameters, which autocast never casts: transformers runs them
    through ``grouped_mm``, not autocast-enabled, on the weights as stored (integrations/moe.py
    ``_grouped_mm``: ``input.to(weight.dtype)``; CPU-traced: no 16-bit copy of them)."""
    tr = traced(m) if m.n_expert else None
    return tr.expert_params if tr is not None else 0


def autocast_layer_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """Mixed precision with checkpointing: the 16-bit casts of one block's linear weights
    (and adapters), what the recomputation of one layer makes and keeps for its backward."""
    if not t.precision.endswith("-mixed"):
        return 0

    pc = count_params(m)
    other = pc.other - _uncast_experts(m)
    linear = 0 if quantized(t) else pc.block_linear_weight_elems + other // m.n_layer
    adapters = 0 if t.finetuning == "full" else trainable_params(m, t) // m.n_layer
    return 2 * (linear + adapters)


def paged(t: TrainerConfig) -> bool:
    """bitsandbytes paged optimizers keep their states in CUDA unified memory
    (``cudaMallocManaged``, bitsandbytes/functional.py ``get_paged``): outside torch's
    allocator counters, resident on the GPU while it has room, so inside the device total."""
    if t.optimizer.startswith("paged_"):
        return True

    # LitGPT trains quantized models with bnb.optim.PagedAdamW (stack.litgpt_layout)
    return t.framework == "litgpt" and quantized(t) and t.optimizer == "adamw"


# bitsandbytes 0.50 ``Optimizer2State.init_state`` (bitsandbytes/optim/optimizer.py): a
# parameter with fewer than ``min_8bit_size`` elements (4096, the default of ``AdamW8bit`` and
# ``PagedAdamW8bit``) keeps two fp32 states; a larger one two uint8 states (``state1``,
# ``state2``) and two fp32 absmax vectors, one value per block of 256 (``absmax1``,
# ``absmax2``); the two 256-entry qmaps are shared by all parameters. ``get_state_buffer`` puts
# a state in CUDA managed memory only for a paged optimizer and a parameter of at least 1e5
# elements; the absmax vectors and the states of smaller parameters are ordinary tensors.
MIN_8BIT_SIZE = 4096
STATE_BLOCK = 256
PAGED_MIN_NUMEL = 100_000
# Device memory a paged optimizer's managed states take, as NVML counts it: the H100 rows that
# page 22 MB and 34 MB of states both use exactly 128 MiB more than the same stack paging
# nothing (benchmarks/calibration/: used minus reserved 0.858 vs 0.733 GiB), so managed memory
# is counted in 128 MiB steps (a measured granularity, not a source figure).
MANAGED_STEP = 128 * 2**20


def trainable_tensors(m: ModelConfig, t: TrainerConfig) -> list[tuple[int, int]]:
    """``(elements, count)`` of every trainable tensor, as a per-tensor optimizer sees them:
    PEFT's ``lora_A`` (rank x in) and ``lora_B`` (out x rank) per adapter (embedding adapters:
    rank x rows and hidden x rank), or for full fine-tuning every parameter of the model."""
    if t.finetuning != "full":
        r = t.lora.rank or 0
        adapted = adapted_modules(m, t.lora.targets, t.framework)
        out = [(r * x.in_features, n) for x, n in adapted.linears if n]
        out += [(r * x.out_features, n) for x, n in adapted.linears if n]
        if adapted.lm_head:
            out += [(r * m.n_embd, 1), (r * m.head_rows, 1)]
        out += [(r * rows, 1) for rows in adapted.embedding_rows]
        out += [(r * m.n_embd, 1) for _ in adapted.embedding_rows]
        return [x for x in out if x[0]]
    pc = count_params(m)
    per_norm = 2 if m.norm == "layernorm" else 1  # weight, and bias for LayerNorm
    out = [(m.rows * m.n_embd, 1)]
    if pc.position_embedding:
        out.append((pc.position_embedding, 1))
    if pc.lm_head:
        out.append((m.head_rows * m.n_embd, 1))
        if pc.lm_head > m.head_rows * m.n_embd:
            out.append((m.head_rows, 1))
    for x in block_linears(m):
        out.append((x.in_features * x.out_features, m.n_layer))
        if x.bias:
            out.append((x.out_features, m.n_layer))
    out.append((norm_params(m) // per_norm, norms_per_block(m) * m.n_layer * per_norm))
    if m.norm_qk:
        out.append((norm_params(m, m.head_dim) // per_norm, 2 * m.n_layer * per_norm))
    out.append((norm_params(m) // per_norm, per_norm))
    return out + _traced_other_tensors(m, pc.other)


def _traced_other_tensors(m: ModelConfig, other: int) -> list[tuple[int, int]]:
    """A traced model's parameters outside the uniform layout (``ParamCount.other``): each
    MoE layer's fused ``gate_up_proj`` (E x 2 width x hidden) and ``down_proj``
    (E x hidden x width), and the rest (routers, expert biases, odd layers) as one tensor."""
    if not other:
        return []
    tr = traced(m)
    out: list[tuple[int, int]] = []
    rest = other
    for e in tr.experts if tr is not None else ():
        gate_up, down = e.n_expert * 2 * e.width * m.n_embd, e.n_expert * e.width * m.n_embd
        if gate_up + down <= min(e.params, rest):
            out += [(gate_up, 1), (down, 1)]
            rest -= gate_up + down
    return out + ([(rest, 1)] if rest > 0 else [])


def _bnb_8bit_state(numel: int, paged_opt: bool) -> tuple[int, int]:
    """(ordinary, managed) bytes of one parameter's 8-bit AdamW state."""
    if numel < MIN_8BIT_SIZE:
        return 2 * 4 * numel, 0  # fp32 states, never paged (below PAGED_MIN_NUMEL)
    absmax = 2 * 4 * -(-numel // STATE_BLOCK)
    if paged_opt and numel >= PAGED_MIN_NUMEL:
        return absmax, 2 * numel
    return absmax + 2 * numel, 0


def _bnb_8bit_states(m: ModelConfig, t: TrainerConfig) -> tuple[int, int]:
    ordinary = managed = 0
    for numel, count in trainable_tensors(m, t):
        o, p = _bnb_8bit_state(numel, paged(t))
        ordinary, managed = ordinary + o * count, managed + p * count
    return ordinary, managed


def paged_state_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """The optimizer states that live in CUDA managed memory (see :func:`paged`)."""
    if t.optimizer == "paged_adamw_8bit":
        return _bnb_8bit_states(m, t)[1]
    if paged(t):  # LitGPT's 32-bit PagedAdamW: fp32 states, paged from PAGED_MIN_NUMEL
        big = [(n, c) for n, c in litgpt_trainable_tensors(m, t) if n >= PAGED_MIN_NUMEL]
        return 8 * sum(n * c for n, c in big)
    return 0


def litgpt_trainable_tensors(m: ModelConfig, t: TrainerConfig) -> list[tuple[int, int]]:
    """:func:`trainable_tensors` as LitGPT builds its LoRA (litgpt/lora.py): the fused qkv has
    one ``lora_A`` (rank x number of enabled q/k/v, in) and one ``lora_B`` (enabled widths,
    rank) per layer; every other adapted linear has its own pair."""
    tensors = trainable_tensors(m, t)
    if t.finetuning == "full":
        return tensors
    r = t.lora.rank or 0
    adapted = adapted_modules(m, t.lora.targets, t.framework)
    qkv = [(x, n) for x, n in adapted.linears if n and x.source == "attn_in"]
    if len(qkv) < 2:
        return tensors
    for x, n in qkv:
        tensors.remove((r * x.in_features, n))
        tensors.remove((r * x.out_features, n))
    layers = max(n for _, n in qkv)
    tensors.append((r * len(qkv) * qkv[0][0].in_features, layers))
    tensors.append((r * sum(x.out_features for x, _ in qkv), layers))
    return tensors


def managed_device_bytes(managed: int) -> int:
    """Device memory that ``managed`` bytes of paged states take (:data:`MANAGED_STEP`)."""
    return -(-managed // MANAGED_STEP) * MANAGED_STEP


def gradient_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    return trainable_params(m, t) * trainable_bytes(m, t)


def _adafactor_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """Adafactor (no first moment): a row and a column vector per matrix, full otherwise."""
    pc = count_params(m)
    if t.finetuning != "full":
        r = t.lora.rank or 0
        n_adapted = trainable_params(m, t) // max(r, 1)  # sum of (in + out) over adapters
        adapted = adapted_modules(m, t.lora.targets, t.framework)  # the adapters PEFT builds
        n_adapters = sum(n for _, n in adapted.linears) + adapted.lm_head
        n_mats = 2 * (n_adapters + len(adapted.embedding_rows))
        return 4 * (n_adapted + r * n_mats)
    per_block = sum(x.in_features + x.out_features for x in block_linears(m))
    vectors = pc.total - pc.linear_weights - pc.embedding - pc.lm_head
    head = 0 if m.tie_embeddings and m.head == "causal_lm" else m.head_rows + m.n_embd
    return 4 * (per_block * m.n_layer + m.rows + m.n_embd + head + vectors)


def optimizer_state_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    n = trainable_params(m, t)
    if t.optimizer == "adamw" and paged(t):  # bnb PagedAdamW keeps 32-bit states
        return 8 * n
    if t.optimizer == "adamw":
        return 2 * n * trainable_bytes(m, t)
    if t.optimizer in ("adamw_8bit", "paged_adamw_8bit"):
        return sum(_bnb_8bit_states(m, t))  # per tensor: see MIN_8BIT_SIZE
    if t.optimizer == "sgd":
        return n * trainable_bytes(m, t)  # one momentum buffer
    return _adafactor_bytes(m, t)


def optimizer_step_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """Temporaries of the optimizer step (torch/optim/adamw.py, sgd.py, _adafactor.py, the
    multi-tensor paths CUDA uses by default): AdamW builds one parameter-sized list
    (``sqrt(exp_avg_sq)``); SGD with momentum updates in place; Adafactor
    (``_multi_tensor_adafactor``) groups the parameters by dimensionality and builds, per group,
    one list of variance estimates (``row_var @ col_var``, or a clone of the variance of a
    vector) that it turns into the updates in place: the larger group, the matrices, counts
    (checked on CPU with ``foreach=True``, tests/test_memory_tracer.py); bitsandbytes' 8-bit
    AdamW updates parameter by parameter in place (``optimizer_update_8bit_blockwise`` /
    ``optimizer_update_32bit`` kernels, ``p.data.contiguous()`` a no-op): nothing."""
    n = trainable_params(m, t) * trainable_bytes(m, t)
    if t.optimizer == "adamw" and not paged(t):  # bnb's PagedAdamW: its 32-bit kernel
        return n
    if t.optimizer == "adafactor":
        if t.finetuning != "full":  # LoRA A and B are all matrices
            return n
        pc = count_params(m)
        vectors = pc.total - pc.linear_weights - pc.embedding - pc.lm_head
        return max(pc.total - vectors, vectors) * trainable_bytes(m, t)
    return 0


def _quant_linear_transient(
    quant: str, act: int, compute: int, n_in: int, n_out: int, tokens: int
) -> int:
    """Largest transient of one frozen bitsandbytes linear (forward or backward), beyond its
    input, output and the gradients that flow through it (bitsandbytes 0.50).

    4-bit (``Linear4bit.forward``, bitsandbytes/nn/modules.py): the input is cast to the
    ``compute_dtype`` transformers passes (``bnb_4bit_compute_dtype``; a copy when the stream
    is another dtype) and the output cast back. Forward, ``gemm_4bit`` (backends/cuda/ops.py)
    dequantizes into a weight-sized buffer of the compute dtype (``_dequant_linear_fallback``,
    all training batches above 1536 tokens and most below on an H100), a nested state first
    rebuilding the fp32 absmax (two per-block fp32 vectors). Backward, ``MatMul4Bit.backward``
    (autograd/_functions.py) calls ``dequantize_4bit``, which returns the dtype the weight was
    quantized from (16-bit), cast to the gradient's dtype: the gradient in the compute dtype,
    the weight, the input gradient in the compute dtype.
    int8 (``MatMul8bitLt``, ``llm_int8_threshold=6.0``): forward casts the input to fp16 and
    finds outlier columns (``abs()`` and a bool mask: 5 bytes per input element at once),
    keeps the int8 input (1 byte) while the int32 product (4) and its fp16 dequantization (2)
    exist (``int8_scaled_mm`` -> ``int8_mm_dequant``, then ``.to`` the input dtype); backward
    copies the int8 weight to the input dtype (``CB.to(dtype_A, copy=True)``).
    """
    weight = n_in * n_out
    if quant == "int8":
        forward = max(5 * tokens * n_in, tokens * n_in + 6 * tokens * n_out)
        return max(forward, act * weight)
    nested = 4 * weight // 64 if quant == "nf4-dq" else 0  # fp32 absmax per block of 64
    cast = compute if compute != act else 0  # the compute-dtype copies of input and output
    forward = cast * tokens * (n_in + n_out) + compute * weight + 2 * nested
    backward = (
        cast * tokens * n_out  # the gradient cast to the compute dtype
        + (2 + (compute if compute != 2 else 0)) * weight  # 16-bit dequantized, cast
        + nested
        + cast * tokens * n_in  # the input gradient before its cast back
    )
    return max(forward, backward)


def dequant_bytes(m: ModelConfig, t: TrainerConfig, tokens: int = 0) -> int:
    """Transient buffers of the quantized linears of the layer being recomputed (the largest
    linear counts; see :func:`_quant_linear_transient`), for ``tokens`` tokens."""

    if not quantized(t):
        return 0
    act = stack(m, t).act
    compute = compute_bytes(t)  # bnb_4bit_compute_dtype: bf16 unless the run is fp32
    return max(
        _quant_linear_transient(t.quantization, act, compute, x.in_features, x.out_features, tokens)
        for x in block_linears(m)
    )
