"""gpt-oss's generated step (cfgcheck/memory/gpt_oss_ops.py, from events.py's step_events)
equals transformers' own above 256 KiB: gpu_measure.py's loop traced op by op on meta tensors
(benchmarks/allocator_meta_trace.py, tests/alloc_tracer.py ``record=True``), the published
gpt-oss-20b config.json (conf/model preset) cut to two layers (one sliding, one full), eager
attention with sinks, LoRA on q and v (dropout 0.05), 2 rows of 512 tokens, two micro-batches,
two optimizer steps (tests/test_memory_events_moe.py ``_check``), checkpointed or not."""

from __future__ import annotations

import pytest

from cfgcheck.memory import gpt_oss_layout
from cfgcheck.memory.events import covered
from cfgcheck.memory.gpt_oss_experts import Experts
from tests.test_memory_events_moe import _check, _run


def test_what_is_covered() -> None:
    """LoRA on the attention projections, eager, checkpointed or not, and on the fused experts
    (``target_parameters``) not checkpointed; not full fine-tuning, the router's parameters or
    SDPA (transformers has no SDPA path with sinks)."""
    m, _, t = _run("gpt_oss", "++trainer.attention=eager")
    assert covered(m, t) and gpt_oss_layout.covered(m, t)
    assert gpt_oss_layout.experts(m, t) == Experts(32, 4, 2880)
    assert covered(m, t.model_copy(update={"gradient_checkpointing": True}))
    experts = t.lora.model_copy(update={"target_parameters": ["mlp.experts.down_proj"]})
    assert covered(m, t.model_copy(update={"lora": experts}))
    assert gpt_oss_layout.experts(m, t.model_copy(update={"lora": experts})) == (
        Experts(32, 4, 2880, ("down_proj",), t.lora.rank or 0)
    )
    for over in (
        {"attention": "sdpa"},
        {"finetuning": "full"},
        {"lora": experts, "gradient_checkpointing": True},
        {"lora": t.lora.model_copy(update={"target_parameters": ["mlp.router.weight"]})},
        {"lora": t.lora.model_copy(update={"targets": ["q_proj", "gate_up_proj"]})},
    ):
        assert not covered(m, t.model_copy(update=over)), over
        assert gpt_oss_layout.experts(m, t.model_copy(update=over)) is None


@pytest.mark.tracer
def test_gpt_oss_lora_sequence_is_the_traced_one() -> None:
    _check("gpt_oss", False, "++trainer.attention=eager")


@pytest.mark.tracer
def test_gpt_oss_checkpointed_sequence_is_the_traced_one() -> None:
    """Non-reentrant checkpointing: the forward keeps nothing (the attention's probabilities
    go when the MLP's return rebinds ``_``), the recomputation runs when the un-permutation's
    index unpacks ``inv_perm`` and stops there, its biased linears take autograd's thread's
    cuBLASLt workspace; each layer's frame keeps its mask."""
    _check("gpt_oss", True, "++trainer.attention=eager")


@pytest.mark.tracer
@pytest.mark.slow
def test_gpt_oss_one_row_sequence_is_the_traced_one() -> None:
    """One row: the transposed output gradient of the attention is a view (no copy)."""
    _check(
        "gpt_oss",
        False,
        "++trainer.attention=eager",
        "++trainer.micro_batch_size=1",
        "++data.max_seq_length=256",
    )


@pytest.mark.tracer
@pytest.mark.parametrize(
    "targets",
    [
        "[mlp.experts.gate_up_proj,mlp.experts.down_proj]",
        pytest.param("[mlp.experts.gate_up_proj]", marks=pytest.mark.slow),
    ],
)
def test_gpt_oss_expert_lora_sequence_is_the_traced_one(targets: str) -> None:
    """PEFT's ParamWrapper on gpt-oss's transposed fused experts (dropout 0, as it requires):
    the factors' casts (lora_A's transpose first), each merged weight made at registration
    and again when the experts read it, kept by the grouped linear with its input; in the
    backward the merged weight's gradient, ``baddbmm``'s, lora_B's fp32 gradient first."""
    _check(
        "gpt_oss",
        False,
        "++trainer.attention=eager",
        f"++trainer.lora.target_parameters={targets}",
        "++trainer.lora.dropout=0",
    )
