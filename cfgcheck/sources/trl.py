"""TRL: an ``SFTConfig`` YAML (``trl sft --config FILE``, with ``ModelConfig`` and
``ScriptArguments`` keys) or a ``transformers.TrainingArguments`` dump, mapped onto cfgcheck's
run config.

Defaults are SFTConfig's overrides of TrainingArguments and TRL's ModelConfig
(huggingface/trl at f2cd57710ae345ea6428ae95363267fcf38a3dc8: ``trl/trainer/sft_config.py``,
``trl/trainer/base_config.py``, ``trl/trainer/model_config.py``; checked against the released
trl 1.16.0 by tests/sources/test_trl_ground_truth.py) over transformers' TrainingArguments
(5.23.0), each cited at its use below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources import deepspeed, launch, trl_data, trl_memory, trl_prompt
from cfgcheck.sources.base import Builder, Format, NativeConfig
from cfgcheck.sources.model_ref import set_model
from cfgcheck.sources.names import TRAINING_ARGUMENTS, schema_attention, schema_optimizer
from cfgcheck.sources.profiles import TRL, TRL_DEFAULT_ATTENTION, Adjustment, Profile
from cfgcheck.sources.trl_rules import TRL_RULES
from cfgcheck.sources.trl_run import TrlRun, run_of
from cfgcheck.sources.trl_unknown import unknown_rule
from cfgcheck.sources.trl_versions import version_tuple
from cfgcheck.sources.unknown import key_list

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

SFT = "trl/trainer/sft_config.py SFTConfig"
BASE = "trl/trainer/base_config.py"
MODEL = "trl/trainer/model_config.py ModelConfig"
ARGS = "transformers TrainingArguments"
DEFAULT_MAX_LENGTH = 1024  # SFTConfig.max_length
# SFT's loss_type "nll" computes the loss in chunks from this release on (sft_config.py of the
# installed 1.16.0: "without materializing the full logits"; v1.9.0's has no chunking).
CHUNKED_SINCE = (1, 16)
# The trainers that refuse a pad/eos token missing from the vocabulary, since (grep of each
# tag's trainer for "is not found in the vocabulary": SFT from 0.16, DPO from 0.24).
CHECKS_SPECIAL_TOKENS = {"sft": (0, 16), "dpo": (0, 24)}


def build(b: Builder) -> None:
    n = b.native
    run = run_of(n)
    b.default("trainer.framework", "hf", "(TRL trains with transformers' Trainer)")
    set_model(b, "model_name_or_path", n.get("model_name_or_path"))
    _lengths(b, run)
    collator = f"{run.config_class}: the collator pads each batch to its longest sample"
    if run.reads("packing"):
        b.take(
            "data.collator",
            "packing",
            run.default("packing", False),
            run.where("packing"),
            lambda v: "packed" if v else "padded",
        )
    else:
        b.default("data.collator", "padded", collator)
    b.default("data.padding", "longest", collator)
    if n.is_set("pad_to_multiple_of"):
        b.take("data.pad_to_multiple_of", "pad_to_multiple_of", None, "")
    if n.is_set("pad_token"):
        b.take("tokenizer.pad_token", "pad_token", None, "")
    if n.is_set("eos_token") and run.reads("eos_token"):
        b.take("tokenizer.eos_token", "eos_token", None, "")
    if n.is_set("dataset_text_field"):
        b.take("data.text_field", "dataset_text_field", "text", "")
    _sft_data(b, run)
    _trainer(b, run)
    trl_memory.apply(b, run)  # reference model, chosen + rejected, GRPO's generation
    launch.apply(b, n.options.get("accelerate_config"))


def _lengths(b: Builder, run: TrlRun) -> None:
    """The longest sequence a step sees: ``max_length`` (SFT, DPO, KTO, ORPO, reward: prompt
    and completion together, truncated to it), or a prompt plus ``max_completion_length``
    generated tokens (GRPO, RLOO, online trainers)."""
    n = b.native
    key = "max_length"
    if not n.is_set("max_length") and n.is_set("max_seq_length") and run.reads("max_seq_length"):
        key = "max_seq_length"  # SFTConfig before 0.20 still read it (deprecated alias)
    if run.reads("max_length") or not run.reads("max_completion_length"):
        default = run.default("max_length")
        if n.is_set(key):
            b.take("data.max_seq_length", key, None, "")
            b.from_key("data.truncation", key, True)
        elif key in n.data or default is None:  # null -> "no truncation is applied"
            b.defer("data.max_seq_length", "model.block_size", run.where("max_length"))
            b.from_key("data.truncation", key, False) if key in n.data else b.default(
                "data.truncation", False, run.where("max_length")
            )
        else:
            b.default("data.max_seq_length", default, run.where("max_length"))
            b.smap.set("max_length", b.default_location(run.where("max_length")), True)
            b.default("data.truncation", True, f"{run.where('max_length')} (truncates)")
        return
    completion = n.get("max_completion_length") or run.default("max_completion_length") or 0
    if not isinstance(completion, int) or isinstance(completion, bool):
        where = run.where("max_completion_length")
        at = n.loc("max_completion_length") or b.default_location(where)
        b.set("data.max_seq_length", completion, at)  # the schema names the invalid value
        return
    trl_prompt.apply(b, run, completion)  # the prompt: truncated, vLLM's cap, or the context


def _trainer(b: Builder, run: TrlRun) -> None:
    n = b.native
    b.take(
        "trainer.micro_batch_size",
        "per_device_train_batch_size",
        run.default("per_device_train_batch_size", 8),
        run.where("per_device_train_batch_size"),
    )
    b.take(
        "trainer.gradient_accumulation_steps",
        "gradient_accumulation_steps",
        run.default("gradient_accumulation_steps", 1),
        run.where("gradient_accumulation_steps"),
    )
    b.take(
        "trainer.gradient_checkpointing",
        "gradient_checkpointing",
        run.default("gradient_checkpointing", False),
        run.where("gradient_checkpointing"),
        bool,
    )
    # bf16=None -> `not fp16` (base_config.py __post_init__ since TRL 0.19; TrainingArguments'
    # False before); the weights load in ModelConfig.dtype (torch_dtype before 0.26; float32
    # by default), so bf16 is autocast over fp32 weights unless dtype is bfloat16.
    fp16 = bool(n.get("fp16"))
    bf16 = n.get("bf16") if "bf16" in n.data else run.default("bf16", False)
    bf16 = (not fp16) if bf16 is None else bool(bf16)
    dtype = str(n.get("dtype") or n.get("torch_dtype") or "float32")
    if fp16:
        b.from_key("trainer.precision", "fp16", "16-mixed")
    elif bf16:
        precision = "bf16-true" if dtype in ("bfloat16", "auto") else "bf16-mixed"
        key = "dtype" if n.is_set("dtype") else "torch_dtype" if n.is_set("torch_dtype") else "bf16"
        where = n.loc(key) or b.default_location(
            f"{run.where('bf16')} -> not fp16; {MODEL} dtype='float32'"
        )
        b.set("trainer.precision", precision, where)
    elif n.loc("bf16"):
        b.from_key("trainer.precision", "bf16", "32-true")
    else:
        b.default("trainer.precision", "32-true", run.where("bf16"))
    b.take(
        "trainer.learning_rate",
        "learning_rate",
        run.default("learning_rate", 5e-5),
        run.where("learning_rate"),
        float,
    )
    b.take(
        "trainer.optimizer",
        "optim",
        run.default("optim", "adamw_torch"),
        run.where("optim"),
        schema_optimizer,
    )
    if n.is_set("attn_implementation"):
        impl = schema_attention(n.get("attn_implementation"))
        b.from_key("trainer.attention", "attn_implementation", impl)
    else:
        b.default("trainer.attention", "sdpa", f"{MODEL} attn_implementation=None (sdpa)")
    if n.get("use_liger_kernel"):
        b.from_key("trainer.loss_chunking", "use_liger_kernel", "fused")
    elif run.trainer.name == "sft" and version_tuple(run.version.table) >= CHUNKED_SINCE:
        # TRL 1.16: loss_type "nll" (the default; "chunked_nll" is its deprecated alias)
        # computes the loss "without materializing the full logits" (sft_config.py).
        b.take(
            "trainer.loss_chunking",
            "loss_type",
            "nll",
            f"{SFT} loss_type='nll' (lm_head and loss in chunks, TRL 1.16)",
            lambda v: "chunked" if v in ("nll", "chunked_nll") else "none",
        )
    else:
        b.default(
            "trainer.loss_chunking",
            "none",
            f"{run.config_class}: full logits for the loss (TRL {run.version.table})",
        )

    peft = bool(n.get("use_peft"))
    four_bit, eight_bit = bool(n.get("load_in_4bit")), bool(n.get("load_in_8bit"))
    if four_bit:
        nested = bool(n.get("use_bnb_nested_quant"))
        kind = str(n.get("bnb_4bit_quant_type", "nf4"))
        b.from_key(
            "trainer.quantization",
            "load_in_4bit",
            f"{kind}-dq" if nested and kind == "nf4" else kind,
        )
    elif eight_bit:
        b.from_key("trainer.quantization", "load_in_8bit", "int8")
    else:
        b.default("trainer.quantization", "none", f"{MODEL} load_in_4bit=False")
    if peft:
        b.from_key("trainer.finetuning", "use_peft", "qlora" if four_bit else "lora")
        b.take("trainer.lora.rank", "lora_r", 16, f"{MODEL} lora_r=16")
        b.take("trainer.lora.alpha", "lora_alpha", 32, f"{MODEL} lora_alpha=32")
        b.take("trainer.lora.dropout", "lora_dropout", 0.05, f"{MODEL} lora_dropout=0.05", float)
        if n.is_set("lora_target_modules"):
            b.take(
                "trainer.lora.targets",
                "lora_target_modules",
                None,
                "",
                lambda v: [v] if isinstance(v, str) else v,
            )
        # ModelConfig.lora_target_parameters (trl/trainer/model_config.py 1.16), handed to
        # LoraConfig(target_parameters=...) by get_peft_config (trl/trainer/utils.py)
        if n.is_set("lora_target_parameters"):
            b.take(
                "trainer.lora.target_parameters",
                "lora_target_parameters",
                None,
                "",
                lambda v: [v] if isinstance(v, str) else v,
            )
    else:
        b.default("trainer.finetuning", "full", f"{MODEL} use_peft=False")
    ds = deepspeed.load(n)
    stage = deepspeed.strategy(ds[0]) if ds else None
    if ds is not None:
        deepspeed.apply_offload(b, *ds)
    if stage is not None:
        b.from_key("trainer.strategy", "deepspeed", stage)
    elif n.get("deepspeed"):  # a file cfgcheck cannot read: its name is the only clue
        b.from_key(
            "trainer.strategy",
            "deepspeed",
            "zero2" if "3" not in str(n.get("deepspeed")) else "zero3",
        )
    elif n.get("fsdp"):
        b.from_key("trainer.strategy", "fsdp", "fsdp")
    else:
        b.default("trainer.strategy", "single", "one process unless launched with accelerate")
    b.take("seed", "seed", run.default("seed", 42), run.where("seed"))
    if n.is_set("output_dir"):
        b.take("output_dir", "output_dir", None, "", str)


def _sft_data(b: Builder, run: TrlRun) -> None:
    """How SFTTrainer prepares the dataset, for the scan (``--scan-data``; TRL 1.16
    trl/trainer/sft_trainer.py ``_prepare_dataset``): the EOS appended to text that lacks it
    (lines 1287-1297), the prompt masked with ``completion_only_loss`` (961-964, 1405-1428),
    and with ``assistant_only_loss`` conversations read from the ``messages`` column
    (1372-1378; the other conversational format, prompt-completion, is
    ``data.prompt_field=prompt data.messages_field=null``); the data that ``dataset_name``
    names (:mod:`cfgcheck.sources.trl_data`)."""
    if run.trainer.name != "sft":
        return
    n = b.native
    b.default("data.add_eos", True, "SFTTrainer._prepare_dataset add_eos")
    if n.is_set("completion_only_loss") and run.reads("completion_only_loss"):
        b.take("data.completion_only_loss", "completion_only_loss", None, "")
    if n.get("assistant_only_loss") is True and run.reads("assistant_only_loss"):
        b.from_key("data.assistant_only_loss", "assistant_only_loss", True)
        b.default("data.messages_field", "messages", "SFTTrainer tokenize_fn example['messages']")
    trl_data.apply(b)  # dataset_name: a local folder or a cached Hub dataset


_TO_NATIVE = {
    **TRAINING_ARGUMENTS,
    "data.max_seq_length": "max_length",
    "data.max_length": "max_length",
    "data.pad_to_multiple_of": "pad_to_multiple_of",
    "trainer.gradient_checkpointing": "gradient_checkpointing",
    "trainer.lora.rank": "lora_r",
    "trainer.lora.alpha": "lora_alpha",
    "tokenizer.pad_token": "pad_token",
}


def to_native(path: str, value: str) -> str | None:
    if path == "data.truncation" and value == "true":
        return ""  # samples over the length never reach the model in this format
    if path == "trainer.loss_chunking" and value == "fused":
        return "use_liger_kernel=true"
    if path == "trainer.attention":
        impl = {"flash": "flash_attention_2"}.get(value, value)
        return f"attn_implementation={impl}"
    if path == "data.collator":
        return f"packing={'true' if value == 'packed' else 'false'}"
    if path == "trainer.finetuning" and value in ("lora", "qlora"):
        return "use_peft=true"  # trl/trainer/model_config.py ModelConfig.use_peft (qlora: below)
    if path == "trainer.quantization" and value in ("nf4", "none"):
        return f"load_in_4bit={'false' if value == 'none' else 'true'}"
    if path == "trainer.precision" and value == "16-mixed":
        return "fp16=true"  # bf16=None -> not fp16 (trl/trainer/base_config.py __post_init__)
    key = _TO_NATIVE.get(path)
    return f"{key}={value}" if key else None


def max_length_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """SFTConfig.max_length defaults to 1024 and truncates (sft_config.py); the key was
    max_seq_length until TRL renamed it (#2895, v0.16) and removed the old name (v0.20), so a
    config written for older TRL loses its length and every sample is cut at 1024."""
    if "max_length" in native.data or run is None:
        return
    trl = run_of(native)
    default = trl.default("max_length")
    if not trl.reads("max_length") or not isinstance(default, int):
        return
    if native.is_set("max_seq_length") and trl.reads("max_seq_length"):
        return  # SFTConfig before 0.20 still reads the old name
    block = run.model.block_size
    if block <= default:
        return
    old = native.get("max_seq_length")
    renamed = (
        f" The file sets max_seq_length={old}, the name TRL read before 0.20: TRL no longer "
        "reads it."
        if old is not None
        else ""
    )
    value = old if isinstance(old, int) and old > 0 else default
    fixes = (
        (
            Fix(
                ("~max_seq_length", f"max_length={value}"),
                f"max_length={value}, the intended length",
            ),
        )
        if old is not None
        else (Fix((f"max_length={default}",), f"keep {default} tokens, explicitly"),)
    )
    yield Finding(
        "trl-max-length-truncates",
        "warning",
        ("max_length", "model.block_size"),
        f"max_length is not set, so TRL truncates every sample to {default} tokens "
        f"({trl.where('max_length')}) although "
        f"{run.model.name} attends to {block}.{renamed}",
        f"set max_length to the length you mean to train on (at most {block}); "
        "`cfgcheck data` shows how many samples are longer",
        fixes=fixes,
    )


def profile(native: NativeConfig) -> Profile:
    base = TRL if native.is_set("attn_implementation") else TRL_DEFAULT_ATTENTION
    run = run_of(native)
    since = CHECKS_SPECIAL_TOKENS.get(run.trainer.name)
    if since is not None and version_tuple(run.version.table) >= since:
        # SFTTrainer / DPOTrainer.__init__ (trl/trainer/sft_trainer.py, dpo_trainer.py):
        # convert_tokens_to_ids of the configured pad_token (and SFT's eos_token) is None ->
        # "ValueError: The specified `pad_token` ('...') is not found in the vocabulary of
        # the given `processing_class`".
        return dataclasses.replace(
            base,
            adjustments=(
                Adjustment(
                    "special-token-not-in-vocab",
                    "error",
                    f'{run.config_class.removesuffix("Config")}Trainer raises "ValueError: '
                    "The specified `pad_token` (or `eos_token`) is not found in the vocabulary "
                    f'of the given `processing_class`" (trl/trainer/{run.trainer.name}_trainer.py)',
                    "warning",
                ),
                *base.adjustments,
            ),
        )
    return base


FORMAT = Format(
    name="trl",
    label="TRL",
    framework="hf",
    keys=key_list("trl"),
    build=build,
    to_native=to_native,
    profile=profile,
    rules=(max_length_rules, *TRL_RULES),
    renamed={"max_seq_length": "max_length"},
    unknown=unknown_rule,
    unknown_severity="error",
    unknown_behaviour="`trl sft --config` refuses it (trl/scripts/utils.py TrlParser: "
    '"Unknown arguments from config file"), and SFTConfig(**kwargs) raises TypeError',
    open_prefixes=(
        "env",
        "deepspeed",
        "fsdp_config",
        "model_init_kwargs",
        "dataset_kwargs",
        "lr_scheduler_kwargs",
        "gradient_checkpointing_kwargs",
        "optim_args",
        "datasets",
    ),
)
