"""A DeepSpeed config (``deepspeed: ds_config.json`` in TrainingArguments, or an inline dict):
its ZeRO stage decides the sharding, and its batch keys must agree with the trainer's.

transformers' ``HfTrainerDeepSpeedConfig.trainer_config_process`` (transformers/integrations/
deepspeed.py) fills every ``"auto"`` value from TrainingArguments and records each value that
is set and differs: ``train_micro_batch_size_per_gpu`` vs ``per_device_train_batch_size``,
``gradient_accumulation_steps``, and ``train_batch_size`` vs world_size x
per_device_train_batch_size x gradient_accumulation_steps; ``trainer_config_finalize`` then
raises ``ValueError: Please correct the following DeepSpeed config values that mismatch
TrainingArguments values: - ds train_batch_size=... vs hf train_batch_size (calculated)=...``.
(DeepSpeed's own ``_batch_assertion`` makes the same train_batch_size check when launched
without the Trainer.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Finding, Fix, Location
from cfgcheck.sources.base import Builder, NativeConfig
from cfgcheck.sources.reader import Document, read_document

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

STAGES = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}


def load(native: NativeConfig, key: str = "deepspeed") -> tuple[Document, bool] | None:
    """The DeepSpeed config ``key`` names: (document, whether it is a separate file). A path
    is opened as TrainingArguments does (relative to the working directory), else next to the
    config file; None when the key is unset or the file cannot be found."""
    value = native.get(key)
    if isinstance(value, dict):
        lines = {
            k.removeprefix(key + "."): loc.line or 0
            for k, loc in native.where.items()
            if k.startswith(key + ".") and loc.line
        }
        return Document(native.file, value, lines), False
    if not isinstance(value, str) or not value.endswith(".json"):
        return None
    for candidate in (Path(value), Path(native.file).parent / value):
        if candidate.is_file():
            try:
                return read_document(candidate), True
            except ConfigLoadError:
                return None
    return None


def strategy(doc: Document) -> str | None:
    zero = doc.data.get("zero_optimization")
    stage = zero.get("stage") if isinstance(zero, dict) else None
    return STAGES.get(stage) if isinstance(stage, int) else None


# trainer.offload from ``zero_optimization`` (deepspeed/runtime/zero/config.py, offload_config.py:
# ``offload_optimizer`` / ``offload_param`` with ``device`` none | cpu | nvme, and the deprecated
# booleans ``cpu_offload`` -> offload_optimizer and ``cpu_offload_param`` -> offload_param).
OFFLOAD = (
    ("trainer.offload.optimizer", "offload_optimizer", "cpu_offload"),
    ("trainer.offload.params", "offload_param", "cpu_offload_param"),
)
DEVICES = ("none", "cpu", "nvme")


def offload_devices(data: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """cfgcheck path -> (device, the dotted DeepSpeed key that says it), for what the
    DeepSpeed config ``data`` sets; accelerate's ``deepspeed_config`` section
    (``offload_optimizer_device`` / ``offload_param_device``) reads the same."""
    out: dict[str, tuple[str, str]] = {}
    zero = data.get("zero_optimization")
    for path, name, legacy in OFFLOAD:
        flat = data.get(f"{name}_device")  # accelerate's deepspeed_config keys
        if isinstance(flat, str) and flat.lower() in DEVICES:
            out[path] = (flat.lower(), f"{name}_device")
        if not isinstance(zero, dict):
            continue
        section = zero.get(name)
        device = section.get("device") if isinstance(section, dict) else None
        if isinstance(device, str) and device.lower() in DEVICES:
            out[path] = (device.lower(), f"zero_optimization.{name}.device")
        elif zero.get(legacy) is True:
            out[path] = ("cpu", f"zero_optimization.{legacy}")
    return out


# DeepSpeed's default reduce_bucket_size (deepspeed/runtime/zero/config.py: pp_int(5e8)); the
# HF integration fills it only where the config says "auto" (hidden_size^2)
REDUCE_BUCKET_DEFAULT = 500_000_000


def apply_offload(b: Builder, doc: Document, separate: bool, key: str = "deepspeed") -> None:
    """``trainer.offload`` from a DeepSpeed config, located at its ``device`` line (in the
    JSON file, or under ``key`` of the native config when it is inline), with the reduce
    bucket the GPU keeps while the optimizer is offloaded."""

    def at(ds_key: str) -> Location | None:
        line = doc.lines.get(ds_key) or doc.lines.get(ds_key.rsplit(".", 1)[0])
        where = Location(doc.file, line) if separate else b.native.loc(f"{key}.{ds_key}")
        return where or b.native.loc(key)

    found = offload_devices(doc.data)
    for path, (device, ds_key) in found.items():
        b.set(path, device, at(ds_key))
    optimizer = found.get("trainer.offload.optimizer")
    zero = doc.data.get("zero_optimization")
    if optimizer is None or optimizer[0] == "none" or not isinstance(zero, dict):
        return
    bucket = zero.get("reduce_bucket_size", REDUCE_BUCKET_DEFAULT)
    if isinstance(bucket, int | float) and not isinstance(bucket, bool) and bucket >= 0:
        where = at("zero_optimization.reduce_bucket_size")
        if "reduce_bucket_size" not in zero:
            where = Location("default of DeepSpeed reduce_bucket_size=5e8 (zero/config.py)", None)
        b.set("trainer.offload.bucket_elements", int(bucket), where)


def _set(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def batch_rule(native: NativeConfig, cfg: RunConfig | None) -> Iterator[Finding]:
    loaded = load(native)
    if loaded is None or cfg is None:
        return
    doc, separate = loaded
    t = cfg.trainer
    prefix = "" if separate else "deepspeed."
    stated_world = bool(
        native.is_set("num_processes")
        or native.options.get("accelerate_config")
        or native.is_set("accelerate_config")
    )
    checks = [
        ("train_micro_batch_size_per_gpu", t.micro_batch_size, "per_device_train_batch_size"),
        (
            "gradient_accumulation_steps",
            t.gradient_accumulation_steps,
            "gradient_accumulation_steps",
        ),
    ]
    if stated_world:
        checks.append(("train_batch_size", t.effective_batch_size, "train_batch_size (calculated)"))
    for ds_key, hf_value, hf_key in checks:
        ds_value = _set(doc.data.get(ds_key))
        if ds_value is None or ds_value == hf_value:
            continue
        line = doc.lines.get(ds_key)
        where = Location(doc.file, line) if separate else native.loc(prefix + ds_key)
        fixes: tuple[Fix, ...] = ()
        if not separate:
            fixes = (Fix((f"{prefix}{ds_key}=auto",), "let the Trainer fill it"),)
        yield Finding(
            "trl-deepspeed-batch-mismatch",
            "error",
            (prefix + ds_key if not separate else f"deepspeed:{ds_key}",),
            f"the DeepSpeed config sets {ds_key}={ds_value} but the Trainer runs "
            f"{hf_key}={hf_value}"
            + (
                f" ({t.world_size} processes x {t.micro_batch_size} x "
                f"{t.gradient_accumulation_steps})"
                if ds_key == "train_batch_size"
                else ""
            )
            + ': transformers refuses to start, "ValueError: Please correct the following '
            f"DeepSpeed config values that mismatch TrainingArguments values: - ds {ds_key}="
            f'{ds_value} vs hf {hf_key}={hf_value}" (transformers/integrations/deepspeed.py)',
            f'set {ds_key} to "auto" in {doc.file} (the Trainer fills it), or make it {hf_value}',
            locations={(prefix + ds_key if not separate else f"deepspeed:{ds_key}"): where},
            fixes=fixes,
        )


# transformers integrations/deepspeed.py HfTrainerDeepSpeedConfig.trainer_config_process
# (5.24.0, lines 136-184): (DeepSpeed key, TrainingArguments value, the name in the message,
# must match). "train_batch_size" is world_size x per_device_train_batch_size x
# gradient_accumulation_steps (line 143); warmup_min_lr is filled, never compared (line 172).
def trainer_fills(args: dict[str, Any], world_size: int | None) -> list[tuple[str, Any, str, bool]]:
    """What ``trainer_config_process`` fills or compares, given the TrainingArguments values
    ``args``; ``train_batch_size`` only when ``world_size`` is known."""
    micro, accum = args["per_device_train_batch_size"], args["gradient_accumulation_steps"]
    out: list[tuple[str, Any, str, bool]] = [
        ("train_micro_batch_size_per_gpu", micro, "per_device_train_batch_size", True),
        ("gradient_accumulation_steps", accum, "gradient_accumulation_steps", True),
    ]
    if world_size is not None:
        out.append(
            ("train_batch_size", world_size * micro * accum, "train_batch_size (calculated)", True)
        )
    lr = args["learning_rate"]
    out += [
        ("gradient_clipping", args["max_grad_norm"], "max_grad_norm", True),
        ("optimizer.params.lr", lr, "learning_rate", True),
        (
            "optimizer.params.betas",
            [args["adam_beta1"], args["adam_beta2"]],
            "adam_beta1+adam_beta2",
            True,
        ),
        ("optimizer.params.eps", args["adam_epsilon"], "adam_epsilon", True),
        ("optimizer.params.weight_decay", args["weight_decay"], "weight_decay", True),
        ("scheduler.params.warmup_min_lr", 0, "", False),
        ("scheduler.params.warmup_max_lr", lr, "learning_rate", True),
        (
            "fp16.enabled",
            bool(args["fp16"] or args.get("fp16_full_eval")),
            "fp16|fp16_full_eval",
            True,
        ),
        (
            "bf16.enabled",
            bool(args["bf16"] or args.get("bf16_full_eval")),
            "bf16|bf16_full_eval",
            True,
        ),
    ]
    return out


def _node(data: dict[str, Any], key: str) -> tuple[dict[str, Any] | None, str]:
    """``find_config_node``: the dict holding the last part of a dotted key, or None."""
    *parents, last = key.split(".")
    node: Any = data
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), last


def fill_match(
    data: dict[str, Any], args: dict[str, Any], world_size: int | None
) -> tuple[dict[str, Any], list[tuple[str, Any, str, Any]]]:
    """``data`` as ``trainer_config_process`` leaves it: every ``"auto"`` replaced by the
    TrainingArguments value (``fill_match``), and the mismatches it records
    (key, DeepSpeed value, TrainingArguments name, its value) that
    ``trainer_config_finalize`` raises as "Please correct the following DeepSpeed config values
    that mismatch TrainingArguments values"."""
    import copy

    filled = copy.deepcopy(data)
    mismatches: list[tuple[str, Any, str, Any]] = []
    for key, hf_value, hf_key, must_match in trainer_fills(args, world_size):
        node, last = _node(filled, key)
        if node is None:
            continue
        if node.get(last) == "auto":
            node[last] = hf_value
            continue
        ds_value = node.get(last)
        if must_match and ds_value is not None and ds_value != hf_value:
            mismatches.append((key, ds_value, hf_key, hf_value))
    return filled, mismatches
