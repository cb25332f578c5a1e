"""The verdict from the allocator simulation (cfgcheck/memory/verdict.py ``decide``) and the
simulator's speed-ups, which must change no result: the replay core against the plain
implementation it replaced (tests/allocsim_reference.py, byte for byte on every figure), the
replay on a roomy GPU taken from the free one, and one replay shared by accumulation counts."""

from __future__ import annotations

import json
import re
from dataclasses import astuple
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cfgcheck.memory import sim_cache
from cfgcheck.memory.allocsim import (
    END,
    FREE,
    MIB,
    REPEAT,
    RESET,
    AllocConf,
    Event,
    replay,
    simulate,
)
from cfgcheck.memory.estimate import estimate
from cfgcheck.memory.events import covered, step_events
from cfgcheck.memory.simulated import simulate_step
from cfgcheck.memory.verdict import decide, outside_bytes, verdict
from cfgcheck.reuse import ESTIMATES
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig
from cfgcheck.schema.gpu import GpuConfig
from tests import allocsim_reference as reference

GIB = 1024**3
CONFS = [
    AllocConf(),
    AllocConf(expandable_segments=True),
    AllocConf(max_split_size=40 * MIB),
    AllocConf(garbage_collection_threshold=0.5, memory_fraction=0.9),
]


def _cfg(
    finetuning: str = "lora", ckpt: bool = False, **trainer: Any
) -> tuple[ModelConfig, DataConfig, TrainerConfig]:
    """A 4-layer Llama with MiB-sized tensors (a replay of its step takes milliseconds)."""
    m = ModelConfig(
        name="llama-mid",
        block_size=4096,
        vocab_size=16000,
        n_layer=4,
        n_embd=1024,
        n_head=8,
        n_query_groups=4,
        head_size=128,
        intermediate_size=2816,
    )
    t = TrainerConfig(
        micro_batch_size=2,
        precision="bf16-true",
        optimizer="adamw",
        gradient_checkpointing=ckpt,
        finetuning=finetuning,
        attention="sdpa",
        lora={"rank": 16, "alpha": 16.0, "dropout": 0.0, "targets": ["q_proj", "v_proj"]},
        gpu=GpuConfig(name="H100"),
        **trainer,
    )
    return m, DataConfig(max_seq_length=512), t


def _same(events: list[Event], conf: AllocConf, capacity: int | None) -> None:
    new = simulate(events, conf, capacity)
    old = reference.simulate(events, reference.AllocConf(**vars(conf)), capacity)
    assert astuple(new) == astuple(old)  # type: ignore[arg-type]


