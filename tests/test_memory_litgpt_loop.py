"""LitGPT's training loop at the end of a forward, traced on CPU: the previous step's logits,
still held by ``logits`` until the assignment, this step's lm_head chunk outputs in bf16 and
Lightning Fabric's fp32 copies of them (``_FabricModule.forward`` -> the precision plugin's
``convert_output`` casts floating outputs to ``torch.get_default_dtype()``,
lightning/fabric/plugins/precision/half.py and bitsandbytes.py). The live bytes at that moment
must equal :func:`cfgcheck.memory.activations.litgpt_forward_end_bytes`, and the estimate of
a large-vocabulary LitGPT run takes that moment when it is the larger one."""

from __future__ import annotations

import pytest

from cfgcheck.memory import activations as act
from cfgcheck.memory.estimate import estimate
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig

torch = pytest.importorskip("torch")

V, H, B, S, CHUNK = 1000, 32, 2, 256, 128


def model() -> ModelConfig:
    return ModelConfig(
        name="tiny",
        block_size=S,
        vocab_size=V,
        n_layer=2,
        n_embd=H,
        n_head=4,
        head_size=8,
        intermediate_size=64,
    )


def trainer() -> TrainerConfig:
    return TrainerConfig(
        framework="litgpt",
        loss_chunking="chunked",
        micro_batch_size=B,
        precision="bf16-true",
        finetuning="lora",
        lora={"rank": 8, "targets": ["q_proj", "v_proj"]},  # type: ignore[arg-type]
    )


def lm_head_chunks(hidden: torch.Tensor, weight: torch.Tensor) -> list[torch.Tensor]:
    """LitGPT's ``GPT.forward(..., lm_head_chunk_size=128)``: the lm_head per 128 positions."""
    return [torch.nn.functional.linear(h, weight) for h in hidden.split(CHUNK, dim=1)]


def fabric_convert_output(chunks: list[torch.Tensor]) -> list[torch.Tensor]:
    """What Fabric's precision plugin does to the module's output (``_convert_fp_tensor``)."""
    return [c.to(torch.get_default_dtype()) for c in chunks]


def test_forward_end_live_bytes_equal_the_formula() -> None:
    from tests.alloc_tracer import AllocTracer

    weight = torch.randn(V, H, dtype=torch.bfloat16)
    hidden = torch.randn(B, S, H, dtype=torch.bfloat16)
    with torch.no_grad(), AllocTracer() as tracer:
        held = fabric_convert_output(lm_head_chunks(hidden, weight))  # the previous step's
        tracer.reset_peak()
        before = tracer.current
        out = lm_head_chunks(hidden, weight)  # this step's forward: bf16 chunks ...
        logits = fabric_convert_output(out)  # ... and Fabric's fp32 copies
        at_end = tracer.peak.bytes - before
        del held, out
    assert logits[0].dtype == torch.float32
    held_bytes = 4 * V * B * S
    assert at_end + held_bytes == act.litgpt_forward_end_bytes(model(), trainer(), B, S)


def test_the_held_logits_are_fp32_and_the_larger_moment_counts() -> None:
    m, t = model(), trainer()
    assert act.held_logits_bytes(t, act.stack(m, t)) == 4
    est = estimate(m, DataConfig(max_seq_length=S), t)
    end = act.litgpt_forward_end_bytes(m, t, B, S)
    backward = act.logits_bytes(m, t, B, S)
    assert est.get("logits_loss") == max(end, backward)
    assert est.phase == ("forward (end)" if end > backward else "forward")
