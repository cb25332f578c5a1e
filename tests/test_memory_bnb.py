"""bitsandbytes and Liger mechanisms of the memory estimate, pinned to what their source implies.

bitsandbytes has no CPU path for these kernels here, so each expected figure is computed in the
test from the layout rules of the source (bitsandbytes 0.50, liger-kernel ``ops/
fused_linear_cross_entropy.py``), independently of cfgcheck's formulas, for real shapes:

* 4-bit (``quantize_4bit``): ``(n + 1) // 2`` packed uint8 bytes, one fp32 absmax per block of
  64; double quantization: the absmax re-quantized to uint8 (``quantize_blockwise``, blocks of
  256, one fp32 absmax per block). int8 (``int8_vectorwise_quant``): int8 + one fp32 per row.
* 8-bit AdamW (``Optimizer2State.init_state``): fp32 states below ``min_8bit_size=4096``
  elements, else two uint8 states and two fp32 absmax vectors per block of 256; paged
  (``get_state_buffer``) only from 1e5 elements.
* ``MatMul4Bit`` / ``gemm_4bit`` / ``MatMul8bitLt``: the transient buffers of a frozen linear.
* Liger FLCE: ``chunk = next_power_of_2(ceil(BT / ceil(V / H)))``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from cfgcheck.memory import activations as act
from cfgcheck.memory import weights
from cfgcheck.memory.estimate import estimate
from cfgcheck.memory.params import block_linears, count_params
from cfgcheck.memory.stack import stack
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig

CONF = Path(__file__).resolve().parent.parent / "conf"
MIB = 2**20


def preset(name: str) -> ModelConfig:
    return ModelConfig.model_validate(yaml.safe_load((CONF / "model" / f"{name}.yaml").read_text()))


def trainer(**kw: Any) -> TrainerConfig:
    base: dict[str, Any] = {
        "micro_batch_size": 1,
        "precision": "bf16-true",
        "finetuning": "qlora",
        "quantization": "nf4",
        "lora": {"rank": 16, "targets": ["q_proj", "v_proj"], "dropout": 0.0},
    }
    return TrainerConfig.model_validate(base | kw)


# ---- storage of a quantized Linear (4096 x 11008, Llama-2-7B's MLP) -----------------------

N_IN, N_OUT = 4096, 11008
N = N_IN * N_OUT


def bnb_4bit_bytes(n: int, nested: bool) -> int:
    """Bytes bitsandbytes allocates for one 4-bit weight, without the per-linear code tables."""
    packed = (n + 1) // 2
    blocks = math.ceil(n / 64)
    if not nested:
        return packed + 4 * blocks
    return packed + blocks + 4 * math.ceil(blocks / 256)


@pytest.mark.parametrize("quant", ["nf4", "fp4", "nf4-dq"])
def test_4bit_storage_matches_the_blockwise_layout(quant: str) -> None:
    expected = bnb_4bit_bytes(N, nested=quant == "nf4-dq")
    assert int(N * weights.QUANT_BYTES[quant]) == expected
    # nf4 and fp4 store alike: 25,362,432 bytes (0.5625 per element)
    assert bnb_4bit_bytes(N, nested=False) == 25_362_432


def test_int8_storage_is_the_int8_matrix_and_a_row_scale() -> None:
    m = preset("llama-2-7b")
    t = trainer(quantization="int8")
    pc = count_params(m)
    per_layer = sum(x.in_features * x.out_features + 4 * x.out_features for x in block_linears(m))
    # the rest (embedding, norms, lm_head) fp32 after prepare_model_for_kbit_training
    assert weights.weight_bytes(m, t) == per_layer * m.n_layer + 4 * pc.unquantized


# ---- 8-bit AdamW -------------------------------------------------------------------------


def adamw8bit_bytes(numel: int, paged: bool) -> tuple[int, int]:
    """(torch allocator, managed) bytes of one parameter's bitsandbytes AdamW8bit state."""
    if numel < 4096:
        return 8 * numel, 0
    absmax = 2 * 4 * math.ceil(numel / 256)
    if paged and numel >= 100_000:
        return absmax, 2 * numel
    return absmax + 2 * numel, 0


def test_8bit_states_follow_min_8bit_size() -> None:
    assert adamw8bit_bytes(4095, False) == (32_760, 0)  # fp32 states below the threshold
    assert adamw8bit_bytes(4096, False) == (8_192 + 128, 0)
    # bitsandbytes' rule makes a bigger tensor cheaper at the threshold: the estimate follows
    small = trainer(optimizer="adamw_8bit", finetuning="lora", quantization="none")
    m = ModelConfig(
        name="t", block_size=64, vocab_size=64, n_layer=1, n_embd=256, n_head=4,
        n_query_groups=4, head_size=64, intermediate_size=512,
    )  # fmt: skip
    r15 = small.model_copy(update={"lora": small.lora.model_copy(update={"rank": 15})})
    r16 = small.model_copy(update={"lora": small.lora.model_copy(update={"rank": 16})})
    # rank 15: lora_A 15x256 = 3840 < 4096 (fp32 states); rank 16: 4096 (8-bit)
    assert weights.optimizer_state_bytes(m, r15) == 2 * 2 * 8 * 3840
    assert weights.optimizer_state_bytes(m, r16) == 2 * 2 * (2 * 4096 + 8 * 16)
    assert weights.optimizer_state_bytes(m, r16) < weights.optimizer_state_bytes(m, r15)


