"""The data and adapter settings of a script (see :mod:`cfgcheck.sources.python.build` for the
libraries' behaviour, cited)."""

from __future__ import annotations

from cfgcheck.sources.base import Builder
from cfgcheck.sources.code.datapath import collator_kind
from cfgcheck.sources.code.values import Unknown
from cfgcheck.sources.python import code_of
from cfgcheck.sources.python.upstream import (
    LOADER,
    SFT,
    TOKENIZER,
    UNSLOTH,
    UNSLOTH_PEFT,
    UNSLOTH_TARGETS,
    _bool,
)


def _data(b: Builder, unsloth: bool, lightning: bool) -> None:
    n = code_of(b)
    notes = n.collected.notes
    # Sequence length
    if n.is_set("load.max_seq_length") or unsloth:
        b.take("data.max_seq_length", "load.max_seq_length", 2048, f"{UNSLOTH} max_seq_length=2048")
    elif n.is_set("args.max_length"):
        b.take("data.max_seq_length", "args.max_length", None, "")
    elif n.is_set("args.max_seq_length"):
        b.take("data.max_seq_length", "args.max_seq_length", None, "")
    elif n.is_set("trainer.max_seq_length"):
        b.take("data.max_seq_length", "trainer.max_seq_length", None, "")
    elif n.is_set("dataset.max_seq_len"):
        b.take("data.max_seq_length", "dataset.max_seq_len", None, "")
    elif n.is_set("tokenize.max_length"):
        b.take("data.max_seq_length", "tokenize.max_length", None, "")
    elif "SFT" in notes.get("args", "") or "SFT" in notes.get("trainer", ""):
        b.default("data.max_seq_length", 1024, f"{SFT} max_length=1024")
    else:
        # Nothing in the code bounds a sample: the longest sample of the data decides, which
        # the code does not say. The model's context stands in, and what rests on it is left
        # out (python-unknown-value), never reported from a guessed length.
        b.defer(
            "data.max_seq_length",
            "model.block_size",
            "(no length in the code: the model's context)",
        )
        # The key that would bound it: the tokenizer call's max_length, the torchtune
        # builder's max_seq_len, else the trainer config's max_length.
        key = next((k for g, k in _LENGTH_KEYS if g in n.collected.calls), "args.max_length")
        bound_at = n.loc(key.split(".")[0])
        n.collected.unknown[key] = Unknown(
            "bounded by nothing in the code (no max_length, max_seq_length or truncation): "
            "the longest sample of the data decides",
            bound_at,
        )
        if bound_at is not None and key not in n.where:
            n.where[key] = bound_at
        n.unknown_paths["data.max_seq_length"] = key
    # The tokenizer call in the mapped function decides padding and truncation.
    if "tokenize" in n.collected.calls:
        padding = n.get("tokenize.padding", False) if n.is_set("tokenize.padding") else False
        value = {True: "longest", "longest": "longest", "max_length": "max_length"}.get(
            padding, "do_not_pad"
        )
        where = f"{TOKENIZER} padding=False"
        if n.is_set("tokenize.padding"):
            b.from_key("data.padding", "tokenize.padding", value)
        else:
            b.set("data.padding", value, n.loc("tokenize") or b.default_location(where))
        if n.is_set("tokenize.truncation"):
            b.from_key("data.truncation", "tokenize.truncation", bool(n.get("tokenize.truncation")))
        else:
            b.set(
                "data.truncation",
                False,
                n.loc("tokenize") or b.default_location(f"{TOKENIZER} truncation=False"),
            )
        if n.is_set("tokenize.max_length"):
            b.take("data.max_length", "tokenize.max_length", None, "")
        if n.is_set("tokenize.pad_to_multiple_of"):
            b.take("data.pad_to_multiple_of", "tokenize.pad_to_multiple_of", None, "")
    elif "dataset" in n.collected.calls:
        b.set("data.padding", "do_not_pad", n.loc("dataset"))
        b.set("data.truncation", True, n.loc("dataset"))
    else:
        b.default("data.padding", "longest", "the trainer tokenizes and its collator pads")
        b.default("data.truncation", True, f"{SFT} truncates at max_length")
    # The collator.
    if lightning or ("loader" in n.collected.calls and "trainer" not in notes):
        kind = (
            collator_kind(n.get("loader.collate_fn"))
            if n.is_set("loader.collate_fn")
            else "default"
        )
        if n.is_set("loader.collate_fn") and kind is not None:
            b.from_key("data.collator", "loader.collate_fn", kind)
        elif not n.is_set("loader.collate_fn"):
            b.set(
                "data.collator",
                "default",
                n.loc("loader") or b.default_location(f"{LOADER} collate_fn=default_collate"),
            )
        else:
            _unread_collator(b, "loader.collate_fn")
        return
    trainer = notes.get("trainer", "")
    if (n.is_set("args.packing") and n.get("args.packing")) or (
        n.is_set("trainer.packing") and n.get("trainer.packing")
    ):
        key = "args.packing" if n.is_set("args.packing") else "trainer.packing"
        b.from_key("data.collator", key, "packed")
    elif n.is_set("trainer.data_collator"):
        kind = collator_kind(n.get("trainer.data_collator"))
        if kind is not None:
            b.from_key("data.collator", "trainer.data_collator", kind)
        else:
            _unread_collator(b, "trainer.data_collator")
    elif trainer in ("Trainer", "Seq2SeqTrainer") and not (
        n.is_set("trainer.processing_class") or n.is_set("trainer.tokenizer")
    ):
        b.set(
            "data.collator",
            "default",
            n.loc("trainer") or b.default_location("transformers Trainer default_data_collator"),
        )
    else:
        b.default("data.collator", "padded", f"{trainer or 'the trainer'}'s default collator pads")


