"""Which call of a training script sets what: the calls people write, as native keys.

The static reader (:mod:`cfgcheck.sources.code`) gives every call with its arguments; here the
calls of the libraries people train with are recognised by their callee's dotted name and
their keyword arguments become native keys ``<group>.<argument>`` (``args.
per_device_train_batch_size``, ``tokenize.padding``), each located at its keyword (or, for an
argument not written, at the call, where a fix inserts it):

========== ==============================================================================
group      calls
========== ==============================================================================
load       Unsloth ``FastLanguageModel`` / ``FastModel`` / ``FastVisionModel.from_pretrained``;
           transformers ``AutoModelForCausalLM`` (and kin) ``.from_pretrained``; torchtune
           model builders (``llama3_2_1b()``)
bnb        transformers ``BitsAndBytesConfig``
peft       Unsloth ``get_peft_model``; peft ``LoraConfig``
args       ``TrainingArguments``, ``Seq2SeqTrainingArguments``, TRL ``SFTConfig`` /
           ``DPOConfig`` / ``GRPOConfig`` / ``ORPOConfig`` / ``KTOConfig`` / ``CPOConfig``,
           Unsloth ``UnslothTrainingArguments``
trainer    ``Trainer``, ``Seq2SeqTrainer``, TRL ``SFTTrainer`` (and kin), ``UnslothTrainer``
tokenize   a tokenizer call (``tokenizer(...)``, ``apply_chat_template(tokenize=True)``) in
           the function a ``dataset.map`` runs
map        ``dataset.map(fn, batched=..., batch_size=...)``
dataset    torchtune dataset builders (``text_completion_dataset``, ``alpaca_dataset``...)
loader     ``torch.utils.data.DataLoader(batch_size=..., collate_fn=...)``
lightning  Lightning ``Trainer`` / ``Fabric`` (``precision``, ``devices``, ``strategy``,
           ``accumulate_grad_batches``)
========== ==============================================================================
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from cfgcheck.findings import Location
from cfgcheck.sources.code import Arg, CallSite, Program
from cfgcheck.sources.code.datapath import is_tokenizer_call
from cfgcheck.sources.code.values import (
    Entries,
    Func,
    Klass,
    Known,
    Obj,
    Ref,
    Unknown,
    Value,
    describe,
)

LOADERS = (
    "FastLanguageModel.from_pretrained",
    "FastModel.from_pretrained",
    "FastVisionModel.from_pretrained",
    "AutoModelForCausalLM.from_pretrained",
    "AutoModelForSeq2SeqLM.from_pretrained",
    "AutoModel.from_pretrained",
    "LlamaForCausalLM.from_pretrained",
    "MistralForCausalLM.from_pretrained",
    "Qwen2ForCausalLM.from_pretrained",
    "AutoPeftModelForCausalLM.from_pretrained",
)
ARGS = (
    "TrainingArguments",
    "Seq2SeqTrainingArguments",
    "SFTConfig",
    "DPOConfig",
    "GRPOConfig",
    "ORPOConfig",
    "KTOConfig",
    "CPOConfig",
    "RewardConfig",
    "UnslothTrainingArguments",
)
TRAINERS = (
    "transformers.Trainer",
    "transformers.Seq2SeqTrainer",
    "SFTTrainer",
    "DPOTrainer",
    "GRPOTrainer",
    "ORPOTrainer",
    "KTOTrainer",
    "CPOTrainer",
    "RewardTrainer",
    "UnslothTrainer",
)
LIGHTNING = (
    "lightning.Trainer",
    "lightning.pytorch.Trainer",
    "pytorch_lightning.Trainer",
    "lightning.Fabric",
    "lightning.fabric.Fabric",
    "lightning_fabric.Fabric",
)
TORCHTUNE_DATASETS = (
    "text_completion_dataset",
    "instruct_dataset",
    "chat_dataset",
    "alpaca_dataset",
    "alpaca_cleaned_dataset",
    "slimorca_dataset",
    "grammar_dataset",
    "samsum_dataset",
    "wikitext_dataset",
    "cnn_dailymail_articles_dataset",
)
# torchtune model builders -> the Hub id of the same shape (torchtune/models/*/_model_builders.py)
TORCHTUNE_MODELS = {
    "llama3_2_1b": "meta-llama/Llama-3.2-1B",
    "llama3_2_3b": "meta-llama/Llama-3.2-3B",
    "llama3_8b": "meta-llama/Meta-Llama-3-8B",
    "llama3_1_8b": "meta-llama/Llama-3.1-8B",
    "llama2_7b": "meta-llama/Llama-2-7b-hf",
    "llama2_13b": "meta-llama/Llama-2-13b-hf",
    "mistral_7b": "mistralai/Mistral-7B-v0.1",
    "gemma_2b": "google/gemma-2b",
    "gemma_7b": "google/gemma-7b",
    "qwen2_5_0_5b": "Qwen/Qwen2.5-0.5B",
    "qwen2_5_1_5b": "Qwen/Qwen2.5-1.5B",
    "qwen2_5_7b_base": "Qwen/Qwen2.5-7B",
    "phi3_mini": "microsoft/Phi-3-mini-4k-instruct",
}
# Calls whose presence decides a setting (a 4-bit load, an adapter, the precision flags).
CONDITIONAL_GROUPS = frozenset({"load", "bnb", "peft", "args", "tokenize", "loader", "lightning"})
# Keywords whose value is an object (a collator, a dtype, a config): named, not a literal.
OBJECT_KEYWORDS = frozenset(
    {
        "data_collator",
        "collate_fn",
        "dtype",
        "torch_dtype",
        "quantization_config",
        "peft_config",
        "processing_class",
        "tokenizer",
        "args",
        "strategy",
        "precision",
    }
)


@dataclass(frozen=True)
class Site:
    """Where a native key lives in the code: the call, and its argument when written."""

    call: CallSite
    arg: Arg | None
    keyword: str


@dataclass
class Collected:
    """The native keys of a program, their locations and code sites, and what is unknown."""

    data: dict[str, dict[str, object]] = field(default_factory=dict)
    where: dict[str, Location] = field(default_factory=dict)
    sites: dict[str, Site] = field(default_factory=dict)
    calls: dict[str, CallSite] = field(default_factory=dict)  # group -> its call
    unknown: dict[str, Unknown] = field(default_factory=dict)
    # What the collator is: "padded", "default", or None (not decided by the code).
    notes: dict[str, str] = field(default_factory=dict)
    # Names of the functions and classes the file defines.
    local: frozenset[str] = frozenset()

    def _defined_here(self, value: Value) -> bool:
        if isinstance(value, Func | Klass):
            return True
        return isinstance(value, Obj) and value.call.name in self.local

    def put(self, group: str, call: CallSite, keywords: dict[str, int | None]) -> None:
        """Record ``call``'s arguments (keyword -> positional index or None) under ``group``."""
        self.calls.setdefault(group, call)
        self.where.setdefault(group, call.location)
        if call.condition is not None and group in CONDITIONAL_GROUPS:
            self.unknown.setdefault(
                group,
                Unknown(
                    f"{call.written}(...), made only on one branch of the if at {call.condition}",
                    call.location,
                ),
            )
        section = self.data.setdefault(group, {})
        for keyword, position in keywords.items():
            key = f"{group}.{keyword}"
            arg = call.arg(keyword, position)
            self.sites[key] = Site(call, arg, keyword)
            if call.condition is not None and group in CONDITIONAL_GROUPS:
                # Made on one branch of an if known only when it runs: whether it happens is
                # not known, so neither are its arguments, written or defaulted.
                self.unknown[key] = Unknown(
                    f"set by {call.written}(...), which runs only on one branch of the if at "
                    f"{call.condition}",
                    call.location,
                )
                self.where[key] = _arg_location(arg) if arg is not None else call.location
                continue
            if arg is None:
                continue
            self.where[key] = _arg_location(arg)
            value = arg.value
            if isinstance(value, Unknown):
                self.unknown[key] = value
            elif isinstance(value, Known):
                section[keyword] = value.value
            elif isinstance(value, Entries):
                try:
                    section[keyword] = {k: _literal(v) for k, v in value.items.items()}
                except ValueError:
                    self.unknown[key] = Unknown("a dict with values computed when it runs")
            elif keyword in ("data_collator", "collate_fn") and self._defined_here(value):
                self.unknown[key] = Unknown(
                    f"{_symbol(value)}, a collator the file defines: cfgcheck does not read "
                    "whether it pads",
                    arg.location,
                )
            elif keyword in OBJECT_KEYWORDS:
                section[keyword] = _symbol(value)
            else:  # a number, a flag, a name: a call's result or an object is not known
                self.unknown[key] = Unknown(describe(value), arg.location)


