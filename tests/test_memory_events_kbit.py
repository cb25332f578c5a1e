"""The generated QLoRA step (cfgcheck/memory/events_kbit.py) against the real one.

bitsandbytes 0.50 runs 4-bit layers on CPU, so ``tests/alloc_tracer.py`` records every storage
gpu_measure.py's QLoRA loop allocates and frees (a bf16 checkpoint loaded with a
``BitsAndBytesConfig``, ``prepare_model_for_kbit_training``, PEFT LoRA with CUDA's 1-byte
dropout masks, two optimizer steps). The generated sequence for CPU (``cuda=False``: without
gemm_4bit's in-op dequantization and cuBLAS's workspaces, which a CPU trace cannot see) must
make and free the same tensors in the same order: every tensor of a size the generator makes
(hidden, query/key/value, intermediate, rank-r, dequantized weights, masks, the LoRA
gradients, the logits), from the reset to the last allocation. The order of frees with no
allocation between them is compared as a multiset: the caching allocator's state after them
does not depend on it (freed blocks merge with free neighbours either way).

The dimensions keep the sizes apart: the tensors the generator leaves out (per-token
statistics, rotary tables, the boolean causal mask, scalars) have sizes it never makes.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from cfgcheck.memory.allocsim import FREE, RESET, simulate
from cfgcheck.memory.events import covered, step_events
from cfgcheck.memory.events_kbit import kbit_covered, kbit_step_events
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig
from tests.test_memory_events import _flat

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _model(**kw: Any) -> ModelConfig:
    shape: dict[str, Any] = dict(
        name="llama-tiny",
        block_size=256,
        vocab_size=1000,
        n_layer=2,
        n_embd=64,
        n_head=4,
        n_query_groups=2,
        head_size=16,
        intermediate_size=160,
    )
    return ModelConfig(**(shape | kw))


def _trainer(
    ckpt: bool, targets: list[str], dropout: float, quant: str, opt: str, accum: int,
    rank: int = 10,
) -> TrainerConfig:  # fmt: skip
    return TrainerConfig(
        micro_batch_size=2,
        precision="bf16-true",
        optimizer=opt,
        gradient_checkpointing=ckpt,
        gradient_accumulation_steps=accum,
        finetuning="qlora",
        quantization=quant,
        attention="sdpa",
        lora={"rank": rank, "alpha": 16.0, "dropout": dropout, "targets": targets},
    )


def _sizes(ev: list[tuple[int, int]], keep: set[int]) -> list[int]:
    """Allocations (+bytes) and frees (-bytes) of the sizes in ``keep``, up to the last
    allocation, each run of frees sorted."""
    live: dict[int, int] = {}
    out: list[int] = []
    for i, n in ev:
        if n > 0:
            live[i] = n
            if n in keep:
                out.append(n)
        elif n in (FREE, -1):
            size = live.pop(i, 0)
            if size in keep:
                out.append(-size)
    while out and out[-1] < 0:
        out.pop()
    res: list[int] = []
    run: list[int] = []
    for x in out:
        if x < 0:
            run.append(x)
        else:
            res += [*sorted(run), x]
            run = []
    return res + sorted(run)


CASES = [
    # the H100 rows' settings: checkpointing, every linear adapted, dropout, double quantization
    pytest.param(True, ALL, 0.05, "nf4-dq", "sgd", 1, id="ckpt-all-dropout-nf4dq"),
    # tl-qlora-qv-acc1-b4's: no checkpointing, q/v adapters; accumulation, AdamW
    pytest.param(
        False,
        ["q_proj", "v_proj"],
        0.0,
        "nf4",
        "adamw",
        2,
        id="q-v-nodropout-accum",
        marks=pytest.mark.slow,
    ),
    # no down adapter: the recomputation starts at MulBackward and stops before its product
    pytest.param(
        True,
        ["q_proj", "v_proj"],
        0.05,
        "nf4-dq",
        "sgd",
        2,
        id="ckpt-q-v-accum",
        marks=pytest.mark.slow,
    ),
    # a down adapter without dropout keeps the product itself
    pytest.param(
        True,
        ["q_proj", "v_proj", "down_proj"],
        0.0,
        "fp4",
        "adamw",
        1,
        id="ckpt-down-fp4",
        marks=pytest.mark.slow,
    ),
    # the first layer's input needs no gradient: only k's branch reaches it
    pytest.param(
        False,
        ["k_proj", "up_proj"],
        0.1,
        "nf4",
        "adamw",
        2,
        id="k-up-dropout",
        marks=pytest.mark.slow,
    ),
]


@pytest.mark.tracer
@pytest.mark.parametrize(("ckpt", "targets", "dropout", "quant", "opt", "accum"), CASES)
def test_the_generated_qlora_step_is_the_traced_one(
    ckpt: bool, targets: list[str], dropout: float, quant: str, opt: str, accum: int
) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    pytest.importorskip("bitsandbytes", reason="the bnb extra installs bitsandbytes")
    from tests.alloc_tracer import traced_step

    torch.set_num_threads(1)
    m, d = _model(), DataConfig(max_seq_length=24)
    t = _trainer(ckpt, targets, dropout, quant, opt, accum)
    assert kbit_covered(m, t)
    spec = {"model": m.model_dump(), "trainer": t.model_dump(), "data": d.model_dump()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = traced_step(spec, record=True, cuda_dropout_masks=True)
    n = sum(1 for op in r.event_ops if op.startswith("setup"))
    ev = _flat(kbit_step_events(m, d, t, cuda=False))
    generated = ev[ev.index((0, RESET)) + 1 :]
    keep = {s for _, s in generated if s > 0}
    traced = _sizes(r.events[n:], keep)
    assert len(traced) > 1000  # two steps, op by op
    assert traced == _sizes(generated, keep)


def test_cuda_dequantizes_each_weight_in_the_forward_above_1536_rows() -> None:
    """bitsandbytes backends/cuda/ops.py: ``gemm_4bit`` takes ``_dequant_linear_fallback``
    above ``_gemm_4bit_custom_max_m`` (1536) rows: a compute-dtype weight (and, double
    quantized, two fp32 absmax vectors) made inside the op, before its output. Below it, and
    on CPU, the forward makes none; the backward dequantizes each weight either way."""
    m = _model()
    t = _trainer(True, ALL, 0.05, "nf4-dq", "adamw", 1)
    weights = {2 * x * y for x, y in ((64, 64), (64, 32), (64, 160))}

    def forward_dequant(seq: int, cuda: bool) -> int:
        ev = _flat(kbit_step_events(m, DataConfig(max_seq_length=seq), t, steps=1, cuda=cuda))
        start = ev.index((0, RESET))
        logits = next(k for k in range(start, len(ev)) if ev[k][1] == 4 * 1000 * 2 * seq)
        return sum(1 for _, s in ev[start:logits] if s in weights)

    assert forward_dequant(24, cuda=True) == 0
    assert forward_dequant(24, cuda=False) == 0
    assert forward_dequant(800, cuda=False) == 0
    assert forward_dequant(800, cuda=True) == 7 * m.n_layer  # 1600 rows


def test_qlora_runs_are_simulated() -> None:
    m, d = _model(), DataConfig(max_seq_length=24)
    t = _trainer(True, ALL, 0.05, "nf4", "paged_adamw_8bit", 2)
    assert covered(m, t) and kbit_covered(m, t)
    r = simulate(step_events(m, d, t))
    assert r.peak_reserved >= r.peak_allocated > 0
    # not generated: int8, a non-gated MLP, layer 0's gradient without an attention adapter
    assert not covered(m, t.model_copy(update={"quantization": "int8"}))
    assert not covered(_model(mlp="gelu", norm="layernorm"), t)
    assert not kbit_covered(m, _trainer(False, ["gate_proj"], 0.05, "nf4", "adamw", 1))
    assert kbit_covered(m, _trainer(True, ["gate_proj"], 0.05, "nf4", "adamw", 1))


def test_paged_states_stay_outside_the_caching_allocator() -> None:
    """bitsandbytes optim/optimizer.py ``get_state_buffer``: a paged optimizer's states of
    1e5 elements or more live in managed memory; smaller ones, and a non-paged optimizer's,
    are ``zeros_like`` in the caching allocator."""
    m, d = _model(), DataConfig(max_seq_length=24)
    big = _model(n_embd=512, n_head=8, head_size=64, intermediate_size=1408)
    t = _trainer(True, ALL, 0.05, "nf4", "adamw_8bit", 1)
    paged = t.model_copy(update={"optimizer": "paged_adamw_8bit"})
    # tiny adapters: every state in the allocator either way
    assert simulate(step_events(m, d, t)) == simulate(step_events(m, d, paged))
    # rank 80: the MLP adapters' A and B (80 x 1408 elements, above 1e5) are paged
    t = _trainer(True, ALL, 0.05, "nf4", "adamw_8bit", 1, rank=80)
    paged = t.model_copy(update={"optimizer": "paged_adamw_8bit"})
    assert (
        simulate(step_events(big, d, paged)).peak_allocated
        < simulate(step_events(big, d, t)).peak_allocated
    )
