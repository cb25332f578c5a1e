"""A launch script's flags and its entry point's data path mapped onto cfgcheck's sections.

TrainingArguments' fields and defaults are the installed transformers'
(``transformers/training_args.py``); the entry point's own fields (``model_max_length``,
``lora_enable``...) are its dataclasses'. Published entry points read like this:

- FastChat ``fastchat/train/train.py`` (lm-sys/FastChat 0e6d3e4b): ``model_max_length`` is
  the tokenizer's, ``preprocess`` pads to it with ``padding="max_length"``;
- Qwen ``finetune.py`` (QwenLM/Qwen): ``use_lora`` / ``q_lora`` with ``LoraArguments``
  (``lora_r``, ``lora_alpha``, ``lora_target_modules``);
- LLaVA ``llava/train/train.py``: ``lora_enable``, ``bits``.
"""

from __future__ import annotations

import contextlib
from typing import Any

from cfgcheck.findings import Finding, Location
from cfgcheck.sources import deepspeed
from cfgcheck.sources.base import Builder
from cfgcheck.sources.code import Known
from cfgcheck.sources.launcher import LaunchConfig, launch_of
from cfgcheck.sources.launcher.entry import inside
from cfgcheck.sources.model_ref import set_model
from cfgcheck.sources.names import TRAINING_ARGUMENTS, schema_optimizer

# The model trained: DeepSpeed-Chat's step3_rlhf_finetuning/main.py trains the actor (its
# --actor_model_name_or_path; the critic, --critic_model_name_or_path, trains beside it).
# run_clm.py trains from scratch with --config_name alone (run_clm.py 440-441: the config
# comes from it; the weights are new): the model is then that config.
MODEL_FLAGS = ("model_name_or_path", "actor_model_name_or_path", "config_name")
LENGTH_FLAGS = ("model_max_length", "max_seq_length", "max_length", "max_seq_len")
# LoRA on/off flags: LLaVA train.py lora_enable, Qwen finetune.py use_lora, TRL use_peft,
# peft examples/sft/train.py use_peft_lora.
LORA_FLAGS = ("lora_enable", "use_lora", "use_peft", "use_peft_lora")
DEEPSPEED_MISSING = "launch-deepspeed-missing"
# cfgcheck path -> the flag that sets it (a fix is that flag as it would be typed).
TO_FLAG = {
    **TRAINING_ARGUMENTS,
    "trainer.gradient_checkpointing": "gradient_checkpointing",
    "trainer.lora.rank": "lora_r",
    "trainer.lora.alpha": "lora_alpha",
    "trainer.lora.targets": "lora_target_modules",
}


def _at(n: LaunchConfig, key: str) -> Location | None:
    """Where ``key`` is set: the flag's line, else the field's default in the entry point."""
    if key in n.where:
        return n.where[key]
    if key in n.defaults:
        where = n.defaults[key][1]
        file, _, rest = where.partition(":")
        line = rest.split(" ", 1)[0]
        if line.isdigit():
            return Location(file, int(line))
        return Location(f"default of {where}", None)
    return None


def _take(b: Builder, path: str, key: str, fallback: Any, convert: Any = None) -> Any:
    n = launch_of(b.native)
    if key in n.unknown:
        n.unknown_paths[path] = key
    value = n.value(key, fallback)
    if value is None:  # a field whose default is None: the Trainer's own default
        value = fallback
    if convert is not None and value is not None:
        with contextlib.suppress(TypeError, ValueError):  # the schema names the invalid value
            value = convert(value)
    b.set(path, value, _at(n, key) or b.default_location(f"{key}={fallback!r}"))
    return value


def build(b: Builder) -> None:
    n = launch_of(b.native)
    b.default("trainer.framework", "hf", "(the entry point trains with transformers' Trainer)")
    key = next((k for k in MODEL_FLAGS if k in n.data or k in n.unknown), MODEL_FLAGS[0])
    if key in n.unknown:
        from cfgcheck.errors import ConfigLoadError

        raise ConfigLoadError(
            f"{n.where[key]}: --{key} is {n.unknown[key]}: give it in the script or after --"
        )
    ref = n.value(key)
    if isinstance(ref, str) and ref and (n.root / ref).is_dir():
        ref = str(n.root / ref)  # a folder, opened from where the script runs (--cwd)
    set_model(b, key, ref)
    if key not in n.where and (at := _at(n, key)):
        b.smap.set("model.pretrained", at, covering=True)
    _lengths(b, n)
    _data(b, n)
    _trainer(b, n)
    _devices(b, n)