def _arg_location(arg: Arg) -> Location:
    return arg.location


def _literal(value: Value) -> object:
    if isinstance(value, Known):
        return value.value
    raise ValueError("not a literal")


def _symbol(value: Value) -> str:
    """A non-literal argument as a name: ``torch.bfloat16``, ``DataCollatorForSeq2Seq(...)``."""
    if isinstance(value, Ref):
        return value.name
    if isinstance(value, Obj):
        return f"{value.call.name}()" + ("" if value.index is None else f"[{value.index}]")
    if isinstance(value, Func):
        return f"<function {value.name}>"
    return "<object>"


def _last(calls: list[CallSite]) -> CallSite | None:
    return calls[-1] if calls else None


def _first_live(calls: list[CallSite]) -> CallSite | None:
    return calls[0] if calls else None


def collect(program: Program) -> Collected:
    out = Collected(local=frozenset({*program.functions, *program.classes}))
    trainer = _last(program.find(*TRAINERS))
    loader = _first_live(program.find(*LOADERS))
    if loader is not None:
        unsloth = loader.name.split(".")[-2] in (
            "FastLanguageModel",
            "FastModel",
            "FastVisionModel",
        )
        out.put(
            "load",
            loader,
            {
                ("model_name" if unsloth else "pretrained_model_name_or_path"): 0,
                "max_seq_length": None,
                "load_in_4bit": None,
                "load_in_8bit": None,
                "dtype": None,
                "torch_dtype": None,
                "full_finetuning": None,
                "use_gradient_checkpointing": None,
                "attn_implementation": None,
                "quantization_config": None,
            },
        )
        out.notes["loader"] = loader.name
    else:
        builders = [c for c in program.calls if c.name.split(".")[-1] in TORCHTUNE_MODELS]
        if builders:
            out.calls["load"] = builders[0]
            out.where["load"] = builders[0].location
            out.notes["torchtune_model"] = builders[0].name.split(".")[-1]
    bnb = _first_live(program.find("BitsAndBytesConfig"))
    if bnb is not None:
        out.put(
            "bnb",
            bnb,
            {
                "load_in_4bit": None,
                "load_in_8bit": None,
                "bnb_4bit_quant_type": None,
                "bnb_4bit_use_double_quant": None,
            },
        )
    peft = _first_live(program.find("get_peft_model"))
    lora = _first_live(program.find("LoraConfig"))
    lora_keys: dict[str, int | None] = {
        "r": None,
        "target_modules": None,
        "target_parameters": None,
        "lora_alpha": None,
        "lora_dropout": None,
    }
    if peft is not None and peft.name.split(".")[-2:-1] in (
        ["FastLanguageModel"],
        ["FastModel"],
        ["FastVisionModel"],
    ):
        out.put("peft", peft, {**lora_keys, "use_gradient_checkpointing": None})
        out.notes["peft"] = "unsloth"
    elif lora is not None:
        out.put("peft", lora, lora_keys)
        out.notes["peft"] = "peft"
    else:  # another adapter method (RandLoraConfig, LoHaConfig, VeraConfig...): trains adapters
        config = _adapter_config(program, peft)
        if config is not None:
            out.put("peft", config, {"r": None, "target_modules": None})
            out.notes["peft"] = config.name.split(".")[-1]
    args = _last(program.find(*ARGS))
    if args is not None:
        out.put(
            "args",
            args,
            {
                k: None
                for k in (
                    "per_device_train_batch_size",
                    "gradient_accumulation_steps",
                    "learning_rate",
                    "fp16",
                    "bf16",
                    "optim",
                    "gradient_checkpointing",
                    "max_length",
                    "max_seq_length",
                    "packing",
                    "dataset_text_field",
                    "seed",
                    "output_dir",
                    "use_liger_kernel",
                    "deepspeed",
                    "fsdp",
                    "pad_to_multiple_of",
                )
            },
        )
        out.notes["args"] = args.name.split(".")[-1]
    if trainer is not None:
        out.put(
            "trainer",
            trainer,
            {
                "data_collator": None,
                "processing_class": None,
                "tokenizer": None,
                "max_seq_length": None,
                "packing": None,
                "dataset_text_field": None,
                "peft_config": None,
                "args": None,
            },
        )
        out.notes["trainer"] = trainer.name.split(".")[-1]
    for target, _, location in program.attributes:
        if target.endswith((".pad_token", ".pad_token_id")):
            out.notes.setdefault("pad_token_set", f"{target} = ... at {location}")
    _collect_map(program, out)
    _collect_lightning(program, out)
    return out