@pytest.mark.parametrize(
    ("name", "rank", "targets", "finetuning"),
    [
        ("tinyllama-1.1b", 16, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                "down_proj"], "qlora"),
        ("llama-2-7b", 16, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                            "down_proj"], "qlora"),
        ("llama-2-7b", 64, ["q_proj", "v_proj", "lm_head"], "lora"),
        ("phi-2", 8, ["all-linear"], "lora"),
        ("phi-2", 0, [], "full"),
        ("gemma-2b", 0, [], "full"),
        ("qwen3-0.6b", 0, [], "full"),
    ],
)  # fmt: skip
def test_8bit_and_paged_states_per_tensor(
    name: str, rank: int, targets: list[str], finetuning: str
) -> None:
    m = preset(name)
    quant = "nf4" if finetuning == "qlora" else "none"
    lora = {"rank": rank or 8, "targets": targets or ["q_proj"], "dropout": 0.0}
    for opt in ("adamw_8bit", "paged_adamw_8bit"):
        t = trainer(optimizer=opt, finetuning=finetuning, quantization=quant, lora=lora)
        tensors = weights.trainable_tensors(m, t)
        # the tensors the optimizer sees are exactly the trainable parameters
        assert sum(n * c for n, c in tensors) == weights.trainable_params(m, t)
        if finetuning == "full":
            assert sum(n * c for n, c in tensors) == count_params(m).total
        ordinary = managed = 0
        for numel, count in tensors:
            o, p = adamw8bit_bytes(numel, paged=opt.startswith("paged"))
            ordinary, managed = ordinary + o * count, managed + p * count
        assert weights.optimizer_state_bytes(m, t) == ordinary + managed
        assert weights.paged_state_bytes(m, t) == managed


def test_paged_states_of_the_calibration_qlora_rows() -> None:
    """TinyLlama's rank-16 adapters are all under 1e5 elements (nothing paged: the H100 rows
    show no managed memory); Llama-2-7B pages gate/up lora_B and down lora_A (11008 x 16)."""
    all7 = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    t = trainer(optimizer="paged_adamw_8bit", lora={"rank": 16, "targets": all7})
    assert weights.paged_state_bytes(preset("tinyllama-1.1b"), t) == 0
    assert weights.paged_state_bytes(preset("llama-2-7b"), t) == 32 * 3 * 2 * 11008 * 16
    # 34 MB of managed states take one 128 MiB step on the device (used - reserved: 0.858 GiB
    # against 0.733 GiB for the rows paging nothing)
    assert weights.managed_device_bytes(32 * 3 * 2 * 11008 * 16) == 128 * MIB
    assert weights.managed_device_bytes(0) == 0
    assert weights.managed_device_bytes(129 * MIB) == 256 * MIB


def test_8bit_optimizer_step_has_no_temporaries() -> None:
    m = preset("tinyllama-1.1b")
    for opt in ("adamw_8bit", "paged_adamw_8bit"):
        assert weights.optimizer_step_bytes(m, trainer(optimizer=opt)) == 0


# ---- transient buffers of a frozen quantized linear --------------------------------------


def test_4bit_transients_with_a_bf16_compute_dtype() -> None:
    """QLoRA as run (bnb_4bit_compute_dtype=bf16, fp32 stream after
    prepare_model_for_kbit_training), 4096 tokens, Llama-2-7B's largest linear (4096 x 11008):
    forward casts the input to bf16, dequantizes into a bf16 weight, makes a bf16 output before
    the cast back; backward casts the gradient to bf16, dequantizes (bf16) and makes a bf16
    input gradient: 2 bytes x (weight + tokens x (in + out)) either way."""
    m, tokens = preset("llama-2-7b"), 4096
    expected = 2 * (N + tokens * (N_IN + N_OUT))
    assert expected == 213_909_504
    assert weights.dequant_bytes(m, trainer(), tokens) == expected
    # nested: forward rebuilds the fp32 absmax (two per-block vectors), backward one
    assert weights.dequant_bytes(m, trainer(quantization="nf4-dq"), tokens) == expected + 8 * (
        N // 64
    )
    # fp32 compute dtype (32-true): no casts; backward dequantizes bf16 then casts to fp32
    assert weights.dequant_bytes(m, trainer(precision="32-true"), tokens) == (2 + 4) * N


