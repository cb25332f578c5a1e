"""LLaMA-Factory v1: ``USE_V1=1 llamafactory-cli sft FILE`` YAML configs (``examples/v1/``)
mapped onto cfgcheck's run config.

v1 is a second trainer in the same package, picked by an environment variable, not by the
file (hiyouga/LLaMA-Factory at ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30,
``src/llamafactory/cli.py`` ``main``: ``is_env_enabled("USE_V1")`` imports ``v1.launcher``).
Its file has other keys than v0's (``model``, ``train_dataset``, ``micro_batch_size``,
``cutoff_len``, and plugin configs: dicts with a ``name``, ``dist_config``, ``peft_config``,
``quant_config``...): ``--from llamafactory`` reads a file with v1-only keys and no v0-only key
as v1 (:func:`is_v1`), ``--from llamafactory-v1`` or ``--framework-version v1`` says so.

Keys and defaults: ``keys/llamafactory_v1.json``, generated from the source
(scripts/gen_llamafactory_v1_keys.py): the fields of ``v1/config/*_args.py`` (parsed by
``HfArgumentParser(...).parse_dict(allow_extra_keys=False)``, ``v1/config/arg_parser.py``) and
of the plugin dataclasses each plugin parses its config into (``BasePlugin.parse_params``,
``v1/utils/plugin.py``: an unknown one raises). Each mapping below cites its source line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from cfgcheck.findings import Finding
from cfgcheck.sources.base import Builder, Format, NativeConfig
from cfgcheck.sources.llamafactory_files import project_path, read_json
from cfgcheck.sources.model_ref import set_model
from cfgcheck.sources.profiles import Adjustment, Profile
from cfgcheck.sources.unknown import key_list, unknown_keys

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

V1 = "src/llamafactory/v1"
TRAINING = f"{V1}/config/training_args.py TrainingArguments"
MODEL = f"{V1}/config/model_args.py ModelArguments"
TRAINER = f"{V1}/core/base_trainer.py"
# plugin configs parsed strictly into one dataclass per plugin name; the others are free-form
STRICT_PLUGINS = ("dist_config", "peft_config", "quant_config")
OPEN_PLUGINS = ("kernel_config", "init_config", "optim_config", "lr_scheduler_config")
NAME = "llamafactory-v1"
LABEL = "LLaMA-Factory v1"


@cache
def spec() -> dict[str, Any]:
    """keys/llamafactory_v1.json: the keys, their defaults and declarations, the plugins."""
    text = resources.files("cfgcheck.sources").joinpath("keys", "llamafactory_v1.json")
    data: dict[str, Any] = json.loads(text.read_text("utf-8"))
    return data


def default(key: str) -> Any:
    return spec()["keys"][key]["default"]


def declared(key: str) -> str:
    """``path:line Class`` of a top-level key."""
    return str(spec()["keys"][key]["where"])


def plugin(n: NativeConfig, key: str) -> dict[str, Any] | None:
    """A plugin config as ``get_plugin_config`` reads it (v1/config/arg_utils.py: a dict, or
    a JSON string from the command line); None when unset."""
    value = n.get(key)
    if isinstance(value, str) and value.startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def plugin_default(key: str, name: str, param: str) -> Any:
    fields = spec()["plugins"][key].get(name, {}).get("fields", {})
    return fields.get(param, {}).get("default")


def plugin_where(key: str, name: str, param: str) -> str:
    entry = spec()["plugins"][key].get(name, {})
    line = entry.get("fields", {}).get(param, {}).get("line")
    path, _, cls = str(entry.get("where", "")).partition(" ")
    return f"{path}:{line} {cls} {param}"


def is_v1(data: dict[str, Any]) -> bool:
    """Keys only v1 reads and none only v0 reads (both lists generated from the source)."""
    keys = set(data)
    v1 = set(spec()["keys"])
    v0 = key_list("llamafactory")
    return bool(keys & (v1 - v0)) and not keys & (v0 - v1)


def _size(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _distributed(b: Builder) -> None:
    """``dist_config`` (base_trainer.py ``_shard_model``: ``DistributedPlugin(name)``; None:
    DDP over more than one GPU), ``cp_size`` and ``dist_config.ep_size``."""
    n = b.native
    dist = plugin(n, "dist_config") or {}
    name = str(dist.get("name", ""))
    cp = _size(n.get("cp_size")) or 1
    if cp > 1:
        b.from_key("trainer.context_parallel", "cp_size", cp)
    ep = _size(dist.get("ep_size")) if name == "fsdpturbo" else None
    if ep is not None and ep > 1:
        # interface.py FSDPTurboParams.ep_size; fsdpturbo.py FSDPTurboParallelState.initialize:
        # experts on an (edp, efsdp, ep, cp) mesh, "dp_size must be divisible by ep_size"
        b.from_key("trainer.expert_parallel_size", "dist_config.ep_size", ep)
    world = max(ep or 1, 1) * cp
    if world > 1:
        # distributed/interface.py: dp_size = world // cp_size, and ep divides dp: the run has
        # at least ep x cp GPUs (the launcher runs torchrun over every visible GPU)
        key = "dist_config.ep_size" if (ep or 1) > 1 else "cp_size"
        b.from_key("trainer.devices", key, world)
    if name in ("fsdp2", "fsdpturbo"):
        # fsdp2.py FSDP2Engine: fully_shard over the dp mesh
        b.from_key("trainer.strategy", "dist_config.name", "fsdp")
    elif name == "deepspeed":
        level = _zero_stage(n, dist)
        strategy = "ddp" if level == 0 else f"zero{level}" if level else "zero3"
        b.from_key("trainer.strategy", "dist_config.config_file", strategy)
    else:
        b.default(
            "trainer.strategy",
            "single",
            f"{TRAINER} _shard_model: dist_config None (DistributedDataParallel over more GPUs)",
        )


def _zero_stage(n: NativeConfig, dist: dict[str, Any]) -> int | None:
    """The ZeRO stage of ``dist_config.config_file`` (read when the config is on disk)."""
    value = dist.get("config_file")
    if not isinstance(value, str) or not value or n.origin is None:
        return None
    path = project_path(n, "dist_config.config_file", value)
    if not path.is_file():
        return None
    config = read_json(n, "dist_config.config_file", path)
    zero = config.get("zero_optimization") if isinstance(config, dict) else None
    stage = zero.get("stage") if isinstance(zero, dict) else None
    return _size(stage)


def _bnb(param: str) -> Any:
    return plugin_default("quant_config", "bnb", param)


def _finetuning(b: Builder) -> None:
    n = b.native
    peft = plugin(n, "peft_config") or {}
    quant = plugin(n, "quant_config") or {}
    kind = str(peft.get("name", ""))
    bits = quant.get("quantization_bit")
    qname = str(quant.get("name", ""))
    if qname == "bnb" and bits is None:
        bits = 4  # quantization.py quantization_with_bnb: "default to 4-bit quantization"
    quantized = qname in ("bnb", "auto") and bits in (4, 8)
    if kind == "lora":
        method = "qlora" if quantized and bits == 4 else "lora"  # as v0: int8 is LoRA
        b.from_key("trainer.finetuning", "peft_config.name", method)
        for path, param, convert in (
            ("trainer.lora.rank", "r", int),
            ("trainer.lora.alpha", "lora_alpha", float),
            ("trainer.lora.dropout", "lora_dropout", float),
        ):
            b.take(
                path,
                f"peft_config.{param}",
                plugin_default("peft_config", "lora", param),
                plugin_where("peft_config", "lora", param),
                convert,
            )
        # peft.py _find_all_linear_modules: "all" -> every Linear but lm_head / output heads
        b.take(
            "trainer.lora.targets",
            "peft_config.target_modules",
            plugin_default("peft_config", "lora", "target_modules"),
            plugin_where("peft_config", "lora", "target_modules"),
            lambda v: ["all-linear"] if v == "all" else [v] if isinstance(v, str) else list(v),
        )
    elif kind == "freeze":  # trains whole layers: counted as full (an upper bound), as v0
        b.from_key("trainer.finetuning", "peft_config.name", "full")
    else:
        b.default("trainer.finetuning", "full", f"{MODEL} peft_config=None (every parameter)")
    if quantized:
        if bits == 8:
            q = "int8"
        else:  # BnbParams: quantization_type nf4, double_quantization True
            qtype = str(
                quant.get(
                    "quantization_type", plugin_default("quant_config", "bnb", "quantization_type")
                )
            )
            dq = quant.get(
                "double_quantization", plugin_default("quant_config", "bnb", "double_quantization")
            )
            q = f"{qtype}-dq" if dq and qtype == "nf4" else qtype
        b.from_key("trainer.quantization", "quant_config.name", q)
    else:
        b.default("trainer.quantization", "none", f"{MODEL} quant_config=None")


def _precision(b: Builder) -> None:
    """model_engine.py loads ``dtype="auto"`` (the checkpoint's: bf16 for today's models);
    ``bf16`` is read only by FSDP2 (fsdp2.py ``get_mp_policy``: param_dtype bf16, else fp32,
    the computation in fp32); without fsdp2 / fsdpturbo the model runs in its own dtype."""
    n = b.native
    name = str((plugin(n, "dist_config") or {}).get("name", ""))
    if name in ("fsdp2", "fsdpturbo"):
        b.take(
            "trainer.precision",
            "bf16",
            default("bf16"),
            declared("bf16"),
            lambda v: "bf16-true" if v else "32-true",
        )
    else:
        b.default("trainer.precision", "bf16-true", f"{V1}/core/model_engine.py dtype='auto'")


def build(b: Builder) -> None:
    n = b.native
    b.default("trainer.framework", "hf", f"{V1}/core/model_engine.py (transformers models)")
    if n.is_set("model"):
        set_model(b, "model", n.get("model"))
    else:
        b.model_key = "model"
        b.default("model.pretrained", default("model"), declared("model"))
    b.take("data.max_seq_length", "cutoff_len", default("cutoff_len"), declared("cutoff_len"))
    # core/utils/batching.py _collate_micro_batch: pad_and_truncate(micro_batch, cutoff_len)
    collation = f"{V1}/core/utils/collation.py pad_and_truncate"
    b.default("data.truncation", True, collation)
    b.default("data.padding", "longest", f"{collation}: min(longest, cutoff_len)")
    free = str(n.get("batching_strategy", "")) in ("padding_free", "dynamic_padding_free")
    if free:
        b.from_key("data.collator", "batching_strategy", "packed")
    else:
        b.default("data.collator", "padded", declared("batching_strategy") + " normal")
    b.take(
        "trainer.micro_batch_size",
        "micro_batch_size",
        default("micro_batch_size"),
        declared("micro_batch_size"),
    )
    _distributed(b)
    micro = _size(n.get("micro_batch_size")) or default("micro_batch_size")
    total = _size(n.get("global_batch_size"))
    if total is not None and micro:
        # core/utils/batching.py BatchGenerator: num_micro_batch = global_batch_size //
        # dp_size // micro_batch_size (dp_size = world // cp_size)
        dp = max(1, _size(b.config["trainer"].get("devices")) or 1) // max(
            1, _size(n.get("cp_size")) or 1
        )
        b.from_key(
            "trainer.gradient_accumulation_steps",
            "global_batch_size",
            max(1, total // max(1, dp * micro)),
        )
    else:
        b.default(
            "trainer.gradient_accumulation_steps",
            1,
            f"{V1}/core/utils/batching.py: global_batch_size None -> num_micro_batch = 1",
        )
    _finetuning(b)
    _precision(b)
    # base_trainer.py: gradient_checkpointing_enable({"use_reentrant": False})
    b.take(
        "trainer.gradient_checkpointing",
        "enable_activation_checkpointing",
        default("enable_activation_checkpointing"),
        declared("enable_activation_checkpointing"),
        bool,
    )
    attention = {"flash_attention_2": "flash", "eager": "eager"}
    b.take(
        "trainer.attention",
        "flash_attn",
        default("flash_attn"),
        declared("flash_attn"),
        lambda v: attention.get(str(v), "sdpa"),
    )
    optim = plugin(n, "optim_config")
    if optim is None:
        b.default("trainer.optimizer", "adamw", f"{TRAINER} _init_optimizer: torch.optim.AdamW")
    else:  # muon: Muon for the matrices, AdamW for the rest: counted as AdamW (two states)
        b.from_key("trainer.optimizer", "optim_config.name", "adamw")
    # base_trainer.py compute_log_probs: the model's logits, .float(), cross_entropy over all
    # of them (no labels passed: a fused linear cross-entropy never runs)
    b.default("trainer.loss_chunking", "none", f"{TRAINER} compute_log_probs: full logits")
    b.take(
        "trainer.learning_rate",
        "learning_rate",
        default("learning_rate"),
        declared("learning_rate"),
        float,
    )
    b.take("seed", "seed", default("seed"), declared("seed"))
    if n.is_set("output_dir"):
        b.take("output_dir", "output_dir", None, "", str)


def plugin_keys(native: NativeConfig) -> frozenset[str]:
    """Every key the file may set: the top-level fields, the fields of the dataclass of each
    strict plugin's ``name`` (every plugin's when the name is not one), free-form plugins."""
    keys = set(spec()["keys"])
    for key in STRICT_PLUGINS:
        found = plugin(native, key) or {}
        plugins = spec()["plugins"][key]
        names = [str(found["name"])] if str(found.get("name")) in plugins else list(plugins)
        keys |= {f"{key}.{f}" for name in names for f in plugins[name]["fields"]}
    return frozenset(keys)


# the plugin family each strict plugin config is parsed by (its class name in the error)
FAMILY = {
    "dist_config": "DistributedPlugin",
    "peft_config": "PeftPlugin",
    "quant_config": "QuantizationPlugin",
}


def unknown(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """Unknown keys, a strict plugin's judged against its own dataclass: ``ep_size`` under
    ``dist_config: {name: fsdp2}`` is refused (``FSDP2Params`` has no ``ep_size``)."""
    for f in unknown_keys(native, replace(FORMAT, keys=plugin_keys(native))):
        key, _, param = f.paths[0].partition(".")
        name = str((plugin(native, key) or {}).get("name"))
        entry = spec()["plugins"].get(key, {}).get(name)
        if not param or entry is None:
            yield f
            continue
        cls, fields = entry["where"].rpartition(" ")[2], sorted(entry["fields"])
        others = [
            n for n, e in spec()["plugins"][key].items() if param in e["fields"] and n != name
        ]
        message = (
            f"{LABEL}'s {key} plugin {name} ({cls}) has no {param} (value "
            f'{native.get(f.paths[0])!r}): {FAMILY[key]}.parse_params raises "ValueError: '
            f"Unknown params for {FAMILY[key]}.{cls}: ['{param}']. Expected: {fields}\" "
            f"(v1/utils/plugin.py) when the run starts"
        )
        hint = f"remove {f.paths[0]}" + (
            f", or set {key}.name to {' or '.join(others)}, whose parameters include it"
            if others
            else ""
        )
        yield replace(f, message=message, hint=hint)


def to_native(path: str, value: str) -> str | None:
    simple = {
        "data.max_seq_length": "cutoff_len",
        "data.max_length": "cutoff_len",
        "trainer.micro_batch_size": "micro_batch_size",
        "trainer.learning_rate": "learning_rate",
        "trainer.lora.rank": "peft_config.r",
        "trainer.lora.alpha": "peft_config.lora_alpha",
        "trainer.lora.dropout": "peft_config.lora_dropout",
        "trainer.context_parallel": "cp_size",
        "trainer.expert_parallel_size": "dist_config.ep_size",
        "seed": "seed",
    }
    if path == "data.truncation" and value == "true":
        return ""
    if path == "trainer.gradient_checkpointing":
        return f"enable_activation_checkpointing={value}"
    if path == "trainer.precision" and value in ("bf16-true", "32-true"):
        return f"bf16={'true' if value == 'bf16-true' else 'false'}"
    if path == "trainer.attention":
        return "flash_attn=" + {"flash": "flash_attention_2"}.get(value, value)
    key = simple.get(path)
    return f"{key}={value}" if key else None


def fsdpturbo_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """fsdpturbo shards through FSDPTurbo's expert-parallel adapter, which has a spec for a few
    model types only (fsdpturbo.py ``FSDPTurboFSDP2Engine.prepare_model`` calls
    ``prepare_model_ep``, whatever ``ep_size``: "No FSDPTurbo EP spec is registered for
    model_type=...")."""
    dist = plugin(native, "dist_config") or {}
    if run is None or str(dist.get("name")) != "fsdpturbo":
        return
    known = spec()["fsdpturbo_model_types"]
    arch = run.model.architecture
    if arch is None or arch in known:
        return
    where = next(iter(known.values())).rpartition(":")[0]
    yield Finding(
        "llamafactory-v1-fsdpturbo-model",
        "error",
        ("dist_config.name", "model.architecture"),
        f"dist_config.name=fsdpturbo with a {arch} model: LLaMA-Factory v1 refuses to start: "
        f'"ValueError: No FSDPTurbo EP spec is registered for model_type={arch}." ({where} '
        f"prepare_model_ep; specs for {', '.join(known)})",
        f"use dist_config.name=fsdp2 (no expert parallelism) for {arch}, or a "
        f"{' or '.join(known)} model",
    )


V1_PROFILE = Profile(
    LABEL,
    (
        Adjustment(
            "pad-token-missing",
            None,
            "LLaMA-Factory v1 pads input ids with 0 and labels with IGNORE_INDEX itself "
            "(v1/core/utils/collation.py pad_and_truncate), never through tokenizer.pad",
        ),
        Adjustment(
            "pad-is-eos",
            None,
            "LLaMA-Factory v1 pads labels with IGNORE_INDEX by position "
            "(v1/core/utils/collation.py pad_and_truncate), so a real eos keeps its label",
        ),
        Adjustment(
            "strategy-device-count",
            None,
            "llamafactory-cli takes the device count from the launcher (v1/launcher.py: torchrun "
            "over every visible GPU, NPROC_PER_NODE)",
        ),
    ),
)


FORMAT = Format(
    name=NAME,
    label=LABEL,
    framework="hf",
    keys=frozenset(spec()["keys"]),
    build=build,
    to_native=to_native,
    profile=lambda _: V1_PROFILE,
    unknown=unknown,
    rules=(fsdpturbo_rules,),
    unknown_severity="error",
    unknown_behaviour="USE_V1=1 llamafactory-cli refuses the file: HfArgumentParser.parse_dict("
    "args, allow_extra_keys=False) raises (src/llamafactory/v1/config/arg_parser.py get_args; "
    "only ALLOW_EXTRA_KEYS=1 lets it through), a plugin's parse_params 'Unknown params for ...' "
    "(v1/utils/plugin.py)",
    open_prefixes=OPEN_PLUGINS,
)
