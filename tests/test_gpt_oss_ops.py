"""gpt-oss's generated step (cfgcheck/memory/gpt_oss_ops.py, from events.py's step_events)
equals transformers' own above 256 KiB: gpu_measure.py's loop traced op by op on meta tensors
(benchmarks/allocator_meta_trace.py, tests/alloc_tracer.py ``record=True``), the published
gpt-oss-20b config.json (conf/model preset) cut to two layers (one sliding, one full), eager
attention with sinks, LoRA on q and v (dropout 0.05), 2 rows of 512 tokens, two micro-batches,
two optimizer steps (tests/test_memory_events_moe.py ``_check``), checkpointed or not."""

from __future__ import annotations

import pytest

from cfgcheck.memory import gpt_oss_ops
from cfgcheck.memory.events import covered
from tests.test_memory_events_moe import _check, _run


def test_what_is_covered() -> None:
    """LoRA on the attention projections, eager, checkpointed or not; not LoRA on the experts
    (``target_parameters``), full fine-tuning or SDPA (transformers has no SDPA path with
    sinks)."""
    m, _, t = _run("gpt_oss", "++trainer.attention=eager")
    assert covered(m, t) and gpt_oss_ops.covered(m, t)
    assert gpt_oss_ops.experts(m, t) == gpt_oss_ops.Experts(32, 4, 2880)
    assert covered(m, t.model_copy(update={"gradient_checkpointing": True}))
    for over in (
        {"attention": "sdpa"},
        {"finetuning": "full"},
        {"lora": t.lora.model_copy(update={"target_parameters": ["mlp.experts.down_proj"]})},
        {"lora": t.lora.model_copy(update={"targets": ["q_proj", "gate_up_proj"]})},
    ):
        assert not covered(m, t.model_copy(update=over)), over
        assert gpt_oss_ops.experts(m, t.model_copy(update=over)) is None


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
