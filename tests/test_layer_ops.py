"""The generated event sequence of the Llama layout (cfgcheck/memory/layer_ops.py and
llama_step.py) equals the real one, tensor by tensor, for every setting it generates.

The real sequence is gpu_measure.py's loop traced op by op (tests/alloc_tracer.py,
``record=True``) on meta tensors at TinyLlama's width (benchmarks/allocator_meta_trace.py:
CUDA's attention kernel and dropout, cuBLAS's workspaces where CUDA takes them), two layers
deep; both sequences are reduced to the allocations and frees of the tensors above 1 MiB, the
caching allocator's large pool (``kSmallSize``), and must be equal: the build as a multiset,
then the two optimizer steps in order (benchmarks/allocator_sequence_diff.py
``first_difference``). The H100 rows of these settings are checked by
benchmarks/memory_calibration.py (docs/memory.md).
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from benchmarks.allocator_meta_trace import meta_tracing  # noqa: E402
from benchmarks.allocator_sequence_diff import first_difference, reduced  # noqa: E402
from cfgcheck.memory import layer_ops  # noqa: E402
from cfgcheck.memory.events import blas_workspace, step_events  # noqa: E402
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig  # noqa: E402
from tests.alloc_tracer import cuda_events, traced_step  # noqa: E402

pytestmark = pytest.mark.tracer

MIB = 2**20
# TinyLlama-1.1B's width (benchmarks/calibration/runs.json), two layers
WIDE = dict(
    name="llama-wide",
    block_size=2048,
    vocab_size=32000,
    n_layer=2,
    n_embd=2048,
    n_head=32,
    n_query_groups=4,
    head_size=64,
    intermediate_size=5632,
)
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
QV = ["q_proj", "v_proj"]
MLP = ["q_proj", "up_proj", "down_proj"]  # gate_proj, k_proj, v_proj, o_proj frozen
NO_DROPOUT = {"rank": 8, "alpha": 16.0, "dropout": 0.0, "targets": QV}  # nn.Identity
SETTINGS: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    # name: (model overrides, trainer overrides, data overrides)
    "full-bf16": ({}, {"finetuning": "full"}, {}),
    "full-fp32": ({}, {"finetuning": "full", "precision": "32-true"}, {}),
    "full-accum1": ({}, {"finetuning": "full", "gradient_accumulation_steps": 1}, {}),
    "full-sgd": ({}, {"finetuning": "full", "optimizer": "sgd"}, {}),
    "lora-all": ({}, {"lora": {"rank": 8, "alpha": 16.0, "dropout": 0.05, "targets": ALL}}, {}),
    "lora-qv": ({}, {}, {}),
    "lora-qv-no-dropout": ({}, {"lora": NO_DROPOUT}, {}),
    "lora-q-mlp": ({}, {"lora": {"rank": 16, "alpha": 16.0, "dropout": 0.05, "targets": MLP}}, {}),
    "lora-packed": ({}, {}, {"collator": "packed"}),
    "lora-mha": ({"n_query_groups": 16, "n_head": 16, "head_size": 128}, {}, {}),
    # Mistral: a sliding window (4096, gpu_measure.py's) no shorter than the sequence
    "lora-mistral-window": ({"name": "mistral-wide", "sliding_window_size": 4096}, {}, {}),
    # Qwen2: q, k, v biases (addmm, cuBLASLt's workspace), tied embeddings
    "lora-qwen2": ({"name": "qwen2-wide", "attn_bias": True, "tie_embeddings": True}, {}, {}),
    # non-reentrant gradient checkpointing (torch/utils/checkpoint.py): the forward keeps each
    # layer's input, the backward recomputes the layer up to down_proj
    "full-bf16-ckpt": ({}, {"finetuning": "full", "gradient_checkpointing": True}, {}),
    "full-fp32-ckpt": (
        {},
        {"finetuning": "full", "precision": "32-true", "gradient_checkpointing": True},
        {},
    ),
    "lora-qv-ckpt": ({}, {"gradient_checkpointing": True}, {}),
    "lora-mha-ckpt": (
        {"n_query_groups": 16, "n_head": 16, "head_size": 128},
        {"gradient_checkpointing": True, "lora": NO_DROPOUT},
        {},
    ),
    "lora-qwen2-ckpt": (
        {"name": "qwen2-wide", "attn_bias": True, "tie_embeddings": True},
        {"gradient_checkpointing": True},
        {"collator": "packed"},
    ),
}


def _run(name: str) -> tuple[ModelConfig, DataConfig, TrainerConfig]:
    mo, to, do = SETTINGS[name]
    t: dict[str, Any] = {
        "micro_batch_size": 2,
        "gradient_accumulation_steps": 2,
        "precision": "bf16-true",
        "optimizer": "adamw",
        "finetuning": "lora",
        "attention": "sdpa",
        "lora": {"rank": 8, "alpha": 16.0, "dropout": 0.05, "targets": QV},
    }
    return (
        ModelConfig(**{**WIDE, **mo}),
        DataConfig(**{"max_seq_length": 512, **do}),
        TrainerConfig(**{**t, **to}),
    )


# the others take several seconds each: slow
QUICK = ("full-bf16", "lora-qv", "full-bf16-ckpt", "lora-qv-ckpt")


def _assert_traced_equals_generated(
    m: ModelConfig, d: DataConfig, t: TrainerConfig, spec: dict[str, Any]
) -> None:
    """``spec`` (``model``, ``trainer``, ``data`` dicts) traced on meta tensors, reduced to the
    tensors above 1 MiB, equals the sequence generated for ``m``, ``d``, ``t``."""
    torch.set_num_threads(1)
    with warnings.catch_warnings(), meta_tracing():
        warnings.simplefilter("ignore")
        r = traced_step(spec, record=True)
    threshold = int(1.01 * MIB)
    real = reduced(cuda_events(r, blas_workspace(t)), threshold)
    gen = reduced(step_events(m, d, t), threshold)
    assert len(gen) > 500  # the layers' tensors, op by op, over two steps
    at = first_difference(gen, real)
    assert at is None, (at, gen[max(0, at - 5) : at + 10], real[max(0, at - 5) : at + 10])


@pytest.mark.parametrize(
    "name", [n if n in QUICK else pytest.param(n, marks=pytest.mark.slow) for n in SETTINGS]
)
def test_the_generated_sequence_is_the_traced_one(name: str) -> None:
    m, d, t = _run(name)
    assert layer_ops.exact(m, d, t)
    spec = {"model": m.model_dump(), "trainer": t.model_dump(), "data": d.model_dump()}
    _assert_traced_equals_generated(m, d, t, spec)


def test_what_is_not_generated_op_by_op() -> None:
    """Eager attention, Gemma's norm, QLoRA keep the coarser sequence."""
    m, d, t = _run("full-bf16")
    for change in (
        {"attention": "eager"},
        {"finetuning": "qlora", "quantization": "nf4"},
        {"precision": "bf16-mixed"},
    ):
        assert not layer_ops.exact(m, d, t.model_copy(update=change)), change
    assert not layer_ops.exact(m.model_copy(update={"tie_embeddings": True}), d, t)
    # LoRA without q_proj: the first layer's attention has no gradient (not generated)
    lora = t.lora.model_copy(update={"targets": ["down_proj"]})
    assert not layer_ops.exact(m, d, t.model_copy(update={"finetuning": "lora", "lora": lora}))
    # checkpointed with an adapter on down_proj: the recomputation stops inside the adapter
    m, d, t = _run("lora-all")
    assert layer_ops.exact(m, d, t)
    assert not layer_ops.exact(m, d, t.model_copy(update={"gradient_checkpointing": True}))


