"""LLaMA-Factory: ``llamafactory-cli train FILE`` YAML configs (``examples/train_lora/*.yaml``
and the like; the same keys as overrides, ``cutoff_len=4096``) mapped onto cfgcheck's run
config.

Defaults are those of LLaMA-Factory's argument dataclasses, generated from its source into
``keys/llamafactory.defaults.txt`` (scripts/gen_llamafactory_keys.py), and what
``get_train_args`` and the model loader derive from them (hiyouga/LLaMA-Factory at
ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30: ``src/llamafactory/hparams/parser.py``,
``hparams/*_args.py``, ``model/adapter.py``, ``model/model_utils/*.py``), each cited at its
use below.
"""

from __future__ import annotations

from typing import Any

from cfgcheck.sources import deepspeed
from cfgcheck.sources import llamafactory_files as files
from cfgcheck.sources.base import Builder, Format, NativeConfig
from cfgcheck.sources.llamafactory_args import packing, pair_factor, stage, value, zero_stage
from cfgcheck.sources.llamafactory_data import data_rules, deepspeed_rules
from cfgcheck.sources.llamafactory_rules import (
    choice_rules,
    method_rules,
    quantization_rules,
    version_rules,
)
from cfgcheck.sources.model_ref import set_model
from cfgcheck.sources.names import TRAINING_ARGUMENTS, schema_optimizer
from cfgcheck.sources.profiles import (
    LLAMAFACTORY,
    LLAMAFACTORY_NO_TRAINING,
    LLAMAFACTORY_ROPE_SCALED,
    Profile,
)
from cfgcheck.sources.unknown import key_list

PARSER = "src/llamafactory/hparams/parser.py get_train_args"
DATA = "hparams/data_args.py DataArguments"
FT = "hparams/finetuning_args.py"
MODEL = "hparams/model_args.py"
ARGS = "transformers TrainingArguments"
# find_all_linear_modules (model/model_utils/misc.py): every module whose class name holds
# "Linear" (not "Embedding"), lm_head (and chatglm's output_layer, internlm2's output, the
# projector of a multimodal model) excluded: PEFT's all-linear for a text model.
ALL = "all"
# Quantization methods that quantize on the fly at load (model_utils/quantization.py); gptq,
# awq, aqlm load an already-quantized checkpoint.
ON_THE_FLY = ("bnb", "hqq", "eetq")


