"""A training script's native keys (:mod:`.collect`) onto cfgcheck's four sections.

Each library's own behaviour, from its source:

- Unsloth (unslothai/unsloth at 015bdef0d94a241bcd94eec7a405b1700632180d):
  ``FastLanguageModel.from_pretrained`` defaults ``max_seq_length=2048``, ``load_in_4bit=True``,
  ``full_finetuning=False`` (unsloth/models/loader.py:410-430); 4-bit loads use
  ``BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_use_double_quant=True,
  bnb_4bit_quant_type="nf4")`` (unsloth/models/llama.py:2620); full fine-tuning turns 4/8-bit
  off (loader.py:1264); ``dtype=None`` is bfloat16 where the GPU supports it, else float16,
  and a bfloat16 request on a GPU without it becomes float16 (llama.py:2435-2437); the
  trainer's mixed precision follows the model's dtype (unsloth/models/rl.py:2354-2420); the
  trainer's ``max_seq_length`` defaults to the model's and a larger one is reduced to it
  (rl.py:2509-2545); ``max_seq_length`` above the model's context extends RoPE by
  ``max_seq_length / max_position_embeddings`` instead of failing (llama.py:2566-2590);
  ``get_peft_model`` defaults ``r=16``, the seven projections of Llama-style models, and
  ``use_gradient_checkpointing="unsloth"`` (loader.py / llama.py ``get_peft_model``).
- transformers 5.2 ``Trainer``: with no ``data_collator``, a ``processing_class`` (or the old
  ``tokenizer=``) that is a tokenizer gives ``DataCollatorWithPadding``, otherwise
  ``default_data_collator``, which stacks (src/transformers/trainer.py, "default_collator").
  ``TrainingArguments`` defaults: ``per_device_train_batch_size=8``,
  ``gradient_accumulation_steps=1``, ``learning_rate=5e-5``, ``optim="adamw_torch"``.
- TRL ``SFTTrainer`` pads with its own ``DataCollatorForLanguageModeling``
  (trl/trainer/sft_trainer.py) and defaults as :mod:`cfgcheck.sources.trl` cites.
- A tokenizer call's ``padding`` defaults to ``False`` and ``truncation`` to ``False``
  (transformers tokenization_utils_base.py ``__call__``).
- torch ``DataLoader`` defaults ``batch_size=1`` and ``collate_fn=default_collate``
  (torch/utils/data/dataloader.py); torchtune's dataset builders return unpadded token lists
  (torchtune/datasets/_text_completion.py) and ``padded_collate_sft`` pads them
  (torchtune/data/_collate.py).
- Lightning ``Trainer`` defaults ``precision="32-true"``, ``devices="auto"``,
  ``accumulate_grad_batches=1`` (lightning/pytorch/trainer/trainer.py).
"""

from __future__ import annotations

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources.base import Builder
from cfgcheck.sources.model_ref import set_model
from cfgcheck.sources.names import schema_attention, schema_optimizer
from cfgcheck.sources.python import code_of
from cfgcheck.sources.python.build_data import _data, _peft
from cfgcheck.sources.python.collect import TORCHTUNE_MODELS
from cfgcheck.sources.python.upstream import (
    ARGS,
    LIGHTNING,
    LOADER,
    SFT,
)


def build(b: Builder) -> None:

    n = code_of(b)
    notes = n.collected.notes
    unsloth = "unsloth" in notes.get("loader", "") or notes.get("peft") == "unsloth"
    lightning = "lightning" in notes
    torchtune = "torchtune_dataset" in notes or "torchtune_model" in notes
    framework = "torchtune" if torchtune and lightning else "hf"
    b.default("trainer.framework", framework, "(the libraries the code imports)")
    _model(b, n.collected.notes)
    if unsloth and not _has_tokenizer_files(b.config["model"].get("pretrained")):
        # Unsloth always leaves the tokenizer with a pad token: _fix_pad_token heals a bad or
        # missing one and the model-aware patch_tokenizer adds one where none exists
        # (unsloth/tokenizer_utils.py:653). Its string is the tokenizer's own, unknown
        # without the tokenizer files; a preset has none, so a placeholder stands for it.
        b.default("tokenizer.pad_token", "<pad>", "unsloth/tokenizer_utils.py _fix_pad_token")
    if n.gpu_name and n.gpu_location is not None:  # named by the notebook's metadata
        b.set("trainer.gpu.name", n.gpu_name, n.gpu_location)
        b.smap.set("trainer.gpu", n.gpu_location, covering=False)
    if lightning or ("loader" in n.data and "trainer" not in notes):
        _lightning(b)
    else:
        _hf(b, unsloth)
    _data(b, unsloth, lightning)
    _peft(b, unsloth)
    _guard(b)


