"""The generated event sequence of a training step (cfgcheck/memory/events.py).

First its shape: every free refers to a live allocation, two steps, the optimizer states made
once. Then against the real step: on a llama of MiB-sized tensors, gpu_measure.py's loop is
traced op by op on CPU (tests/alloc_tracer.py, ``record=True``) and both sequences go through
the allocator simulation; outside the Llama layout without checkpointing the generated sequence is
coarser (the tensors that decide segments, not every op), so the test bounds the difference
of the simulated figures instead of asking the sequences to be equal (where they are equal:
tests/test_layer_ops.py; docs/memory.md, "Allocator simulation").
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from cfgcheck.memory.allocsim import END, FREE, REPEAT, RESET, simulate
from cfgcheck.memory.event_seq import blas_workspace
from cfgcheck.memory.events import covered, step_events
from cfgcheck.memory.simulated import simulate_step
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig
from cfgcheck.schema.gpu import GpuConfig

MID = dict(
    name="llama-mid",
    block_size=4096,
    vocab_size=16000,
    n_layer=2,
    n_embd=1024,
    n_head=8,
    n_query_groups=4,
    head_size=128,
    intermediate_size=2816,
)
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _tiny_llama(intermediate_size: int = 160, **kw: Any) -> ModelConfig:
    """The tiny Llama the traced tests build with transformers (2 layers, 64 wide)."""
    return ModelConfig(
        name="llama-tiny",
        block_size=256,
        vocab_size=1000,
        n_layer=2,
        n_embd=64,
        n_head=4,
        n_query_groups=2,
        head_size=16,
        intermediate_size=intermediate_size,
        **kw,
    )


def _cfg(finetuning: str, ckpt: bool, **kw: Any) -> tuple[ModelConfig, DataConfig, TrainerConfig]:
    t = TrainerConfig(
        micro_batch_size=2,
        precision="bf16-true",
        optimizer="adamw",
        gradient_checkpointing=ckpt,
        finetuning=finetuning,
        attention="sdpa",
        lora={"rank": 16, "alpha": 16.0, "dropout": 0.0, "targets": ALL},
        **kw,
    )
    return ModelConfig(**MID), DataConfig(max_seq_length=256), t


def _flat(ev: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The events with each repeated block written out."""
    out, i = [], 0
    while i < len(ev):
        if ev[i][1] == REPEAT:
            j = ev.index((0, END), i)
            out += ev[i + 1 : j] * ev[i][0]
            i = j + 1
        else:
            out.append(ev[i])
            i += 1
    return out


@pytest.mark.parametrize(
    ("finetuning", "ckpt", "accum"), [("full", False, 1), ("lora", True, 1), ("full", True, 3)]
)
def test_events_are_well_formed(finetuning: str, ckpt: bool, accum: int) -> None:
    m, d, t = _cfg(finetuning, ckpt, gradient_accumulation_steps=accum)
    ev = _flat(step_events(m, d, t))
    live: set[int] = set()
    allocs = 0
    for ident, size in ev:
        assert size not in (REPEAT, END)
        if size == FREE:
            assert ident in live
            live.remove(ident)
        elif size == RESET:
            assert not allocs or ident == 0
        else:
            assert ident not in live and size > 0
            live.add(ident)
            allocs += 1
    assert sum(1 for _, s in ev if s == RESET) == 1
    # after two steps: weights, batch, adapters and optimizer states stay, nothing else
    r = simulate(ev)
    assert r == simulate(step_events(m, d, t))  # skipping repetitions changes nothing
    assert r.peak_reserved >= r.peak_allocated
    kept = {i: s for i, s in ev if s > 0}
    assert 0 < sum(kept[i] for i in live) < r.peak_allocated


def test_uncovered_settings_are_not_simulated() -> None:
    m, d, t = _cfg("lora", False)
    assert covered(m, t)
    q = t.model_copy(update={"quantization": "int8", "finetuning": "qlora"})  # 4-bit: events_kbit
    assert not covered(m, q) and simulate_step(m, d, q) is None