def _lengths(b: Builder, n: LaunchConfig) -> None:
    if n.entry is not None and n.entry.packs is not None:  # run_clm.py's block_size
        from cfgcheck.sources.launcher.clm import block_length

        block_length(b, n, lambda key: _at(n, key) or b.default_location(key))
        return
    for key in LENGTH_FLAGS:
        if n.known(key) and isinstance(n.value(key), int):
            _take(b, "data.max_seq_length", key, None)
            return
    b.defer("data.max_seq_length", "model.block_size", "no length flag: the model's context")


def _data(b: Builder, n: LaunchConfig) -> None:
    """The tokenizer call and the collator (:mod:`cfgcheck.sources.code.datapath`)."""
    entry = n.entry
    if entry is not None and entry.packs is not None:  # run_clm.py's group_texts
        from cfgcheck.sources.launcher.clm import apply_packing

        apply_packing(b, n, entry.packs)
        return
    call = entry.tokenize if entry else None
    if entry is None or call is None or entry.per_sample is None:
        # Tokenized together (one call pads all samples to the longest), or by code cfgcheck
        # does not see: batches are taken to stack.
        where = call.location if call else None
        b.set("data.padding", "longest", where or b.default_location("the entry point pads"))
        b.set("data.collator", "padded", where or b.default_location("the entry point pads"))
        b.set("data.truncation", True, where or b.default_location("the entry point truncates"))
        return
    padding = call.kwargs.get("padding")
    if padding is None:
        b.set("data.padding", "do_not_pad", call.location)
    elif isinstance(padding.value, Known):
        raw = padding.value.value
        value = {True: "longest", "longest": "longest", "max_length": "max_length"}.get(
            raw, "do_not_pad"
        )
        b.set("data.padding", value, padding.location)
    else:
        b.set("data.padding", "longest", padding.location)
        n.unknown_paths["data.padding"] = "padding"
    truncation = call.kwargs.get("truncation")
    if truncation is not None and isinstance(truncation.value, Known):
        b.set("data.truncation", bool(truncation.value.value), truncation.location)
    else:
        b.set("data.truncation", False, call.location)
    if entry.collator is not None:
        kind, where = entry.collator
        if kind in ("default", "padded"):
            b.set("data.collator", kind, where)
        else:  # the file's own collator: whether it pads is not read
            b.set("data.collator", "padded", where)
            n.unknown_paths["data.collator"] = "data_collator"