_LENGTH_KEYS = (
    ("tokenize", "tokenize.max_length"),
    ("dataset", "dataset.max_seq_len"),
    ("args", "args.max_length"),
)


def _unread_collator(b: Builder, key: str) -> None:
    """A collator cfgcheck does not know (the file's own, another module's): whether it pads
    is not read, so what rests on the collator is left out."""
    n = code_of(b)
    b.set("data.collator", "padded", n.loc(key))
    n.collected.unknown.setdefault(
        key, Unknown(f"{n.get(key)}, a collator cfgcheck does not know: whether it pads", None)
    )
    n.unknown_paths["data.collator"] = key


def _peft(b: Builder, unsloth: bool) -> None:
    n = code_of(b)
    peft = "peft" in n.collected.calls
    four = False
    if n.get("load.full_finetuning"):
        b.from_key("trainer.quantization", "load.full_finetuning", "none")
    elif unsloth:
        four = bool(n.get("load.load_in_4bit", True)) if n.is_set("load.load_in_4bit") else True
        if four:
            where = n.loc("load.load_in_4bit") or b.default_location(f"{UNSLOTH} load_in_4bit=True")
            b.set("trainer.quantization", "nf4-dq", where)
        elif n.get("load.load_in_8bit"):
            b.from_key("trainer.quantization", "load.load_in_8bit", "int8")
        else:
            b.from_key("trainer.quantization", "load.load_in_4bit", "none")
    elif n.get("bnb.load_in_4bit") or n.get("load.load_in_4bit"):
        four = True
        key = "bnb.load_in_4bit" if n.get("bnb.load_in_4bit") else "load.load_in_4bit"
        kind = str(n.get("bnb.bnb_4bit_quant_type") or "nf4")
        nested = bool(n.get("bnb.bnb_4bit_use_double_quant"))
        b.from_key("trainer.quantization", key, f"{kind}-dq" if nested and kind == "nf4" else kind)
    elif n.get("bnb.load_in_8bit") or n.get("load.load_in_8bit"):
        b.from_key(
            "trainer.quantization",
            "bnb.load_in_8bit" if n.get("bnb.load_in_8bit") else "load.load_in_8bit",
            "int8",
        )
    else:
        b.default("trainer.quantization", "none", "no quantization in the code")
    if n.get("load.full_finetuning") or not peft:
        b.default("trainer.finetuning", "full", "no LoRA adapter in the code")
        if unsloth:  # from_pretrained's use_gradient_checkpointing="unsloth" (loader.py:423)
            b.take(
                "trainer.gradient_checkpointing",
                "load.use_gradient_checkpointing",
                "unsloth",
                f"{UNSLOTH} use_gradient_checkpointing='unsloth'",
                _bool,
            )
            return
        if n.is_set("args.gradient_checkpointing"):
            b.take(
                "trainer.gradient_checkpointing", "args.gradient_checkpointing", False, "", _bool
            )
        return
    b.from_key("trainer.finetuning", "peft", "qlora" if four else "lora")
    unsloth_peft = n.collected.notes.get("peft") == "unsloth"
    b.take(
        "trainer.lora.rank",
        "peft.r",
        16 if unsloth_peft else 8,
        f"{UNSLOTH_PEFT} r=16" if unsloth_peft else "peft LoraConfig r=8",
    )
    b.take(
        "trainer.lora.alpha",
        "peft.lora_alpha",
        16 if unsloth_peft else 8,
        "lora_alpha default",
        float,
    )
    b.take("trainer.lora.dropout", "peft.lora_dropout", 0.0, "lora_dropout default", float)
    if n.is_set("peft.target_modules"):
        b.take(
            "trainer.lora.targets",
            "peft.target_modules",
            None,
            "",
            lambda v: [v] if isinstance(v, str) else list(v),
        )
    elif unsloth_peft:
        b.default("trainer.lora.targets", UNSLOTH_TARGETS, f"{UNSLOTH_PEFT} target_modules")
    if n.is_set("peft.target_parameters"):
        b.take(
            "trainer.lora.target_parameters",
            "peft.target_parameters",
            None,
            "",
            lambda v: [v] if isinstance(v, str) else list(v),
        )
    if unsloth_peft:
        gc = (
            n.get("peft.use_gradient_checkpointing", "unsloth")
            if n.is_set("peft.use_gradient_checkpointing")
            else "unsloth"
        )
        where = n.loc("peft.use_gradient_checkpointing") or b.default_location(
            f"{UNSLOTH_PEFT} use_gradient_checkpointing='unsloth'"
        )
        b.set("trainer.gradient_checkpointing", bool(gc), where)
    elif n.is_set("args.gradient_checkpointing"):
        b.take("trainer.gradient_checkpointing", "args.gradient_checkpointing", False, "", _bool)
    elif "SFT" in n.collected.notes.get("args", ""):
        b.default(
            "trainer.gradient_checkpointing",
            True,
            "trl/trainer/base_config.py gradient_checkpointing=True",
        )
