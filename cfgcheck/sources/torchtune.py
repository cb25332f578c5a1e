"""torchtune: recipe configs (``recipes/configs/**.yaml``, run as ``tune run RECIPE --config
FILE``) mapped onto cfgcheck's run config, without instantiating anything.

The model is the builder ``model._component_`` names; its shape comes from torchtune's own
builder definitions (``keys/torchtune.json``, generated from the source by
``scripts/gen_torchtune_builders.py``; see :mod:`cfgcheck.sources.torchtune_data`), or from the
checkpointer's ``checkpoint_dir/config.json`` for a builder torchtune does not ship. Defaults are
those of the recipes (pytorch/torchtune ``recipes/lora_finetune_single_device.py`` and
siblings), cited at each use; the recipe's own refusals are in
:mod:`cfgcheck.sources.torchtune_rules`.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.schema.run import SECTIONS
from cfgcheck.sources import torchtune_data as tt
from cfgcheck.sources import torchtune_versions as tv
from cfgcheck.sources.base import Builder, Format, NativeConfig
from cfgcheck.sources.model_ref import set_model
from cfgcheck.sources.names import schema_optimizer
from cfgcheck.sources.profiles import (
    TORCHTUNE,
    TORCHTUNE_NOT_SFT,
    TORCHTUNE_NOT_TRAINING,
    TORCHTUNE_UNCUT,
    TORCHTUNE_UNMODELLED_SAVINGS,
    TORCHTUNE_WORLD_UNKNOWN,
    Adjustment,
    Profile,
)
from cfgcheck.sources.reader import walk_keys

RECIPE = "recipes/lora_finetune_single_device.py"
# The launch command's process count, located at the `tune run` comment or the argument.
LAUNCH_PATH = "tune run --nproc_per_node"
PADDED_COLLATE = "torchtune.data.padded_collate_sft"
# torchtune's LoRA names of the attention projections (torchtune/modules/peft/lora.py
# LORA_ATTN_MODULES) -> the llama names cfgcheck's memory model reads them by.
LORA_ATTN = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
MLP = ("gate_proj", "up_proj", "down_proj")
# dtype -> precision: training.get_dtype (torchtune/training/precision.py) loads the weights
# in that dtype (no autocast); None is torch.float32.
DTYPE = {
    "bf16": "bf16-true",
    "fp32": "32-true",
    "fp64": "32-true",
    "fp16": "16-mixed",
    None: "32-true",
}
# Losses that never hold the full fp32 logits: CEWithChunkedOutputLoss upcasts one chunk of
# the chunked output at a time; LinearCrossEntropyLoss runs the output projection and the loss
# in chunks (torchtune/modules/loss/).
CHUNKED_LOSSES = ("CEWithChunkedOutputLoss", "LinearCrossEntropyLoss")


def _number(value: Any) -> Any:
    """YAML reads ``3e-4`` as text: a number where it is one, else as written (the schema
    reports it)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def component_name(native: NativeConfig, section: str) -> str | None:
    """``section._component_`` as a dotted path; a value that is not one is one line, exit 2
    (torchtune's ``_get_component_from_path`` takes a string)."""
    value = native.get(f"{section}._component_")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        where = native.loc(f"{section}._component_")
        raise ConfigLoadError(
            f"{where or native.file}: {section}._component_ must be a dotted path such as "
            f"torchtune.models.llama3_2.lora_llama3_2_1b, got {type(value).__name__} {value!r}"
        )
    return value


def check_components(native: NativeConfig) -> None:
    for key, value in walk_keys(native.data):
        if key.rpartition(".")[2] == "_component_" and not isinstance(value, str):
            component_name(native, key.rpartition(".")[0])


# The section that names the trained model: ``model``; the PPO recipe's ``policy_model``.
MODEL_KEYS = ("model", "policy_model")


def model_key(native: NativeConfig) -> str:
    for key in MODEL_KEYS:
        if isinstance(native.get(key), dict):
            return key
    raise ConfigLoadError(
        f"{native.file}: the torchtune config has no model section: set model._component_ to "
        "a builder such as torchtune.models.llama3_2.lora_llama3_2_1b"
    )