def _trainer(b: Builder, n: LaunchConfig) -> None:
    _take(b, "trainer.micro_batch_size", "per_device_train_batch_size", 8)
    _take(b, "trainer.gradient_accumulation_steps", "gradient_accumulation_steps", 1)
    _take(b, "trainer.gradient_checkpointing", "gradient_checkpointing", False, bool)
    _take(b, "trainer.learning_rate", "learning_rate", 5e-5, float)
    if n.known("optim") and isinstance(n.value("optim"), str):
        _take(b, "trainer.optimizer", "optim", "adamw_torch", schema_optimizer)
    if n.value("fp16") is True:
        b.set("trainer.precision", "16-mixed", _at(n, "fp16"))
    elif n.value("bf16") is True:  # autocast over the weights the entry point loads (fp32)
        b.set("trainer.precision", "bf16-mixed", _at(n, "bf16"))
    elif n.known("dtype") and n.value("dtype") in ("fp16", "bf16"):
        # DeepSpeed-Chat main.py: --dtype fp16|bf16|fp32 (default fp16) enables the DeepSpeed
        # config's fp16 / bf16 section (dschat/utils/ds_utils.py get_train_ds_config).
        precision = "16-mixed" if n.value("dtype") == "fp16" else "bf16-mixed"
        b.set("trainer.precision", precision, _at(n, "dtype"))
    else:
        b.default("trainer.precision", "32-true", "TrainingArguments bf16=False, fp16=False")
    # peft examples/sft utils.py create_and_prepare_model: use_4bit_quantization /
    # use_8bit_quantization build the BitsAndBytesConfig (4-bit NF4 by its default quant type).
    four_bit = n.value("q_lora") is True or n.value("bits") == 4
    four_bit = four_bit or n.value("use_4bit_quantization") is True
    eight_bit = n.value("bits") == 8 or n.value("use_8bit_quantization") is True
    lora = next((k for k in LORA_FLAGS if n.value(k) is True), None)
    entry = n.entry
    always = (
        entry is not None
        and entry.applies_lora is not None
        and not any(k in n.defaults for k in LORA_FLAGS)
    )  # the entry point applies LoRA whatever the flags (FastChat's train_lora.py)
    if four_bit:
        key = next(
            k for k in ("q_lora", "use_4bit_quantization", "bits") if n.value(k) in (True, 4)
        )
        b.set("trainer.quantization", "nf4", _at(n, key))
    elif eight_bit:
        b.set("trainer.quantization", "int8", _at(n, "bits") or _at(n, "use_8bit_quantization"))
    else:
        b.default("trainer.quantization", "none", "no q_lora / bits flag")
    if lora is not None or four_bit or always:
        at = _at(n, lora or "q_lora") if lora or four_bit else entry.applies_lora if entry else None
        b.set("trainer.finetuning", "qlora" if four_bit else "lora", at)
        if n.known("lora_r"):
            _take(b, "trainer.lora.rank", "lora_r", 8, int)
        if n.known("lora_alpha"):
            _take(b, "trainer.lora.alpha", "lora_alpha", 16, int)
        targets = n.value("lora_target_modules")
        if isinstance(targets, str) and targets:
            names = [t for t in targets.replace(",", " ").split() if t]
            b.set("trainer.lora.targets", names, _at(n, "lora_target_modules"))
    else:
        b.default("trainer.finetuning", "full", "no LoRA flag: every weight trains")


def _visible_count(value: str | None) -> int | None:
    """How many devices ``CUDA_VISIBLE_DEVICES`` lists (None: unset or unknown)."""
    if value is None or "\x00" in value or not value.strip() or value.strip() == "-1":
        return None
    parts = [p for p in value.split(",") if p.strip()]
    return len(parts) or None


def _flag_text(launch: Any, name: str) -> str | None:
    flag = launch.launcher_flags.get(name) or launch.launcher_flags.get(name.replace("_", "-"))
    return flag.value if flag is not None else None


