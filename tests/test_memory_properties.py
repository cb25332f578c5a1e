"""Property tests: over random shapes and settings, more batch, sequence or rank never needs
less memory; checkpointing, zero1/zero2 sharding and quantized weights never need more.

zero3/fsdp are left out on purpose: with few GPUs and a large unit (a big embedding), the two
all-gathered copies of that unit can outweigh what sharding saves, in the estimate as on GPUs.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cfgcheck.memory import activations as act
from cfgcheck.memory import weights
from cfgcheck.memory.estimate import estimate
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig


@st.composite
def shapes(draw: st.DrawFn) -> ModelConfig:
    kv = draw(st.integers(1, 4))
    heads = kv * draw(st.integers(1, 4))
    head = 8 * draw(st.integers(1, 8))
    return ModelConfig(
        name="prop",
        block_size=8192,
        vocab_size=draw(st.integers(16, 5000)),
        n_layer=draw(st.integers(1, 6)),
        n_embd=heads * head,
        n_head=heads,
        n_query_groups=kv,
        intermediate_size=draw(st.integers(8, 1024)),
        mlp=draw(st.sampled_from(["swiglu", "geglu", "gelu"])),
        norm=draw(st.sampled_from(["rmsnorm", "layernorm"])),
        tie_embeddings=draw(st.booleans()),
    )


@st.composite
def trainers(draw: st.DrawFn) -> dict[str, Any]:
    finetuning = draw(st.sampled_from(["full", "lora", "qlora"]))
    return {
        "micro_batch_size": draw(st.integers(1, 8)),
        "precision": draw(st.sampled_from(["bf16-true", "bf16-mixed", "32-true"])),
        "optimizer": draw(st.sampled_from(["adamw", "adamw_8bit", "sgd", "adafactor"])),
        "attention": draw(st.sampled_from(["eager", "sdpa", "flash"])),
        "loss_chunking": draw(st.sampled_from(["none", "chunked", "fused"])),
        "gradient_accumulation_steps": draw(st.integers(1, 4)),
        "finetuning": finetuning,
        "quantization": "nf4" if finetuning == "qlora" else "none",
        "lora": {"rank": draw(st.integers(1, 64)), "targets": ["q_proj", "v_proj", "down_proj"]},
    }


def total(m: ModelConfig, seq: int, **kw: Any) -> int:
    return estimate(m, DataConfig(max_seq_length=seq), TrainerConfig.model_validate(kw)).total_bytes


@settings(max_examples=60, deadline=None, database=None)
@given(shapes(), trainers(), st.integers(1, 4096))
def test_more_batch_sequence_rank_never_less(m: ModelConfig, t: dict[str, Any], seq: int) -> None:
    base = total(m, seq, **t)
    assert total(m, seq, **(t | {"micro_batch_size": t["micro_batch_size"] + 1})) >= base
    assert total(m, seq + 1, **t) >= base
    lora = t["lora"] | {"rank": t["lora"]["rank"] + 1}
    # bitsandbytes' 8-bit AdamW keeps fp32 states below min_8bit_size elements, so a higher
    # rank can cost less (tests/test_memory_bnb.py): the rank property holds for the others
    if "8bit" not in t["optimizer"]:
        assert total(m, seq, **(t | {"lora": lora})) >= base


@settings(max_examples=60, deadline=None, database=None)
@given(shapes(), trainers(), st.integers(1, 4096), st.integers(2, 16))
def test_checkpointing_and_sharding_never_more(
    m: ModelConfig, t: dict[str, Any], seq: int, gpus: int
) -> None:
    tc = TrainerConfig.model_validate(t)
    ckpt = tc.model_copy(update={"gradient_checkpointing": True})
    b = tc.micro_batch_size
    # checkpointing keeps one layer plus every layer's input: never more than every layer
    if m.n_layer > 1:
        assert act.activation_bytes(m, ckpt, b, seq) <= act.activation_bytes(m, tc, b, seq)
    single = total(m, seq, **(t | {"devices": gpus}))
    for strategy in ("zero1", "zero2"):
        assert total(m, seq, **(t | {"devices": gpus, "strategy": strategy})) <= single


@settings(max_examples=60, deadline=None, database=None)
@given(shapes(), st.sampled_from(["nf4", "nf4-dq", "int8"]))
def test_quantized_weights_never_more_than_16_bit(m: ModelConfig, q: str) -> None:
    # LitGPT keeps unquantized parameters 16-bit (transformers + PEFT upcasts them to fp32)
    bf16 = TrainerConfig(
        micro_batch_size=1, precision="bf16-true", finetuning="lora", framework="litgpt"
    )
    quant = bf16.model_copy(update={"quantization": q})
    assert weights.weight_bytes(m, quant) <= weights.weight_bytes(m, bf16)
