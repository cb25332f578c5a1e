"""The verdict and the figures on a given GPU: "does not fit" counts what a run cannot do
without; a full GPU makes torch free its cache, so the shown cache never takes the total past
the GPU (fms-acceleration's Mistral-7B full fine-tuning completed on an A100-80GB)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cfgcheck.memory.allocator import ROUNDING
from cfgcheck.memory.estimate import MemoryEstimate, estimate
from cfgcheck.memory.verdict import required_bytes, verdict

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
GIB = 1024**3


def mistral_full() -> MemoryEstimate:
    import memory_accuracy

    fms = REPO / "benchmarks" / "reference" / "fms-acceleration-a100.csv"
    row = next(r for r in memory_accuracy.read_rows(fms) if r["method"] == "full")
    return estimate(*memory_accuracy.row_config(row)[:3])


def test_a_full_gpu_caps_the_allocator_cache_and_nothing_else() -> None:
    est = mistral_full()
    assert est.total_bytes < 80 * GIB  # the run completed on an A100-80GB
    # a GPU with room for what the run needs but not for all of the cache
    gpu = (required_bytes(est) + est.total_bytes) // 2
    assert required_bytes(est) < gpu < est.total_bytes
    on = est.on_gpu(gpu)
    assert on.total_bytes == gpu
    assert on.allocated_bytes == est.allocated_bytes
    assert on.get("fragmentation") < est.get("fragmentation")
    assert "capped" in next(c.note for c in on.components if c.key == "fragmentation")
    assert verdict(est, gpu) == "may not fit"


def test_block_rounding_is_never_freed_and_a_roomy_gpu_changes_nothing() -> None:
    est = mistral_full()
    tight = est.on_gpu(required_bytes(est))  # no room at all for cached free blocks
    assert tight.get("fragmentation") == int(est.allocated_bytes * ROUNDING) == est.cache_floor
    assert tight.total_bytes == required_bytes(est)
    assert verdict(est, required_bytes(est) - 1) == "does not fit"
    assert est.on_gpu(est.total_bytes) is est
    assert est.on_gpu(2 * est.total_bytes) is est


def test_cli_shows_the_figures_on_the_declared_gpu(capsys: object) -> None:
    from cfgcheck.cli import main

    args = [
        "memory",
        "--format",
        "json",
        "model=mistral-7b-v0.1",
        "trainer.finetuning=full",
        "trainer.micro_batch_size=1",
        "trainer.gradient_accumulation_steps=8",
        "data.max_seq_length=4096",
        "trainer.gradient_checkpointing=true",
    ]
    main([*args, "trainer.gpu.name=H200"])
    roomy = json.loads(capsys.readouterr().out)  # type: ignore[attr-defined]
    uncapped = roomy["estimate"]["total_gib"]
    cache = next(c for c in roomy["estimate"]["components"] if c["key"] == "fragmentation")
    small = round(uncapped - cache["gib"] / 2, 2)
    main([*args, "trainer.gpu.name=", f"trainer.gpu.memory_gib={small}"])
    out = json.loads(capsys.readouterr().out)  # type: ignore[attr-defined]
    assert out["verdict"] in ("may not fit", "does not fit")
    assert out["estimate"]["allocated_gib"] == roomy["estimate"]["allocated_gib"]
    assert out["estimate"]["total_gib"] < uncapped
    assert abs(out["estimate"]["total_gib"] - small) < 0.01  # the cache fills what is left
