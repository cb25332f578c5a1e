"""The sweep's plain-point shortcut (cfgcheck/hydra/plain.py): taken for plain value overrides
of existing untyped scalars, refused wherever Hydra's override code could give another
config, and verdicts equal to Hydra's path either way (tests/test_sweep.py compares the fast
path with composing every point)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from cfgcheck.hydra.plain import PlainBase
from cfgcheck.hydra.sweep import SweepChecker
from cfgcheck.schema.run import RunConfig
from tests.test_sweep import hydra_app, plan  # noqa: F401  (the fixture)


def base_and_parsed(app: Any, *overrides: str) -> tuple[PlainBase | None, list[Any]]:
    checker = SweepChecker(app, "config")
    parsed = [checker._parse(o) for o in overrides]
    group = tuple(o for o, (_, level) in zip(overrides, parsed, strict=True) if level)
    base = checker._base(group)
    assert isinstance(base, bytes)
    values = [o for o, level in parsed if not level]
    return PlainBase.of(pickle.loads(base), RunConfig), values


def test_plain_values_take_the_shortcut_and_match_hydra(hydra_app: Any) -> None:  # noqa: F811
    overrides = ("data.max_seq_length=2048", "trainer.learning_rate=3e-5", "seed=7")
    plain, values = base_and_parsed(hydra_app, *overrides)
    assert plain is not None
    assert plain.references == {"name"}  # output_dir: outputs/${name} in conf/config.yaml
    applied = plain.apply(values)
    assert applied is not None
    assert applied["data"]["max_seq_length"] == 2048 and applied["seed"] == 7
    assert applied["trainer"]["learning_rate"] == pytest.approx(3e-5)
    assert plain.owned["data"]["max_seq_length"] != 2048  # the base is left as it was

    on = SweepChecker(hydra_app, "config")
    off = SweepChecker(hydra_app, "config")
    off.plain_points = False
    assert on.check(overrides).to_dict() == off.check(overrides).to_dict()


@pytest.mark.parametrize(
    "override",
    [
        "+data.max_length=512",  # adds a key
        "data.paths=[a.jsonl]",  # a list merges
        "data.pad_to_multiple_of=null",  # null
        "name=other",  # read by output_dir's interpolation
        "++data.no_such_key=1",  # not in the composition
        "trainer.lora=3",  # a mapping replaced by a scalar
        "name='${seed}'",  # would become an interpolation
        "data.max_seq_length=???",  # MISSING
    ],
)
def test_anything_else_goes_through_hydra(hydra_app: Any, override: str) -> None:  # noqa: F811
    plain, values = base_and_parsed(hydra_app, override)
    assert plain is not None
    assert plain.apply(values) is None
    on = SweepChecker(hydra_app, "config")
    off = SweepChecker(hydra_app, "config")
    off.plain_points = False
    assert on.check((override,)).signature() == off.check((override,)).signature()


def test_a_sweep_is_the_same_with_and_without_the_shortcut(hydra_app: Any) -> None:  # noqa: F811
    p = plan(
        hydra_app,
        "model=tinyllama-1.1b,llama-2-7b",
        "data.max_seq_length=1024,2049,8192",
        "trainer.micro_batch_size=4,32",
        "name=a,b",
        "trainer.learning_rate=1e-5,-1",
    )
    on = SweepChecker(hydra_app, "config", p.hydra_overrides).check_all(p.points)
    slow = SweepChecker(hydra_app, "config", p.hydra_overrides)
    slow.plain_points = False
    off = slow.check_all(p.points)
    assert [v.to_dict() for v in on.points] == [v.to_dict() for v in off.points]
    assert len(on.failing) > 0 and any(v.ok for v in on.points)
