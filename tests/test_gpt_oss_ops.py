"""gpt-oss's generated forward (cfgcheck/memory/gpt_oss_ops.py) equals transformers' own above
256 KiB: gpu_measure.py's loop traced op by op on meta tensors
(benchmarks/allocator_meta_trace.py, tests/alloc_tracer.py ``record=True``), the published
gpt-oss-20b config.json (conf/model preset) cut to two layers (one sliding, one full), eager
attention with sinks, LoRA on q and v (dropout 0.05), 2 rows of 512 tokens. Compared: the
events after the peaks' reset up to the loss's log-probabilities (the backward is not
generated yet, so gpt-oss is not ``covered``)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from cfgcheck.memory import gpt_oss_ops
from cfgcheck.memory.events import covered
from tests.test_memory_events_moe import MIB, _run


def test_gpt_oss_is_not_covered_yet() -> None:
    """The forward alone is generated: the step stays on the pattern figure."""
    m, _, t = _run("gpt_oss", "++trainer.attention=eager")
    assert not covered(m, t)
    with pytest.raises(ValueError):
        gpt_oss_ops.forward_events(m, *_run("gpt_oss", "++trainer.gradient_checkpointing=true")[1:])


@pytest.mark.tracer
def test_gpt_oss_forward_is_the_traced_one() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from benchmarks.allocator_meta_trace import meta_tracing
    from benchmarks.allocator_sequence_diff import reduced
    from cfgcheck.memory.event_seq import blas_workspace
    from tests.alloc_tracer import cuda_events, traced_step

    m, d, t = _run("gpt_oss", "++trainer.gradient_checkpointing=false", "++trainer.attention=eager")
    spec: dict[str, Any] = {"model": m.model_dump(), "trainer": t.model_dump(),
                            "data": d.model_dump()}  # fmt: skip
    torch.set_num_threads(1)
    with warnings.catch_warnings(), meta_tracing():
        warnings.simplefilter("ignore")
        r = traced_step(spec, record=True)
    threshold = MIB // 4  # the masks (0.25 MiB booleans) among them
    real = reduced(cuda_events(r, blas_workspace(t)), threshold)
    real = real[real.index("R") + 1 :]
    gen = reduced(gpt_oss_ops.forward_events(m, d, t), threshold)[1:]
    # two layers: the attention's 64 MiB scores, the experts' routed rows, the loss
    assert len(gen) > 250
    assert gen == real[: len(gen)]
    assert real[len(gen)] == gen[-5]  # the backward's first: nll_loss's gradient (fp32 logits)
