"""The collector's settings while a batch of checks runs (cfgcheck/collector.py): raised and
frozen inside, restored exactly after, shared by batches on several threads, never lowering
what the process set itself."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from cfgcheck.collector import YOUNG, batch_collection


@pytest.fixture(autouse=True)
def defaults() -> Iterator[tuple[int, int, int]]:
    """Each test starts from CPython's thresholds and nothing frozen, and leaves them so."""
    before = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(*before)


def test_a_batch_raises_and_freezes_then_restores(defaults: tuple[int, int, int]) -> None:
    kept = [object() for _ in range(10)]
    with batch_collection():
        assert gc.get_threshold() == (YOUNG, 10, 10)
        assert gc.get_freeze_count() > 0  # the objects alive before it, out of collections
    assert gc.get_threshold() == defaults
    assert gc.get_freeze_count() == 0
    assert kept


def test_restored_when_the_batch_raises(defaults: tuple[int, int, int]) -> None:
    with pytest.raises(RuntimeError), batch_collection():
        raise RuntimeError("a point failed")
    assert gc.get_threshold() == defaults
    assert gc.get_freeze_count() == 0


def test_what_the_process_set_itself_is_left_alone() -> None:
    gc.set_threshold(200_000, 30, 30)  # mypy's main
    gc.freeze()
    frozen = gc.get_freeze_count()
    with batch_collection():
        assert gc.get_threshold() == (200_000, 30, 30)
    assert gc.get_threshold() == (200_000, 30, 30)
    assert gc.get_freeze_count() == frozen  # not unfrozen by the batch


def test_overlapping_batches_on_threads_restore_once(defaults: tuple[int, int, int]) -> None:
    inside = threading.Barrier(2)
    seen: list[tuple[int, int, int]] = []
    left = threading.Event()

    def first() -> None:
        with batch_collection():
            inside.wait()
            left.wait()  # leaves while the second is still inside

    def second() -> None:
        with batch_collection():
            inside.wait()
            left.set()
            worker.join()
            seen.append(gc.get_threshold())  # still raised: one batch is running

    worker = threading.Thread(target=first)
    other = threading.Thread(target=second)
    worker.start()
    other.start()
    other.join()
    assert seen == [(YOUNG, 10, 10)]
    assert gc.get_threshold() == defaults
    assert gc.get_freeze_count() == 0


def test_a_sweep_runs_in_a_batch(defaults: tuple[int, int, int], monkeypatch: Any) -> None:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from cfgcheck.hydra.sweep import SweepChecker, plan_sweep
    from tests.conftest import CONF

    during: list[tuple[int, int, int]] = []
    real = SweepChecker.check

    def check(self: SweepChecker, point: Any) -> Any:
        during.append(gc.get_threshold())
        return real(self, point)

    monkeypatch.setattr(SweepChecker, "check", check)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="test"):
        app = GlobalHydra.instance().hydra
        p = plan_sweep(app, "config", ["data.max_seq_length=512,1024"])
        assert p is not None
        SweepChecker(app, "config", p.hydra_overrides).check_all(p.points)
    GlobalHydra.instance().clear()
    assert during == [(YOUNG, 10, 10)] * 2
    assert gc.get_threshold() == defaults