def test_alloc_conf_changes_the_simulated_figure() -> None:
    m, d, t = _cfg("full", True)
    base = simulate_step(m, d, t)
    exp = simulate_step(m, d, t.model_copy(update={"cuda_alloc_conf": "expandable_segments:True"}))
    assert base is not None and exp is not None
    # with expandable segments large blocks split down to 512 bytes (should_split), so the
    # blocks handed out are never bigger, and the segments grow page by page
    assert exp.allocated <= base.allocated
    assert exp.reserved != base.reserved


def test_a_gpu_that_only_fits_after_freeing_the_cache() -> None:
    m, d, t = _cfg("full", False)
    free = simulate_step(m, d, t)
    assert free is not None
    roomy = simulate_step(m, d, t, capacity=free.reserved)
    assert roomy is not None and roomy.retries == 0 and roomy.ooms == 0
    tight = simulate_step(m, d, t, capacity=free.allocated + (free.reserved - free.allocated) // 4)
    assert tight is not None and tight.retries > 0
    over = simulate_step(m, d, t, capacity=free.allocated // 2)
    assert over is not None and over.ooms > 0


@pytest.mark.tracer
@pytest.mark.slow
@pytest.mark.parametrize(
    ("finetuning", "ckpt", "tied"),
    [
        ("full", False, False),
        ("full", True, False),
        ("lora", False, False),
        ("lora", True, False),
        ("full", True, True),
    ],
)
def test_generated_sequence_simulates_like_the_traced_step(
    finetuning: str, ckpt: bool, tied: bool
) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from tests.alloc_tracer import cuda_events, traced_step

    torch.set_num_threads(1)
    m, d, t = _cfg(finetuning, ckpt)
    m = m.model_copy(update={"tie_embeddings": tied})
    spec = {"model": m.model_dump(), "trainer": t.model_dump(), "data": d.model_dump()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = traced_step(spec, record=True)
    traced = simulate(cuda_events(r, blas_workspace(t)))  # with cuBLAS's workspaces
    generated = simulate(step_events(m, d, t))
    assert abs(generated.peak_allocated - traced.peak_allocated) <= 0.02 * traced.peak_allocated
    # LoRA with checkpointing: +4.5 % (12 MiB: a few segments); the others within 4 %
    assert abs(generated.peak_reserved - traced.peak_reserved) <= 0.05 * traced.peak_reserved


def test_cfgcheck_memory_shows_the_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from cfgcheck.cli import main

    main(["memory", "--format", "json", "trainer.gpu.memory_gib=12.2"])
    out = json.loads(capsys.readouterr().out)
    sim = out["simulation"]
    assert sim["allocated_gib"] <= sim["reserved_gib"]
    assert sim["fragmentation_gib"] == pytest.approx(
        sim["reserved_gib"] - sim["allocated_gib"], abs=0.002
    )
    assert sim["outcome"] is not None and sim["events"] > 0
    main(["memory", "trainer.cuda_alloc_conf=expandable_segments:True"])
    text = capsys.readouterr().out
    assert re.search(
        r"^reserved +[0-9.]+ GiB +torch max_memory_reserved \(allocator simulation", text, re.M
    )
    main(["memory", "--format", "json", "trainer.framework=torchtune"])
    assert json.loads(capsys.readouterr().out)["simulation"] is None  # not covered


def _sizes_of(ev: list[tuple[int, int]], keep: set[int]) -> list[int]:
    """The allocations (+size) and frees (-size) of the sizes in ``keep``, in order."""
    live: dict[int, int] = {}
    out = []
    for i, n in ev:
        if n > 0:
            live[i] = n
            if n in keep:
                out.append(n)
        elif n == FREE or n == -1:
            size = live.pop(i, 0)
            if size in keep:
                out.append(-size)
    return out


@pytest.mark.tracer
@pytest.mark.parametrize("tied", [True, False])
def test_the_embedding_gradients_are_those_of_the_traced_step(tied: bool) -> None:
    """A vocabulary x hidden tensor is only a weight or its gradient here (the logits are of
    another size): the traced step and the generated one make and free them in the same order,
    with accumulation and checkpointing. Tied, the embedding's dense gradient and the sum of
    the two gradients (autograd's input buffer) are live with the lm_head's one; untied, each
    micro-batch after the first makes a new gradient, added into ``.grad`` and freed."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.alloc_tracer import traced_step

    torch.set_num_threads(1)
    m = _tiny_llama(128, tie_embeddings=tied)
    t = TrainerConfig(
        micro_batch_size=2,
        precision="bf16-true",
        optimizer="adamw",
        gradient_checkpointing=True,
        gradient_accumulation_steps=2,
        finetuning="full",
        attention="sdpa",
    )
    d = DataConfig(max_seq_length=24)  # logits 48 x 1000: not of the weight's size
    spec = {"model": m.model_dump(), "trainer": t.model_dump(), "data": d.model_dump()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = traced_step(spec, record=True)
    n = sum(1 for op in r.event_ops if op.startswith("setup"))
    size = 1000 * 64 * 2
    weight = {size}
    traced = _sizes_of(r.events[n:], weight)
    ev = _flat(step_events(m, d, t))
    generated = _sizes_of(ev[ev.index((0, RESET)) + 1 :], weight)
    # up to the last allocation: after it, zero_grad's frees, then the trace's teardown (the
    # optimizer's states and the model freed when traced_step returns)
    while traced and traced[-1] < 0:
        traced.pop()
    while generated and generated[-1] < 0:
        generated.pop()
    assert traced == generated
    assert traced.count(-size) >= (8 if tied else 4)  # the temporaries above are in it


def _live_before(ev: list[tuple[int, int]], of: int) -> Iterator[tuple[int, int]]:
    """For each allocation (its bytes), how many tensors of ``of`` bytes are live before it."""
    live: dict[int, int] = {}
    count = 0
    for i, n in ev:
        if n > 0:
            yield n, count
            live[i] = n
            count += n == of
        elif n == FREE or n == -1:
            count -= live.pop(i, 0) == of


def _most_live(ev: list[tuple[int, int]], size: int) -> int:
    """The most tensors of ``size`` bytes live at once."""
    return max((count + (n == size) for n, count in _live_before(ev, size)), default=0)


@pytest.mark.tracer
@pytest.mark.parametrize("tied", [True, False])
def test_a_tied_model_frees_its_first_lm_head_weight_while_it_is_built(tied: bool) -> None:
    """``LlamaForCausalLM.__init__`` makes ``nn.Linear``'s lm_head weight; tied, ``post_init``
    points it at the embedding's and the first weight is freed during the build (traced on CPU:
    transformers' own build, the tracer around it). On a GPU its segment stays cached, so the
    reserved figure that ``reset_peak_memory_stats`` keeps has it, and the caching allocator
    hands it out later (Gemma-2B full fine-tuning on an H100: this block is the 1.94 GiB the
    simulation missed, docs/memory.md). The generated build makes and frees it too; untied,
    both weights stay."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.alloc_tracer import traced_step

    torch.set_num_threads(1)
    m = _tiny_llama(tie_embeddings=tied)
    t = TrainerConfig(
        micro_batch_size=2,
        precision="bf16-true",
        optimizer="adamw",
        finetuning="full",
        attention="sdpa",
    )
    d = DataConfig(max_seq_length=24)
    spec = {"model": m.model_dump(), "trainer": t.model_dump(), "data": d.model_dump()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = traced_step(spec, steps=1, record=True)
    n = sum(1 for op in r.event_ops if op.startswith("setup"))
    size = 1000 * 64 * 2  # vocabulary x hidden, bf16
    traced = _sizes_of(r.events[:n], {size})
    ev = step_events(m, d, t, steps=1)
    reset = ev.index((0, RESET))
    generated = _sizes_of(ev[:reset], {size})
    assert traced == generated == ([size, size, -size] if tied else [size, size])
    # at a size of its own segment (> 10 MiB) the freed weight is reserved, not allocated, at
    # the reset: the simulated build holds it
    mid = ModelConfig(**MID, tie_embeddings=tied)
    ev = step_events(mid, DataConfig(max_seq_length=256), t, steps=1)
    built = simulate(ev[: ev.index((0, RESET)) + 1])
    weight = MID["vocab_size"] * MID["n_embd"] * 2
    assert (built.reserved_at_end - built.peak_allocated >= weight) is tied


@pytest.mark.tracer
def test_a_tied_model_loaded_from_its_checkpoint_makes_no_lm_head_weight(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``from_pretrained`` builds the model on the meta device with its ties held back
    (transformers 5.24 ``modeling_utils.py`` ``get_init_context``: ``init.no_tie_weights()``,
    ``torch.device("meta")``), then materialises the checkpoint's tensors: a tied model's
    lm_head weight is never made (traced on CPU: a tiny tied checkpoint saved, loaded the way
    users load one, loading kept on the traced thread). ``from_config`` makes and frees it. The
    generated build follows: the block only for a model named by its shape, not for
    ``model.pretrained``."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    from tests.alloc_tracer import AllocTracer, gpu_measure

    monkeypatch.setenv("HF_DEACTIVATE_ASYNC_LOAD", "1")  # no loader threads: all traced
    m = _tiny_llama(tie_embeddings=True)
    cfg = gpu_measure().hf_config(m.model_dump())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).save_pretrained(tmp_path)
    size = 1000 * 64 * 2  # vocabulary x hidden, bf16
    traced = {}
    for how in ("from_config", "from_pretrained"):
        tracer = AllocTracer()
        tracer.record = True
        with warnings.catch_warnings(), tracer:
            warnings.simplefilter("ignore")
            if how == "from_config":
                model = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
            else:
                model = tf.AutoModelForCausalLM.from_pretrained(
                    tmp_path, dtype=torch.bfloat16, device_map="cpu"
                )
        assert model.lm_head.weight is model.model.embed_tokens.weight
        traced[how] = _sizes_of(tracer.events, {size})
        del model
    assert traced == {"from_config": [size, size, -size], "from_pretrained": [size]}
    t = TrainerConfig(
        micro_batch_size=2, precision="bf16-true", optimizer="adamw", finetuning="full"
    )
    d = DataConfig(max_seq_length=24)
    for model_cfg, block in (
        (m, True),
        (m.model_copy(update={"pretrained": str(tmp_path)}), False),
    ):
        ev = step_events(model_cfg, d, t, steps=1)
        assert (-size in _sizes_of(ev[: ev.index((0, RESET))], {size})) is block


@pytest.mark.tracer
def test_a_checkpointed_forward_holds_only_its_working_set() -> None:
    """Under non-reentrant checkpointing the forward saves nothing: a layer's MLP holds at most
    three intermediate-size tensors (activation, up, their product), not the four it saves
    without checkpointing; the generated forward is the traced one there."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.alloc_tracer import traced_step

    torch.set_num_threads(1)
    m = _tiny_llama()
    d = DataConfig(max_seq_length=24)
    inter = 2 * 160 * 2 * 24  # bf16, 2 rows of 24 tokens
    most = {}
    for ckpt in (True, False):
        t = TrainerConfig(
            micro_batch_size=2,
            precision="bf16-true",
            optimizer="adamw",
            gradient_checkpointing=ckpt,
            finetuning="full",
            attention="sdpa",
        )
        spec = {"model": m.model_dump(), "trainer": t.model_dump(), "data": d.model_dump()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = traced_step(spec, steps=1, record=True)
        first = r.event_ops.index(next(o for o in r.event_ops if o.startswith("backward")))
        n = sum(1 for op in r.event_ops if op.startswith("setup"))
        traced = _most_live(r.events[n:first], inter)
        ev = _flat(step_events(m, d, t))
        logits = next(k for k, (_, size) in enumerate(ev) if size == 2 * 1000 * 48)
        generated = _most_live(ev[ev.index((0, RESET)) + 1 : logits], inter)
        assert traced == generated
        most[ckpt] = traced
    assert most == {True: 3, False: 2 * 4}


@pytest.mark.parametrize(
    ("gpu", "size"),
    [
        ("H100", 32 * 2**20),
        ("H200", 32 * 2**20),
        ("A100-80GB", 8 * 2**20 + 128 * 1024),
        (None, 32 * 2**20),
    ],
)
def test_each_thread_that_runs_a_matmul_takes_a_cublas_workspace(
    gpu: str | None, size: int
) -> None:
    """CublasHandlePool.cpp: ``parseChosenWorkspaceSize`` (":4096:2:16:8" = 8 MiB + 128 KiB,
    ":4096:8" = 32 MiB on sm90), allocated through the caching allocator once per handle and
    stream, a handle per thread: the forward's and autograd's. Both stay to the end; a GPU not
    named gets the larger size."""
    m, d, t = _cfg("full", False, gradient_accumulation_steps=2)
    if gpu:
        t = t.model_copy(update={"gpu": GpuConfig(name=gpu)})
    assert blas_workspace(t) == size
    ev = _flat(step_events(m, d, t))
    freed = {i for i, n in ev if n == FREE}
    kept = [i for i, n in ev if n == size and i not in freed]
    assert len(kept) == 2
    reset = ev.index((0, RESET))
    loss = next(k for k in range(reset, len(ev)) if ev[k][1] == 4 * m.vocab_size * 512)
    assert ev.index((kept[0], size)) < loss < ev.index((kept[1], size))  # forward, backward


def test_a_biased_linear_takes_a_cublaslt_workspace_in_the_forward() -> None:
    """``addmm`` with a bias runs through cuBLASLt (Blas.cpp ``useLtInterface``), whose
    workspace (1 MiB, ``parseCUDABlasLtWorkspaceSize``) the forward's thread takes once; the
    backward's matmuls are plain ones. Qwen2-like q/k/v biases."""
    m, d, t = _cfg("lora", False)
    plain = _flat(step_events(m, d, t))
    biased = _flat(step_events(m.model_copy(update={"attn_bias": True}), d, t))

    def kept(ev: list[tuple[int, int]], size: int) -> int:
        freed = {i for i, n in ev if n == FREE}
        return sum(1 for i, n in ev if n == size and i not in freed)

    assert kept(biased, 2**20) == kept(plain, 2**20) + 1


def _live_at(ev: list[tuple[int, int]], size: int, of: int) -> list[int]:
    """For each allocation of ``size`` bytes, how many tensors of ``of`` bytes are live; only
    those made while one is (the backward's, not the optimizer's)."""
    return [count for n, count in _live_before(ev, of) if n == size and count]


@pytest.mark.tracer
@pytest.mark.parametrize("ckpt", [True, False])
def test_the_mlp_weight_gradients_are_made_as_autograd_makes_them(ckpt: bool) -> None:
    """Autograd runs the MLP's backward node by node and frees each node's saved tensors after
    it (torch/csrc/autograd/engine.cpp ``evaluate_function``), so each projection's weight
    gradient is made while some of the layer's intermediate-size tensors and gradients are
    live: the generated sequence has as many live at each weight gradient as the traced step
    (recomputed under checkpointing)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.alloc_tracer import traced_step

    torch.set_num_threads(1)
    m = _tiny_llama()
    d = DataConfig(max_seq_length=24)
    t = TrainerConfig(
        micro_batch_size=2,
        precision="bf16-true",
        optimizer="adamw",
        gradient_checkpointing=ckpt,
        finetuning="full",
        attention="sdpa",
    )
    weight, inter = 160 * 64 * 2, 2 * 24 * 160 * 2  # bf16: an MLP weight, 2 x 24 tokens
    spec = {"model": m.model_dump(), "trainer": t.model_dump(), "data": d.model_dump()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = traced_step(spec, steps=1, record=True)
    n = sum(1 for op in r.event_ops if op.startswith("setup"))
    traced = _live_at(r.events[n:], weight, inter)
    ev = _flat(step_events(m, d, t, steps=1))
    generated = _live_at(ev[ev.index((0, RESET)) + 1 :], weight, inter)
    assert len(traced) == 3 * m.n_layer  # down, up, gate per layer
    assert traced == generated