@pytest.mark.parametrize("conf", CONFS, ids=["default", "expandable", "max-split", "gc"])
@pytest.mark.parametrize(("finetuning", "ckpt"), [("lora", False), ("full", True)])
def test_generated_steps_replay_as_the_plain_implementation(
    conf: AllocConf, finetuning: str, ckpt: bool
) -> None:
    m, d, t = _cfg(finetuning, ckpt, gradient_accumulation_steps=3)
    ev = step_events(m, d, t)
    free = reference.simulate(ev, reference.AllocConf(**vars(conf)))
    caps = [free.peak_reserved, (free.peak_reserved + free.peak_allocated) // 2]
    caps.append(free.peak_allocated * 9 // 10)  # out of memory
    for cap in [None, *caps] if conf.memory_fraction is None else caps:
        _same(ev, conf, cap)


SIZES = st.sampled_from(
    [1, 512, 700 * 1024, MIB, MIB + 512, 3 * MIB, 6 * MIB, 10 * MIB, 12 * MIB, 25 * MIB, 60 * MIB]
)


@st.composite
def sequences(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = []
    live: list[int] = []
    for i in range(draw(st.integers(1, 80))):
        action = draw(st.integers(0, 9))
        if action < 5 or not live:
            events.append((i, draw(SIZES)))
            live.append(i)
        elif action < 9:
            events.append((live.pop(draw(st.integers(0, len(live) - 1))), FREE))
        else:
            events.append((0, RESET))
    if draw(st.booleans()):  # a repeated block that frees what it makes
        events += [(draw(st.integers(1, 4)), REPEAT), (900, draw(SIZES)), (901, draw(SIZES))]
        events += [(900, FREE), (902, draw(SIZES)), (901, FREE), (902, FREE), (0, END)]
    return events


@settings(max_examples=300, deadline=None)
@given(sequences(), st.sampled_from(CONFS), st.sampled_from([None, 40, 64, 100, 200]))
def test_any_sequence_replays_as_the_plain_implementation(
    events: list[Event], conf: AllocConf, capacity_mib: int | None
) -> None:
    if conf.memory_fraction is not None and capacity_mib is None:
        capacity_mib = 150
    _same(events, conf, None if capacity_mib is None else capacity_mib * MIB)


def test_a_gpu_with_room_for_the_free_peak_replays_as_the_free_run() -> None:
    """simulated._replays takes the free replay for a GPU that holds its peak: no cudaMalloc
    can fail there, so every decision is the same (here checked against the replay)."""
    for ft, ckpt in (("lora", False), ("full", True)):
        m, d, t = _cfg(ft, ckpt)
        ev = step_events(m, d, t)
        free = simulate(ev)
        on = simulate(ev, capacity=free.peak_reserved)
        assert astuple(on) == astuple(free)  # type: ignore[arg-type]
        sim = simulate_step(m, d, t, capacity=free.peak_reserved)
        assert sim is not None and (sim.retries, sim.ooms) == (0, 0)


def test_one_replay_serves_every_longer_accumulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A repeated micro-batch that changed nothing after k repetitions changes nothing after
    more: the replay of accumulation a > k is that of any other a' > k."""
    m, d, t = _cfg("full", False, gradient_accumulation_steps=16)
    _, needed = replay(step_events(m, d, t))
    assert needed is not None and needed >= 1
    short = t.model_copy(update={"gradient_accumulation_steps": 2})
    if needed > 1:  # fewer repetitions than it takes: a different replay, not shared
        assert replay(step_events(m, d, short))[1] is None
    results = []
    for accum in (needed + 1, needed + 2, 16, 64):
        tt = t.model_copy(update={"gradient_accumulation_steps": accum})
        results.append(astuple(simulate(step_events(m, d, tt))))  # type: ignore[arg-type]
    assert len(set(results)) == 1
    # the cache serves them from one replay, with the figures of a fresh one
    ESTIMATES.clear()
    monkeypatch.setenv("CFGCHECK_NO_CACHE", "1")  # count the replays, not the disk's hits
    calls = []
    real = sim_cache.replay

    def counted(*args: object, **kw: object) -> object:
        calls.append(1)
        return real(*args, **kw)  # type: ignore[arg-type]

    sim_cache.replay = counted  # type: ignore[assignment]
    try:
        for accum in (64, 16, needed + 1):
            tt = t.model_copy(update={"gradient_accumulation_steps": accum})
            sim = simulate_step(m, d, tt)
            assert sim is not None and (sim.reserved, sim.allocated) == results[0][:2]
    finally:
        sim_cache.replay = real  # type: ignore[assignment]
    assert len(calls) == 1


def test_verdict_follows_the_simulation() -> None:
    m, d, t = _cfg("full", False)
    est = estimate(m, d, t)
    sim = simulate_step(m, d, t)
    assert sim is not None
    outside = outside_bytes(est)
    peak = sim.reserved + outside
    roomy = decide(m, d, t, int(peak * (1 + est.margin)) + 1, est)
    assert (roomy.verdict, roomy.basis, roomy.peak) == ("fits", "simulation", peak)
    margin = decide(m, d, t, peak + 1, est)  # fits, but not with the stated error
    assert (margin.verdict, margin.retry) == ("may not fit", False)
    # the reserved peak over the GPU: the allocator frees its cache and retries
    retry = decide(m, d, t, peak - (sim.reserved - sim.allocated) // 4, est)
    assert retry.verdict == "may not fit" and retry.retry and retry.basis == "simulation"
    assert retry.simulation is not None and retry.simulation.retries > 0
    # allocated + context over the GPU: decided without a replay
    over = decide(m, d, t, est.allocated_bytes + outside - 1, est)
    assert (over.verdict, over.basis, over.simulation) == ("does not fit", "estimate", None)


def test_a_step_that_cannot_complete_even_after_freeing_the_cache_does_not_fit() -> None:
    m, d, t = _cfg("lora", False)
    est = estimate(m, d, t)
    outside = outside_bytes(est)
    sim = simulate_step(m, d, t)
    assert sim is not None
    # between allocated and reserved: find a GPU where the replay runs out of memory although
    # its allocated peak fits (fragmentation that freeing the cache cannot undo)
    lo, hi = est.allocated_bytes + outside, sim.reserved + outside
    found = [
        dec
        for cap in range(lo, hi, max(1, (hi - lo) // 64))
        if (dec := decide(m, d, t, cap, est)).basis == "simulation"
    ]
    assert found and {dec.verdict for dec in found} <= {"does not fit", "may not fit"}
    for dec in found:
        assert dec.simulation is not None
        assert (dec.verdict == "does not fit") == (dec.simulation.ooms > 0)


def test_allocator_settings_change_the_verdict() -> None:
    m, d, t = _cfg("full", True)
    est = estimate(m, d, t)
    peaks = {}
    for conf in ("", "expandable_segments:True", "max_split_size_mb:20"):
        tt = t.model_copy(update={"cuda_alloc_conf": conf or None})
        sim = simulate_step(m, d, tt)
        assert sim is not None
        peaks[conf] = sim.reserved + outside_bytes(est)
    assert len(set(peaks.values())) > 1
    cap = int(min(peaks.values()) * (1 + est.margin)) + 1
    verdicts = {
        conf: decide(m, d, t.model_copy(update={"cuda_alloc_conf": conf or None}), cap).verdict
        for conf in peaks
    }
    assert "fits" in verdicts.values() and set(verdicts.values()) != {"fits"}


def test_uncovered_runs_keep_the_estimate_verdict() -> None:
    m, d, t = _cfg("qlora", True, quantization="int8")  # 8-bit: no event sequence
    assert not covered(m, t)
    est = estimate(m, d, t)
    for cap in (est.total_bytes // 2, est.total_bytes, 2 * est.total_bytes):
        dec = decide(m, d, t, cap, est)
        assert dec.basis == "estimate" and dec.simulation is None
        assert dec.verdict == verdict(est, cap)
        assert "does not cover" in dec.describe()


@pytest.mark.parametrize(("finetuning", "ckpt"), [("lora", False), ("full", False), ("full", True)])
def test_the_allocated_bound_never_exceeds_the_replayed_peak(finetuning: str, ckpt: bool) -> None:
    """The rule that decides "does not fit" without a replay takes the estimate's allocated
    peak: below the replayed sequence's, which adds cuBLAS's workspaces."""
    for micro in (1, 4):
        m, d, t = _cfg(finetuning, ckpt)
        t = t.model_copy(update={"micro_batch_size": micro})
        sim = simulate_step(m, d, t)
        assert sim is not None
        assert estimate(m, d, t).allocated_bytes <= sim.allocated


def test_cfgcheck_memory_prints_each_figure_on_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    from cfgcheck.cli import main

    main(["memory"])
    text = capsys.readouterr().out
    for name in ("allocated", "reserved", "fragmentation", "CUDA context", "device peak"):
        assert re.search(rf"^{name} +[0-9.]+ GiB  ", text, re.M), name
    assert "verdict on the allocator simulation's device peak" in text
    main(["memory", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    mem = out["memory"]
    assert out["verdict_basis"] == "simulation" and mem["source"] == "simulation"
    assert mem["reserved_gib"] == out["simulation"]["reserved_gib"]
    assert mem["fragmentation_gib"] == pytest.approx(
        mem["reserved_gib"] - mem["allocated_gib"], abs=0.002
    )
    assert mem["device_gib"] == pytest.approx(mem["reserved_gib"] + mem["context_gib"], abs=0.002)
    main(["memory", "--format", "json", "trainer.framework=torchtune"])
    out = json.loads(capsys.readouterr().out)
    assert out["verdict_basis"] == "estimate" and out["memory"]["source"] == "estimate"


def test_gpu_memory_finding_says_the_cache_is_freed_and_retried() -> None:
    from cfgcheck import check
    from cfgcheck.rules.memory import gpu_memory
    from tests.conftest import CONF

    shipped = check(CONF, "config", ()).config
    assert shipped is not None
    m, d, t = _cfg("full", False)
    sim = simulate_step(m, d, t)
    assert sim is not None
    outside = outside_bytes(estimate(m, d, t))
    cap = sim.reserved + outside - (sim.reserved - sim.allocated) // 4
    assert decide(m, d, t, cap).retry
    gpu = GpuConfig(memory_gib=cap / GIB)
    run = shipped.model_copy(
        update={"model": m, "data": d, "trainer": t.model_copy(update={"gpu": gpu})}
    )
    found = list(gpu_memory(run))
    assert len(found) == 1 and found[0].severity == "warning"
    assert "retrying cudaMalloc" in found[0].message and "simulated peak" in found[0].message


def test_published_run_that_completed_by_freeing_its_cache_may_not_fit() -> None:
    """fms-acceleration's Mistral-7B full fine-tuning completed on an A100-80GB
    (benchmarks/reference/fms-acceleration-a100.csv): replayed on the A100 the step needs the
    allocator to free its cache and retry at the larger batch, and never runs out of memory:
    "may not fit", never "does not fit"."""
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo / "benchmarks"))
    import memory_accuracy

    a100 = 81920 * 2**20
    rows = memory_accuracy.read_rows(
        repo / "benchmarks" / "reference" / "fms-acceleration-a100.csv"
    )
    decisions = []
    for row in rows:
        if row["method"] == "full" and row["gpus"] == "1":
            m, d, t, _ = memory_accuracy.row_config(row)
            decisions.append(decide(m, d, t, a100))
    assert decisions and all(dec.basis == "simulation" for dec in decisions)
    assert all(dec.verdict == "may not fit" for dec in decisions)
    assert any(dec.retry and dec.peak > a100 for dec in decisions)
