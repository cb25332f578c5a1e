"""CPU / NVMe offload in the memory estimate (cfgcheck/memory/offload.py).

The byte counts are checked against DeepSpeed's own ZeRO optimizers, run on DeepSpeed's CPU
accelerator (tests/ds_offload_probe.py): the fp32 master partition, its gradient, the optimizer
states, the 16-bit buffers, the GPU staging buffer, the reduce bucket and the parameter
partitions are the tensors DeepSpeed allocates, counted from the objects after a real step.
On CPU the "device" and the host are the same memory, so where each tensor lives on a GPU is
read from DeepSpeed's source (``self.device``), not measured; no offloading run is measured on
a GPU, and the estimate carries the uncalibrated margin (tests below).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.memory import offload, sharding
from cfgcheck.memory.coverage import UNCALIBRATED_MARGIN
from cfgcheck.memory.estimate import estimate
from cfgcheck.memory.params import count_params
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

ROOT = Path(__file__).resolve().parent.parent
TINY: dict[str, Any] = {
    "name": "llama-tiny",
    "block_size": 512,
    "vocab_size": 2048,
    "n_layer": 2,
    "n_embd": 64,
    "n_head": 4,
    "n_query_groups": 2,
    "head_size": 16,
    "intermediate_size": 160,
}
LLAMA_8B: dict[str, Any] = {
    "name": "llama-3-8b",
    "block_size": 8192,
    "vocab_size": 128256,
    "n_layer": 32,
    "n_embd": 4096,
    "n_head": 32,
    "n_query_groups": 8,
    "head_size": 128,
    "intermediate_size": 14336,
}


def _trainer(**kw: Any) -> TrainerConfig:
    base: dict[str, Any] = {
        "micro_batch_size": 1,
        "finetuning": "full",
        "precision": "bf16-mixed",
        "gradient_checkpointing": True,
    }
    return TrainerConfig.model_validate({**base, **kw})


def _run(model: dict[str, Any], **kw: Any) -> Any:
    m = ModelConfig.model_validate(model)
    return estimate(m, DataConfig(max_seq_length=2048), _trainer(**kw))


def test_placement_follows_what_each_framework_does() -> None:
    # ZeRO-1/2 never read offload_param, and any offload_optimizer device is host memory
    # (stage_1_and_2.py l.186: cpu_offload = device != none)
    p = offload.placement(
        _trainer(strategy="zero2", offload={"optimizer": "nvme", "params": "cpu"})
    )
    assert p == offload.Placement("cpu", "none")
    p = offload.placement(
        _trainer(strategy="zero3", offload={"optimizer": "nvme", "params": "cpu"})
    )
    assert p == offload.Placement("nvme", "cpu")
    # FSDP's CPU offload takes the gradients and the optimizer step with the parameters
    p = offload.placement(_trainer(strategy="fsdp", devices=8, offload={"params": "cpu"}))
    assert p == offload.Placement("cpu", "cpu")
    # DDP has nothing to offload
    assert not offload.placement(_trainer(strategy="ddp", offload={"optimizer": "cpu"})).active


def test_zero_offload_keeps_the_16bit_model_and_moves_the_optimizer_to_the_host() -> None:
    base = _run(LLAMA_8B, strategy="zero2", devices=8)
    off = _run(LLAMA_8B, strategy="zero2", devices=8, offload={"optimizer": "cpu"})
    pc = count_params(ModelConfig.model_validate(LLAMA_8B))
    assert off.get("weights") == 2 * pc.total  # bf16 module, not partitioned at stage 2
    assert off.get("optimizer_states") == 0 and base.get("optimizer_states") > 0
    assert off.total_bytes < base.total_bytes
    assert base.host == () and base.to_dict()["host"] is None
    host = {c.key: c.bytes for c in off.host}
    share = pc.total // 8
    assert host["host_master"] == 4 * share and host["host_states"] == 8 * share
    assert off.host_node_bytes == 8 * off.host_bytes  # eight processes on the node
    assert off.to_dict()["host"]["per_node_gib"] == round(off.host_node_bytes / 2**30, 3)


def test_zero3_param_offload_leaves_the_gathered_units() -> None:
    kw: dict[str, Any] = {"strategy": "zero3", "devices": 8}
    both = _run(LLAMA_8B, offload={"optimizer": "cpu", "params": "cpu"}, **kw)
    opt = _run(LLAMA_8B, offload={"optimizer": "cpu"}, **kw)
    assert both.get("weights") == 0 < opt.get("weights")
    assert both.get("sharding_buffers") == opt.get("sharding_buffers") > 0
    assert any(c.key == "host_params" for c in both.host)
    # on one GPU nothing else gathers the units: they are counted with the weights
    one = _run(LLAMA_8B, strategy="zero3", offload={"optimizer": "cpu", "params": "cpu"})
    t = _trainer(strategy="zero3")
    assert one.get("weights") == sharding.gather_bytes(ModelConfig.model_validate(LLAMA_8B), t)


def test_the_reduce_bucket_is_the_configs_or_hidden_squared() -> None:
    m = ModelConfig.model_validate(LLAMA_8B)
    auto = _trainer(strategy="zero2", offload={"optimizer": "cpu"})
    assert offload.bucket_bytes(m, auto) == 4096 * 4096 * 2  # HF "auto": hidden^2, bf16
    default = _trainer(strategy="zero2", offload={"optimizer": "cpu", "bucket_elements": 5 * 10**8})
    assert offload.bucket_bytes(m, default) == 10**9
    # with accumulation the gradients persist through the forward: the bucket is what is left
    kw: dict[str, Any] = {"strategy": "zero2", "devices": 8, "gradient_accumulation_steps": 2}
    small = _run(LLAMA_8B, offload={"optimizer": "cpu"}, **kw)
    big = _run(LLAMA_8B, offload={"optimizer": "cpu", "bucket_elements": 5 * 10**8}, **kw)
    assert big.get("gradients") - small.get("gradients") == 10**9 - 4096 * 4096 * 2


def test_offload_is_not_calibrated_and_says_so() -> None:
    est = _run(LLAMA_8B, strategy="zero3", devices=8, offload={"optimizer": "cpu"})
    assert est.margin == UNCALIBRATED_MARGIN
    assert any("trainer.offload" in g for g in est.uncalibrated)


def test_no_offload_changes_nothing() -> None:
    # offload none is the default: the same estimate as a trainer without the section
    a = _run(LLAMA_8B, strategy="zero3", devices=8)
    b = _run(LLAMA_8B, strategy="zero3", devices=8, offload={"optimizer": "none", "params": "none"})
    assert a.components == b.components and a.host == b.host == ()


def test_cfgcheck_memory_reports_the_host_memory() -> None:
    from tests.conftest import run_cfgcheck

    args = ["model=llama-3-8b", "tokenizer=llama-3", "trainer=fsdp-8gpu"]
    args += ["trainer.strategy=zero3", "trainer.offload.optimizer=cpu", "trainer.gpu.name=H100"]
    proc = run_cfgcheck("memory", *args, "--format", "json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    host = json.loads(proc.stdout)["estimate"]["host"]
    assert host["processes_per_node"] == 8
    assert host["per_node_gib"] == pytest.approx(8 * host["per_process_gib"], abs=0.01)
    assert {c["key"] for c in host["components"]} >= {"host_master", "host_states"}
    text = run_cfgcheck("memory", *args, timeout=120).stdout
    assert "host (CPU) memory for the offload" in text and "per node of 8 process(es)" in text


# --- against DeepSpeed's own ZeRO optimizers, on its CPU accelerator ----------------------------


def _probe(spec: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "ds_offload_probe.py"), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(lines[-1])
    return out


needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="needs deepspeed (no cfgcheck extra: it builds from an sdist against the installed "
    "torch; pip install --no-build-isolation deepspeed)",
)


@pytest.mark.slow
@needs_deepspeed
@pytest.mark.parametrize("accumulation", [1, 2])
def test_zero2_offload_matches_deepspeeds_optimizer(accumulation: int) -> None:
    got = _probe({"model": TINY, "stage": 2, "accumulation": accumulation, "port": 29540})
    m = ModelConfig.model_validate(TINY)
    t = _trainer(
        strategy="zero2", offload={"optimizer": "cpu"}, gradient_accumulation_steps=accumulation
    )
    div = sharding.divisors(t)
    host = {h.key: h.bytes for h in offload.host_parts(m, t, div)}
    assert got["optimizer"] == "DeepSpeedZeroOptimizer" and got["cpu_offload"]
    assert got["module_dtype"] == "torch.bfloat16"
    # DeepSpeed pads the flat group to an alignment: a few elements at most
    assert 0 <= got["master"] - host["host_master"] <= 64
    assert 0 <= got["host_gradients"] - host["host_gradients"] <= 64
    assert 0 <= got["states"] - host["host_states"] <= 128
    assert 0 <= got["bit16_buffer"] + got["accumulated"] - host["host_buffers"] <= 64
    assert got["staging"] == offload.staging_bytes(m, t)
    terms = offload.Terms(0, 0, 0, 10**12, 1, 0, 1)
    assert offload.on_gpu(m, t, div, terms).weights == got["module"]


@pytest.mark.slow
@needs_deepspeed
def test_zero3_offload_matches_deepspeeds_optimizer() -> None:
    got = _probe({"model": TINY, "stage": 3, "params": "cpu", "port": 29541})
    m = ModelConfig.model_validate(TINY)
    t = _trainer(strategy="zero3", offload={"optimizer": "cpu", "params": "cpu"})
    host = {h.key: h.bytes for h in offload.host_parts(m, t, sharding.divisors(t))}
    assert got["optimizer"] == "DeepSpeedZeroOptimizer_Stage3"
    assert got["param_dtype"] == "torch.bfloat16"
    assert got["param_partitions"] == host["host_params"]
    assert got["master"] == host["host_master"]
    assert got["host_gradients"] == host["host_gradients"]
    assert got["grad_partitions"] == host["host_grad_partitions"]
    assert got["states"] == host["host_states"]
    assert got["bucket"] == offload.bucket_bytes(m, t)
