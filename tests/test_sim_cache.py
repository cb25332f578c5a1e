"""The replay caches (cfgcheck/memory/sim_cache.py): a cached replay, in the process or read
back from disk, equals a fresh replay; any changed input (an event, the allocator settings,
the capacity, the simulator's code) misses it; a planted or damaged entry is ignored. The
same for a step's figures kept under its config (a changed field or other code misses)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.memory import sim_cache, trace_cache
from cfgcheck.memory.allocsim import FREE, MIB, AllocConf, Event, SimResult, replay
from cfgcheck.memory.events import step_events
from cfgcheck.memory.simulated import simulate_step
from cfgcheck.memory.verdict import decide
from cfgcheck.reuse import ESTIMATES
from cfgcheck.schema import TrainerConfig
from tests.test_memory_sim_verdict import _cfg


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.delenv("CFGCHECK_NO_CACHE", raising=False)
    monkeypatch.setenv("CFGCHECK_CACHE_DIR", str(tmp_path))
    # the service's app turns the disk caches off for its process (a test that made one)
    monkeypatch.setattr(trace_cache, "_disk", True)
    ESTIMATES.clear()
    yield tmp_path / "simulations"
    ESTIMATES.clear()


@pytest.fixture
def replays(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of events of each replay actually run (not served by a cache)."""
    calls: list[int] = []
    real = replay

    def counted(
        events: list[Event], conf: AllocConf | None = None, capacity: int | None = None
    ) -> tuple[SimResult, int | None]:
        calls.append(len(events))
        return real(events, conf, capacity)

    monkeypatch.setattr(sim_cache, "replay", counted)
    return calls


def _fresh(events: list[Event], conf: AllocConf, capacity: int | None) -> tuple[object, ...]:
    r, needed = replay(events, conf, capacity)
    return (*astuple(r), needed)


def _got(found: tuple[SimResult, int | None]) -> tuple[object, ...]:
    return (*astuple(found[0]), found[1])


CONFS = [AllocConf(), AllocConf(expandable_segments=True), AllocConf(max_split_size=40 * MIB)]