# The settings decided by several keys: each rests on any of them that is unknown.
_DECIDED_BY = {
    "trainer.quantization": (
        "load",
        "bnb",
        "load.load_in_4bit",
        "load.load_in_8bit",
        "load.full_finetuning",
        "bnb.load_in_4bit",
        "bnb.load_in_8bit",
        "bnb.bnb_4bit_quant_type",
        "bnb.bnb_4bit_use_double_quant",
    ),
    "trainer.finetuning": ("peft", "load.full_finetuning"),
    "trainer.precision": (
        "args.fp16",
        "args.bf16",
        "load.dtype",
        "load.torch_dtype",
        "lightning.precision",
    ),
    "data.collator": ("trainer.data_collator", "loader.collate_fn", "args.packing"),
    "data.padding": ("tokenize.padding",),
    "data.truncation": ("tokenize.truncation",),
    "trainer.gradient_checkpointing": (
        "peft.use_gradient_checkpointing",
        "args.gradient_checkpointing",
    ),
    "trainer.strategy": ("args.deepspeed", "args.fsdp", "lightning.strategy"),
    "trainer.devices": ("lightning.devices",),
}


def _guard(b: Builder) -> None:
    from cfgcheck.sources.python import CodeBuilder

    if isinstance(b, CodeBuilder):
        decided = b.native.get("args.fp16") is True or b.native.get("args.bf16") is True
        for path, keys in _DECIDED_BY.items():
            if path == "trainer.precision" and decided:
                continue  # a literal fp16=True / bf16=True decides it whatever the dtype
            b.guard(path, *keys)


def _has_tokenizer_files(ref: object) -> bool:
    """``ref`` is a folder or a cached Hub snapshot, whose tokenizer cfgcheck reads."""
    from pathlib import Path

    from cfgcheck.hfcache import cached_snapshot

    if not isinstance(ref, str):
        return False
    try:
        return Path(ref).expanduser().is_dir() or ("/" in ref and cached_snapshot(ref) is not None)
    except OSError:
        return False


def _model(b: Builder, notes: dict[str, str]) -> None:
    n = code_of(b)
    from cfgcheck.sources.python.unsloth import model_ref

    if n.is_set("load.model_name") or n.is_set("load.pretrained_model_name_or_path"):
        key = (
            "load.model_name"
            if n.is_set("load.model_name")
            else "load.pretrained_model_name_or_path"
        )
        value = n.get(key)
        ref = model_ref(str(value)) if isinstance(value, str) else None
        set_model(b, key, ref)
        if ref != value:
            b.smap.set("model.pretrained", n.loc(key) or b.default_location(""), True)
        return
    builder = notes.get("torchtune_model")
    if builder:
        b.model_key = "load"
        b.set("model.pretrained", TORCHTUNE_MODELS[builder], n.loc("load"))
        return
    for key in ("load.model_name", "load.pretrained_model_name_or_path"):
        unknown = n.collected.unknown.get(key)
        if unknown is not None:
            at = n.loc(key)
            raise ConfigLoadError(
                f"{at}: the model is {unknown.why}: cfgcheck reads the code without running "
                f"it; give the model as the override {key}=<folder or Hub id>"
            )
    raise ConfigLoadError(
        f"{n.file}: the code loads no model cfgcheck can read (FastLanguageModel."
        "from_pretrained, AutoModelForCausalLM.from_pretrained or a torchtune model builder "
        "with a literal name): give it as the override load.model_name=<folder or Hub id>"
    )


def _precision_hf(b: Builder, unsloth: bool) -> None:
    n = code_of(b)
    fp16, bf16 = n.get("args.fp16"), n.get("args.bf16")
    if fp16:
        b.from_key("trainer.precision", "args.fp16", "16-mixed")
        return
    if bf16:
        b.from_key("trainer.precision", "args.bf16", "bf16-mixed")
        return
    if unsloth:
        dtype = str(n.get("load.dtype") or "")
        bf16_ok = n.gpu_bf16
        if "float16" in dtype and "bfloat16" not in dtype:
            b.from_key("trainer.precision", "load.dtype", "16-mixed")
        elif bf16_ok is False:
            b.default(
                "trainer.precision",
                "16-mixed",
                "unsloth/models/llama.py:2435 dtype float16 on a GPU without bfloat16",
            )
        else:
            where = n.loc("load.dtype") or b.default_location(
                "unsloth/models/llama.py:2435 dtype=None -> bfloat16 where supported"
            )
            b.set("trainer.precision", "bf16-true", where)
        return
    dtype = str(n.get("load.torch_dtype") or n.get("load.dtype") or "")
    if "bfloat16" in dtype:
        b.from_key(
            "trainer.precision",
            "load.torch_dtype" if n.is_set("load.torch_dtype") else "load.dtype",
            "bf16-true",
        )
    else:
        b.default("trainer.precision", "32-true", f"{ARGS} fp16=False, bf16=False")


