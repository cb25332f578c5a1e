"""The launch side of a run: an accelerate config (``--accelerate-config FILE``, or TRL's
``accelerate_config: zero3`` / ``num_processes: 8`` keys that the `trl` CLI hands to
``accelerate launch``) decides the device count and the sharding strategy.

accelerate config files (``accelerate config`` writes them; TRL ships ``zero1/2/3``,
``fsdp1/2``, ``multi_gpu``, ``single_gpu`` in trl/accelerate_configs/, each with
``num_processes: 8``): ``distributed_type`` DEEPSPEED (``deepspeed_config.zero_stage``), FSDP,
MULTI_GPU or NO; ``num_processes`` is the world size over ``num_machines`` nodes
(accelerate/commands/launch.py).
"""

from __future__ import annotations

from typing import Any

from cfgcheck.findings import Location
from cfgcheck.sources.base import Builder

# trl/accelerate_configs/<name>.yaml (trl 1.16.0): distributed_type / zero_stage, 8 processes.
TRL_SHIPPED = {
    "zero1": "zero1",
    "zero2": "zero2",
    "zero3": "zero3",
    "fsdp1": "fsdp",
    "fsdp2": "fsdp",
    "multi_gpu": "ddp",
    "single_gpu": "single",
}
TRL_SHIPPED_PROCESSES = 8


def strategy_of(config: dict[str, Any]) -> str | None:
    kind = str(config.get("distributed_type", "")).upper()
    if kind == "DEEPSPEED":
        ds = config.get("deepspeed_config") or {}
        stage = ds.get("zero_stage") if isinstance(ds, dict) else None
        return {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}.get(
            stage if isinstance(stage, int) else 2, "zero2"
        )
    if kind == "FSDP":
        return "fsdp"
    if kind in ("MULTI_GPU", "MULTI_NPU", "MULTI_XPU"):
        return "ddp"
    if kind == "NO":
        return "single"
    return None


def _offload(b: Builder, doc: Any) -> None:
    """``trainer.offload`` from an accelerate config: ``deepspeed_config``'s
    ``offload_optimizer_device`` / ``offload_param_device`` (accelerate/commands/config/
    cluster.py; or the JSON its ``deepspeed_config_file`` names), ``fsdp_config``'s
    ``fsdp_offload_params`` (FSDP's CPUOffload(offload_params=True))."""
    from cfgcheck.sources.deepspeed import offload_devices

    kind = strategy_of(doc.data)
    ds = doc.data.get("deepspeed_config")
    if kind is not None and kind.startswith("zero") and isinstance(ds, dict):
        for path, (device, key) in offload_devices(ds).items():
            line = doc.lines.get(f"deepspeed_config.{key}")
            b.set(path, device, Location(doc.file, line))
        name = ds.get("deepspeed_config_file")
        if isinstance(name, str) and name.endswith(".json"):
            from pathlib import Path

            from cfgcheck.sources.deepspeed import apply_offload
            from cfgcheck.sources.reader import read_document

            # accelerate opens it from the working directory; else next to the config
            for found in (Path(name), Path(doc.file).parent / name):
                if found.is_file():
                    apply_offload(b, read_document(found), True)
                    break
    fsdp = doc.data.get("fsdp_config")
    if kind == "fsdp" and isinstance(fsdp, dict) and fsdp.get("fsdp_offload_params") is True:
        where = Location(doc.file, doc.lines.get("fsdp_config.fsdp_offload_params"))
        b.set("trainer.offload.params", "cpu", where)
        b.set("trainer.offload.optimizer", "cpu", where)


def _devices(b: Builder, processes: Any, machines: Any, where: Location | None) -> None:
    if isinstance(processes, int) and processes > 0:
        nodes = machines if isinstance(machines, int) and machines > 0 else 1
        b.set("trainer.num_nodes", nodes, where)
        b.set("trainer.devices", max(1, processes // nodes), where)


def apply(b: Builder, accelerate_file: str | None) -> None:
    """Device count and strategy from the launch: ``--accelerate-config FILE`` first, then
    the config's own launcher keys (which the `trl` CLI passes after it, so they win)."""
    n = b.native
    if accelerate_file:
        from cfgcheck.sources.reader import read_document

        doc = read_document(accelerate_file)
        where = Location(doc.file, doc.lines.get("distributed_type"))
        strategy = strategy_of(doc.data)
        if strategy is not None:
            b.set("trainer.strategy", strategy, where)
        _offload(b, doc)
        _devices(
            b,
            doc.data.get("num_processes"),
            doc.data.get("num_machines"),
            Location(doc.file, doc.lines.get("num_processes")),
        )
    name = n.get("accelerate_config")
    if isinstance(name, str) and name in TRL_SHIPPED:
        b.from_key("trainer.strategy", "accelerate_config", TRL_SHIPPED[name])
        if not n.is_set("num_processes"):
            _devices(b, TRL_SHIPPED_PROCESSES, 1, n.loc("accelerate_config"))
    elif isinstance(name, str) and name:
        from cfgcheck.sources.reader import read_document

        doc = read_document(name)
        strategy = strategy_of(doc.data)
        if strategy is not None:
            b.from_key("trainer.strategy", "accelerate_config", strategy)
        _offload(b, doc)
        _devices(b, doc.data.get("num_processes"), doc.data.get("num_machines"), n.loc(name))
    if n.is_set("num_processes"):
        _devices(b, n.get("num_processes"), n.get("num_machines"), n.loc("num_processes"))
