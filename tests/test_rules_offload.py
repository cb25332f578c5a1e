"""Rule ``offload-strategy`` (cfgcheck/rules/offload.py), against the frameworks' own code."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from cfgcheck.rules import run_rules
from cfgcheck.schema.run import RunConfig
from tests.test_memory_offload import TINY, _probe, needs_deepspeed


def _cfg(**trainer: Any) -> RunConfig:
    return RunConfig.model_validate(
        {
            "model": TINY,
            "tokenizer": {"vocab_size": 2048},
            "data": {"max_seq_length": 256},
            "trainer": {"micro_batch_size": 1, "finetuning": "full", **trainer},
        }
    )


def _found(cfg: RunConfig) -> list[Any]:
    return [
        f
        for f in run_rules(cfg, ("model", "tokenizer", "data", "trainer"))
        if f.rule == "offload-strategy"
    ]


def test_fsdp_has_no_nvme_and_no_optimizer_only_offload() -> None:
    # torch's own API: CPUOffload has one switch (offload_params), CPUOffloadPolicy only
    # pin_memory; neither names a device
    from torch.distributed.fsdp import CPUOffload, CPUOffloadPolicy

    assert [f.name for f in dataclasses.fields(CPUOffload)] == ["offload_params"]
    assert list(inspect.signature(CPUOffloadPolicy).parameters) == ["pin_memory"]
    nvme = _found(_cfg(strategy="fsdp", devices=2, offload={"params": "nvme"}))
    assert [f.severity for f in nvme] == ["error"] and "NVMe" in nvme[0].message
    alone = _found(_cfg(strategy="fsdp", devices=2, offload={"optimizer": "cpu"}))
    assert [f.severity for f in alone] == ["error"]
    fixed = _cfg(strategy="fsdp", devices=2, offload={"optimizer": "cpu", "params": "cpu"})
    assert _found(fixed) == []


def test_ignored_offload_is_a_warning() -> None:
    got = _found(_cfg(strategy="zero2", devices=2, offload={"params": "cpu", "optimizer": "nvme"}))
    assert [f.severity for f in got] == ["warning", "warning"]
    assert _found(_cfg(strategy="zero3", devices=2, offload={"params": "nvme"})) == []
    assert [f.severity for f in _found(_cfg(strategy="ddp", offload={"optimizer": "cpu"}))] == [
        "warning"
    ]
    assert _found(_cfg(strategy="zero2", offload={"optimizer": "cpu"})) == []


@pytest.mark.slow
@needs_deepspeed
def test_deepspeed_stage2_ignores_offload_param_and_keeps_nvme_states_in_host_memory() -> None:
    # DeepSpeed accepts the config and builds the stage 1/2 optimizer: offload_param is not
    # read (the module keeps every parameter whole), and device nvme is its cpu_offload
    got = _probe({"model": TINY, "stage": 2, "optimizer": "nvme", "params": "cpu", "port": 29542})
    assert got["optimizer"] == "DeepSpeedZeroOptimizer" and got["cpu_offload"]
    assert got["module"] == got["bit16_buffer"] > 0  # all parameters, 16-bit, not partitioned
    found = _found(_cfg(strategy="zero2", offload={"optimizer": "nvme", "params": "cpu"}))
    assert {("nvme" in f.message, "offload_param" in f.message) for f in found} == {
        (True, False),
        (False, True),
    }