def fix_value(n: NativeConfig, path: str, given: str) -> str:
    """A fix's micro batch counts sequences; per_device_train_batch_size counts pairs."""
    if path == "trainer.micro_batch_size" and pair_factor(n) > 1 and given.isdigit():
        return str(max(1, int(given) // pair_factor(n)))
    return given


def _targets(spec: Any) -> list[str]:
    names = files.split_names(spec)
    # adapter.py _setup_lora_tuning: ["all"] alone -> find_all_linear_modules(model)
    return ["all-linear"] if names == [ALL] else names


def _precision(b: Builder, finetuning: str) -> None:
    """get_train_args: compute_dtype bf16 (bf16 or pure_bf16) or fp16; the model loads in it.
    adapter.py init_adapter casts the trainable parameters to fp32 unless pure_bf16, BAdam, or
    ZeRO-3 without quantization: full fine-tuning then keeps fp32 weights under autocast."""
    n = b.native
    if n.get("pure_bf16"):
        b.from_key("trainer.precision", "pure_bf16", "bf16-true")
        return
    fp32_master = finetuning == "full" and not n.get("use_badam") and zero_stage(n) != 3
    if n.get("bf16"):
        b.from_key("trainer.precision", "bf16", "bf16-mixed" if fp32_master else "bf16-true")
    elif n.get("fp16"):
        b.from_key("trainer.precision", "fp16", "16-mixed")
    else:
        # patcher.py: compute_dtype = infer_optim_dtype (bf16 on a bf16 GPU), no autocast
        where = n.loc("bf16") or b.default_location(
            f"{ARGS} bf16=False, fp16=False; model/patcher.py loads in bf16 (infer_optim_dtype)"
        )
        b.set("trainer.precision", "32-true" if fp32_master else "bf16-true", where)


def _finetuning(b: Builder) -> str:
    n = b.native
    kind = str(value(n, "finetuning_type"))
    bits, method = n.get("quantization_bit"), str(value(n, "quantization_method"))
    quantized = isinstance(bits, int) and method in ON_THE_FLY
    if kind in ("lora", "oft"):
        method_name = "qlora" if quantized and bits == 4 and method == "bnb" else "lora"
        b.take(
            "trainer.finetuning",
            "finetuning_type",
            "lora",
            f"{FT} finetuning_type='lora'",
            lambda _: method_name,
        )
    else:  # full; freeze trains whole layers: counted as full (an upper bound)
        b.from_key("trainer.finetuning", "finetuning_type", "full")
    if quantized:
        if bits == 8:
            quant = "int8"
        elif method == "bnb" and bits == 4:
            # quantization_type nf4, double_quantization True (QuantizationArguments)
            qtype = str(value(n, "quantization_type"))
            quant = f"{qtype}-dq" if value(n, "double_quantization") and qtype == "nf4" else qtype
        else:
            quant = "nf4"  # 4 bits or fewer (hqq): about half a byte per weight
        b.from_key("trainer.quantization", "quantization_bit", quant)
    else:
        b.default("trainer.quantization", "none", f"{MODEL} quantization_bit=None")
    if kind == "lora":
        rank = b.take(
            "trainer.lora.rank",
            "lora_rank",
            value(n, "lora_rank"),
            f"{FT} LoraArguments lora_rank=8",
        )
        # FinetuningArguments.__post_init__: lora_alpha = lora_alpha or lora_rank * 2
        if n.is_set("lora_alpha"):
            b.take("trainer.lora.alpha", "lora_alpha", None, "")
        elif isinstance(rank, int):
            b.default("trainer.lora.alpha", rank * 2, f"{FT} lora_alpha = lora_rank * 2")
        b.take(
            "trainer.lora.dropout",
            "lora_dropout",
            value(n, "lora_dropout"),
            f"{FT} lora_dropout=0.0",
            float,
        )
        b.take(
            "trainer.lora.targets",
            "lora_target",
            ALL,
            f"{FT} lora_target='all' (model_utils/misc.py find_all_linear_modules)",
            _targets,
        )
    elif kind == "oft":
        # OFT's block-diagonal rotation holds about in*(b-1)/2 parameters per layer, a LoRA of
        # rank ~ (b-1)/4 on a square one: counted so for the memory estimate.
        block = value(n, "oft_block_size")
        rank = max(1, (int(block) - 1) // 4) if isinstance(block, int) else 8
        b.take(
            "trainer.lora.rank", "oft_block_size", block, f"{FT} oft_block_size=32", lambda _: rank
        )
        b.take("trainer.lora.targets", "oft_target", ALL, f"{FT} oft_target='all'", _targets)
    return kind


def build(b: Builder) -> None:
    n = b.native
    b.default("trainer.framework", "hf", "(LLaMA-Factory trains with transformers' Trainer)")
    set_model(b, "model_name_or_path", n.get("model_name_or_path"))

    b.take("data.max_seq_length", "cutoff_len", value(n, "cutoff_len"), f"{DATA} cutoff_len=2048")
    # data/processor/*.py: every sample is cut to cutoff_len (infer_seqlen)
    b.default("data.truncation", True, "data/processor/supervised.py infer_seqlen(cutoff_len)")
    pack = packing(n)
    where = n.loc("neat_packing") if n.get("neat_packing") else n.loc("packing")
    b.set(
        "data.collator",
        "packed" if pack else "padded",
        where or b.default_location(f"{PARSER}: packing=None -> stage == 'pt'"),
    )
    # train/sft/workflow.py: SFTDataCollatorWith4DAttentionMask, a DataCollatorForSeq2Seq that
    # pads to the longest of the batch, pad_to_multiple_of=8 when training
    collator = "data/collator.py (DataCollatorForSeq2Seq): pads to the longest"
    b.default("data.padding", "longest", collator)
    if stage(n) == "sft" and not pack and n.get("do_train"):
        b.default("data.pad_to_multiple_of", 8, "train/sft/workflow.py pad_to_multiple_of=8")

    # dpo and rm: PairwiseDataCollatorWithPadding (data/collator.py) makes 2 * n sequences
    # of n pairs, one forward over all (train/dpo/trainer.py concatenated_forward)
    per_pair = pair_factor(n)
    b.take(
        "trainer.micro_batch_size",
        "per_device_train_batch_size",
        value(n, "per_device_train_batch_size"),
        f"{ARGS} per_device_train_batch_size=8"
        + (f" ({per_pair} sequences a pair)" if per_pair > 1 else ""),
        lambda v: v * per_pair if isinstance(v, int) else v,
    )
    b.take(
        "trainer.gradient_accumulation_steps",
        "gradient_accumulation_steps",
        value(n, "gradient_accumulation_steps"),
        f"{ARGS} gradient_accumulation_steps=1",
    )
    kind = _finetuning(b)
    _precision(b, "full" if kind in ("full", "freeze") else kind)
    # model_utils/checkpointing.py prepare_model_for_training: gradient checkpointing is on
    # unless disable_gradient_checkpointing
    b.take(
        "trainer.gradient_checkpointing",
        "disable_gradient_checkpointing",
        False,
        "model_utils/checkpointing.py: on unless disable_gradient_checkpointing",
        lambda v: not v,
    )
    b.take("trainer.optimizer", "optim", "adamw_torch_fused", f"{ARGS} optim", schema_optimizer)
    b.take(
        "trainer.learning_rate",
        "learning_rate",
        value(n, "learning_rate"),
        f"{ARGS} learning_rate=5e-05",
        float,
    )
    # model_utils/attention.py: auto leaves transformers' choice (sdpa), disabled is eager
    attention = {"fa2": "flash", "fa3": "flash", "disabled": "eager"}
    b.take(
        "trainer.attention",
        "flash_attn",
        "auto",
        f"{MODEL} flash_attn='auto' (sdpa)",
        lambda v: attention.get(str(v), "sdpa"),
    )
    # model/loader.py apply_liger_kernel(require_logits=stage not in [pt, sft]): the fused
    # linear cross-entropy only for pt and sft
    if n.get("enable_liger_kernel") and stage(n) in ("pt", "sft"):
        b.from_key("trainer.loss_chunking", "enable_liger_kernel", "fused")
    elif n.get("use_liger_kernel"):
        b.from_key("trainer.loss_chunking", "use_liger_kernel", "fused")
    else:
        b.default("trainer.loss_chunking", "none", "transformers' loss over the full logits")
    level = zero_stage(n)
    if n.get("deepspeed"):
        strategy = "ddp" if level == 0 else f"zero{level}" if level else "zero2"
        b.from_key("trainer.strategy", "deepspeed", strategy)
        doc = files.deepspeed_document(n)  # its offload (examples/deepspeed/ds_z3_offload...)
        if doc is not None:
            deepspeed.apply_offload(b, *doc)
    elif n.get("fsdp"):
        b.from_key("trainer.strategy", "fsdp", "fsdp")
    else:
        b.default("trainer.strategy", "single", "launcher.py (torchrun over every GPU: DDP)")
    b.take("seed", "seed", value(n, "seed"), f"{ARGS} seed=42")
    if n.is_set("output_dir"):
        b.take("output_dir", "output_dir", None, "", str)
    _data_files(b)


def _data_files(b: Builder) -> None:
    """data.paths for --scan-data: the local files of ``dataset`` (dataset_info.json)."""
    n = b.native
    registry = files.datasets(n)
    if registry is None or not registry.entries:
        return
    names = files.split_names(n.get("dataset"))
    paths = files.local_files(n, registry, names)
    if not paths:
        return
    b.from_key("data.paths", "dataset", paths)
    entry = registry.entries.get(names[0]) or {}
    columns = entry.get("columns") or {}
    if not isinstance(columns, dict):
        return
    if entry.get("formatting", "alpaca") == "sharegpt":
        _sharegpt(b, entry, columns)
    elif stage(n) == "pt":
        b.from_key("data.text_field", "dataset", str(columns.get("prompt", "text")))
    else:
        # data/parser.py DatasetAttr: prompt/query/response columns of the alpaca format
        parts = [
            columns.get(k, d)
            for k, d in (("prompt", "instruction"), ("query", "input"), ("response", "output"))
        ]
        b.from_key("data.template", "dataset", "\n".join(f"{{{p}}}" for p in parts))


# data/parser.py DatasetAttr: the sharegpt columns' and tags' defaults.
_SHAREGPT_TAGS = {
    "role_tag": "from",
    "content_tag": "value",
    "user_tag": "human",
    "assistant_tag": "gpt",
    "observation_tag": "observation",
    "function_tag": "function_call",
    "system_tag": "system",
}
# data/converter.py SharegptDatasetConverter maps the tags to LLaMA-Factory's roles; its own
# template renders them. The tokenizer's chat template knows the standard roles: a function
# call is the assistant's output (LLaMA-Factory trains on it, an "even" turn), an observation
# the tool's answer.
_SHAREGPT_ROLES = {
    "user_tag": "user",
    "assistant_tag": "assistant",
    "observation_tag": "tool",
    "function_tag": "assistant",
    "system_tag": "system",
}


def _sharegpt(b: Builder, entry: dict[str, Any], columns: dict[str, Any]) -> None:
    """A ``formatting: sharegpt`` dataset: its conversations rendered with the chat template,
    labels on the assistant's turns unless ``train_on_prompt`` (data/processor/supervised.py:
    the prompt's labels are IGNORE_INDEX)."""
    raw = entry.get("tags")
    tags = {**_SHAREGPT_TAGS, **(raw if isinstance(raw, dict) else {})}
    b.from_key("data.messages_field", "dataset", str(columns.get("messages", "conversations")))
    b.from_key("data.message_role_key", "dataset", str(tags["role_tag"]))
    b.from_key("data.message_content_key", "dataset", str(tags["content_tag"]))
    roles = {str(tags[t]): r for t, r in _SHAREGPT_ROLES.items() if tags.get(t)}
    b.from_key("data.message_roles", "dataset", roles)
    if not b.native.get("train_on_prompt"):
        b.from_key("data.assistant_only_loss", "dataset", True)
        b.from_key("data.assistant_mask", "dataset", "turns")


_TO_NATIVE = {
    **TRAINING_ARGUMENTS,
    "data.max_seq_length": "cutoff_len",
    "data.max_length": "cutoff_len",
    "trainer.lora.rank": "lora_rank",
    "trainer.lora.alpha": "lora_alpha",
    "trainer.lora.dropout": "lora_dropout",
}
_OPTIM = {"adamw": "adamw_torch_fused", "adamw_8bit": "adamw_bnb_8bit"}
# 32-true has no key: without bf16/fp16 the model still loads in bf16 where the GPU has it
# (model/patcher.py infer_optim_dtype); only full fine-tuning then trains in fp32.
# One precision at a time: the other switches off (TrainingArguments refuses fp16 with bf16).
_PRECISION = {
    "bf16-true": "pure_bf16=true\nfp16=false",
    "bf16-mixed": "bf16=true\nfp16=false\npure_bf16=false",
    "16-mixed": "fp16=true\nbf16=false\npure_bf16=false",
}


def to_native(path: str, value: str) -> str | None:
    if path == "data.truncation" and value == "true":
        return ""  # LLaMA-Factory always cuts samples to cutoff_len
    if path == "data.collator":
        return f"packing={'true' if value == 'packed' else 'false'}"
    if path == "trainer.gradient_checkpointing":
        return f"disable_gradient_checkpointing={'false' if value == 'true' else 'true'}"
    if path == "trainer.lora.targets":
        names = value.strip("[]").replace(" ", "")
        return f"lora_target={ALL if names.lower() == 'all-linear' else names}"
    if path == "trainer.finetuning" and value in ("lora", "full"):
        return f"finetuning_type={value}"
    if path == "trainer.quantization":
        bits = {"none": None, "int8": 8, "nf4": 4, "nf4-dq": 4, "fp4": 4}
        if value not in bits:
            return None
        return "~quantization_bit" if bits[value] is None else f"quantization_bit={bits[value]}"
    if path == "trainer.precision":
        return _PRECISION.get(value)
    if path == "trainer.optimizer":
        return f"optim={_OPTIM.get(value, value)}"
    if path == "trainer.attention":
        return "flash_attn=" + {"flash": "fa2", "eager": "disabled"}.get(value, value)
    if path == "trainer.loss_chunking" and value == "fused":
        return "enable_liger_kernel=true"
    key = _TO_NATIVE.get(path)
    return f"{key}={value}" if key else None


def profile(native: NativeConfig) -> Profile:
    """rope_scaling scales the context to cutoff_len; without do_train nothing trains."""
    if not native.get("do_train"):
        return LLAMAFACTORY_NO_TRAINING
    return LLAMAFACTORY_ROPE_SCALED if native.get("rope_scaling") else LLAMAFACTORY


FORMAT = Format(
    name="llamafactory",
    label="LLaMA-Factory",
    framework="hf",
    keys=key_list("llamafactory"),
    build=build,
    to_native=to_native,
    profile=profile,
    rules=(
        version_rules,
        choice_rules,
        quantization_rules,
        method_rules,
        data_rules,
        deepspeed_rules,
    ),
    fix_value=fix_value,
    unknown_severity="error",
    unknown_behaviour="llamafactory-cli train refuses the file: HfArgumentParser.parse_dict("
    'args, allow_extra_keys=False) raises "ValueError: Some keys are not used by the '
    'HfArgumentParser" (src/llamafactory/hparams/parser.py _parse_args; only '
    "ALLOW_EXTRA_ARGS=1 lets it through)",
    open_prefixes=(
        "deepspeed",
        "fsdp_config",
        "accelerator_config",
        "lr_scheduler_kwargs",
        "gradient_checkpointing_kwargs",
        "model_init_kwargs",
        "ray_init_kwargs",
        "kt_config",
        "vllm_config",
        "sglang_config",
        "dataset_dir",
        "optim_args",
        "rope_scaling",
    ),
)
