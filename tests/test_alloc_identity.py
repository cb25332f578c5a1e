"""The generated step frees the very tensor the real step frees, not only one of its size.

tests/test_memory_events_kbit.py and tests/test_layer_ops.py compare sizes (a run of frees as
a multiset in the first): where several tensors of one size are live (an RMSNorm's backward,
the gated MLP's product and its two inputs, a LoRA's rank-r tensors) they cannot tell which
one goes, nor in what order, and the caching allocator's blocks differ with it. Here each free
is named by the allocation it undoes (the n-th kept allocation after the reset), in both the
generated and the traced sequence, and the two lists must be equal: every allocation and
every free, in order.

The traces are the same as those tests' (tests/alloc_tracer.py ``record=True``): QLoRA on CPU
with bitsandbytes' CPU backend (every tensor of a size the generator makes), the dense Llama
layout on meta tensors at TinyLlama's width (every tensor above 1 MiB).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from cfgcheck.memory.allocsim import FREE, RESET, Event
from tests.test_memory_events import _flat

pytestmark = pytest.mark.tracer

Named = tuple[str, int, int]  # ("a" | "f", bytes, the allocation's index; -1: made before)


def named(events: list[Event], keep: Any) -> list[Named]:
    """The allocations after the reset of the sizes ``keep`` accepts, and the frees of them
    (and of such tensors made before it), each named by the allocation's index, up to the
    last allocation."""
    flat = _flat(events)
    start = flat.index((0, RESET)) + 1 if (0, RESET) in flat else 0
    live: dict[int, tuple[int, int]] = {}
    out: list[Named] = []
    made = 0
    for k, (i, n) in enumerate(flat):
        if n > 0:
            index = -1
            if k >= start and keep(n):
                index, made = made, made + 1
                out.append(("a", n, index))
            live[i] = (n, index)
        elif n in (FREE, -1):
            size, index = live.pop(i, (0, -1))
            if k >= start and keep(size):
                out.append(("f", size, index))
    while out and out[-1][0] == "f":
        out.pop()
    return out


def _first_difference(gen: list[Named], real: list[Named]) -> str:
    at = next(k for k in range(min(len(gen), len(real)) + 1) if gen[k : k + 1] != real[k : k + 1])
    lo = max(0, at - 4)
    return f"at {at}: generated {gen[lo : at + 4]}, traced {real[lo : at + 4]}"


def test_named_frees_tell_tensors_of_one_size_apart() -> None:
    ev: list[Event] = [(9, 8), (0, RESET), (1, 8), (2, 8), (1, FREE), (9, FREE), (3, 8)]
    swapped: list[Event] = [(9, 8), (0, RESET), (1, 8), (2, 8), (2, FREE), (9, FREE), (3, 8)]
    assert named(ev, lambda n: n == 8) == [
        ("a", 8, 0), ("a", 8, 1), ("f", 8, 0), ("f", 8, -1), ("a", 8, 2)
    ]  # fmt: skip
    assert named(ev, lambda n: n == 8) != named(swapped, lambda n: n == 8)
    assert named([*ev, (3, FREE)], lambda n: True) == named(ev, lambda n: True)  # the tail


def _kbit_cases() -> list[Any]:
    from tests.test_memory_events_kbit import CASES

    return CASES


@pytest.mark.parametrize(("ckpt", "targets", "dropout", "quant", "opt", "accum"), _kbit_cases())
def test_the_qlora_step_frees_the_traced_tensors(
    ckpt: bool, targets: list[str], dropout: float, quant: str, opt: str, accum: int
) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    pytest.importorskip("bitsandbytes", reason="the bnb extra installs bitsandbytes")
    from cfgcheck.memory.events_kbit import kbit_step_events
    from cfgcheck.schema import DataConfig
    from tests.alloc_tracer import traced_step
    from tests.test_memory_events_kbit import _model, _trainer

    torch.set_num_threads(1)
    m, d = _model(), DataConfig(max_seq_length=24)
    t = _trainer(ckpt, targets, dropout, quant, opt, accum)
    spec = {"model": m.model_dump(), "trainer": t.model_dump(), "data": d.model_dump()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = traced_step(spec, record=True, cuda_dropout_masks=True)
    n = sum(1 for op in r.event_ops if op.startswith("setup"))
    generated = kbit_step_events(m, d, t, cuda=False)
    flat = _flat(generated)
    sizes = {s for _, s in flat[flat.index((0, RESET)) :] if s > 0}
    gen = named(generated, sizes.__contains__)
    real = named([*r.events[:n], (0, RESET), *r.events[n:]], sizes.__contains__)
    assert len(gen) > 1000
    assert gen == real, _first_difference(gen, real)


# the checkpointed ones free recomputed tensors of one size in an order of their own
DENSE_QUICK = ("full-bf16-ckpt", "lora-qv-ckpt")
DENSE = (*DENSE_QUICK, "full-fp32-ckpt", "lora-mha-ckpt", "lora-all", "full-bf16")


@pytest.mark.parametrize(
    "name", [n if n in DENSE_QUICK else pytest.param(n, marks=pytest.mark.slow) for n in DENSE]
)
def test_the_dense_step_frees_the_traced_tensors(name: str) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from benchmarks.allocator_meta_trace import meta_tracing
    from cfgcheck.memory.events import blas_workspace, step_events
    from tests.alloc_tracer import cuda_events, traced_step
    from tests.test_layer_ops import MIB, _run

    m, d, t = _run(name)
    spec = {"model": m.model_dump(), "trainer": t.model_dump(), "data": d.model_dump()}
    torch.set_num_threads(1)
    with warnings.catch_warnings(), meta_tracing():
        warnings.simplefilter("ignore")
        r = traced_step(spec, record=True)

    def big(n: int) -> bool:
        return n >= int(1.01 * MIB)

    gen = named(step_events(m, d, t), big)
    real = named(cuda_events(r, blas_workspace(t)), big)
    assert len(gen) > 500
    assert gen == real, _first_difference(gen, real)