@pytest.mark.parametrize("conf", CONFS)
@pytest.mark.parametrize("ft", ["lora", "full"])
def test_a_cached_replay_equals_a_fresh_one(
    cache_dir: Path, replays: list[int], conf: AllocConf, ft: str
) -> None:
    m, d, t = _cfg(ft, False, gradient_accumulation_steps=3)
    events = step_events(m, d, t)
    free = replay(events, conf)[0]
    for capacity in (None, free.peak_reserved, free.peak_reserved * 3 // 4):
        fresh = _fresh(events, conf, capacity)
        first = sim_cache.replay_cached(events, conf, capacity)  # replayed, then stored
        in_process = sim_cache.replay_cached(events, conf, capacity)
        ESTIMATES.clear()
        from_disk = sim_cache.replay_cached(events, conf, capacity)
        assert _got(first) == _got(in_process) == _got(from_disk) == fresh
    assert replays == [len(events)] * 3  # once per capacity: the rest were hits
    assert len(list(cache_dir.glob("*.json"))) == 3


def test_any_changed_input_misses(cache_dir: Path, replays: list[int]) -> None:
    m, d, t = _cfg("lora", False)
    events = step_events(m, d, t)
    conf = AllocConf()
    sim_cache.replay_cached(events, conf, None)
    assert len(replays) == 1
    grown = list(events)
    i = next(k for k, (_, size) in enumerate(grown) if size > MIB)
    grown[i] = (grown[i][0], grown[i][1] + 512)  # one allocation 512 bytes larger
    freed_late = list(events)
    j = next(k for k, (_, size) in enumerate(freed_late) if size == FREE)
    freed_late[j], freed_late[j + 1] = freed_late[j + 1], freed_late[j]  # two events swapped
    changed: list[tuple[list[Event], AllocConf, int | None]] = [
        (grown, conf, None),
        (freed_late, conf, None),
        (events, AllocConf(expandable_segments=True), None),
        (events, AllocConf(max_split_size=40 * MIB), None),
        (events, conf, 64 * 1024**3),
    ]
    for k, (ev, c, cap) in enumerate(changed, start=2):
        ESTIMATES.clear()
        assert _got(sim_cache.replay_cached(ev, c, cap)) == _fresh(ev, c, cap)
        assert len(replays) == k, "a changed input was served from the cache"
    # the simulator's code is part of the on-disk key: other code, other entries
    ESTIMATES.clear()
    before = len(replays)
    sim_cache._code_hash.cache_clear()
    real = sim_cache._CODE
    try:
        sim_cache._CODE = (*real, Path(__file__))
        sim_cache.replay_cached(events, conf, None)
    finally:
        sim_cache._CODE = real
        sim_cache._code_hash.cache_clear()
    assert len(replays) == before + 1


def test_configs_that_make_the_same_events_share_one_replay(
    cache_dir: Path, replays: list[int]
) -> None:
    """global_batch_size is read by the batching rule only: the step is generated and replayed
    once; and a second process (the in-process caches cleared) replays nothing."""
    m, d, t = _cfg("lora", False, gradient_accumulation_steps=2)
    other = t.model_copy(update={"global_batch_size": 4})
    assert step_events(m, d, t) == step_events(m, d, other)
    first, second = simulate_step(m, d, t), simulate_step(m, d, other)
    assert first == second and len(replays) == 1
    ESTIMATES.clear()
    assert simulate_step(m, d, t) == first and len(replays) == 1
    # the verdict from the disk's replay is the fresh one's
    capacity = 3 * first.reserved // 2 if first else 0
    ESTIMATES.clear()
    warm = decide(m, d, t, capacity)
    ESTIMATES.clear()
    cold_env = pytest.MonkeyPatch()
    cold_env.setenv("CFGCHECK_NO_CACHE", "1")
    try:
        cold = decide(m, d, t, capacity)
    finally:
        cold_env.undo()
    assert warm == cold


def test_equal_events_share_one_key_whatever_objects_hold_them(
    cache_dir: Path, replays: list[int]
) -> None:
    """The key reads the events' values only: a copy whose ints are other objects (as a
    second generation of the same step makes them) hits the entry of the first, in the
    process and on disk."""
    m, d, t = _cfg("lora", False)
    events = step_events(m, d, t)
    copy = [(int(str(ident)), int(str(size))) for ident, size in events]
    assert copy == events and any(a[1] is not b[1] for a, b in zip(copy, events, strict=True))
    conf = AllocConf()
    assert sim_cache.content_key(copy, conf, None) == sim_cache.content_key(events, conf, None)
    first = sim_cache.replay_cached(events, conf, None)
    assert _got(sim_cache.replay_cached(copy, conf, None)) == _got(first)
    ESTIMATES.clear()
    assert _got(sim_cache.replay_cached(copy, conf, None)) == _got(first)
    assert replays == [len(events)]


def test_planted_or_damaged_entries_are_ignored(cache_dir: Path, replays: list[int]) -> None:
    m, d, t = _cfg("lora", False)
    events = step_events(m, d, t)
    conf = AllocConf()
    fresh = _fresh(events, conf, None)
    sim_cache.replay_cached(events, conf, None)
    (entry,) = cache_dir.glob("*.json")
    good = json.loads(entry.read_text())
    bad: list[object] = [
        {**good, "key": "0" * 64},  # another key's entry under this name
        {**good, "format": 99},
        {**good, "result": [1, 2, 3]},
        {**good, "result": [True] * 6},
        {**good, "needed": "2"},
        [good],
    ]
    for k, planted in enumerate(bad, start=2):
        entry.write_text(json.dumps(planted))
        ESTIMATES.clear()
        assert _got(sim_cache.replay_cached(events, conf, None)) == fresh
        assert len(replays) == k
        assert json.loads(entry.read_text()) == good  # rewritten
    entry.write_text("x" * 10_000)  # over the entry's bound: never parsed
    ESTIMATES.clear()
    assert _got(sim_cache.replay_cached(events, conf, None)) == fresh


def test_off_where_the_disk_caches_are(cache_dir: Path, replays: list[int]) -> None:
    m, d, t = _cfg("lora", False)
    events = step_events(m, d, t)
    trace_cache.use_disk(False)  # as the HTTP service sets it
    try:
        sim_cache.replay_cached(events, AllocConf(), None)
    finally:
        trace_cache.use_disk(True)
    assert not cache_dir.exists()


@pytest.fixture
def generated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The steps generated (not served by a cache)."""
    from cfgcheck.memory import simulated

    calls: list[int] = []
    real = step_events

    def counted(*args: Any, **kwargs: Any) -> list[Event]:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(simulated, "step_events", counted)
    return calls


def test_a_second_run_generates_nothing_and_gets_the_fresh_figures(
    cache_dir: Path, replays: list[int], generated: list[int]
) -> None:
    m, d, t = _cfg("full", True, gradient_accumulation_steps=2)
    capacity = replay(step_events(m, d, t))[0].peak_reserved * 9 // 10  # frees and retries
    on_gpu = simulate_step(m, d, t, capacity)  # replayed free, then on the GPU
    fresh = simulate_step(m, d, t)
    assert on_gpu is not None and on_gpu.retries > 0
    assert (len(generated), len(replays)) == (1, 2)
    ESTIMATES.clear()  # a new process
    assert simulate_step(m, d, t) == fresh
    assert simulate_step(m, d, t, capacity) == on_gpu
    assert (len(generated), len(replays)) == (1, 2)
    # against an uncached simulation
    ESTIMATES.clear()
    env = pytest.MonkeyPatch()
    env.setenv("CFGCHECK_NO_CACHE", "1")
    try:
        assert simulate_step(m, d, t, capacity) == on_gpu
    finally:
        env.undo()


@pytest.mark.parametrize(
    "change",
    [
        {"micro_batch_size": 3},
        {"gradient_checkpointing": False},
        {"cuda_alloc_conf": "expandable_segments:True"},
        {"gpu": {"name": "A100-80GB"}},  # another cuBLAS workspace
    ],
)
def test_a_changed_config_misses_the_step_cache(
    cache_dir: Path, generated: list[int], change: dict[str, Any]
) -> None:
    m, d, t = _cfg("full", True)
    simulate_step(m, d, t)
    ESTIMATES.clear()
    other = TrainerConfig.model_validate({**t.model_dump(), **change})
    fresh_env = pytest.MonkeyPatch()
    fresh_env.setenv("CFGCHECK_NO_CACHE", "1")
    try:
        fresh = simulate_step(m, d, other)
    finally:
        fresh_env.undo()
    ESTIMATES.clear()
    assert simulate_step(m, d, other) == fresh
    assert len(generated) == 3  # the first, the fresh one, and the changed one: no hit


def test_other_code_misses_the_step_cache(
    cache_dir: Path, generated: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    m, d, t = _cfg("lora", False)
    simulate_step(m, d, t)
    ESTIMATES.clear()
    simulate_step(m, d, t)
    assert len(generated) == 1
    ESTIMATES.clear()
    monkeypatch.setattr(sim_cache, "_package_hash", lambda: b"an edited cfgcheck")
    simulate_step(m, d, t)
    assert len(generated) == 2