def _model(b: Builder) -> dict[str, Any]:
    """The model section from the builder's shape (or checkpoint_dir's config.json); returns
    the builder entry's signature defaults (LoRA rank, alpha, ... of that builder)."""
    n = b.native
    mk = model_key(n)
    path = component_name(n, mk)
    if path is None:
        raise ConfigLoadError(f"{n.loc(mk) or n.file}: {mk} has no _component_ (a builder)")
    kwargs = {k: v for k, v in n.get(mk).items() if k != "_component_"}
    stated = tv.resolve(n)
    version = stated.table
    entry = tt.builder(path, version)
    elsewhere = [v for v in tv.versions() if tt.builder(path, v) is not None]
    if entry is None and elsewhere and not stated.known:
        # a builder of another version, the version not stated: read with that version's
        # shape (torchtune_rules.component_rules warns which versions ship it)
        version = elsewhere[-1]
        entry = tt.builder(path, version)
    b.model_key = f"{mk}._component_"
    where = n.loc(b.model_key)
    if entry is not None and tt.decoder(entry):
        shape = tt.model_shape(path, entry, kwargs, version)
        if isinstance(shape, str):  # a component builder without every shape argument
            raise ConfigLoadError(f"{where or n.file}: {mk}._component_={path}: {shape}")
        for key, value in shape.items():
            if value is not None:
                b.set(f"model.{key}", value, where)
        sig = entry.get("signature") or {}
        return {"lora": bool(entry["lora"]), **dict(sig.get("defaults", {}))}
    folder = n.get("checkpointer.checkpoint_dir")
    # Only for a file on disk (the CLI, the hook): a service request's text never makes the
    # server look at its own folders (no existence oracle before the paths are confined).
    on_disk = n.origin is not None and isinstance(folder, str)
    if on_disk and (Path(str(folder)).expanduser() / "config.json").is_file():
        set_model(b, "checkpointer.checkpoint_dir", folder)
        return {"lora": "lora_attn_modules" in kwargs}
    if entry is not None:
        raise ConfigLoadError(
            f"{where or n.file}: {mk}._component_={path} builds no text decoder cfgcheck "
            f"models (family {entry['family']}: vision, mixture-of-experts or encoder), and "
            "checkpointer.checkpoint_dir has no config.json to read a shape from"
        )
    builders = tt.data(version)["builders"]
    known = [k for k in builders if k.startswith(path.rpartition(".")[0] + ".")]
    close = difflib.get_close_matches(path, known or list(builders), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    also = f"; {tv.span(elsewhere)} ships it" if elsewhere else ""
    raise ConfigLoadError(
        f"{where or n.file}: {mk}._component_={path} is not a model builder "
        f"{tv.label(version)} ships ({tt.source(version)}, {stated.origin}){also}{hint}, "
        "and checkpointer.checkpoint_dir has no config.json to read the shape from"
    )


def _lora(b: Builder, defaults: dict[str, Any]) -> None:
    n = b.native
    mk = model_key(n)
    model = n.get(mk)
    quantized = bool(model.get("quantize_base", defaults.get("quantize_base", False)))
    if not defaults.get("lora"):
        b.default("trainer.finetuning", "full", f"{model.get('_component_')} has no LoRA")
        b.default("trainer.quantization", "none", "a full builder is not quantized")
        return
    b.from_key("trainer.finetuning", f"{mk}._component_", "qlora" if quantized else "lora")
    # QLoRA: torchao's NF4Tensor (to_nf4, block 64, its scalers quantized again in blocks of
    # 256: double quantization), torchtune/modules/low_precision/nf4_linear.py
    if quantized:
        b.set(
            "trainer.quantization",
            "nf4-dq",
            n.loc(f"{mk}.quantize_base") or n.loc(f"{mk}._component_"),
        )
    else:
        b.default("trainer.quantization", "none", "quantize_base=False")
    builder = str(model.get("_component_"))
    for path, key in (("rank", "lora_rank"), ("alpha", "lora_alpha"), ("dropout", "lora_dropout")):
        b.take(f"trainer.lora.{path}", f"{mk}.{key}", defaults.get(key), f"{builder} {key}")
    modules = model.get("lora_attn_modules")
    targets = [LORA_ATTN[m] for m in modules or [] if isinstance(m, str) and m in LORA_ATTN]
    if model.get("apply_lora_to_mlp", defaults.get("apply_lora_to_mlp", False)):
        targets += MLP
    if model.get("apply_lora_to_output", defaults.get("apply_lora_to_output", False)):
        targets.append("lm_head")
    where = n.loc(f"{mk}.lora_attn_modules") or n.loc(f"{mk}._component_")
    b.set("trainer.lora.targets", targets or ["q_proj"], where)


def _data(b: Builder, packed: bool) -> None:
    n = b.native
    if n.is_set("tokenizer.max_seq_len"):
        # the model tokenizers cut each sample to max_seq_len (truncation_type="right")
        b.take("data.max_seq_length", "tokenizer.max_seq_len", None, "")
        b.from_key("data.truncation", "tokenizer.max_seq_len", True)
    else:
        why = (
            "tokenizer max_seq_len=None (samples are not cut; the model's max_seq_len is the limit)"
        )
        block = b.config["model"].get("block_size")
        if isinstance(block, int):  # the builder's max_seq_len, known already
            b.default("data.max_seq_length", block, why)
        else:  # a model folder's: known once the folder is read
            b.defer("data.max_seq_length", "model.block_size", why)
        b.default("data.truncation", False, "tokenizer max_seq_len=None")
    collate = n.get("collate_fn", PADDED_COLLATE)
    if packed:
        # _setup_data: padded_collate_packed for a PackedDataset, whose packs are padded to
        # max_seq_len (torchtune/datasets/_packed.py _pad_pack)
        b.from_key("data.collator", "dataset", "packed")
        b.from_key("data.padding", "dataset", "max_length")
    else:
        where = f"{RECIPE} _setup_data: collate_fn={PADDED_COLLATE} pads to the batch's longest"
        is_default = "default_collate" in str(collate)
        if n.is_set("collate_fn"):
            b.from_key("data.collator", "collate_fn", "default" if is_default else "padded")
        else:
            b.default("data.collator", "padded", where)
        b.default("data.padding", "longest", where)
    b.default("data.ignore_index", -100, "torchtune/data/_common.py CROSS_ENTROPY_IGNORE_IDX")


def is_packed(native: NativeConfig) -> bool:
    dataset = native.get("dataset")
    if isinstance(dataset, list):
        return any(isinstance(d, dict) and d.get("packed") for d in dataset)
    return bool(isinstance(dataset, dict) and dataset.get("packed"))


def build(b: Builder) -> None:
    n = b.native
    check_components(n)
    tt.interpolate(n)
    launch = tt.launch(n)
    recipe = recipe_of(n)
    b.default("trainer.framework", "torchtune", "(format of the file)")
    defaults = _model(b)
    _lora(b, defaults)

    dtype = n.get("dtype")
    b.set(
        "trainer.precision",
        DTYPE.get(dtype if isinstance(dtype, str) else None, "32-true"),
        n.loc("dtype") or b.default_location("training.get_dtype(None) = torch.float32"),
    )
    b.take("trainer.micro_batch_size", "batch_size", 1, f"{RECIPE}: cfg.batch_size")
    b.take(
        "trainer.gradient_accumulation_steps",
        "gradient_accumulation_steps",
        1,
        f"{RECIPE}: cfg.gradient_accumulation_steps",
    )
    distributed = "distributed" in recipe
    where = launch.where or b.default_location("tune run without --nproc_per_node (1)")
    b.set("trainer.devices", launch.nproc_per_node if distributed else 1, where)
    b.set("trainer.num_nodes", launch.nnodes if distributed else 1, where)
    world = launch.nproc_per_node * launch.nnodes
    # the distributed recipes shard with FSDP2 (training.shard_model, fully_shard)
    b.set("trainer.strategy", "fsdp" if distributed and world > 1 else "single", where)
    if distributed and world > 1 and n.get("fsdp_cpu_offload") is True:
        # training.shard_model(cpu_offload=cfg.fsdp_cpu_offload): FSDP2's CPUOffloadPolicy on
        # every sharded module (torchtune/training/_distributed.py l.551); the optimizer steps
        # the parameters on the CPU (recipes/full_finetune_distributed.py)
        b.from_key("trainer.offload.params", "fsdp_cpu_offload", "cpu")
        b.from_key("trainer.offload.optimizer", "fsdp_cpu_offload", "cpu")
    b.smap.set(LAUNCH_PATH, where, covering=False)

    opt = n.get("optimizer._component_", "torch.optim.AdamW")
    b.set(
        "trainer.optimizer",
        schema_optimizer(str(opt).rsplit(".", 1)[-1]),
        n.loc("optimizer._component_") or b.default_location("optimizer"),
    )
    b.take("trainer.learning_rate", "optimizer.lr", 1e-3, "torch.optim.AdamW lr=0.001", _number)
    loss = str(n.get("loss._component_", ""))
    chunked = any(name in loss for name in CHUNKED_LOSSES)
    if n.is_set("loss._component_"):
        b.from_key("trainer.loss_chunking", "loss._component_", "chunked" if chunked else "none")
    else:
        b.default("trainer.loss_chunking", "none", "no loss component")
    b.take(
        "trainer.gradient_checkpointing",
        "enable_activation_checkpointing",
        False,
        f"{RECIPE}: cfg.get('enable_activation_checkpointing', False)",
        bool,
    )
    # torchtune/modules/attention_utils.py sdpa_or_flex_attention: no mask for padded
    # batches (is_causal=True), so SDPA runs its flash kernel; packed batches use flex
    # attention's block mask (no dense mask either)
    # (SDPA's flash kernel takes 16-bit inputs only; fp32 runs its memory-efficient kernel)
    b.default(
        "trainer.attention",
        "flash" if dtype == "bf16" else "sdpa",
        "torchtune/modules/attention_utils.py (no mask)",
    )
    _data(b, is_packed(n))
    if n.is_set("seed"):
        b.take("seed", "seed", None, "")
    b.take("output_dir", "output_dir", "/tmp/torchtune", "output_dir", str)
    # torchtune's own keys under model. / tokenizer. (model.lora_rank, tokenizer.max_seq_len)
    # share their first part with cfgcheck's sections: locate them too.
    for key, location in n.where.items():
        if key.split(".")[0] in SECTIONS and key not in b.smap.entries:
            b.smap.set(key, location, covering=False)


_TO_NATIVE = {
    "data.max_seq_length": "tokenizer.max_seq_len",
    "data.max_length": "tokenizer.max_seq_len",
    "trainer.micro_batch_size": "batch_size",
    "trainer.gradient_accumulation_steps": "gradient_accumulation_steps",
    "trainer.gradient_checkpointing": "enable_activation_checkpointing",
    "trainer.lora.rank": "model.lora_rank",
    "trainer.lora.alpha": "model.lora_alpha",
    "trainer.learning_rate": "optimizer.lr",
    "seed": "seed",
}


def to_native(path: str, value: str) -> str | None:
    if path == "data.truncation" and value == "true":
        return ""  # the tokenizer cuts to tokenizer.max_seq_len once it is set
    if path == "data.collator" and value == "padded":
        return f"collate_fn={PADDED_COLLATE}"
    if path == "data.collator" and value == "packed":
        return "dataset.packed=true"
    if path == "trainer.precision":
        back = {"bf16-true": "bf16", "32-true": "fp32"}
        return f"dtype={back[value]}" if value in back else None
    if path == "trainer.loss_chunking" and value == "chunked":
        return "loss._component_=torchtune.modules.loss.LinearCrossEntropyLoss"
    key = _TO_NATIVE.get(path)
    return f"{key}={value}" if key else None


def recipe_of(native: NativeConfig) -> str:
    """The recipe (see :func:`torchtune_data.launch`), else the single-device fine-tuning
    recipe of the builder's kind (LoRA or full)."""
    recipe = tt.launch(native).recipe
    if recipe:
        return recipe
    model: dict[str, Any] = next(
        (native.get(k) for k in MODEL_KEYS if isinstance(native.get(k), dict)), {}
    )
    entry = tt.builder(str(model.get("_component_")), tt.version_of(native))
    lora = entry["lora"] if entry is not None else "lora_attn_modules" in model
    return "lora_finetune_single_device" if lora else "full_finetune_single_device"


def profile(native: NativeConfig) -> Profile:
    recipe = recipe_of(native)
    keys = tt.recipe_keys(recipe, tt.version_of(native))
    extra: list[Adjustment] = []
    if keys is not None and "optimizer" not in keys["keys"]:
        extra.append(TORCHTUNE_NOT_TRAINING)
    if any(method in recipe for method in ("dpo", "ppo", "grpo", "distillation")):
        extra.append(TORCHTUNE_NOT_SFT)
    savings = ("compile", "enable_activation_offloading", "optimizer_in_bwd")
    if any(native.get(key) is True for key in savings):
        extra.append(TORCHTUNE_UNMODELLED_SAVINGS)
    if "distributed" in recipe and not tt.launch(native).nproc_known:
        extra.append(TORCHTUNE_WORLD_UNKNOWN)
    if not native.is_set("tokenizer.max_seq_len") and not is_packed(native):
        extra.append(TORCHTUNE_UNCUT)
    return Profile(TORCHTUNE.name, (*TORCHTUNE.adjustments, *extra))


def _format() -> Format:
    from cfgcheck.sources.torchtune_rules import RULES

    return Format(
        name="torchtune",
        label="torchtune",
        framework="torchtune",
        keys=tt.all_recipe_keys(),
        build=build,
        to_native=to_native,
        profile=profile,
        rules=RULES,
        unknown_severity="warning",
        unknown_behaviour="torchtune's recipes read the keys they know from the config "
        "(cfg.key / cfg.get('key') in recipes/*.py) and never look at the others, so the "
        "setting is silently ignored",
    )


FORMAT = _format()
