"""The CPU allocation tracer (tests/alloc_tracer.py) on tiny random-weight mixture-of-experts
models: the whole training step transformers runs (router, per-expert dispatch of
``MixtralExperts.forward``, backward, AdamW) against cfgcheck's estimate, which counts the
router and dispatch from the source (cfgcheck/memory/activations.py ``_router_bytes``) and
states the uncalibrated margin for it."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from tests.conftest import requires

pytestmark = [requires("torch", "transformers", "peft"), pytest.mark.slow]

SMALL: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 256,
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": None,
}
MOE: dict[str, dict[str, Any]] = {
    "mixtral": {"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen3_moe": {"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 48, "head_dim": 16},
    "olmoe": {"model_type": "olmoe", "num_experts": 8, "num_experts_per_tok": 2},
}  # fmt: skip
# The dense differential test's tolerance (tests/test_memory_tracer.py), well inside the
# margin the estimate states for a MoE (coverage.py: not measured on a GPU).
UNDER, OVER = -0.03, 0.05


def run_of(family: str, finetuning: str) -> dict[str, dict[str, Any]]:
    from cfgcheck.models.generic import generic_model

    data = {**SMALL, **MOE[family]}
    model = {k: v.value for k, v in generic_model(data, "config.json", "").items()}
    trainer: dict[str, Any] = {
        "micro_batch_size": 2,
        "finetuning": finetuning,
        "precision": "bf16-true",
        "attention": "sdpa",
        "optimizer": "adamw",
        "gradient_checkpointing": False,
    }
    if finetuning == "lora":
        trainer["lora"] = {"rank": 8, "alpha": 16, "dropout": 0.0,
                           "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]}  # fmt: skip
    return {
        "model": {"name": f"tiny-{family}", "vocab_size": 256, **model},
        "trainer": trainer,
        "data": {"max_seq_length": 128},
    }


@pytest.mark.parametrize("seq", [128, 512])
@pytest.mark.parametrize("finetuning", ["full", "lora"])
@pytest.mark.parametrize("family", sorted(MOE))
def test_moe_step_matches_the_trace(family: str, finetuning: str, seq: int) -> None:
    import torch

    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    run = run_of(family, finetuning)
    run["data"]["max_seq_length"] = seq
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(run)
    label = (
        f"{family} {finetuning}: traced {c.traced.peak.bytes} at {c.traced.peak.phase}, estimate "
        f"{c.estimated} at {c.phase} ({100 * c.error:+.1f}%)"
    )
    print(label)
    assert UNDER <= c.error <= OVER, label
