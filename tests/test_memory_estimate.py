"""Each memory component's formula on a tiny shape by hand, sharding, and monotonicity."""

from __future__ import annotations

from typing import Any

import pytest

from cfgcheck.memory import activations as act
from cfgcheck.memory import weights
from cfgcheck.memory.estimate import estimate
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig

MODEL = ModelConfig(
    name="tiny",
    block_size=64,
    vocab_size=10,
    n_layer=2,
    n_embd=8,
    n_head=2,
    n_query_groups=1,
    head_size=4,
    intermediate_size=16,
)
TOTAL = 1352  # see test_memory_params.test_hand_computed_tiny_llama


def trainer(**kw: Any) -> TrainerConfig:
    base: dict[str, Any] = {
        "micro_batch_size": 1,
        "precision": "bf16-true",
        "finetuning": "lora",
        "lora": {"rank": 2, "targets": ["q_proj", "v_proj"], "dropout": 0.0},
    }
    return TrainerConfig.model_validate(base | kw)


def test_weights_by_precision_and_quantization() -> None:
    assert weights.weight_bytes(MODEL, trainer()) == 2 * TOTAL
    assert weights.weight_bytes(MODEL, trainer(precision="bf16-mixed")) == 4 * TOTAL
    linear = 2 * (64 + 32 + 32 + 64 + 3 * 128)
    rest = TOTAL - linear
    # LitGPT's bnb path (Fabric's BitsandbytesPrecision) quantizes every nn.Linear, the
    # lm_head (10 x 8) included, and keeps the other parameters 16-bit
    head = 10 * 8
    nf4 = weights.weight_bytes(MODEL, trainer(quantization="nf4", framework="litgpt"))
    assert nf4 == int((linear + head) * (0.5 + 4 / 64)) + 2 * (rest - head)
    dq = weights.weight_bytes(MODEL, trainer(quantization="nf4-dq", framework="litgpt"))
    assert dq == int((linear + head) * (0.5 + 1 / 64 + 4 / (64 * 256))) + 2 * (rest - head)
    assert dq < nf4 < 2 * TOTAL
    # transformers + peft.prepare_model_for_kbit_training: the rest upcast to fp32
    hf = weights.weight_bytes(MODEL, trainer(quantization="nf4"))
    assert hf == int(linear * (0.5 + 4 / 64)) + 4 * rest


def test_gradients_and_optimizer_states_count_trainable_only() -> None:
    lora = 2 * 2 * (16 + 12)
    # PEFT keeps adapters (so gradients and AdamW states) in fp32; LitGPT in the model dtype
    assert weights.gradient_bytes(MODEL, trainer()) == 4 * lora
    assert weights.optimizer_state_bytes(MODEL, trainer()) == 2 * 4 * lora
    litgpt = trainer(framework="litgpt")
    assert weights.gradient_bytes(MODEL, litgpt) == 2 * lora
    assert weights.optimizer_state_bytes(MODEL, litgpt) == 2 * 2 * lora  # bf16 states
    full = trainer(finetuning="full", precision="bf16-mixed")
    assert weights.gradient_bytes(MODEL, full) == 4 * TOTAL
    assert weights.optimizer_state_bytes(MODEL, full) == 8 * TOTAL  # two fp32 AdamW states
    assert weights.optimizer_state_bytes(MODEL, trainer(optimizer="sgd")) == 4 * lora
    eight = weights.optimizer_state_bytes(MODEL, trainer(optimizer="adamw_8bit"))
    assert eight == 2 * 4 * lora  # every tensor under bitsandbytes' min_8bit_size: fp32 states


def test_layer_activations_by_hand() -> None:
    # PEFT LoRA on q,v without dropout, sdpa, bf16: each adapter casts its input to fp32, a
    # copy each (2 * 4*8) and keeps its fp32 rank-2 A output (2 * 4*2); two RMSNorms (fp32
    # input copy + rstd) 2*(4*8+4), q 2*8, k and v expanded to 2 heads 2*2*8, sdpa output
    # 2*8 + lse 4*2, MLP 3*2*16.
    per_token = 64 + 16 + 72 + 16 + 32 + 16 + 8 + 96
    # padded batches: sdpa also keeps the bf16 (b, 1, s, s) mask, 2 bytes per token and key
    layer = act.layer_activations(MODEL, trainer())
    # LitGPT: bf16 adapters share the attention-norm output (2*8), bf16 A outputs 2*2*2; its
    # fused qkv's zero_pad keeps the q and v adapter output (2*(8+4)); with one k/v group the
    # kernel's v is a view of the whole qkv output (2*(2+2)*4 instead of 2*2*4)
    litgpt = act.layer_activations(MODEL, trainer(framework="litgpt"))
    assert litgpt.per_token == per_token - 64 - 16 + 16 + 8 + 24 + 16
    assert (layer.per_token, layer.attention_scores) == (per_token, 2)
    flash = act.layer_activations(MODEL, trainer(attention="flash"))
    native_gqa = per_token - 2 * 2 * (8 - 4)  # k and v not expanded to 2 heads
    assert (flash.per_token, flash.attention_scores) == (native_gqa, 0)
    unmasked = act.layer_activations(MODEL, trainer(), masked=False)
    assert (unmasked.per_token, unmasked.attention_scores) == (native_gqa, 0)
    eager = act.layer_activations(MODEL, trainer(attention="eager"))
    assert eager.attention_scores == 2 * (4 + 2)  # fp32 softmax + bf16 copy per head


