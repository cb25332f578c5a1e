"""The ``--deepspeed`` JSON of a launch, as the HF integration reads it: its ``"auto"`` values
filled from the flags and a value that is set and disagrees with them refused, both by
:func:`cfgcheck.sources.deepspeed.fill_match` (transformers integrations/deepspeed.py
``HfTrainerDeepSpeedConfig.trainer_config_process``; ``trainer_config_finalize`` raises the
mismatches before training).

``train_batch_size`` is compared only when the launch states its world size (python: one
process; torchrun: ``--nproc_per_node`` x ``--nnodes``, 1 when absent; deepspeed ``--num_gpus``;
accelerate ``--num_processes`` or its config file); ``deepspeed`` without ``--num_gpus`` runs on
every GPU of the machine, which a script does not say.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Finding, Location
from cfgcheck.sources.base import NativeConfig
from cfgcheck.sources.deepspeed import fill_match, trainer_fills
from cfgcheck.sources.launcher import LaunchConfig, launch_of

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

MISMATCH = "launch-deepspeed-mismatch"
# TrainingArguments defaults (transformers training_args.py), for a field the entry point's
# parser does not read from the installed source.
DEFAULTS: dict[str, Any] = {
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "learning_rate": 5e-5,
    "max_grad_norm": 1.0,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "weight_decay": 0.0,
    "fp16": False,
    "bf16": False,
    "fp16_full_eval": False,
    "bf16_full_eval": False,
}
COUNTS = ("nproc_per_node", "nproc-per-node", "num_gpus", "num_processes")


def _args(n: LaunchConfig) -> dict[str, Any]:
    out = {}
    for key, fallback in DEFAULTS.items():
        value = n.value(key, fallback)
        out[key] = fallback if value is None or isinstance(value, str) else value
    return out


def world_stated(n: LaunchConfig) -> bool:
    """Whether the launch says how many processes it starts (see the module)."""
    launch = n.launch
    if launch is None or any(k.startswith("launcher.") for k in n.unknown):
        return False
    if launch.launcher in ("python", "torchrun"):
        return True
    if launch.launcher == "accelerate" and "config_file" in launch.launcher_flags:
        return True
    return any(name in launch.launcher_flags for name in COUNTS)


def resolved(n: LaunchConfig, run: RunConfig | None) -> tuple[dict[str, Any], list[Any]] | None:
    """The DeepSpeed JSON as the Trainer fills it, and its mismatches; None without one."""
    from cfgcheck.sources.reader import read_document

    value = n.value("deepspeed")
    if not isinstance(value, str) or not value.endswith(".json"):
        return None
    path = n.root / value
    if not path.is_file():
        return None  # launch-deepspeed-missing
    try:
        doc = read_document(path)
    except ConfigLoadError:
        return None
    world = None
    if run is not None and world_stated(n):
        world = run.trainer.devices * run.trainer.num_nodes
    filled, mismatches = fill_match(doc.data, _args(n), world)
    unknown = set(n.unknown)
    mismatches = [m for m in mismatches if not set(m[2].split("|")) & unknown]
    from cfgcheck.locations import display_path

    shown = display_path(path)
    return filled, [(*m, Location(shown, doc.lines.get(m[0]))) for m in mismatches]


def mismatch_rule(native: NativeConfig, run: RunConfig | None) -> list[Finding]:
    n = launch_of(native)
    got = resolved(n, run)
    if got is None or not got[1]:
        return []
    mismatches = got[1]
    lines = "; ".join(f"- ds {k}={d} vs hf {h}={v}" for k, d, h, v, _ in mismatches)
    locations: dict[str, Location | None] = {}
    for key, _, hf_key, _, where in mismatches:
        locations[f"deepspeed:{key}"] = where
        for flag in hf_key.split("|"):
            name = flag.split(" ")[0]
            if name in n.where:
                locations[name] = n.where[name]
    return [
        Finding(
            MISMATCH,
            "error",
            tuple(locations),
            f"the DeepSpeed config {n.value('deepspeed')} disagrees with the flags: "
            'TrainingArguments refuses to start with "ValueError: Please correct the following '
            f'DeepSpeed config values that mismatch TrainingArguments values: {lines}" '
            "(transformers integrations/deepspeed.py trainer_config_finalize)",
            'set these DeepSpeed values to "auto" (the Trainer fills them from the flags), or '
            "give the flags the JSON's values",
            locations=locations,
        )
    ]


__all__ = ["mismatch_rule", "resolved", "trainer_fills", "world_stated"]
