"""CPU / NVMe offload that the strategy cannot do, or does differently than the config says.

Read from the frameworks (deepspeedai/DeepSpeed edaa722, torch 2.13):

* DeepSpeed ``zero/config.py`` ``offload_param``: "Valid only with stage 3"; the stage 1/2
  optimizer (``zero/stage_1_and_2.py``) never reads it, so the weights stay on the GPU;
* ``stage_1_and_2.py`` l.186: ``cpu_offload = True`` for any ``offload_optimizer.device`` but
  ``none``, so ``nvme`` below stage 3 keeps the states in host memory;
* DeepSpeed offloads only through a ZeRO optimizer (``engine.py`` builds one when
  ``zero_optimization.stage`` > 0), and torch DDP has no offload;
* torch FSDP ``CPUOffload(offload_params: bool)`` and FSDP2 ``CPUOffloadPolicy(pin_memory)``
  offload to the CPU only, and only with the parameters (the optimizer steps the parameters
  where they are).
"""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.findings import Fix
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig

OPTIMIZER = "trainer.offload.optimizer"
PARAMS = "trainer.offload.params"


@rule("offload-strategy", requires=("trainer",))
def offload_strategy(cfg: RunConfig) -> Iterator[Problem]:
    """Offload settings the strategy refuses or ignores."""
    t = cfg.trainer
    o = t.offload
    if o.optimizer == "none" and o.params == "none":
        return
    s = t.strategy
    if s in ("single", "ddp"):
        yield Problem(
            "warning",
            ("trainer.strategy", OPTIMIZER, PARAMS),
            f"trainer.offload is set but trainer.strategy={s}: only DeepSpeed ZeRO (1-3) and "
            "FSDP offload; nothing is moved off the GPU and the estimate counts it there",
            "use trainer.strategy=zero2 (optimizer offload) or zero3, or drop trainer.offload",
            fixes=(Fix(("trainer.strategy=zero3",), "ZeRO-3 offloads the optimizer and weights"),),
        )
    elif s == "fsdp":
        if "nvme" in (o.optimizer, o.params):
            yield Problem(
                "error",
                ("trainer.strategy", OPTIMIZER, PARAMS),
                "torch FSDP offloads to the CPU only (CPUOffload(offload_params=True), FSDP2 "
                "CPUOffloadPolicy): it has no NVMe device",
                "offload to cpu, or use DeepSpeed ZeRO-3 (ZeRO-Infinity) for NVMe",
                fixes=(
                    Fix((f"{OPTIMIZER}=cpu", f"{PARAMS}=cpu"), "FSDP CPU offload"),
                    Fix(("trainer.strategy=zero3",), "ZeRO-Infinity offloads to NVMe"),
                ),
            )
        elif o.params == "none":
            yield Problem(
                "error",
                ("trainer.strategy", OPTIMIZER, PARAMS),
                f"{OPTIMIZER}={o.optimizer} without {PARAMS}: torch FSDP has no optimizer-only "
                "offload; its CPU offload moves the parameters, the gradients and the "
                "optimizer step together",
                f"set {PARAMS}=cpu (FSDP CPU offload), or use trainer.strategy=zero2/zero3",
                fixes=(Fix((f"{PARAMS}=cpu",), "FSDP CPU offload"),),
            )
    else:  # zero1 / zero2 / zero3
        if s != "zero3" and o.params != "none":
            yield Problem(
                "warning",
                ("trainer.strategy", PARAMS),
                f"{PARAMS}={o.params} does nothing at trainer.strategy={s}: DeepSpeed reads "
                'offload_param at ZeRO stage 3 only ("Valid only with stage 3", '
                "deepspeed/runtime/zero/config.py); the weights stay on the GPU",
                "use trainer.strategy=zero3 to offload the weights, or drop offload_param",
                fixes=(
                    Fix(("trainer.strategy=zero3",), "ZeRO-3 offloads the weights"),
                    Fix((f"{PARAMS}=none",), "keep the weights on the GPU"),
                ),
            )
        if s != "zero3" and o.optimizer == "nvme":
            yield Problem(
                "warning",
                ("trainer.strategy", OPTIMIZER),
                f"{OPTIMIZER}=nvme at trainer.strategy={s}: the ZeRO-1/2 optimizer treats every "
                "offload device as the CPU (stage_1_and_2.py: cpu_offload = device != none), "
                "so the optimizer states are in host memory, not on NVMe",
                "use trainer.strategy=zero3 for NVMe (ZeRO-Infinity), or say cpu",
                fixes=(Fix((f"{OPTIMIZER}=cpu",), "what DeepSpeed does at this stage"),),
            )