def test_checkpointing_keeps_layer_inputs_and_one_layer() -> None:
    t = trainer(gradient_checkpointing=True)
    tokens = 3 * 32
    head = act.head_activations(MODEL, t) * tokens
    # the layer inputs and the head; the recomputed layer is a separate moment of the estimate
    unmasked = act.activation_bytes(MODEL, t, 3, 32, masked=False)
    assert unmasked == 2 * 2 * 8 * tokens + head
    # a padded batch: transformers' boolean (batch, 1, seq, seq) sdpa mask is a layer input too
    assert act.activation_bytes(MODEL, t, 3, 32) == unmasked + 3 * 32 * 32
    e = estimate(MODEL, DataConfig(max_seq_length=32, padding="max_length"), t)
    assert e.allocated_bytes >= act.layer_activations(MODEL, t).bytes(32, 32)


def test_logits_and_loss() -> None:
    # transformers: the output (with its logits) is gone when backward starts
    assert act.logits_bytes(MODEL, trainer(), 2, 5) == 12 * 10 * 10
    # LitGPT / torchtune loops hold the logits
    assert act.logits_bytes(MODEL, trainer(framework="torchtune"), 2, 5) == (2 + 12) * 10 * 10
    # chunked (LitGPT): all logits and their gradients, plus one 128-token chunk's
    # log-probabilities and NLL gradient (here the whole 5-token sequence is one chunk)
    assert act.logits_bytes(MODEL, trainer(loss_chunking="chunked"), 2, 5) == (4 + 4) * 10 * 10
    fused = act.logits_bytes(MODEL, trainer(loss_chunking="fused"), 2, 5)
    # Liger: bf16 grad_input (2*8 per token), one chunk of next_pow2(ceil(10 / ceil(10/8))) = 8
    # rows of bf16 logits and input gradient (2*8*(10+8)), loss, mask and labels (21 per token)
    assert fused == 2 * 8 * 10 + 2 * 8 * (10 + 8) + 21 * 10


def test_components_sum_to_the_total() -> None:
    e = estimate(MODEL, DataConfig(max_seq_length=32), trainer())
    assert sum(c.bytes for c in e.components) == e.total_bytes
    assert e.allocated_bytes < e.reserved_bytes < e.total_bytes


def test_sharding_divides_per_strategy() -> None:
    from cfgcheck.memory.sharding import divisors

    def t(s: str) -> TrainerConfig:
        return trainer(strategy=s, devices=4, finetuning="full")

    assert divisors(t("ddp")) == divisors(t("single"))
    assert (divisors(t("zero1")).optimizer, divisors(t("zero1")).gradients) == (4, 1)
    assert (divisors(t("zero2")).gradients, divisors(t("zero2")).weights) == (4, 1)
    assert divisors(t("fsdp")).weights == divisors(t("zero3")).weights == 4


def total(**kw: Any) -> int:
    seq = kw.pop("seq", 256)
    model = kw.pop("model", MODEL)
    return estimate(model, DataConfig(max_seq_length=seq), trainer(**kw)).total_bytes


MONO = [{}, {"finetuning": "full"}, {"attention": "eager"}, {"precision": "bf16-mixed"}]


@pytest.mark.parametrize("kw", MONO)
def test_more_batch_sequence_or_rank_never_needs_less(kw: dict[str, Any]) -> None:
    for b in (1, 2, 4):
        assert total(micro_batch_size=b, **kw) <= total(micro_batch_size=2 * b, **kw)
    for s in (64, 512, 2048):
        assert total(seq=s, **kw) <= total(seq=2 * s, **kw)
    if "finetuning" not in kw:
        for r in (2, 8, 32):
            lo = {"rank": r, "targets": ["q_proj", "v_proj"]}
            hi = {"rank": 2 * r, "targets": ["q_proj", "v_proj"]}
            assert total(lora=lo, **kw) <= total(lora=hi, **kw)


@pytest.mark.parametrize("kw", MONO)
def test_checkpointing_and_sharding_never_need_more(kw: dict[str, Any]) -> None:
    def allocated(**kw: Any) -> int:
        return estimate(MODEL, DataConfig(max_seq_length=256), trainer(**kw)).allocated_bytes

    for b in (1, 8):
        # the tensors: the allocator's cache (allocator.py) of this 8-wide model, whose
        # attention mask outweighs its layers, is larger after a checkpointed step
        assert allocated(micro_batch_size=b, gradient_checkpointing=True, **kw) <= allocated(
            micro_batch_size=b, **kw
        )
    for s in ("zero1", "zero2", "zero3", "fsdp"):
        assert total(strategy=s, devices=8, **kw) <= total(strategy="single", devices=8, **kw)


def test_quantization_never_needs_more_weights_than_16_bit() -> None:
    big = MODEL.model_copy(
        update={"n_embd": 512, "n_head": 8, "head_size": 64, "intermediate_size": 2048}
    )
    t = trainer(finetuning="qlora")
    assert weights.weight_bytes(big, trainer(quantization="int8")) < weights.weight_bytes(big, t)
    # where the weights dominate (a short sequence): QLoRA's fp32 stream (after
    # prepare_model_for_kbit_training) makes its activations and backward buffers larger
    sizes = [
        total(model=big, seq=16, quantization=q, finetuning="qlora") for q in ("nf4", "nf4-dq")
    ]
    assert sizes[1] <= sizes[0] <= total(model=big, seq=16)