# the generator's per-layer paths (cfgcheck/memory/llama_step.py ``step``): the first layer
# (``i > 0``: its input kept or freed, its graph), the first of each attention type (the masks
# and rotary tables its frame is the last to hold), the last (the final norm's gradient), and
# a middle one, which the rows' other layers repeat
ROW_LAYERS = 3


@pytest.mark.slow
@pytest.mark.parametrize(
    "run_id",
    [
        "tl-full-b4",
        "tl-full-fp32-b4",
        "tl-lora-all-r8-b4",
        "tl-full-ckpt-b16-s2048",
        "tl-lora-ckpt-b16-s2048",
    ],
)
def test_the_h100_rows_sequence_is_the_traced_one(run_id: str) -> None:
    """The H100 calibration rows (benchmarks/calibration/runs.json) as
    benchmarks/allocator_sequence_diff.py checks them: the row's spec traced, the config
    ``check`` composes from its overrides generated, at the row's batch, sequence length,
    accumulation, width and settings (which tensors cross 1 MiB depends on them), three
    layers deep instead of 22 (``ROW_LAYERS``): the generated sequence is the real one above
    1 MiB. ``python benchmarks/allocator_sequence_diff.py RUN_ID --min-mib 1.01`` checks the
    22 layers."""
    from benchmarks.memory_calibration import DATA
    from cfgcheck import check
    from cfgcheck.memory.events import covered
    from tests.alloc_tracer import ROOT

    runs = {r["id"]: r for r in json.loads((DATA / "runs.json").read_text())}
    spec = runs[run_id]
    cfg = check(ROOT / "conf", "config", (*spec["overrides"], "trainer.gpu.name=H100")).config
    assert cfg is not None and covered(cfg.model, cfg.trainer)
    assert cfg.model.n_layer == spec["model"]["n_layer"] == 22
    assert cfg.model.hf_config is None  # the depth is n_layer alone
    spec = {**spec, "model": {**spec["model"], "n_layer": ROW_LAYERS}}
    m = cfg.model.model_copy(update={"n_layer": ROW_LAYERS})
    _assert_traced_equals_generated(m, cfg.data, cfg.trainer, spec)
