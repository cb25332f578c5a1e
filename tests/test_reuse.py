"""The caches that let checks share work (:mod:`cfgcheck.reuse`): keyed by content, bounded."""

from __future__ import annotations

import pytest

from cfgcheck.memory.estimate import UNREAD_TRAINER_FIELDS, estimate
from cfgcheck.reuse import ESTIMATES, BoundedCache, Unkeyable, frozen, shared_scope
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig
from cfgcheck.validate import validate
from tests.conftest import CONF


def test_frozen_keys_tell_types_and_signs_apart() -> None:
    assert frozen({"a": 1}) != frozen({"a": 1.0}) != frozen({"a": True})
    assert frozen(0.0) != frozen(-0.0)
    assert frozen([1, "x", None]) == frozen([1, "x", None])
    assert frozen({"a": 1, "b": 2}) != frozen({"b": 2, "a": 1})  # order kept: never merged
    with pytest.raises(Unkeyable):
        frozen({"a": object()})


def test_bounded_cache_evicts_the_least_recently_used() -> None:
    cache: BoundedCache[str, int] = BoundedCache(2)
    assert cache.get_or("a", lambda: 1) == 1
    assert cache.get_or("b", lambda: 2) == 2
    assert cache.get_or("a", lambda: 99) == 1  # hit: "a" is now the most recent
    assert cache.get_or("c", lambda: 3) == 3  # evicts "b"
    assert len(cache) == 2
    assert cache.get_or("b", lambda: 22) == 22
    assert (cache.hits, cache.misses) == (1, 4)
    assert cache.get("a") is None and cache.get("b") == 22  # "a" was evicted by "b"


def test_bounded_cache_shared_by_threads_stays_bounded_and_right() -> None:
    from concurrent.futures import ThreadPoolExecutor

    cache: BoundedCache[int, int] = BoundedCache(8)

    def work(seed: int) -> bool:
        return all(
            cache.get_or(k % 13, lambda k=k: (k % 13) * 2) == (k % 13) * 2
            for k in range(seed, seed + 2000)
        )

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(8)))
    assert len(cache) <= 8


def _sections() -> tuple[ModelConfig, DataConfig, TrainerConfig]:
    import yaml

    model = yaml.safe_load((CONF / "model" / "tinyllama-1.1b.yaml").read_text())
    data = yaml.safe_load((CONF / "data" / "alpaca-tiny.yaml").read_text())
    trainer = yaml.safe_load((CONF / "trainer" / "lora.yaml").read_text())
    return (
        ModelConfig.model_validate(model),
        DataConfig.model_validate(data),
        TrainerConfig.model_validate(trainer),
    )


def test_estimate_cache_is_keyed_by_content() -> None:
    m, d, t = _sections()
    ESTIMATES.clear()
    misses = ESTIMATES.misses
    first = estimate(m, d, t)
    bigger = estimate(m, d, t.model_copy(update={"micro_batch_size": t.micro_batch_size * 4}))
    assert bigger.total_bytes > first.total_bytes  # another content: computed, not reused
    again = estimate(m, d, TrainerConfig.model_validate(t.model_dump()))  # equal content
    assert again is first
    other_lr = estimate(m, d, t.model_copy(update={"learning_rate": 1e-2}))
    assert other_lr is first  # a setting the estimate never reads is not in the key
    assert ESTIMATES.misses - misses == 2


class _Recording(TrainerConfig):
    """A trainer section that records which of its fields are read."""

    def __getattribute__(self, name: str) -> object:
        if name in TrainerConfig.model_fields:
            READ.add(name)
        return super().__getattribute__(name)


READ: set[str] = set()


@pytest.mark.parametrize("trainer", ["full", "lora", "qlora", "fsdp-8gpu"])
def test_fields_left_out_of_the_estimate_key_are_never_read_by_the_estimate(trainer: str) -> None:
    import yaml

    from cfgcheck.memory.estimate import _estimate

    m, d, _ = _sections()
    raw = yaml.safe_load((CONF / "trainer" / f"{trainer}.yaml").read_text())
    raw["gpu"] = {"name": "A100-80GB"}
    t = _Recording.model_validate(raw)
    READ.clear()
    _estimate(m, d, t)
    assert READ  # the recording works
    assert not READ & UNREAD_TRAINER_FIELDS


def test_rule_results_shared_in_a_scope_equal_a_fresh_check() -> None:
    from cfgcheck import check

    base = check(CONF, "config", ["model=llama-2-7b", "trainer.micro_batch_size=32"])
    assert not base.ok
    raw = base.config.to_plain() if base.config is not None else None
    assert raw is not None
    with shared_scope() as scope:
        first = validate(raw)
        second = validate({**raw, "seed": 7})
    assert scope.rules.hits > 0 and scope.fixes.hits > 0
    fresh = validate({**raw, "seed": 7})
    assert [f.to_dict() for f in second.findings] == [f.to_dict() for f in fresh.findings]
    assert [f.to_dict() for f in first.findings] == [f.to_dict() for f in validate(raw).findings]
