"""LitGPT: ``config_hub/finetune/*.yaml`` files (and the same keys as CLI-style overrides,
``train.max_seq_length=3063``) mapped onto cfgcheck's run config.

Defaults are those of the finetune commands' ``setup()`` (Lightning-AI/litgpt at
26857050fe3ff627cd714fe92f5838f51a3d5efa, ``litgpt/finetune/lora.py``; ``full.py`` and
``adapter.py`` share them), read there and cited at each use below.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources.base import Builder, Format, NativeConfig
from cfgcheck.sources.litgpt_model import (
    PRETRAIN,
    checkpoint_ref,
    is_pretrain,
    named_config,
    pretrain_model,
    resolvable,
    shape_from_config,
)
from cfgcheck.sources.litgpt_versions import unknown_with_versions
from cfgcheck.sources.model_ref import set_model
from cfgcheck.sources.names import schema_optimizer
from cfgcheck.sources.profiles import LITGPT_FINETUNE, LITGPT_PRETRAIN, Profile
from cfgcheck.sources.unknown import key_list

if TYPE_CHECKING:
    from cfgcheck.schema.model import ModelConfig
    from cfgcheck.schema.run import RunConfig

SETUP = "litgpt/finetune/lora.py setup()"

# quantize values (setup()'s Literal) -> trainer.quantization.
QUANTIZE = {
    "bnb.nf4": "nf4",
    "bnb.nf4-dq": "nf4-dq",
    "bnb.fp4": "fp4",
    "bnb.fp4-dq": "fp4",
    "bnb.int8-training": "int8",
}
# LitGPT's LoRA switches -> the roles (llama names) of the layers they adapt (litgpt/lora.py:
# query, key, value of the fused qkv; projection = attention output; mlp = every MLP linear;
# head = lm_head). Once the model is known they become that architecture's module names
# (cfgcheck.memory.modules.block_linears: phi-2's dense/fc1/fc2, phi-3's fused qkv_proj...).
LORA_SWITCHES = {
    "lora_query": (True, ("q_proj",)),
    "lora_key": (False, ("k_proj",)),
    "lora_value": (True, ("v_proj",)),
    "lora_projection": (False, ("o_proj",)),
    "lora_mlp": (False, ("gate_proj", "up_proj", "down_proj")),
    "lora_head": (False, ("lm_head",)),
}


def optimizer_name(value: Any) -> str:
    """``optimizer: AdamW`` or ``{class_path: torch.optim.AdamW, init_args: ...}`` -> name."""
    if isinstance(value, dict):
        return str(value.get("class_path", "")).rsplit(".", 1)[-1]
    return str(value).rsplit(".", 1)[-1]


def _targets_by_architecture(b: Builder, model: ModelConfig) -> None:
    """The LoRA targets (roles) as the resolved architecture names its modules."""
    from cfgcheck.memory.modules import architecture_of, block_linears

    if architecture_of(model) is None:
        return
    roles = set(b.config["trainer"]["lora"]["targets"])
    names = [layer.name for layer in block_linears(model) if roles & set(layer.roles)]
    if "lm_head" in roles:
        names.append("lm_head")
    b.config["trainer"]["lora"]["targets"] = list(dict.fromkeys(names))


def _int(value: Any) -> Any:
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


def _devices(b: Builder, pretrain: bool) -> Any:
    """``devices``: an int, or ``auto``/-1 = torch.cuda.device_count() (litgpt/utils.py
    parse_devices), which only the machine knows: counted as one device, so the per-GPU
    estimate is the unsharded upper bound. pretrain.py defaults to "auto", finetune to 1."""
    n = b.native
    value = _int(n.get("devices", "auto" if pretrain else 1))
    if value in ("auto", -1):
        where = n.loc("devices") or b.default_location(f'{PRETRAIN}: devices="auto"')
        b.set("trainer.devices", 1, where)
        return 1
    return b.take("trainer.devices", "devices", 1, f"{SETUP}: devices=1", _int)


def build(b: Builder) -> None:
    n = b.native
    b.default("trainer.framework", "litgpt", "(format of the file)")
    pretrain = is_pretrain(n)
    if pretrain:
        pretrain_model(b)
    else:
        ref = n.get("checkpoint_dir")
        model = checkpoint_ref(str(ref)) if ref else None
        named = named_config(model) if model and not resolvable(model) else None
        if named is not None:
            # `litgpt download` writes model_config.yaml from Config.from_name of the Hub id
            # (litgpt/scripts/download.py), so LitGPT's table is the checkpoint's shape
            shape_from_config(b, "checkpoint_dir", named, str(named["name"]))
        else:
            set_model(b, "checkpoint_dir", model)
    cmd = PRETRAIN if pretrain else SETUP

    b.take(
        "trainer.precision",
        "precision",
        "bf16-mixed",
        f"{cmd}: precision=None -> get_default_supported_precision(training=True) "
        "(litgpt/utils.py) = bf16-mixed on a bf16 GPU",
    )
    quantize = n.get("quantize")
    if quantize is not None:
        b.from_key("trainer.quantization", "quantize", QUANTIZE.get(str(quantize), quantize))
    else:
        b.default("trainer.quantization", "none", f"{SETUP}: quantize=None")
    devices = _devices(b, pretrain)
    nodes = b.take("trainer.num_nodes", "num_nodes", 1, f"{cmd}: num_nodes=1", _int)

    # Fine-tuning method: LoRA keys mean the lora command; 4-bit weights under it are QLoRA.
    lora = any(n.get(k) is not None for k in ("lora_r", "lora_alpha", *LORA_SWITCHES))
    four_bit = str(quantize).startswith(("bnb.nf4", "bnb.fp4"))
    if lora:
        method = "qlora" if four_bit else "lora"
        b.from_key("trainer.finetuning", "quantize" if four_bit else "lora_r", method)
        b.take("trainer.lora.rank", "lora_r", 8, f"{SETUP}: lora_r=8")
        b.take("trainer.lora.alpha", "lora_alpha", 16, f"{SETUP}: lora_alpha=16")
        b.take("trainer.lora.dropout", "lora_dropout", 0.05, f"{SETUP}: lora_dropout=0.05")
        targets: list[str] = []
        for switch, (default, modules) in LORA_SWITCHES.items():
            value = n.get(switch)
            if default if value is None else bool(value):
                targets += modules
        b.default("trainer.lora.targets", targets, f"{SETUP}: lora_query/key/value/... switches")
        for switch in LORA_SWITCHES:
            if n.is_set(switch):
                b.smap.set("trainer.lora.targets", n.loc(switch) or b.default_location(SETUP), True)
        b.after_model.append(_targets_by_architecture)
    else:
        b.default("trainer.finetuning", "qlora" if four_bit else "full", "litgpt/finetune/full.py")

    # Batch: global / (devices * nodes) / micro, rounded down (litgpt/args.py TrainArgs
    # .batch_size and .gradient_accumulation_iters); the setup() defaults are 16 and 1.
    # pretrain.py setup(): TrainArgs(global_batch_size=512, micro_batch_size=4, ...)
    micro_default, global_default = (4, 512) if pretrain else (1, 16)
    micro = b.take(
        "trainer.micro_batch_size",
        "train.micro_batch_size",
        micro_default,
        f"{cmd}: micro_batch_size={micro_default}",
    )
    global_batch = b.take(
        "trainer.global_batch_size",
        "train.global_batch_size",
        global_default,
        f"{cmd}: global_batch_size={global_default}",
    )
    world = devices * nodes if isinstance(devices, int) and isinstance(nodes, int) else 1
    if isinstance(micro, int) and isinstance(global_batch, int) and world > 0 and micro > 0:
        accumulation = max(1, global_batch // world // micro)
        b.set(
            "trainer.gradient_accumulation_steps",
            accumulation,
            n.loc("train.global_batch_size")
            or b.default_location(
                "litgpt/args.py TrainArgs.gradient_accumulation_iters: "
                "global_batch_size // devices // micro_batch_size"
            ),
        )
    if pretrain and world > 1 and isinstance(nodes, int) and nodes > 1:
        # FSDPStrategy(sharding_strategy="HYBRID_SHARD"): shards within a node, replicas across
        b.default("trainer.shard_group", devices, f"{PRETRAIN}: sharding_strategy='HYBRID_SHARD'")
    b.default(
        "trainer.strategy",
        "fsdp" if world > 1 else "single",
        f"{PRETRAIN}: FSDPStrategy(sharding_strategy='HYBRID_SHARD') when devices * num_nodes > 1"
        if pretrain
        else f"{SETUP}: ModelParallelStrategy (data-parallel FSDP) when devices * num_nodes > 1",
    )

    # Optimizer: a name or a jsonargparse class_path; setup() default "AdamW" with torch's lr.
    opt = n.get("optimizer", "AdamW")
    b.set(
        "trainer.optimizer",
        schema_optimizer(optimizer_name(opt)),
        n.loc("optimizer") or b.default_location(f'{SETUP}: optimizer="AdamW"'),
    )
    # LitGPT v0.3.x had no optimizer: train.learning_rate (TrainArgs, litgpt/args.py at v0.3.1)
    b.take(
        "trainer.learning_rate",
        "train.learning_rate" if n.is_set("train.learning_rate") else "optimizer.init_args.lr",
        1e-3,
        f'{SETUP}: optimizer="AdamW" -> torch.optim.AdamW(lr=0.001)',
        float,
    )

    # Sequence length: SFTDataset cuts samples to train.max_seq_length (litgpt/data/base.py);
    # unset, samples are not cut and the model's block is the limit.
    if n.get("train.max_seq_length") is not None:
        b.take("data.max_seq_length", "train.max_seq_length", None, "")
        b.from_key("data.truncation", "train.max_seq_length", True)
    else:
        b.defer(
            "data.max_seq_length",
            "model.block_size",
            f"{PRETRAIN}: train.max_seq_length=None -> model.max_seq_length = block_size "
            "(every chunk is the block long)"
            if pretrain
            else f"{SETUP}: train.max_seq_length=None (samples are not cut; the block is "
            "the limit)",
        )
        b.default("data.truncation", pretrain, f"{cmd}: train.max_seq_length=None")
    collate = "litgpt/data/base.py get_sft_collate_fn: pads to the longest sample of the batch"
    b.default("data.padding", "longest", collate)
    b.default("data.collator", "padded", collate)
    b.take(
        "data.ignore_index",
        "data.init_args.ignore_index",
        -100,
        "litgpt/data/alpaca.py Alpaca.ignore_index=-100",
    )
    if pretrain:
        b.default(
            "trainer.loss_chunking",
            "none",
            f"{PRETRAIN} fit(): logits = model(input_ids) holds the full logits "
            "(chunked_cross_entropy chunks only the loss)",
        )
    else:
        b.default(
            "trainer.loss_chunking",
            "chunked",
            "litgpt/finetune/lora.py fit(): model(input_ids, lm_head_chunk_size=128) and "
            "chunked_cross_entropy",
        )
    b.default(
        "trainer.attention",
        "sdpa",
        "litgpt/model.py CausalSelfAttention: torch.nn.functional.scaled_dot_product_attention",
    )
    # No key switches it: the finetune commands checkpoint every Block when they shard, that
    # is with devices * num_nodes > 1 (full.py FSDPStrategy(activation_checkpointing_policy=
    # {Block}); lora.py parallelize_fn(activation_checkpointing=True)), and never on one GPU.
    b.default(
        "trainer.gradient_checkpointing",
        world > 1 and not pretrain,
        f"{PRETRAIN}: FSDPStrategy without activation_checkpointing_policy, none"
        if pretrain
        else f"{SETUP}: activation checkpointing of every Block when devices * num_nodes > 1 "
        "(full.py FSDPStrategy, lora.py parallelize_fn), none on one device",
    )
    seed, out = (42, "out/pretrain") if pretrain else (1337, "out/finetune/lora")
    b.take("seed", "seed", seed, f"{cmd}: seed={seed}")
    b.take("output_dir", "out_dir", out, f"{cmd}: out_dir", str)


_TO_NATIVE = {
    "data.max_seq_length": "train.max_seq_length",
    "data.max_length": "train.max_seq_length",
    "trainer.micro_batch_size": "train.micro_batch_size",
    "trainer.global_batch_size": "train.global_batch_size",
    "trainer.devices": "devices",
    "trainer.num_nodes": "num_nodes",
    "trainer.precision": "precision",
    "trainer.lora.rank": "lora_r",
    "trainer.lora.alpha": "lora_alpha",
    "trainer.learning_rate": "optimizer.init_args.lr",
    "seed": "seed",
}


def to_native(path: str, value: str) -> str | None:
    if path == "data.truncation" and value == "true":
        return ""  # samples over the length never reach the model in this format
    if path == "trainer.gradient_accumulation_steps":
        # LitGPT derives it: global_batch_size // devices // micro_batch_size (litgpt/args.py),
        # so a fix that trades micro batch for accumulation is its micro batch change alone.
        return ""
    if path == "trainer.strategy" and value == "fsdp":
        return ""  # devices * num_nodes > 1 shards with FSDP by itself (setup())
    if path == "trainer.quantization":
        back = {v: k for k, v in QUANTIZE.items() if k != "bnb.fp4-dq"}
        return (
            "quantize=null"
            if value == "none"
            else f"quantize={back[value]}"
            if value in back
            else None
        )
    key = _TO_NATIVE.get(path)
    return f"{key}={value}" if key else None


# --- LitGPT's own refusals (each raised in setup() before training starts) ---------------------


def _finding(
    rule: str, paths: tuple[str, ...], message: str, hint: str, fixes: tuple[Fix, ...]
) -> Finding:
    return Finding(rule, "error", paths, message, hint, fixes=fixes)


def quantize_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """lora.py setup(): quantize with '*-mixed' precision, with several devices, and
    (instantiate_bnb_optimizer in litgpt/utils.py) with an optimizer other than AdamW."""
    quantize = native.get("quantize")
    if quantize is None:
        return
    precision = native.get("precision") or "bf16-mixed"
    if "mixed" in str(precision):
        implicit = "" if native.is_set("precision") else " (the default when precision is unset)"
        yield _finding(
            "litgpt-quantize-mixed-precision",
            ("quantize", "precision"),
            f"quantize={quantize} with precision={precision}{implicit}: LitGPT refuses it with "
            '"ValueError: Quantization and mixed precision is not supported." '
            "(litgpt/finetune/lora.py setup())",
            "set precision=bf16-true (or 16-true / 32-true) with quantize",
            (Fix(("precision=bf16-true",), "quantized weights with bf16-true precision"),),
        )
    devices, nodes = native.get("devices", 1), native.get("num_nodes", 1)
    sizes = [_int(devices), _int(nodes)]
    if all(isinstance(v, int) for v in sizes) and sizes[0] * sizes[1] > 1:
        yield _finding(
            "litgpt-quantize-multi-device",
            ("quantize", "devices", "num_nodes"),
            f"quantize={quantize} on devices={devices} x num_nodes={nodes}: LitGPT raises "
            '"NotImplementedError: Quantization is currently not supported for multi-GPU '
            'training" (litgpt/finetune/lora.py setup())',
            "train quantized on one device (devices=1 num_nodes=1), or drop quantize",
            (
                Fix(("devices=1", "num_nodes=1"), "one device"),
                Fix(("quantize=null",), "no quantization"),
            ),
        )
    name = optimizer_name(native.get("optimizer", "AdamW"))
    if "AdamW" not in name:
        yield _finding(
            "litgpt-quantize-optimizer",
            ("quantize", "optimizer"),
            f'quantize={quantize} with optimizer {name}: LitGPT raises "ValueError: The chosen '
            'quantization format only supports the AdamW optimizer." (litgpt/utils.py '
            "instantiate_bnb_optimizer; it trains with bitsandbytes PagedAdamW)",
            "use optimizer=AdamW with quantize",
            (Fix(("optimizer=AdamW",), "AdamW (LitGPT runs bitsandbytes PagedAdamW)"),),
        )


def batch_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """litgpt/args.py TrainArgs.batch_size / gradient_accumulation_iters assert the per-rank
    batch and the accumulation are at least 1."""
    devices, nodes = _int(native.get("devices", 1)), _int(native.get("num_nodes", 1))
    micro = native.get("train.micro_batch_size", 1)
    global_batch = native.get("train.global_batch_size", 16)
    if not all(isinstance(v, int) and v > 0 for v in (devices, nodes, micro, global_batch)):
        return
    if global_batch // (devices * nodes) // micro == 0:
        need = micro * devices * nodes
        yield _finding(
            "litgpt-batch-too-small",
            ("train.global_batch_size", "train.micro_batch_size", "devices"),
            f"train.global_batch_size={global_batch} is below micro_batch_size={micro} x "
            f"devices={devices} x num_nodes={nodes}: LitGPT stops on an AssertionError in "
            "TrainArgs.gradient_accumulation_iters (litgpt/args.py)",
            f"raise train.global_batch_size to at least {need}",
            (Fix((f"train.global_batch_size={need}",), "one micro batch per device per step"),),
        )


def unknown(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    return unknown_with_versions(native, FORMAT)


def profile(native: NativeConfig) -> Profile:
    return LITGPT_PRETRAIN if is_pretrain(native) else LITGPT_FINETUNE


FORMAT = Format(
    name="litgpt",
    label="LitGPT",
    framework="litgpt",
    keys=key_list("litgpt"),
    build=build,
    to_native=to_native,
    profile=profile,
    rules=(quantize_rules, batch_rules),
    unknown=unknown,
    unknown_severity="error",
    unknown_behaviour="LitGPT's command line (jsonargparse) refuses a config file with a key "
    "setup() does not take",
    open_prefixes=("data", "optimizer", "log.metadata", "model_config"),
)