def _adapter_config(program: Program, peft: CallSite | None) -> CallSite | None:
    """The peft config given to ``get_peft_model`` (or a trainer's ``peft_config``)."""
    candidates = [peft.arg("peft_config", 1)] if peft is not None else []
    candidates += [t.kwargs.get("peft_config") for t in program.find(*TRAINERS)]
    for arg in candidates:
        value = arg.value if arg is not None else None
        if isinstance(value, Obj) and value.call.name.endswith("Config"):
            return value.call
    return None


def _rewrites_samples(func: Func) -> int | None:
    """The line where ``func`` pads or cuts token lists itself (``[pad] * n``, ``x[:n]``), so
    what its tokenizer call's ``padding`` says is not what the samples end up as."""
    for node in ast.walk(func.node):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            operands = (node.left, node.right)
            if any(isinstance(o, ast.List) for o in operands):
                return node.lineno
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            return node.lineno
    return None


def _collect_map(program: Program, out: Collected) -> None:
    """The ``dataset.map(fn, ...)`` whose function tokenizes, and that tokenizer call."""
    for call in program.calls:
        if not call.name.endswith(".map") or not call.args:
            continue
        fn = call.arg("function", 0)
        if fn is None or not isinstance(fn.value, Func):
            continue
        tokenizing = [c for c in program.inside(fn.value) if is_tokenizer_call(c)]
        if not tokenizing:
            continue
        out.put("map", call, {"batched": None, "batch_size": None})
        out.put(
            "tokenize",
            tokenizing[0],
            {"padding": None, "truncation": None, "max_length": None, "pad_to_multiple_of": None},
        )
        out.notes["map_function"] = fn.value.name
        line = _rewrites_samples(fn.value)
        if line is not None:
            where = program.code.location(fn.value.unit, line)
            for key in ("tokenize.padding", "tokenize.truncation"):
                out.data.get("tokenize", {}).pop(key.split(".")[1], None)
                out.unknown[key] = Unknown(
                    f"not what the samples end up as: {fn.value.name} pads or cuts the token "
                    f"lists itself at {where}",
                    where,
                )
        return


def _collect_lightning(program: Program, out: Collected) -> None:
    lightning = _last(program.find(*LIGHTNING))
    if lightning is not None:
        out.put(
            "lightning",
            lightning,
            {"precision": None, "devices": None, "strategy": None, "accumulate_grad_batches": None},
        )
        out.notes["lightning"] = lightning.name.split(".")[-1]
    loaders = program.find("DataLoader")
    train = next((c for c in loaders if "train" in (c.function or "") or c.function is None), None)
    train = train or (loaders[0] if loaders else None)
    if train is not None:
        out.put("loader", train, {"batch_size": 1, "collate_fn": 4})
    datasets = [c for c in program.calls if c.name.split(".")[-1] in TORCHTUNE_DATASETS]
    if datasets:
        out.put("dataset", datasets[0], {"max_seq_len": None, "packed": None})
        out.notes["torchtune_dataset"] = datasets[0].name.split(".")[-1]
