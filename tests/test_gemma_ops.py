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
from cfgcheck.memory import gemma_layout, layer_ops  # noqa: E402
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
# Gemma 3 1B's width (google/gemma-3-1b-it config.json, benchmarks/calibration/
# runs-2026-11-27.json), two layers: a sliding one, then a full one (sliding_window_pattern 2)
G3_TEXT = {
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152,
    "intermediate_size": 6912,
    "max_position_embeddings": 32768,
    "model_type": "gemma3_text",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 1,
    "query_pre_attn_scalar": 256,
    "rope_local_base_freq": 10000,
    "rope_theta": 1000000,
    "sliding_window": 256,
    "layer_types": ["sliding_attention", "full_attention"],
    "vocab_size": 32000,
}
GEMMA3 = dict(
    WIDE,
    name="gemma3-wide",
    block_size=32768,
    n_embd=1152,
    n_head=4,
    intermediate_size=6912,
    architecture="gemma3_text",
    norm_qk=True,
    post_attention_norm=True,
    post_mlp_norm=True,
    sliding_window_size=256,
    sliding_window_pattern=2,
    hf_config=G3_TEXT,
)
# Gemma 3's multimodal model (google/gemma-3-4b-it's layout) with a one-layer vision tower:
# the text model runs inside Gemma3ForConditionalGeneration, the tower is built, not run
GEMMA3_MM = dict(
    GEMMA3,
    name="gemma3-mm-wide",
    architecture="gemma3",
    hf_config={
        "boi_token_index": 255999,
        "eoi_token_index": 256000,
        "image_token_index": 32001,
        "mm_tokens_per_image": 16,
        "model_type": "gemma3",
        "text_config": {k: v for k, v in G3_TEXT.items() if k != "max_position_embeddings"},
        "vision_config": {
            "hidden_size": 64,
            "image_size": 64,
            "intermediate_size": 128,
            "model_type": "siglip_vision_model",
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "patch_size": 16,
            "vision_use_head": False,
        },
    },
)
# a sequence of 1536: the masks (b x s x s) and k, v (one head of 256) above 1 MiB
LONG = {"max_seq_length": 1536}
CKPT = {"gradient_checkpointing": True}
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
    "gemma3-full-bf16": (GEMMA3, {"finetuning": "full"}, LONG),
    "gemma3-full-fp32-ckpt": (GEMMA3, {"finetuning": "full", "precision": "32-true", **CKPT}, {}),
    "gemma3-full-bf16-ckpt": (GEMMA3, {"finetuning": "full", **CKPT}, LONG),
    "gemma3-lora-qv": (GEMMA3, {}, {}),
    "gemma3-lora-qv-ckpt": (GEMMA3, CKPT, LONG),
    "gemma3-lora-gqa-ckpt": (
        {**GEMMA3, "n_query_groups": 2, "hf_config": {**G3_TEXT, "num_key_value_heads": 2}},
        {"lora": {"rank": 8, "alpha": 16.0, "dropout": 0.05, "targets": ALL[:6]}, **CKPT},
        {},
    ),
    "gemma3-multimodal-lora-ckpt": (GEMMA3_MM, CKPT, LONG),
    "gemma3-multimodal-full": (GEMMA3_MM, {"finetuning": "full"}, {}),
}
QUICK = ("full-bf16", "lora-qv-ckpt", "gemma3-full-bf16-ckpt", "gemma3-multimodal-lora-ckpt")


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
    assert gemma_layout.exact(m, d, t) and not layer_ops.exact(m, d, t)
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
    """Gemma 2 (sandwich norms without q/k norms), soft-capping, Gemma 1 with a sliding
    window, Gemma 3's window shorter than unpadded rows (only the sliding mask made) or
    packed rows, eager attention keep the coarser sequence."""
    m, d, t = _run("full-bf16")
    for change in (
        {"post_attention_norm": True, "post_mlp_norm": True},
        {"final_logit_softcapping": 30.0},
        {"sliding_window_size": 256},
        {"architecture": "gemma3_text"},
    ):
        assert not gemma_layout.exact(m.model_copy(update=change), d, t), change
    assert not gemma_layout.exact(m, d, t.model_copy(update={"attention": "eager"}))
    assert not gemma_layout.exact(m.model_copy(update={"mlp": "swiglu", "name": "x"}), d, t)
    m3, d3, t3 = _run("gemma3-lora-qv-ckpt")
    assert gemma_layout.exact(m3, d3, t3)
    assert not gemma_layout.exact(m3, d3.model_copy(update={"collator": "packed"}), t3)
    one_row = t3.model_copy(update={"micro_batch_size": 1, "gradient_accumulation_steps": 4})
    assert not gemma_layout.exact(m3, d3, one_row)
    assert not gemma_layout.exact(m3.model_copy(update={"final_logit_softcapping": 30.0}), d3, t3)
