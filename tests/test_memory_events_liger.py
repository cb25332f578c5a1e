"""Liger's fused linear cross-entropy in the generated step (cfgcheck/memory/events_liger.py).

Liger needs Triton and CUDA, so no CPU trace checks this sequence: the tests check what its
source says (liger-kernel 0.8.5, ``ops/fused_linear_cross_entropy.py``): no tokens x vocabulary
tensor at all, one chunk x vocabulary buffer, ``grad_input`` made in the forward and handed to
the backward as the final norm output's gradient.
"""

from __future__ import annotations

from cfgcheck.memory.allocsim import RESET, simulate
from cfgcheck.memory.events import covered, step_events
from cfgcheck.memory.events_liger import chunk_rows, covered_fused
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig
from tests.test_memory_events import MID, _flat


def _cfg(loss: str, finetuning: str = "lora") -> tuple[ModelConfig, DataConfig, TrainerConfig]:
    t = TrainerConfig(
        micro_batch_size=4,
        precision="bf16-true",
        optimizer="adamw",
        finetuning=finetuning,
        attention="sdpa",
        loss_chunking=loss,
        lora={"rank": 8, "alpha": 16.0, "dropout": 0.0, "targets": ["q_proj", "v_proj"]},
    )
    return ModelConfig(**MID), DataConfig(max_seq_length=512), t


def test_chunk_rows_follow_liger() -> None:
    # ``inc_factor = cdiv(V, H)``, ``next_power_of_2(cdiv(BT, inc_factor))``, at most BT:
    # the H100 row tl-lora-fused-b8-s2048 (BT 16384, V 32000, H 2048): 16 -> 1024 rows
    assert chunk_rows(16384, 32000, 2048) == 1024
    assert chunk_rows(4096, 32000, 4096) == 512  # cdiv(32000, 4096) = 8 -> 512
    assert chunk_rows(100, 1000, 4096) == 100  # one chunk: BT itself


def test_the_fused_loss_never_makes_the_logits() -> None:
    m, d, t = _cfg("fused")
    assert covered(m, t) and covered_fused(m, t)
    tokens, v = 4 * 512, m.head_rows
    ev = _flat(step_events(m, d, t))
    sizes = [s for _, s in ev[ev.index((0, RESET)) :] if s > 0]
    assert 2 * v * tokens not in sizes and 4 * v * tokens not in sizes
    assert 2 * v * chunk_rows(tokens, v, m.n_embd) in sizes  # logits_storage
    plain = simulate(step_events(*_cfg("none")))
    fused = simulate(step_events(m, d, t))
    # the loss moment drops from two fp32 tokens x vocabulary tensors and more to one chunk
    assert fused.peak_allocated < plain.peak_allocated - 4 * v * tokens


def test_what_is_not_generated() -> None:
    m, _, t = _cfg("fused", finetuning="full")  # the lm_head's gradient in the forward
    assert not covered(m, t)
    mixed = t.model_copy(update={"finetuning": "lora", "precision": "bf16-mixed"})
    assert not covered_fused(m, mixed)  # autocast: the ``@`` path, not mm(out=)