def _devices(b: Builder, n: LaunchConfig) -> None:
    launch = n.launch
    if launch is None:
        return
    line = Location(n.file, launch.line)
    for name in ("nproc_per_node", "nproc-per-node", "num_gpus", "num_processes"):
        flag = launch.launcher_flags.get(name)
        if f"launcher.{name}" in n.unknown:  # $(nvidia-smi ...): the count is not known
            n.unknown_paths["trainer.devices"] = f"launcher.{name}"
            break
        if flag is not None and flag.value and flag.value.isdigit():
            b.set("trainer.devices", int(flag.value), Location(n.file, flag.word.line))
            break
    counts = ("num_gpus", "include", "num_nodes", "hostfile")
    visible = _visible_count(n.visible_devices)
    include = launch.launcher_flags.get("include")
    if launch.launcher == "deepspeed" and include is not None and include.value:
        # deepspeed --include host:0,1@host2:0,1 (deepspeed/launcher/runner.py): the slots of
        # the first host per node, one node per host.
        hosts = [h for h in include.value.split("@") if h]
        slots = [s for s in hosts[0].partition(":")[2].split(",") if s] if hosts else []
        if slots:
            b.set("trainer.devices", len(slots), Location(n.file, include.word.line))
            b.set("trainer.num_nodes", len(hosts), Location(n.file, include.word.line))
    elif (
        launch.launcher == "deepspeed"
        and visible is not None
        and not any(c in launch.launcher_flags for c in counts)
    ):
        # deepspeed with none of --include/--exclude/--num_gpus/--num_nodes respects
        # CUDA_VISIBLE_DEVICES on a single node (runner.py main: args.include =
        # f"localhost:{cuda_visible_devices}").
        b.set("trainer.devices", visible, line)
    elif launch.launcher == "torchrun" and _flag_text(launch, "nproc_per_node") in ("gpu", "auto"):
        # torchrun --nproc_per_node gpu|auto: one process per visible GPU (torch/distributed/
        # run.py determine_local_world_size).
        if visible is not None:
            b.set("trainer.devices", visible, line)
        else:
            n.unknown_paths.setdefault("trainer.devices", "launcher.nproc_per_node")
    elif launch.launcher == "deepspeed" and not any(c in launch.launcher_flags for c in counts):
        # deepspeed without --num_gpus / --include starts one process per GPU of the machine
        # (deepspeed/launcher/runner.py): the count is not in the script.
        n.unknown_paths.setdefault("trainer.devices", "launcher.num_gpus")
        n.problems.append(
            Finding(
                "launch-unknown-value",
                "warning",
                ("launcher.num_gpus",),
                f"deepspeed at line {launch.line} has no --num_gpus or --include: it starts one "
                "process per GPU of the machine it runs on, which the script does not say, so "
                "the memory estimate (ZeRO shards over the processes) is left out",
                "give the count: deepspeed --num_gpus N ...",
                locations={"launcher.num_gpus": line},
            )
        )
    for name in ("nnodes", "num_nodes", "num_machines"):
        flag = launch.launcher_flags.get(name)
        if flag is not None and flag.value and flag.value.isdigit():
            b.set("trainer.num_nodes", int(flag.value), Location(n.file, flag.word.line))
            break
    config_file = launch.launcher_flags.get("config_file")
    if launch.launcher == "accelerate" and config_file is not None and config_file.value:
        # accelerate launch --config_file: its num_processes and distributed_type
        # (cfgcheck.sources.launch, as for TRL's accelerate configs); flags on the command win.
        path = n.root / config_file.value
        if path.is_file() and inside(path, n.root):  # the project's own files only
            from cfgcheck.sources import launch as accelerate

            accelerate.apply(b, str(path))
            if not n.value("deepspeed") and not n.value("fsdp"):
                return
    value = n.value("deepspeed")
    if isinstance(value, str) and value:
        path = n.root / value
        if path.is_file() and value.endswith(".json"):
            n.data["deepspeed"] = str(path)
            loaded = deepspeed.load(n)
            n.data["deepspeed"] = value
            stage = deepspeed.strategy(loaded[0]) if loaded else None
            if loaded:
                deepspeed.apply_offload(b, *loaded)
            if stage is not None:
                b.set("trainer.strategy", stage, _at(n, "deepspeed"))
                return
        elif "deepspeed" not in n.unknown:
            n.problems.append(
                Finding(
                    DEEPSPEED_MISSING,
                    "error",
                    ("deepspeed",),
                    f"--deepspeed {value}: no such file in {n.root}: TrainingArguments "
                    "opens it at start-up and the run stops before training",
                    "give the path of the DeepSpeed JSON relative to the folder the script "
                    "runs from (--cwd)",
                )
            )
        b.set("trainer.strategy", "zero3" if "3" in value else "zero2", _at(n, "deepspeed") or line)
    elif n.value("fsdp"):
        b.set("trainer.strategy", "fsdp", _at(n, "fsdp"))
    elif launch.launcher == "deepspeed" and isinstance(n.value("zero_stage"), int):
        # DeepSpeed-Chat's main.py builds its DeepSpeed config from --zero_stage
        # (get_train_ds_config(stage=args.zero_stage), dschat/utils/ds_utils.py).
        stage = deepspeed.STAGES.get(n.value("zero_stage"), "zero2")
        b.set("trainer.strategy", stage, _at(n, "zero_stage") or line)
    elif launch.launcher in ("torchrun", "deepspeed", "accelerate") and any(
        f in launch.launcher_flags for f in ("nproc_per_node", "num_gpus", "num_processes")
    ):
        b.set("trainer.strategy", "ddp", line)
    else:
        b.default("trainer.strategy", "single", "python: one process")
