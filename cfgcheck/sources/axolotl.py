"""Axolotl: ``examples/*.yml`` files (and the same keys as overrides, ``sequence_len=9000``)
mapped onto cfgcheck's run config.

Defaults are Axolotl's schema defaults and what ``normalize_config`` derives
(axolotl-ai-cloud/axolotl at 067b021c8b87a9e5e380b9173c704cf7340e30f5:
``src/axolotl/utils/schemas/{config,training,peft}.py``,
``src/axolotl/utils/config/__init__.py``), each cited at its use below.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources import axolotl_data, deepspeed
from cfgcheck.sources.axolotl_plugins import listed, unknown_with_plugins
from cfgcheck.sources.axolotl_rules import (
    expert_parallel,
    gptq_rules,
    positions_past_context,
    shard_group,
    size_of,
)
from cfgcheck.sources.base import Builder, Format, NativeConfig
from cfgcheck.sources.model_ref import set_model
from cfgcheck.sources.names import schema_attention, schema_optimizer
from cfgcheck.sources.profiles import AXOLOTL, Profile
from cfgcheck.sources.reader import first_set
from cfgcheck.sources.unknown import key_list

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

SCHEMA = "src/axolotl/utils/schemas/config.py"
TRAINING = "src/axolotl/utils/schemas/training.py"
PEFT = "src/axolotl/utils/schemas/peft.py"
NORMALIZE = "src/axolotl/utils/config/__init__.py normalize_config"

# Legacy boolean flags -> attn_implementation (src/axolotl/utils/schemas/enums.py
# LEGACY_ATTN_FLAG_TO_IMPL, applied by normalize_attn_implementation in config.py).
LEGACY_ATTENTION = {
    "xformers_attention": "xformers",
    "sage_attention": "sage",
    "flex_attention": "flex_attention",
    "flash_attention": "flash_attention_2",
    "sdp_attention": "sdpa",
    "eager_attention": "eager",
}
# Backends that keep packed samples from attending to each other: enums.py
# ATTN_IMPLS_SUPPORTING_PACKING plus sdpa/eager (config.py attn_decontaminates_packing).
PACKING_ATTENTION = frozenset(
    {
        "flash_attention_2",
        "flash_attention_3",
        "flex_attention",
        "xformers",
        "sage",
        "kernels-community/flash-attn2",
        "kernels-community/flash-attn3",
        "sdpa",
        "eager",
    }
)
# The cross-entropy replacements of which Axolotl allows one (validation.py
# check_cross_entropy_conflicts), and the loss_chunking each amounts to.
CROSS_ENTROPY = {
    "cut_cross_entropy": "fused",
    "chunked_cross_entropy": "chunked",
    "liger_cross_entropy": "none",
    "liger_fused_linear_cross_entropy": "fused",
}


# model_type (a transformers Auto class) -> model.head: reward models
# (AutoModelForSequenceClassification) and process reward models (token classification).
HEADS = {
    "SequenceClassification": "sequence_classification",
    "TokenClassification": "token_classification",
}
# rl: modes whose trainer concatenates chosen and rejected into one forward (utils/schemas/
# enums.py RLType; core/builders/rl.py: DPO and IPO run TRL's DPOTrainer, ORPO its ORPOTrainer,
# SIMPO its CPOTrainer: each runs chosen and rejected as one batch, trl dpo_trainer.py
# _compute_loss "batch is [chosen, rejected]"). KTO scores single completions, GRPO
# generations.
PAIRED_RL = frozenset({"dpo", "ipo", "orpo", "simpo"})


def _fsdp_activation_checkpointing(native: NativeConfig) -> str | None:
    """The fsdp_config key that turns FSDP activation checkpointing on (fsdp.py FSDPConfig
    activation_checkpointing; the fsdp_-prefixed spelling is read the same way, see
    validation.py check_fp8_config), or None."""
    for key in (
        "fsdp_config.activation_checkpointing",
        "fsdp_config.fsdp_activation_checkpointing",
    ):
        if native.get(key) is True:
            return key
    return None


def attention_impl(native: NativeConfig) -> tuple[str | None, str | None]:
    """(attn_implementation after Axolotl's legacy-flag mapping, the key that set it)."""
    if native.is_set("attn_implementation"):
        return str(native.get("attn_implementation")), "attn_implementation"
    for flag, impl in LEGACY_ATTENTION.items():
        if native.get(flag):
            return impl, flag
    return None, None


def _fsdp_offload(b: Builder) -> None:
    """``fsdp_config.offload_params`` (``fsdp_offload_params`` in the older spelling): FSDP's
    CPU offload (utils/schemas/fsdp.py; the trainer builds CPUOffload(offload_params=True) /
    FSDP2's CPUOffloadPolicy from it)."""
    n = b.native
    for key in ("fsdp_config.offload_params", "fsdp_config.fsdp_offload_params"):
        if n.get(key) is True:
            b.from_key("trainer.offload.params", key, "cpu")
            b.from_key("trainer.offload.optimizer", key, "cpu")
            return


def _deepspeed_strategy(value: Any) -> str:
    text = str(value).lower()
    for stage in ("3", "2", "1"):
        if f"zero{stage}" in text or f"zero_{stage}" in text or f'"stage": {stage}' in text:
            return f"zero{stage}"
    if isinstance(value, dict):
        zero = value.get("zero_optimization")
        level = zero.get("stage") if isinstance(zero, dict) else None
        if level in (1, 2, 3):
            return f"zero{level}"
    return "zero2"


def build(b: Builder) -> None:
    n = b.native
    b.default("trainer.framework", "hf", "(Axolotl trains with transformers' Trainer)")
    set_model(b, "base_model", n.get("base_model"))

    b.take("data.max_seq_length", "sequence_len", 512, f"{SCHEMA} sequence_len=512")
    # excess_length_strategy None means 'drop' (config.py): no sample longer than
    # sequence_len reaches the model, as with truncation.
    b.take(
        "data.truncation",
        "excess_length_strategy",
        True,
        f"{SCHEMA} excess_length_strategy=None (drop longer samples)",
        lambda v: v in (True, "drop", "truncate"),
    )
    packing = bool(n.get("sample_packing"))
    b.take(
        "data.collator",
        "sample_packing",
        False,
        f"{SCHEMA} sample_packing=None",
        lambda v: "packed" if v else "padded",
    )
    # pad_to_sequence_len "Defaults to True if sample_packing enabled" (config.py, set by
    # validation.py hint_sample_packing_padding).
    if n.is_set("pad_to_sequence_len"):
        b.from_key(
            "data.padding",
            "pad_to_sequence_len",
            "max_length" if n.get("pad_to_sequence_len") else "longest",
        )
    else:
        b.default(
            "data.padding",
            "max_length" if packing else "longest",
            f"{SCHEMA} pad_to_sequence_len (True with sample_packing)",
        )
    special = n.get("special_tokens") or {}
    if isinstance(special, dict):
        for name in ("pad_token", "eos_token", "bos_token", "unk_token"):
            if special.get(name) is not None:
                b.from_key(f"tokenizer.{name}", f"special_tokens.{name}", special[name])

    micro = b.take(
        "trainer.micro_batch_size", "micro_batch_size", 1, f"{TRAINING} micro_batch_size=1"
    )
    if n.is_set("gradient_accumulation_steps") or not n.is_set("batch_size"):
        b.take(
            "trainer.gradient_accumulation_steps",
            "gradient_accumulation_steps",
            1,
            f"{TRAINING} gradient_accumulation_steps=1",
        )
    elif isinstance(micro, int) and isinstance(n.get("batch_size"), int) and micro > 0:
        # normalize_config: gradient_accumulation_steps = batch_size // micro_batch_size
        b.from_key(
            "trainer.gradient_accumulation_steps",
            "batch_size",
            max(1, n.get("batch_size") // micro),
        )
    cp_key = first_set(n.data, ("context_parallel_size", "sequence_parallel_degree")) or ""
    cp = n.get(cp_key) if cp_key else None
    if isinstance(cp, int) and cp > 1:
        # validation.py check_context_parallel_size (sequence_parallel_degree is its old
        # name); utils/distributed.py builds the context-parallel groups out of the world,
        # so the run has at least that many GPUs, and each holds sequence_len / cp tokens.
        b.from_key("trainer.context_parallel", cp_key, cp)
    ep = expert_parallel(b)
    if ep > 1 and not n.is_set("world_size"):
        # expert_parallel/plugin.py _validate_mesh_axes: world_size must equal
        # expert_parallel_size * dp_shard_size * tensor_parallel_size * context_parallel_size
        others = [n.get(k) for k in ("dp_shard_size", "tensor_parallel_size")] + [cp]
        world = ep
        for size in others:
            world *= size_of(size) or 1
        b.from_key("trainer.devices", "expert_parallel_size", world)
    elif isinstance(cp, int) and cp > 1 and not n.is_set("world_size"):
        b.from_key("trainer.devices", cp_key, cp)
    else:
        b.take("trainer.devices", "world_size", 1, f"{NORMALIZE}: world_size from WORLD_SIZE (1)")
    rl = n.get("rl")
    if rl and str(rl) != "orpo" and (not n.get("adapter") or n.get("rl_adapter_ref_model")):
        # src/axolotl/train.py setup_reference_model: every rl mode but ORPO loads the model a
        # second time (ModelLoader(cfg, ...)), unless an adapter lets TRL disable it instead.
        b.from_key("trainer.reference_model", "rl", True)
    if str(rl) in PAIRED_RL:
        # chosen and rejected of each sample go through the model as one batch
        b.from_key("trainer.sequences_per_sample", "rl", 2)
    if n.get("reward_model"):
        # trl reward_trainer.py: the collator stacks chosen then rejected and the loss splits
        # the rewards with torch.chunk(..., chunks=2): both in one forward
        b.from_key("trainer.sequences_per_sample", "reward_model", 2)
    model_type = str(n.get("model_type") or "")
    for cls, head in HEADS.items():
        if cls in model_type:
            # loaders/utils.py: model_type is the transformers Auto class; num_labels goes
            # into its config (config_kwargs["num_labels"])
            b.from_key("model.head", "model_type", head)
            if n.get("num_labels") is not None:
                b.from_key("model.num_labels", "num_labels", n.get("num_labels"))
    if n.get("tiled_mlp"):  # monkeypatch/tiled_mlp (memory/tiled.py)
        b.from_key("trainer.tiled_mlp", "tiled_mlp", True)
        shards = n.get("tiled_mlp_num_shards")
        if isinstance(shards, int) and not isinstance(shards, bool) and shards > 0:
            b.from_key("trainer.tiled_mlp_shards", "tiled_mlp_num_shards", shards)
    offload = n.get("activation_offloading")
    if offload:  # True, "legacy", "disk", "hidden_states" (config.py activation_offloading)
        b.from_key("trainer.activation_offloading", "activation_offloading", True)

    adapter = n.get("adapter")
    four_bit, eight_bit = bool(n.get("load_in_4bit")), bool(n.get("load_in_8bit"))
    method = {"lora": "lora", "qlora": "qlora"}.get(str(adapter), "full")
    if adapter is None:
        b.default("trainer.finetuning", "full", f"{PEFT} adapter=None (full fine-tuning)")
    else:
        b.from_key(
            "trainer.finetuning", "adapter", method if adapter in ("lora", "qlora") else adapter
        )
    if four_bit:
        # src/axolotl/loaders/model.py: bnb_4bit_quant_type nf4, bnb_4bit_use_double_quant True
        b.from_key("trainer.quantization", "load_in_4bit", "nf4-dq")
    elif eight_bit:
        b.from_key("trainer.quantization", "load_in_8bit", "int8")
    else:
        b.default("trainer.quantization", "none", f"{PEFT} load_in_4bit/load_in_8bit=False")
    if method in ("lora", "qlora"):
        if n.is_set("lora_r"):
            b.take("trainer.lora.rank", "lora_r", None, "")
        if n.is_set("lora_alpha"):
            b.take("trainer.lora.alpha", "lora_alpha", None, "")
        b.take("trainer.lora.dropout", "lora_dropout", 0.0, f"{PEFT} lora_dropout=0.0", float)
        if n.get("lora_target_linear"):
            b.from_key("trainer.lora.targets", "lora_target_linear", ["all-linear"])
        # lora_target_modules / lora_target_parameters: str | list[str]
        # (src/axolotl/utils/schemas/peft.py), a string taken as a one-name list by the LoRA
        # config builder, then LoraConfig(target_modules / target_parameters)
        names = {"lora_target_parameters": "trainer.lora.target_parameters"}
        if not n.get("lora_target_linear"):
            names = {"lora_target_modules": "trainer.lora.targets", **names}
        for key, field in names.items():
            if n.is_set(key):
                value = n.get(key)
                b.from_key(field, key, [value] if isinstance(value, str) else value)

    # bf16 'auto' -> True on a bf16 GPU (resolve_dtype in config/__init__.py); the model is
    # then loaded in bf16 (torch_dtype), as LitGPT's bf16-true.
    bf16, fp16 = n.get("bf16", "auto"), n.get("fp16")
    if fp16:
        b.from_key("trainer.precision", "fp16", "16-mixed")
    elif bf16 in (True, "auto", "full"):
        where = n.loc("bf16") or b.default_location(
            f"{SCHEMA} bf16='auto' -> resolve_dtype: bf16 on a bf16 GPU"
        )
        b.set("trainer.precision", "bf16-true", where)
    else:
        b.from_key("trainer.precision", "bf16", "32-true")
    fsdp_ckpt = _fsdp_activation_checkpointing(n)
    if fsdp_ckpt is not None and not n.get("gradient_checkpointing"):
        # src/axolotl/utils/trainer.py setup_fsdp_envs: fsdp_config.activation_checkpointing
        # -> FSDP_ACTIVATION_CHECKPOINTING=true, which accelerate's FSDP plugin applies to
        # every wrapped layer (the same saving as gradient_checkpointing).
        b.from_key("trainer.gradient_checkpointing", fsdp_ckpt, True)
    else:
        b.take(
            "trainer.gradient_checkpointing",
            "gradient_checkpointing",
            False,
            f"{SCHEMA} gradient_checkpointing=False",
            bool,
        )
    b.take(
        "trainer.optimizer",
        "optimizer",
        "adamw_torch_fused",
        f"{TRAINING} optimizer='adamw_torch_fused'",
        schema_optimizer,
    )
    if n.is_set("learning_rate"):
        b.take("trainer.learning_rate", "learning_rate", None, "", float)
    impl, impl_key = attention_impl(n)
    if impl_key:
        b.from_key("trainer.attention", impl_key, schema_attention(impl))
    else:
        b.default("trainer.attention", "sdpa", "transformers attn_implementation (sdpa)")
    ce = first_set(n.data, CROSS_ENTROPY)
    if ce is not None and n.get(ce):
        b.from_key("trainer.loss_chunking", ce, CROSS_ENTROPY[ce])
    elif "cut_cross_entropy" in listed(n) and n.get("cut_cross_entropy") is None:
        # integrations/cut_cross_entropy/args.py: cut_cross_entropy: Optional[bool] = True,
        # so listing the plugin turns it on: logits are never held in full.
        b.from_key("trainer.loss_chunking", "plugins", "fused")
    else:
        b.default("trainer.loss_chunking", "none", "transformers' loss over the full logits")
    if n.get("deepspeed"):
        b.from_key("trainer.strategy", "deepspeed", _deepspeed_strategy(n.get("deepspeed")))
        ds = deepspeed.load(n)  # e.g. deepspeed_configs/zero3_bf16_cpuoffload_all.json
        if ds is not None:
            deepspeed.apply_offload(b, *ds)
    elif n.get("fsdp") or n.get("fsdp_config"):
        b.from_key("trainer.strategy", "fsdp" if n.get("fsdp") else "fsdp_config", "fsdp")
        shard_group(b)
        _fsdp_offload(b)
    elif ep > 1:
        # pure EP runs under DDP, the experts left out of it (monkeypatch/accelerate/
        # parallelism_config.py _validate_accelerator; expert_parallel/shard.py)
        b.from_key("trainer.strategy", "expert_parallel_size", "ddp")
    else:
        b.default("trainer.strategy", "single", f"{NORMALIZE} (ddp when world_size > 1)")
    if n.is_set("seed"):
        b.take("seed", "seed", None, "")
    b.take("output_dir", "output_dir", "./model-out", f"{SCHEMA} output_dir", str)
    axolotl_data.apply(b)  # the first datasets entry, for --scan-data


_TO_NATIVE = {
    "data.max_seq_length": "sequence_len",
    "data.max_length": "sequence_len",
    "trainer.micro_batch_size": "micro_batch_size",
    "trainer.gradient_accumulation_steps": "gradient_accumulation_steps",
    "trainer.gradient_checkpointing": "gradient_checkpointing",
    "trainer.lora.rank": "lora_r",
    "trainer.lora.alpha": "lora_alpha",
    "trainer.learning_rate": "learning_rate",
    "trainer.devices": "world_size",
    "tokenizer.pad_token": "special_tokens.pad_token",
    "seed": "seed",
}


def to_native(path: str, value: str) -> str | None:
    if path == "data.truncation" and value == "true":
        return ""  # samples over the length never reach the model in this format
    if path == "trainer.optimizer":
        names = {"adamw": "adamw_torch_fused", "adamw_8bit": "adamw_bnb_8bit"}
        return f"optimizer={names.get(value, value)}"
    if path == "trainer.loss_chunking" and value == "chunked":
        return "chunked_cross_entropy=true"
    if path == "data.padding" and value in ("max_length", "longest"):
        return f"pad_to_sequence_len={'true' if value == 'max_length' else 'false'}"
    if path == "data.collator":
        return f"sample_packing={'true' if value == 'packed' else 'false'}"
    if path == "trainer.attention":
        # attn_implementation wins over the legacy flags (attention_impl above)
        impl = {"flash": "flash_attention_2"}.get(value, value)
        return f"attn_implementation={impl}"
    if path == "trainer.precision" and value == "16-mixed":
        return "bf16=false\nfp16=true"  # bf16 'auto' would pick bf16 on a bf16 GPU
    if path == "trainer.finetuning" and value in ("lora", "qlora"):
        return f"adapter={value}"  # the PEFT adapter (qlora: with load_in_4bit, below)
    if path == "trainer.quantization" and value in ("nf4", "nf4-dq"):
        # load_in_4bit loads nf4 with double quantization (src/axolotl/loaders/model.py)
        return "load_in_4bit=true"
    key = _TO_NATIVE.get(path)
    return f"{key}={value}" if key else None


# --- Axolotl's own refusals and silent traps ---------------------------------------------------


def conflict_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """validation.py check_fsdp_deepspeed, check_cross_entropy_conflicts, and the FSDP +
    8-bit optimizer checks (check_fsdp2_w_8bit_optimizer, check_fsdp_offload_w_8bit_optimizer)."""
    if native.get("deepspeed") and native.get("fsdp"):
        yield Finding(
            "axolotl-deepspeed-with-fsdp",
            "error",
            ("deepspeed", "fsdp"),
            'deepspeed and fsdp are both set: Axolotl refuses the config with "deepspeed and '
            'fsdp cannot be used together." (validation.py check_fsdp_deepspeed)',
            "keep one of them: remove fsdp (and fsdp_config) or remove deepspeed",
            fixes=(
                Fix(("~fsdp", "~fsdp_config"), "DeepSpeed only"),
                Fix(("~deepspeed",), "FSDP only"),
            ),
        )
    enabled = [k for k in CROSS_ENTROPY if native.get(k)]
    if len(enabled) > 1:
        yield Finding(
            "axolotl-cross-entropy-conflict",
            "error",
            tuple(enabled),
            f"{len(enabled)} cross-entropy replacements are enabled ({', '.join(enabled)}): "
            'Axolotl refuses the config with "Only one cross entropy optimization can be '
            'enabled at a time" (validation.py check_cross_entropy_conflicts)',
            f"keep one; e.g. keep {enabled[0]} and set the others to false",
            fixes=(Fix(tuple(f"{k}=false" for k in enabled[1:]), f"only {enabled[0]}"),),
        )
    fsdp_config = native.get("fsdp_config")
    optimizer = str(native.get("optimizer", ""))
    if fsdp_config and "8bit" in optimizer:
        inner = fsdp_config if isinstance(fsdp_config, dict) else {}
        # FSDP1 is what an unversioned fsdp_config gets (validation.py check_fsdp_version)
        version = str(native.get("fsdp_version", inner.get("fsdp_version", 1)))
        offload = bool(inner.get("offload_params") or inner.get("fsdp_offload_params"))
        fsdp2_bnb = version == "2" and optimizer in ("adamw_8bit", "adamw_bnb_8bit")
        if fsdp2_bnb or (offload and version != "2"):
            why = (
                f'"FSDP2 not compatible with {optimizer}, use `adamw_torch_8bit` instead" '
                "(validation.py check_fsdp2_w_8bit_optimizer: bitsandbytes 8-bit states fail "
                "with CUDA errors under FSDP2)"
                if fsdp2_bnb
                else f'"FSDP Offload not compatible with {optimizer}" (validation.py '
                "check_fsdp_offload_w_8bit_optimizer)"
            )
            fix = "adamw_torch_8bit" if fsdp2_bnb else "adamw_torch_fused"
            yield Finding(
                "axolotl-fsdp-8bit-optimizer",
                "error",
                ("optimizer", "fsdp_config"),
                f"FSDP with optimizer={optimizer}: Axolotl refuses it with {why}",
                f"use optimizer={fix}",
                fixes=(Fix((f"optimizer={fix}",), f"{fix} under FSDP"),),
            )


def packing_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """config.py check_sample_packing_without_attention: with a backend outside
    ATTN_IMPLS_SUPPORTING_PACKING + sdpa/eager, packed samples attend to each other (Axolotl
    only logs a warning)."""
    if not native.get("sample_packing"):
        return
    impl, key = attention_impl(native)
    if impl in PACKING_ATTENTION:
        return
    shown = f"attn_implementation={impl}" if impl else "no attention backend set"
    yield Finding(
        "axolotl-packing-attention",
        "warning",
        ("sample_packing", key or "attn_implementation"),
        f"sample_packing with {shown}: packed samples are not isolated, each attends to the "
        "samples packed before it (Axolotl logs 'does not handle cross-sample "
        "decontamination' and trains on; src/axolotl/utils/schemas/validation.py)",
        "set attn_implementation=flash_attention_2 (or sdpa / flex_attention), or turn "
        "sample_packing off",
        fixes=(
            Fix(("attn_implementation=flash_attention_2",), "FlashAttention 2 isolates samples"),
            Fix(("attn_implementation=sdpa",), "SDPA with the block-diagonal mask"),
        ),
    )


def profile(native: NativeConfig) -> Profile:
    return AXOLOTL


def unknown(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    return unknown_with_plugins(native, FORMAT)


FORMAT = Format(
    name="axolotl",
    label="Axolotl",
    framework="hf",
    keys=key_list("axolotl"),
    build=build,
    to_native=to_native,
    profile=profile,
    rules=(conflict_rules, packing_rules, positions_past_context, gptq_rules),
    unknown=unknown,
    unknown_severity="warning",
    unknown_behaviour="Axolotl's config model ignores keys it does not define, so the setting "
    "is silently dropped (src/axolotl/utils/schemas/config.py AxolotlInputConfig)",
)
