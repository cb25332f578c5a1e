"""Eager attention's softmax backward (cfgcheck/memory/attention_backward.py) against the CPU
allocation tracer (tests/alloc_tracer.py): a tiny Llama whose small vocabulary leaves the peak
to the layers, at 256 tokens, where transformers' ``eager_attention_forward`` holds three fp32
score-sized tensors at the softmax's backward (its kept output, the output's gradient cast to
fp32, the scores' gradient). DeepSeek's latent attention is traced the same way in
tests/test_memory_tracer_moe.py ``test_mla_step_matches_the_trace``."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from tests.conftest import requires

pytestmark = [requires("torch", "transformers", "peft"), pytest.mark.slow]

# the dense families' tolerance (tests/test_memory_tracer.py)
UNDER, OVER = -0.03, 0.05


def llama_run(finetuning: str, checkpointing: bool, precision: str) -> dict[str, Any]:
    model = {
        "name": "llama-tiny", "block_size": 512, "vocab_size": 256, "n_layer": 2, "n_embd": 64,
        "n_head": 4, "n_query_groups": 2, "head_size": 16, "intermediate_size": 176,
    }  # fmt: skip
    trainer = {
        "micro_batch_size": 2, "finetuning": finetuning, "precision": precision,
        "attention": "eager", "optimizer": "adamw", "gradient_checkpointing": checkpointing,
        "lora": {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": ["o_proj"]},
    }  # fmt: skip
    return {"model": model, "trainer": trainer, "data": {"max_seq_length": 256}}


@pytest.mark.parametrize("precision", ["bf16-true", "bf16-mixed", "32-true"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["", "ckpt"])
@pytest.mark.parametrize("finetuning", ["full", "lora"])
def test_eager_softmax_backward_matches_the_trace(
    finetuning: str, checkpointing: bool, precision: str
) -> None:
    """The traced peak is the softmax's backward (``_softmax_backward_data``) of the
    recomputed layer (checkpointing) or of the last layer; the estimate now names that moment
    and is within the dense tolerance. Without it the estimate was 2.5-15 % under without
    checkpointing and 8.6-23.6 % under with it (the recomputed layer counted at its MLP's
    backward, which holds less than the three fp32 score-sized tensors)."""
    import torch

    from cfgcheck.memory import attention_backward
    from cfgcheck.memory.estimate import estimate
    from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig
    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    run = llama_run(finetuning, checkpointing, precision)
    m, t = ModelConfig(**run["model"]), TrainerConfig(**run["trainer"])
    assert attention_backward.applies(m, t)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(run)
    est = estimate(m, DataConfig(**run["data"]), t)
    label = f"{finetuning} {checkpointing} {precision}: {100 * c.error:+.1f}% ({est.phase})"
    print(label)
    assert c.traced.peak.op == "_softmax_backward_data", label
    phase = "backward (recomputation)" if checkpointing else "backward (last layer)"
    assert est.phase == phase, label
    assert UNDER <= c.error <= OVER, label


def test_sdpa_has_no_softmax_backward_moment() -> None:
    """sdpa and flash keep no probabilities (the kernel recomputes them in its backward):
    the moment applies to eager attention only, and gpt-oss's sinks are gpt_oss.py's."""
    from cfgcheck.memory import attention_backward
    from cfgcheck.schema import ModelConfig, TrainerConfig

    run = llama_run("lora", True, "bf16-true")
    m = ModelConfig(**run["model"])
    sdpa = TrainerConfig(**{**run["trainer"], "attention": "sdpa"})
    assert not attention_backward.applies(m, sdpa)
    assert attention_backward.recompute_extra(m, sdpa, 2, 256, True) is None
    assert attention_backward.last_layer_extra(m, sdpa, 2, 256, True) == 0
