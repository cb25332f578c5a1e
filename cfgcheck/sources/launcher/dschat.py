"""DeepSpeed-Chat's own LoRA (microsoft/DeepSpeedExamples applications/DeepSpeed-Chat, at
83757d9c): ``main.py`` calls ``convert_linear_layer_to_lora(model, args.lora_module_name,
args.lora_dim)`` when ``--lora_dim`` is above 0 (training/step1_supervised_finetuning/main.py
lines 260-264), which replaces only the ``nn.Linear`` modules whose name *contains*
``--lora_module_name`` (dschat/utils/module/lora.py lines 89-97: ``part_module_name in name``).
A substring that is in no linear module's name applies LoRA to nothing, silently; with
``--only_optimize_lora`` nothing is left to train.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources.base import NativeConfig
from cfgcheck.sources.launcher import launch_of

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

RULE = "launch-lora-module-unmatched"


def _layers_prefix(linears: list[str]) -> str | None:
    """The part of the linears' names that names the decoder layers (``decoder.layers.``,
    ``layers.``): what DeepSpeed-Chat's own scripts pass."""
    for path in linears:
        parts = path.split(".")
        for i, part in enumerate(parts):
            if part.isdigit() and i > 0:
                return f"{parts[i - 1]}."
    return None


def lora_module_rule(native: NativeConfig, run: RunConfig | None) -> list[Finding]:
    from cfgcheck.memory.modules import LINEAR, module_tree

    n = launch_of(native)
    entry = n.entry
    if entry is None or run is None or entry.parser != "argparse":
        return []
    if not {"lora_dim", "lora_module_name"} <= set(entry.fields):
        return []
    if {"lora_dim", "lora_module_name"} & set(n.unknown):
        return []
    dim, part = n.value("lora_dim", 0), n.value("lora_module_name")
    if not isinstance(dim, int) or dim <= 0 or not isinstance(part, str):
        return []
    model = run.model
    deep = any(c.isdigit() for c in part)
    tree = module_tree(model if deep else model.model_copy(update={"n_layer": 1}))
    if tree is None:
        return []  # an architecture cfgcheck cannot name modules for
    linears = [p for p, kind in tree.items() if kind == LINEAR]
    if any(part in p for p in linears):
        return []
    only = n.value("only_optimize_lora") is True
    prefix = _layers_prefix(linears)
    fixes: tuple[Fix, ...] = ()
    if prefix:
        fixes = (Fix((), f"LoRA on the linears under {prefix}", ("--lora_module_name", prefix)),)
    shown = ", ".join(linears[:4])
    return [
        Finding(
            RULE,
            "error",
            ("lora_module_name", "lora_dim"),
            f"--lora_module_name {part!r} is in no linear module's name of {model.name} "
            f"({shown}, ...): DeepSpeed-Chat's convert_linear_layer_to_lora "
            "(dschat/utils/module/lora.py) replaces only the nn.Linear modules whose name "
            f"contains it, so --lora_dim {dim} applies LoRA to nothing"
            + (", and --only_optimize_lora then leaves no parameter to train" if only else ""),
            f"give a part of the model's linear module names, e.g. --lora_module_name {prefix}"
            if prefix
            else "give a part of the model's linear module names",
            locations={k: n.where[k] for k in ("lora_module_name", "lora_dim") if k in n.where},
            fixes=fixes,
        )
    ]
