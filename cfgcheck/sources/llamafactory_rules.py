"""LLaMA-Factory's own refusals of its arguments (the file checks are in
:mod:`cfgcheck.sources.llamafactory_data`, its rule profile in :mod:`cfgcheck.sources.profiles`).

Each refusal is a check ``llamafactory-cli train`` runs before training starts, quoted from
hiyouga/LLaMA-Factory at ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30:
``src/llamafactory/hparams/parser.py`` (``get_train_args``, ``_verify_model_args``),
``hparams/finetuning_args.py`` and ``hparams/data_args.py`` (``__post_init__``),
``model/model_utils/quantization.py``, ``data/parser.py`` (``get_dataset_list``) and
``data/template.py`` (``get_template_and_fix_tokenizer``).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources.base import NativeConfig
from cfgcheck.sources.llamafactory_args import (
    choices,
    stage,
    templates,
    value,
    version_bound,
    zero_stage,
)

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

PARSER = "hparams/parser.py get_train_args"
VERIFY = "hparams/parser.py _verify_model_args"
FT_POST = "hparams/finetuning_args.py FinetuningArguments.__post_init__"


def refusal(
    rule: str, paths: tuple[str, ...], message: str, hint: str, fixes: tuple[Fix, ...] = ()
) -> Finding:
    return Finding(rule, "error", paths, message, hint, fixes=fixes)


def quote(text: str, where: str) -> str:
    return f'LLaMA-Factory refuses to start: "{text}" ({where})'


def choice_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """Values outside a Literal / enum field, and an unregistered template."""

    for key, allowed in choices().items():
        if key not in ("stage", "finetuning_type", "quantization_method", "flash_attn"):
            continue
        got = native.get(key)
        if got is None or got in allowed:
            continue
        close = difflib.get_close_matches(str(got), [str(a) for a in allowed], n=1, cutoff=0.5)
        yield refusal(
            "llamafactory-invalid-choice",
            (key,),
            f"{key}={got!r} is not one of {', '.join(map(str, allowed))}: LLaMA-Factory "
            f"fails at start (its arguments dataclass allows only these, hparams/*_args.py)",
            f"set {key} to one of {', '.join(map(str, allowed))}",
            (Fix((f"{key}={close[0]}",), f"{key} {close[0]}"),) if close else (),
        )
    template = native.get("template")
    if isinstance(template, str) and template not in templates():
        close = difflib.get_close_matches(template, sorted(templates()), n=1, cutoff=0.6)
        yield refusal(
            "llamafactory-unknown-template",
            ("template",),
            quote(f"Template {template} does not exist.", "data/template.py"),
            f"use a registered template{f', e.g. {close[0]}' if close else ''} (LLaMA-Factory's "
            "README lists the template of each model)",
            (Fix((f"template={close[0]}",), f"template {close[0]}"),) if close else (),
        )


def quantization_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """_verify_model_args and model_utils/quantization.py configure_quantization."""
    bits = native.get("quantization_bit")
    if bits is None:
        return
    kind = native.get("finetuning_type", "lora")
    if kind not in ("lora", "oft"):
        yield refusal(
            "llamafactory-quantization-needs-adapters",
            ("quantization_bit", "finetuning_type"),
            f"quantization_bit={bits} with finetuning_type={kind}: "
            + quote("Quantization is only compatible with the LoRA or OFT method.", VERIFY),
            "train LoRA adapters on the quantized model (finetuning_type=lora), or drop "
            "quantization_bit to train every weight",
            (
                Fix(("finetuning_type=lora",), "QLoRA: adapters on the quantized model"),
                Fix(("~quantization_bit",), f"{kind} fine-tuning of the unquantized model"),
            ),
        )
    method = native.get("quantization_method", "bnb")
    if method == "bnb" and bits not in (4, 8):
        yield refusal(
            "llamafactory-quantization-bits",
            ("quantization_bit", "quantization_method"),
            f"quantization_bit={bits} with bitsandbytes: "
            + quote(
                "Bitsandbytes only accepts 4-bit or 8-bit quantization.",
                "model_utils/quantization.py",
            ),
            "use quantization_bit=4 or 8 (or quantization_method=hqq for 2/3 bits)",
            (Fix(("quantization_bit=4",), "4-bit QLoRA"),),
        )
    if native.get("pissa_init"):
        yield refusal(
            "llamafactory-quantization-pissa",
            ("quantization_bit", "pissa_init"),
            quote(
                "Please use scripts/pissa_init.py to initialize PiSSA for a quantized model.",
                VERIFY,
            ),
            "initialize PiSSA offline with scripts/pissa_init.py, then train without pissa_init",
            (Fix(("pissa_init=false",), "no PiSSA initialisation at start"),),
        )


def method_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """FinetuningArguments.__post_init__ and get_train_args: options of one method or stage."""

    kind = value(native, "finetuning_type")
    if kind != "lora":
        for key, label in (
            ("loraplus_lr_ratio", "`loraplus_lr_ratio`"),
            ("use_rslora", "`use_rslora`"),
            ("use_dora", "`use_dora`"),
            ("pissa_init", "`pissa_init`"),
        ):
            if native.get(key):
                yield refusal(
                    "llamafactory-lora-only-option",
                    (key, "finetuning_type"),
                    f"{key} with finetuning_type={kind}: "
                    + quote(f"{label} is only valid for LoRA training.", FT_POST),
                    f"remove {key}, or set finetuning_type=lora",
                    (Fix((f"~{key}",), f"no {key}"), Fix(("finetuning_type=lora",), "LoRA")),
                )
    optimizers = [k for k in ("use_galore", "use_apollo", "use_badam") if native.get(k)]
    if kind == "lora" and optimizers:
        yield refusal(
            "llamafactory-lora-with-optimizer",
            (optimizers[0], "finetuning_type"),
            quote("Cannot use LoRA with GaLore, APOLLO or BAdam together.", FT_POST),
            f"use {optimizers[0]} with finetuning_type=full, or remove it",
            (Fix((f"~{optimizers[0]}",), "LoRA alone"),),
        )
    current = stage(native)
    if current != "sft":
        for key in ("neat_packing", "train_on_prompt", "mask_history", "predict_with_generate"):
            if native.get(key):
                yield refusal(
                    "llamafactory-sft-only-option",
                    (key, "stage"),
                    f"{key} with stage={current}: "
                    + quote(f"`{key}` cannot be set as True except SFT.", PARSER),
                    f"remove {key} (it applies to stage=sft only)",
                    (Fix((f"~{key}",), f"no {key}"),),
                )
    if current == "ppo" and not native.get("reward_model"):
        yield refusal(
            "llamafactory-ppo-reward-model",
            ("stage", "reward_model"),
            quote("`reward_model` is necessary for PPO training.", FT_POST),
            "set reward_model to the reward model (or adapter) trained with stage=rm",
        )
    if zero_stage(native) == 3:
        for key, text in (
            ("pure_bf16", "`pure_bf16` is incompatible with DeepSpeed ZeRO-3."),
            ("use_unsloth", "Unsloth is incompatible with DeepSpeed ZeRO-3."),
        ):
            if native.get(key):
                yield refusal(
                    "llamafactory-zero3-conflict",
                    (key, "deepspeed"),
                    f"{key} with ZeRO-3: " + quote(text, PARSER),
                    f"remove {key}, or use a ZeRO-2 DeepSpeed config",
                    (Fix((f"~{key}",), f"ZeRO-3 without {key}"),),
                )
    if native.get("streaming") and value(native, "max_steps") in (None, -1):
        yield refusal(
            "llamafactory-streaming-max-steps",
            ("streaming", "max_steps"),
            quote("Please specify `max_steps` in streaming mode.", PARSER),
            "set max_steps (a streamed dataset has no length to count epochs by)",
        )
    yield from _argument_conflicts(native)


def _conflicts(n: NativeConfig) -> list[tuple[bool, tuple[str, ...], str, str, str]]:
    """(refused, keys, LLaMA-Factory's message, where, the change that avoids it)."""

    # transformers' TrainingArguments.__post_init__ sets do_eval=True for any eval_strategy
    # but "no" (training_args.py:1571 in 5.24), before LLaMA-Factory's check (parser.py:480)
    strategy = n.get("eval_strategy")
    evaluates = any(n.get(k) for k in ("do_eval", "do_predict", "predict_with_generate")) or (
        strategy is not None and str(strategy) != "no"
    )
    no_eval_data = n.get("eval_dataset") is None and float(n.get("val_size") or 0) < 1e-6
    data_post = "hparams/data_args.py DataArguments.__post_init__"
    # FinetuningArguments.__post_init__ (finetuning_args.py:593): DPO keeps a reference
    # model unless its loss is orpo or simpo (pref_loss defaults to sigmoid)
    ref_model = stage(n) == "dpo" and n.get("pref_loss", "sigmoid") not in ("orpo", "simpo")
    return [
        (
            # finetuning_args.py:621 (v0.9.5: :601)
            bool(n.get("pissa_init")) and (stage(n) in ("ppo", "kto") or ref_model),
            ("pissa_init", "stage"),
            "Cannot use PiSSA for current training stage.",
            FT_POST,
            "remove pissa_init (PiSSA for sft/pt/rm, or DPO with pref_loss orpo or simpo)",
        ),
        (
            evaluates and no_eval_data,
            ("do_eval", "eval_dataset", "val_size"),
            "Please make sure eval_dataset be provided or val_size >1e-6",
            PARSER,
            "set eval_dataset, or val_size (e.g. 0.1) to hold out part of dataset",
        ),
        (
            stage(n) == "sft" and bool(n.get("do_predict")) and not n.get("predict_with_generate"),
            ("do_predict", "predict_with_generate"),
            "Please enable `predict_with_generate` to save model predictions.",
            PARSER,
            "set predict_with_generate=true",
        ),
        (
            stage(n) in ("rm", "ppo") and bool(n.get("load_best_model_at_end")),
            ("load_best_model_at_end", "stage"),
            "RM and PPO stages do not support `load_best_model_at_end`.",
            PARSER,
            "remove load_best_model_at_end",
        ),
        (
            bool(n.get("predict_with_generate")) and zero_stage(n) == 3,
            ("predict_with_generate", "deepspeed"),
            "`predict_with_generate` is incompatible with DeepSpeed ZeRO-3.",
            PARSER,
            "predict without ZeRO-3 (a ZeRO-2 config), or drop predict_with_generate",
        ),
        (
            bool(n.get("deepspeed")) and bool(n.get("use_galore") or n.get("use_apollo")),
            ("use_galore" if n.get("use_galore") else "use_apollo", "deepspeed"),
            "GaLore and APOLLO are incompatible with DeepSpeed yet.",
            PARSER,
            "remove deepspeed (or the GaLore/APOLLO optimizer)",
        ),
        (
            bool(n.get("fp8")) and n.get("quantization_bit") is not None,
            ("fp8", "quantization_bit"),
            "FP8 training is not compatible with quantization. Please disable one of them.",
            PARSER,
            "remove fp8 or quantization_bit",
        ),
        (
            bool(n.get("do_train")) and n.get("quantization_device_map") == "auto",
            ("quantization_device_map", "do_train"),
            "Cannot use device map for quantized models in training.",
            PARSER,
            "remove quantization_device_map (it is for inference)",
        ),
        (
            n.get("eval_dataset") is not None and float(n.get("val_size") or 0) > 1e-6,
            ("val_size", "eval_dataset"),
            "Cannot specify `val_size` if `eval_dataset` is not None.",
            data_post,
            "keep eval_dataset or val_size, not both",
        ),
        (
            bool(n.get("mask_history")) and bool(n.get("train_on_prompt")),
            ("mask_history", "train_on_prompt"),
            "`mask_history` is incompatible with `train_on_prompt`.",
            data_post,
            "keep one of mask_history and train_on_prompt",
        ),
    ]


def _argument_conflicts(native: NativeConfig) -> Iterator[Finding]:
    try:
        table = _conflicts(native)
    except (TypeError, ValueError):  # a val_size that is no number: the schema says so
        return
    for refused, keys, text, where, hint in table:
        if refused:
            yield refusal("llamafactory-argument-conflict", keys, quote(text, where), hint)


def version_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """A TrainingArguments key that only some transformers releases in LLaMA-Factory's range
    (pyproject.toml: transformers>=4.55.0,<=5.8.0) define."""

    for key, versions in version_bound().items():
        if key in native.data:
            yield Finding(
                "llamafactory-transformers-key",
                "warning",
                (key,),
                f"{key} is a TrainingArguments field of transformers {', '.join(versions)} "
                "only (of the 4.57.6 and 5.8.0 releases LLaMA-Factory allows): with the "
                'other, HfArgumentParser refuses the file ("Some keys are not used by the '
                'HfArgumentParser", hparams/parser.py _parse_args)',
                f"keep the transformers release that has {key} installed, or move the setting "
                "to its current key (transformers' TrainingArguments docs)",
            )
