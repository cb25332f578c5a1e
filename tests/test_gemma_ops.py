"""The generated event sequence of Gemma's layout (cfgcheck/memory/gemma_ops.py through
cfgcheck/memory/llama_step.py) equals the real one, tensor by tensor, as tests/test_layer_ops.py
checks for Llama's.

The real sequence is gpu_measure.py's loop traced op by op (tests/alloc_tracer.py,
``record=True``) on meta tensors, two layers of gemma-2b's width (one k/v head of 256, GeGLU,
tied embeddings: transformers' ``GemmaConfig`` as gpu_measure.py builds it); both sequences
reduced to the tensors above 1 MiB (the caching allocator's large pool) must be equal: the
build as a multiset, then the two optimizer steps in order. The H100 rows
(gemma-full-ckpt-b2, gemma-lora-ckpt-b8-s2048) are checked by
benchmarks/memory_calibration.py (docs/memory.md).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from benchmarks.allocator_meta_trace import meta_tracing  # noqa: E402
from benchmarks.allocator_sequence_diff import first_difference, reduced  # noqa: E402
from cfgcheck.memory import gemma_ops, layer_ops  # noqa: E402
from cfgcheck.memory.events import blas_workspace, step_events  # noqa: E402
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig  # noqa: E402
from tests.alloc_tracer import cuda_events, traced_step  # noqa: E402

pytestmark = pytest.mark.tracer

MIB = 2**20
# gemma-2b's width (benchmarks/calibration/runs.json), two layers, a smaller vocabulary
WIDE = dict(
    name="gemma-wide",
    block_size=2048,
    vocab_size=32000,
    n_layer=2,
    n_embd=2048,
    n_head=8,
    n_query_groups=1,
    head_size=256,
    intermediate_size=5632,
    mlp="geglu",
    tie_embeddings=True,
)
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
SETTINGS: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    # name: (model overrides, trainer overrides, data overrides)
    "full-bf16": ({}, {"finetuning": "full"}, {}),
    "full-fp32": ({}, {"finetuning": "full", "precision": "32-true"}, {}),
    "lora-qv": ({}, {}, {}),
    "lora-all": ({}, {"lora": {"rank": 8, "alpha": 16.0, "dropout": 0.05, "targets": ALL}}, {}),
    # grouped k/v heads: repeat_kv copies them (one k/v head: views)
    "lora-gqa": ({"n_query_groups": 4}, {}, {}),
    "full-bf16-ckpt": ({}, {"finetuning": "full", "gradient_checkpointing": True}, {}),
    "lora-qv-ckpt": ({}, {"gradient_checkpointing": True}, {}),
}
QUICK = ("full-bf16", "lora-qv-ckpt")


def _run(name: str) -> tuple[ModelConfig, DataConfig, TrainerConfig]:
    mo, to, do = SETTINGS[name]
    t: dict[str, Any] = {
        "micro_batch_size": 2,
        "gradient_accumulation_steps": 2,
        "precision": "bf16-true",
        "optimizer": "adamw",
        "finetuning": "lora",
        "attention": "sdpa",
        "lora": {"rank": 8, "alpha": 16.0, "dropout": 0.05, "targets": ["q_proj", "v_proj"]},
    }
    return (
        ModelConfig(**{**WIDE, **mo}),
        DataConfig(**{"max_seq_length": 512, **do}),
        TrainerConfig(**{**t, **to}),
    )


@pytest.mark.parametrize(
    "name", [n if n in QUICK else pytest.param(n, marks=pytest.mark.slow) for n in SETTINGS]
)
def test_the_generated_gemma_sequence_is_the_traced_one(name: str) -> None:
    m, d, t = _run(name)
    assert gemma_ops.exact(m, d, t) and not layer_ops.exact(m, d, t)
    spec = {"model": m.model_dump(), "trainer": t.model_dump(), "data": d.model_dump()}
    torch.set_num_threads(1)
    with warnings.catch_warnings(), meta_tracing():
        warnings.simplefilter("ignore")
        r = traced_step(spec, record=True)
    threshold = int(1.01 * MIB)
    real = reduced(cuda_events(r, blas_workspace(t)), threshold)
    gen = reduced(step_events(m, d, t), threshold)
    assert len(gen) > 500
    at = first_difference(gen, real)
    assert at is None, (at, gen[max(0, at - 5) : at + 10], real[max(0, at - 5) : at + 10])


def test_what_gemma_ops_does_not_generate() -> None:
    """Gemma 2's extra norms, soft-capping, a sliding window shorter than the sequence, eager
    attention keep the coarser sequence."""
    m, d, t = _run("full-bf16")
    for change in (
        {"post_attention_norm": True, "post_mlp_norm": True},
        {"final_logit_softcapping": 30.0},
        {"sliding_window_size": 256},
        {"architecture": "gemma3_text"},
    ):
        assert not gemma_ops.exact(m.model_copy(update=change), d, t), change
    assert not gemma_ops.exact(m, d, t.model_copy(update={"attention": "eager"}))
    assert not gemma_ops.exact(m.model_copy(update={"mlp": "swiglu", "name": "x"}), d, t)
