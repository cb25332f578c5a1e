"""One DeepSpeed ZeRO-Offload step on CPU, and what DeepSpeed's own optimizer holds.

Run in a fresh process (``deepspeed.init_distributed`` is process-wide) by
tests/test_memory_offload.py: ``python tests/ds_offload_probe.py '<spec json>'`` with a
``model`` dict (as in benchmarks/calibration/runs.json), ``stage`` (2 or 3), ``optimizer``
and ``params`` (the offload devices), ``accumulation``. The model is built as gpu_measure.py
builds it, the DeepSpeed config is what the HF integration passes with ``--bf16`` and "auto"
values filled (``reduce_bucket_size`` = hidden^2). DeepSpeed's CPU accelerator runs the step
over gloo with one process: every tensor is in host memory, so what this reports is the size,
dtype and role of each tensor of DeepSpeed's ZeRO optimizer; where each one lives on a GPU
is the code's ``self.device`` choice, read in cfgcheck/memory/offload.py.

The last line printed is a JSON object of byte counts.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def main(spec: dict[str, Any]) -> dict[str, Any]:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(spec.get("port", 29533)),
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
    )
    import torch

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import deepspeed

    from tests.alloc_tracer import build, gpu_measure

    deepspeed.init_distributed(dist_backend="gloo")
    from cfgcheck.schema.model import ModelConfig

    m = ModelConfig.model_validate(spec["model"]).model_dump()
    t = {"precision": "bf16-mixed", "attention": "sdpa", "finetuning": "full"}
    t["gradient_checkpointing"] = False
    model = build(m, t, gpu_measure())
    stage = spec["stage"]
    zero: dict[str, Any] = {
        "stage": stage,
        "offload_optimizer": {"device": spec.get("optimizer", "cpu"), "pin_memory": False},
        "reduce_bucket_size": m["n_embd"] * m["n_embd"],
    }
    if spec.get("params"):
        zero["offload_param"] = {"device": spec["params"], "pin_memory": False}
    accum = spec.get("accumulation", 1)
    cfg = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": accum,
        "bf16": {"enabled": True},
        "zero_optimization": zero,
        # torch AdamW on the CPU partition: DeepSpeedCPUAdam needs a compiled op; the states
        # are the same two fp32 tensors per element (deepspeed/ops/adam/cpu_adam.py)
        "zero_force_ds_cpu_optimizer": False,
    }
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
    o = engine.optimizer
    ids = torch.randint(0, m["vocab_size"], (1, 16))
    out: dict[str, Any] = {}
    for _ in range(accum - 1):  # the micro-batches before the boundary
        engine.backward(engine(input_ids=ids, labels=ids).loss)
        engine.step()
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    if stage == 3:
        out["grad_partitions"] = _bytes([o.grad_partitions_flat_buffer])
        out["host_gradients"] = _bytes(g.grad for g in o.fp32_partitioned_groups_flat)
        out["bucket"] = _bytes(b.buffer for b in o.ipg_buckets.values())
        out["param_partitions"] = _bytes(p.ds_tensor for p in model.parameters())
        out["param_dtype"] = str(next(model.parameters()).ds_tensor.dtype)
        out["master"] = _bytes(o.fp32_partitioned_groups_flat)
    else:
        out["host_gradients"] = _bytes(g.grad for g in o.single_partition_of_fp32_groups)
        out["master"] = _bytes(o.single_partition_of_fp32_groups)
        out["bit16_buffer"] = _bytes(o.param_buffer_of_bit16_for_cpu_offload_groups)
        out["staging"] = _bytes([o.temp_grad_buffer_for_gpu_offload])
        out["accumulated"] = _bytes(getattr(o, "accumulated_grads_in_cpu", {}).values())
        out["module"] = _bytes(model.parameters())
        out["module_dtype"] = str(next(model.parameters()).dtype)
    engine.step()
    out["states"] = _bytes(
        v
        for s in o.optimizer.state.values()
        for v in s.values()
        if torch.is_tensor(v) and v.dim() > 0
    )
    out["optimizer"] = type(o).__name__
    out["cpu_offload"] = bool(getattr(o, "cpu_offload", False) or o.offload_optimizer)
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
