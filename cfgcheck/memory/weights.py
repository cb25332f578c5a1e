"""Bytes of weights, gradients and optimizer states, from the parameter count and settings."""

from __future__ import annotations

from cfgcheck.memory.params import (
    ParamCount,
    adapted_modules,
    block_linears,
    count_params,
    lora_params,
)
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

# Bytes per quantized weight element: bitsandbytes stores int8 weights with one fp32 scale
# per output row (added separately); 4-bit in blocks of 64 with an fp32 absmax per block, or,
# double-quantized, an int8 absmax per block and an fp32 scale per 256 blocks.
QUANT_BYTES: dict[str, float] = {
    "int8": 1.0,
    "nf4": 0.5 + 4 / 64,
    "fp4": 0.5 + 4 / 64,
    "nf4-dq": 0.5 + 1 / 64 + 4 / (64 * 256),
}


def master_bytes(t: TrainerConfig) -> int:
    """Bytes per stored (trainable) parameter: fp32 unless ``bf16-true``."""
    return 2 if t.precision == "bf16-true" else 4


def trainable_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """Bytes per trainable parameter (and per gradient element): the master dtype for full
    fine-tuning, the adapter dtype for LoRA (fp32 under PEFT, see :mod:`stack`)."""
    if t.finetuning == "full":
        return master_bytes(t)
    from cfgcheck.memory.stack import stack

    return stack(m, t).adapter


def trainable_params(m: ModelConfig, t: TrainerConfig) -> int:
    if t.finetuning == "full":
        return count_params(m).total
    return lora_params(m, t.lora.rank or 0, t.lora.targets, t.framework)


def weight_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """The base model's weights (adapters not included), quantized block linears included."""
    pc = count_params(m)
    stored = master_bytes(t)
    if t.quantization not in QUANT_BYTES or t.finetuning == "full":
        return pc.total * stored
    from cfgcheck.memory.stack import stack

    st = stack(m, t)
    # LitGPT under Fabric's bitsandbytes plugin quantizes the (untied) lm_head too
    head = m.rows * m.n_embd if st.quantized_head and pc.lm_head else 0
    quant = (pc.linear_weights + head) * QUANT_BYTES[t.quantization]
    if t.quantization == "int8":
        quant += 4 * m.n_layer * sum(x.out_features for x in block_linears(m))
        quant += 4 * m.rows if head else 0
    if st.kbit_upcast:  # prepare_model_for_kbit_training: 16-bit params to fp32
        stored = 4
    return int(quant) + (pc.unquantized - head) * stored


def autocast_copy_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """Mixed precision: the 16-bit casts of fp32 linear weights that autocast makes and
    autograd keeps for backward (every unquantized linear, lm_head included)."""
    if not t.precision.endswith("-mixed"):
        return 0
    pc: ParamCount = count_params(m)
    quantized = t.quantization in QUANT_BYTES and t.finetuning != "full"
    linear = 0 if quantized else pc.linear_weights
    head = m.rows * m.n_embd
    adapters = 0 if t.finetuning == "full" else trainable_params(m, t)
    return 2 * (linear + head + adapters)


def paged(t: TrainerConfig) -> bool:
    """bitsandbytes paged optimizers keep their states in CUDA unified memory
    (``cudaMallocManaged``, bitsandbytes/functional.py ``get_paged``): outside torch's
    allocator counters, resident on the GPU while it has room, so inside the device total."""
    if t.optimizer.startswith("paged_"):
        return True
    from cfgcheck.memory.stack import quantized

    # LitGPT trains quantized models with bnb.optim.PagedAdamW (stack.litgpt_layout)
    return t.framework == "litgpt" and quantized(t) and t.optimizer == "adamw"


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
    head = 0 if m.tie_embeddings else m.rows + m.n_embd
    return 4 * (per_block * m.n_layer + m.rows + m.n_embd + head + vectors)


def optimizer_state_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    n = trainable_params(m, t)
    if t.optimizer == "adamw":
        return 2 * n * trainable_bytes(m, t)
    if t.optimizer in ("adamw_8bit", "paged_adamw_8bit"):
        return int(n * (2 + 2 * 4 / 256))  # two int8 states + fp32 absmax per 256-block
    if t.optimizer == "sgd":
        return n * trainable_bytes(m, t)  # one momentum buffer
    return _adafactor_bytes(m, t)


def optimizer_step_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """Temporaries of the optimizer step (torch/optim/adamw.py, sgd.py, _adafactor.py, the
    multi-tensor paths CUDA uses by default): AdamW builds one parameter-sized list
    (``sqrt(exp_avg_sq)``); SGD with momentum updates in place; Adafactor builds the variance
    estimates and the updates (two lists); 8-bit optimizers update parameter by parameter."""
    n = trainable_params(m, t) * trainable_bytes(m, t)
    if t.optimizer == "adamw":
        return n
    if t.optimizer == "adafactor":
        return 2 * n
    return 0


def dequant_bytes(m: ModelConfig, t: TrainerConfig) -> int:
    """Transient buffers of a quantized linear while its layer runs: bitsandbytes' 4-bit
    ``MatMul4Bit`` dequantizes the weight (in the stored 16-bit dtype) and casts it to the
    input's dtype, in forward and again in backward (bitsandbytes/autograd/_functions.py);
    int8 backward copies the weight to the input dtype. The largest block linear counts."""
    from cfgcheck.memory.stack import quantized, stack

    if not quantized(t):
        return 0
    largest = max(x.in_features * x.out_features for x in block_linears(m))
    act = stack(m, t).act
    if t.quantization == "int8":
        return largest * act
    return largest * (2 + (act if act != 2 else 0))