def _hf(b: Builder, unsloth: bool) -> None:
    n = code_of(b)
    sft = n.get("args") is not None and "SFT" in n.collected.notes.get("args", "")
    b.take(
        "trainer.micro_batch_size",
        "args.per_device_train_batch_size",
        8,
        f"{ARGS} per_device_train_batch_size=8",
    )
    b.take(
        "trainer.gradient_accumulation_steps",
        "args.gradient_accumulation_steps",
        1,
        f"{ARGS} gradient_accumulation_steps=1",
    )
    b.take("trainer.learning_rate", "args.learning_rate", 5e-5, f"{ARGS} learning_rate=5e-5", float)
    b.take("trainer.optimizer", "args.optim", "adamw_torch", f"{ARGS} optim", schema_optimizer)
    _precision_hf(b, unsloth)
    if n.is_set("load.attn_implementation"):
        b.from_key(
            "trainer.attention",
            "load.attn_implementation",
            schema_attention(n.get("load.attn_implementation")),
        )
    else:
        b.default("trainer.attention", "sdpa", "transformers attn_implementation=None (sdpa)")
    if unsloth:
        b.default(
            "trainer.loss_chunking",
            "chunked",
            "Unsloth's fused cross-entropy (unsloth_zoo) never holds the fp32 logits",
        )
    elif sft:
        b.default("trainer.loss_chunking", "chunked", f"{SFT} loss_type='nll'")
    if n.get("args.deepspeed"):
        from cfgcheck.sources import deepspeed

        # TrainingArguments(deepspeed=...): a dict literal or a JSON path; its ZeRO stage and
        # offload when it can be read, else the file name is the only clue
        ds = deepspeed.load(n, "args.deepspeed")
        stage = deepspeed.strategy(ds[0]) if ds else None
        named = "zero3" if "3" in str(n.get("args.deepspeed")) else "zero2"
        b.from_key("trainer.strategy", "args.deepspeed", stage or named)
        if ds is not None:
            deepspeed.apply_offload(b, *ds, key="args.deepspeed")
    elif n.get("args.fsdp"):
        b.from_key("trainer.strategy", "args.fsdp", "fsdp")
    else:
        b.default(
            "trainer.strategy", "single", "one process unless launched with accelerate/torchrun"
        )
    if n.is_set("args.seed"):
        b.take("seed", "args.seed", 42, "")


_LIGHTNING_PRECISION = {
    "32": "32-true",
    "32-true": "32-true",
    "16": "16-mixed",
    "16-mixed": "16-mixed",
    "bf16": "bf16-mixed",
    "bf16-mixed": "bf16-mixed",
    "bf16-true": "bf16-true",
}


def _lightning(b: Builder) -> None:
    n = code_of(b)
    b.take("trainer.micro_batch_size", "loader.batch_size", 1, f"{LOADER} batch_size=1")
    b.take(
        "trainer.gradient_accumulation_steps",
        "lightning.accumulate_grad_batches",
        1,
        f"{LIGHTNING} accumulate_grad_batches=1",
    )
    precision = str(n.get("lightning.precision", "32-true"))
    mapped = _LIGHTNING_PRECISION.get(precision)
    if n.is_set("lightning.precision") and mapped:
        b.from_key("trainer.precision", "lightning.precision", mapped)
    else:
        b.default("trainer.precision", "32-true", f"{LIGHTNING} precision='32-true'")
    devices = n.get("lightning.devices")
    if isinstance(devices, int) and devices > 0:
        b.from_key("trainer.devices", "lightning.devices", devices)
    strategy = str(n.get("lightning.strategy") or "")
    if "fsdp" in strategy:
        b.from_key("trainer.strategy", "lightning.strategy", "fsdp")
    elif "deepspeed" in strategy:
        b.from_key(
            "trainer.strategy", "lightning.strategy", "zero3" if "3" in strategy else "zero2"
        )
    elif "ddp" in strategy:
        b.from_key(
            "trainer.strategy",
            "lightning.strategy",
            "ddp" if isinstance(devices, int) and devices > 1 else "single",
        )
    else:
        b.default("trainer.strategy", "single", f"{LIGHTNING} strategy='auto' on one device")
    b.default("trainer.attention", "sdpa", "torch scaled_dot_product_attention")