def test_int8_transients_of_matmul8bitlt() -> None:
    """Forward of the 4096 -> 11008 projection: the int8 input (1 byte) with the int32 product
    (4) and its fp16 dequantization (2) per output element; down (11008 -> 4096): the fp16
    input copy, its abs() and the outlier mask (5 bytes per input element); backward: the
    weight copied to fp32. The largest of all counts."""
    m, tokens = preset("llama-2-7b"), 4096
    up = tokens * (N_IN + 6 * N_OUT)
    down = max(5 * tokens * N_OUT, tokens * N_OUT + 6 * tokens * N_IN)
    assert up == 287_309_824 and down < up and up > 4 * N
    assert weights.dequant_bytes(m, trainer(quantization="int8"), tokens) == up
    assert weights.dequant_bytes(m, trainer(quantization="int8"), 1) == 4 * N  # backward


def test_int8_keeps_its_input_and_4bit_does_not() -> None:
    """MatMul8bitLt saves ``A`` (fp32 here); MatMul4Bit ``(None, B)``. With LoRA on q, v and no
    dropout the adapters already keep the attention input, so int8 adds the MLP inputs."""
    m = preset("tinyllama-1.1b")
    assert stack(m, trainer(quantization="int8")).quantized_saves_input
    assert not stack(m, trainer()).quantized_saves_input
    int8 = act.layer_activations(m, trainer(quantization="int8"))
    nf4 = act.layer_activations(m, trainer())
    assert int8.per_token - nf4.per_token == 4 * (m.n_embd + m.mlp_width)


# ---- Liger fused linear cross-entropy ----------------------------------------------------


def test_liger_chunk_size() -> None:
    # the example in Liger's source: BT = 4096 * 4, V = 32000, H = 4096 -> 2048
    assert act.liger_chunk_size(32000, 4096, 4096 * 4) == 2048
    assert act.liger_chunk_size(32000, 2048, 8 * 2048) == 1024  # TinyLlama b8 s2048
    assert act.liger_chunk_size(128256, 4096, 8192) == 256  # Llama 3: ceil(V/H) = 32
    assert act.liger_chunk_size(32000, 2048, 1) == 1


def test_fused_loss_bytes_for_tinyllama_b8_s2048() -> None:
    m, tokens = preset("tinyllama-1.1b"), 8 * 2048
    t = trainer(finetuning="lora", quantization="none", loss_chunking="fused")
    # bf16 grad_input, a 1024-row chunk of bf16 logits and its input gradient, loss/mask/labels
    expected = 2 * 2048 * tokens + 2 * 1024 * (32000 + 2048) + (4 + 1 + 16) * tokens
    assert act.logits_bytes(m, t, 8, 2048) == expected
    # the last layer's backward is larger then: residual gradient + three bf16 MLP gradients,
    # less the final norm's kept fp32 input and statistic
    back = (2 * 2048 + 3 * 2 * 5632 - (4 * 2048 + 4)) * tokens
    assert act.last_layer_backward_bytes(m, t, tokens) == back > expected
    e = estimate(m, DataConfig(max_seq_length=2048), t.model_copy(update={"micro_batch_size": 8}))
    assert e.get("logits_loss") == back


def test_the_loss_moment_stays_the_peak_without_fusion() -> None:
    m, tokens = preset("tinyllama-1.1b"), 4 * 1024
    t = trainer(finetuning="lora", quantization="none")
    assert act.logits_bytes(m, t, 4, 1024) > act.last_layer_backward_bytes(m, t, tokens)


def test_a_down_projection_adapter_adds_its_gradient_path() -> None:
    """PEFT's fp32 adapter on down_proj (bf16 model): while the base's bf16 input gradient
    waits, lora_A's fp32 input gradient (and, with dropout, the dropout's) and its bf16 cast:
    2 + 4 (+ 4) + 2 bytes per intermediate element, above MulBackward's 3 x 2."""
    m, tokens = preset("tinyllama-1.1b"), 4096
    head = 4 * 2048 + 4  # the final RMSNorm's fp32 input and statistic, freed
    lora = {"rank": 8, "targets": ["down_proj"], "dropout": 0.0}
    t = trainer(finetuning="lora", quantization="none", loss_chunking="fused", lora=lora)
    assert act.last_layer_backward_bytes(m, t, tokens) == (2 * 2048 + 8 * 5632 - head) * tokens
    dropped = t.model_copy(update={"lora": t.lora.model_copy(update={"dropout": 0.05})})
    back = act.last_layer_backward_bytes(m, dropped, tokens)
    assert back == (2 * 2048 + 12 * 5632 - head) * tokens
    qv = t.model_copy(update={"lora": t.lora.model_copy(update={"targets": ["q_proj"]})})
    assert act.last_layer_backward_bytes(m, qv, tokens) == (2 * 2048 + 6 * 5632 - head) * tokens
