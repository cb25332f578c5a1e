"""The generated event sequence of a mixture-of-experts step (cfgcheck/memory/events_moe.py in
llama_step.py's layer) equals the real one above 256 KiB.

The real sequence is gpu_measure.py's loop traced op by op (tests/alloc_tracer.py,
``record=True``) on meta tensors (benchmarks/allocator_meta_trace.py: CUDA's attention kernel
and dropout, cuBLAS's workspaces where CUDA takes them), the published configs of
Mixtral-8x7B and Qwen3-30B-A3B (conf/model presets, their config.json) cut to two layers:
transformers' own router, ``grouped_mm_experts_forward`` and PEFT run. Both sequences are
reduced to the allocations and frees of the tensors above 256 KiB (the large pool, and the
router's tokens x experts tensors) and must be equal: the build as a multiset, then two
optimizer steps in order (benchmarks/allocator_sequence_diff.py ``first_difference``), as
tests/test_layer_ops.py does for the dense Llama layout. The H200 rows of these settings are
checked by benchmarks/memory_calibration.py (docs/memory.md).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from cfgcheck import check
from cfgcheck.memory import moe_layout
from cfgcheck.memory.events import covered
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20
PRESETS = {"mixtral": "mixtral-8x7b", "qwen3_moe": "qwen3-30b-a3b", "gpt_oss": "gpt-oss-20b"}
OLMOE = ROOT / "benchmarks" / "calibration" / "models" / "olmoe-1b-7b"  # its config.json


def _run(family: str, *overrides: str) -> tuple[ModelConfig, DataConfig, TrainerConfig]:
    """The family's preset (its published config.json; OLMoE's from the calibration runs'
    model folder) with LoRA on q and v (the shipped default, dropout 0.05), two layers deep,
    2 rows of 512 tokens, two micro-batches."""
    model = (
        ("model=pretrained", f"model.pretrained={OLMOE}", "tokenizer=olmo-2")
        if family == "olmoe"
        else (f"model={PRESETS[family]}",)
    )
    cfg = check(
        ROOT / "conf",
        "config",
        (
            *model,
            "++data.max_seq_length=512",
            "++trainer.micro_batch_size=2",
            "++trainer.gradient_accumulation_steps=2",
            "trainer.gpu.name=H100",
            *overrides,
        ),
    ).config
    assert cfg is not None
    m = cfg.model
    hf = dict(m.hf_config or {})
    hf["num_hidden_layers"] = 2
    if "layer_types" in hf:
        hf["layer_types"] = hf["layer_types"][:2]
    return m.model_copy(update={"n_layer": 2, "hf_config": hf}), cfg.data, cfg.trainer


def test_what_is_covered() -> None:
    """Mixtral and Qwen3-MoE with LoRA on attention projections and on the fused experts
    through ``target_parameters`` (PEFT's ParamWrapper), full fine-tuning, checkpointed or
    not; not gpt-oss (tests/test_gpt_oss_ops.py), the router's or some
    layers' parameters or the router's auxiliary loss (not generated: the pattern-based
    figure)."""
    for family in ("mixtral", "qwen3_moe"):
        for ckpt in ("true", "false"):
            m, _, t = _run(family, f"++trainer.gradient_checkpointing={ckpt}")
            assert covered(m, t) and moe_layout.covered(m, t)
    m, _, t = _run("mixtral")
    assert covered(m, t.model_copy(update={"finetuning": "full"}))
    experts = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    lora = t.lora.model_copy(update={"target_parameters": experts, "dropout": 0.0})
    assert covered(m, t.model_copy(update={"lora": lora}))  # PEFT's ParamWrapper
    ckpt = t.model_copy(update={"lora": lora, "gradient_checkpointing": True})
    assert covered(m, ckpt)
    for other in (["mlp.gate.weight"], ["model.layers.0.mlp.experts.down_proj"]):
        lora = t.lora.model_copy(update={"target_parameters": other, "dropout": 0.0})
        assert not covered(m, t.model_copy(update={"lora": lora}))
    for targets in (["q_proj", "w1"], ["all-linear"]):  # the experts', the router's too
        lora = t.lora.model_copy(update={"targets": targets})
        assert not covered(m, t.model_copy(update={"lora": lora}))
    aux = m.model_copy(update={"hf_config": {**(m.hf_config or {}), "output_router_logits": True}})
    assert not covered(aux, t)
    m, _, t = _run("olmoe")  # softmax then top-k, no renormalisation
    assert covered(m, t) and moe_layout.covered(m, t)
    m, _, t = _run("gpt_oss", "++trainer.attention=eager")  # gpt_oss_ops.py, not this module
    assert not moe_layout.covered(m, t)


def _check(family: str, ckpt: bool, *overrides: str) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from benchmarks.allocator_meta_trace import meta_tracing
    from benchmarks.allocator_sequence_diff import first_difference, reduced
    from cfgcheck.memory.event_seq import blas_workspace
    from cfgcheck.memory.events import step_events
    from tests.alloc_tracer import cuda_events, traced_step

    m, d, t = _run(family, f"++trainer.gradient_checkpointing={str(ckpt).lower()}", *overrides)
    assert covered(m, t)
    model = m.model_dump()
    model["vocab_size"] = model["vocab_size"] or model["padded_vocab_size"]  # OLMoE's folder
    spec: dict[str, Any] = {"model": model, "trainer": t.model_dump(), "data": d.model_dump()}
    torch.set_num_threads(1)
    with warnings.catch_warnings(), meta_tracing():
        warnings.simplefilter("ignore")
        r = traced_step(spec, record=True)
    threshold = MIB // 4  # the router's tensors (tokens x experts) among them
    real = reduced(cuda_events(r, blas_workspace(t)), threshold)
    gen = reduced(step_events(m, d, t), threshold)
    # the experts' grouped linears, their backward, the routed copies: over two steps
    assert len(gen) > 1500
    at = first_difference(gen, real)
    assert at is None, (at, gen[max(0, at - 5) : at + 10], real[max(0, at - 5) : at + 10])


@pytest.mark.tracer
def test_mixtral_lora_sequence_is_the_traced_one() -> None:
    _check("mixtral", False)


@pytest.mark.tracer
@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "ckpt"), [("mixtral", True), ("qwen3_moe", False), ("qwen3_moe", True)]
)
def test_moe_lora_sequence_is_the_traced_one(family: str, ckpt: bool) -> None:
    _check(family, ckpt)


@pytest.mark.tracer
@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "targets", "ckpt"),
    [
        ("mixtral", "[mlp.experts.gate_up_proj,mlp.experts.down_proj]", False),
        ("mixtral", "[mlp.experts.gate_up_proj,mlp.experts.down_proj]", True),
        ("mixtral", "[mlp.experts.gate_up_proj]", True),
        ("qwen3_moe", "[mlp.experts.gate_up_proj,mlp.experts.down_proj]", False),
        ("qwen3_moe", "[mlp.experts.gate_up_proj,mlp.experts.down_proj]", True),
        ("qwen3_moe", "[mlp.experts.down_proj]", False),
    ],
)
def test_expert_lora_sequence_is_the_traced_one(family: str, targets: str, ckpt: bool) -> None:
    """PEFT's ParamWrapper (``target_parameters``, dropout 0 as it requires) beside LoRA on q
    and v: the factors cast per forward, each merged weight (``baddbmm``) made once when the
    parametrization is registered and again when the experts read it, kept by the grouped
    linear with its input; the merged weight's gradient and the factors' in the backward.
    Checkpointed, the forward drops them when ParamWrapper's forward returns and the
    recomputation makes them again."""
    _check(family, ckpt, f"++trainer.lora.target_parameters={targets}", "++trainer.lora.dropout=0")


@pytest.mark.tracer
@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "ckpt"), [("mixtral", False), ("mixtral", True), ("qwen3_moe", True)]
)
def test_full_sequence_is_the_traced_one(family: str, ckpt: bool) -> None:
    """Full fine-tuning: the router's linear keeps its input, the grouped linears theirs (the
    routed copies, the product); their weight gradients (every expert's matrix) made in the
    grouped linears' backward, the router's before its input's; Qwen3's q / k norms keep
    their cast and make their weights' gradients."""
    _check(family, ckpt, "++trainer.finetuning=full")


@pytest.mark.tracer
@pytest.mark.parametrize(
    ("ckpt", "overrides"),
    [
        (False, ()),
        pytest.param(True, ("++trainer.finetuning=full",), marks=pytest.mark.slow),
        pytest.param(True, (), marks=pytest.mark.slow),
        pytest.param(False, ("++trainer.finetuning=full",), marks=pytest.mark.slow),
        pytest.param(
            False,
            (
                "++trainer.lora.target_parameters=[mlp.experts.gate_up_proj,mlp.experts.down_proj]",
                "++trainer.lora.dropout=0",
            ),
            marks=pytest.mark.slow,
        ),
    ],
)
def test_olmoe_sequence_is_the_traced_one(ckpt: bool, overrides: tuple[str, ...]) -> None:
    """OLMoE (transformers 5.24 ``models/olmoe/modeling_olmoe.py``): ``OlmoeTopKRouter``'s
    fp32 softmax then ``topk`` without renormalisation (``norm_topk_prob`` false, l.327-336),
    cast to the logits' dtype; its q / k norms over the whole projection (l.239-240: before
    the heads' view, statistics per token), so the views' backward (the transposed
    gradients' copies, k's then q's) runs before v_proj's."""
    _check("olmoe", ckpt, *overrides)
