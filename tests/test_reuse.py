"""The caches that let checks share work (:mod:`cfgcheck.reuse`): keyed by content, bounded."""

from __future__ import annotations

import pytest

from cfgcheck.findings import CheckResult
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


def test_rule_results_in_a_scope_tell_a_given_field_from_a_derived_one() -> None:
    """Equal contents, but head_size given in one and derived in the other: the
    head-size-mismatch rule reads which (model_fields_set), so neither reuses the other's."""
    from cfgcheck import check

    base = check(CONF, "config", [])
    assert base.config is not None
    raw = base.config.model_dump(exclude_unset=True)
    derived = {**raw, "model": {**raw["model"], "n_embd": 2050, "n_head": 32}}
    derived["model"].pop("head_size", None)
    given = {**derived, "model": {**derived["model"], "head_size": 2050 // 32}}

    def rule(result: CheckResult) -> list[dict[str, object]]:
        return [f.to_dict() for f in result.findings if f.rule == "head-size-mismatch"]

    with shared_scope():
        in_scope = [rule(validate(derived)), rule(validate(given))]
    fresh = [rule(validate(derived)), rule(validate(given))]
    assert in_scope == fresh
    assert fresh[0] and fresh[0] != fresh[1]  # the rule tells them apart


def test_pinned_keys_and_derived_values_equal_fresh_ones() -> None:
    """Within pinned(), a section is keyed once per object; derived values (block linears,
    parameter counts, LoRA's share) are shared by content and equal what is computed afresh."""
    from cfgcheck.memory.params import adapted_modules, count_params, lora_params
    from cfgcheck.reuse import DERIVED, content_number, derived, frozen, pinned

    DERIVED.clear()
    m, _, t = _sections()
    copy = ModelConfig.model_validate(m.model_dump())
    targets, rank = t.lora.targets, t.lora.rank or 8
    fresh = (count_params(m), adapted_modules(m, targets), lora_params(m, rank, targets))
    assert content_number(m) is None  # outside a block: nothing is memoized by identity
    with pinned():
        assert content_number(m) == content_number(copy) is not None
        assert frozen(m) is frozen(m)  # once per object
        shared = (
            count_params(copy),
            adapted_modules(copy, targets),
            lora_params(copy, rank, targets),
        )
        other = m.model_copy(update={"n_layer": m.n_layer + 1})
        assert content_number(other) != content_number(m)
        assert count_params(other).total > count_params(m).total
        calls: list[int] = []

        def compute(value: int) -> int:
            calls.append(value)
            return value

        assert derived("test", m, (), lambda: compute(5)) == 5
        assert derived("test", copy, (), lambda: compute(6)) == 5  # same content: shared
        assert calls == [5]
    assert shared == fresh
