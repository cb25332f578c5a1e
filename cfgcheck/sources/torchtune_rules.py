"""torchtune's own refusals and silent traps, each quoting the error its code raises
(pytorch/torchtune main at bd2a0fc7 and the releases 0.5.0, 0.6.0, 0.6.1: keys/torchtune.json's
``checks`` list where each message lives in each version; the messages are reproduced with the
installed torchtune's and torch's own code in tests/sources/test_torchtune_ground_truth.py).
What differs between versions: :mod:`cfgcheck.sources.torchtune_version_rules`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources import torchtune_data as tt
from cfgcheck.sources import torchtune_versions as tv
from cfgcheck.sources.base import NativeConfig, NativeRule
from cfgcheck.sources.reader import walk_keys
from cfgcheck.sources.torchtune import (
    LAUNCH_PATH,
    LORA_ATTN,
    MODEL_KEYS,
    PADDED_COLLATE,
    is_packed,
    recipe_of,
)
from cfgcheck.sources.torchtune_version_rules import (
    instantiation_error,
    other_version,
    params_of,
    version_key_rules,
)

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

# What a recipe passes a component positionally besides the config's keywords
# (recipes/lora_finetune_single_device.py: config.instantiate(cfg_dataset, self._tokenizer),
# config.instantiate(cfg_optimizer, model.parameters()), config.instantiate(cfg_lr_scheduler,
# optimizer, num_training_steps=..., last_epoch=...); recipes/full_finetune_distributed.py:
# config.instantiate(self.tp_plan, model=model, ...)).
PASSED = {
    "tensor_parallel_plan": ("model",),
    "dataset": ("tokenizer",),
    "dataset_val": ("tokenizer",),
    "optimizer": ("params",),
    "lr_scheduler": ("optimizer", "num_training_steps", "last_epoch"),
}


# torchtune/training/precision.py PRECISION_STR_TO_DTYPE
DTYPES = ("fp16", "bf16", "fp32", "fp64")


def _error(rule: str, paths: tuple[str, ...], message: str, hint: str, *fixes: Fix) -> Finding:
    return Finding(rule, "error", paths, message, hint, fixes=fixes)


def _components(native: NativeConfig) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``{_component_: ...}`` node: (its dotted key, the node)."""
    for key, value in walk_keys(native.data):
        if isinstance(value, dict) and isinstance(value.get("_component_"), str):
            yield key, value
    for key, value in native.data.items():
        if isinstance(value, list):  # dataset: [ {...}, {...} ]
            for i, item in enumerate(value):
                if isinstance(item, dict) and isinstance(item.get("_component_"), str):
                    yield f"{key}.{i}", item


def component_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """config.instantiate(node) calls ``_component_(*args, **rest_of_node)``
    (torchtune/config/_instantiate.py _create_component): a key the callable does not take is
    "TypeError: f() got an unexpected keyword argument 'x'", a missing required one "TypeError:
    f() missing 1 required positional argument: 'x'", a path torchtune does not have
    "InstantiationError: Error loading '...'"."""
    version = tv.resolve(native)
    for key, node in _components(native):
        path = str(node["_component_"])
        section = key.split(".")[0]
        if not path.startswith("torchtune."):
            continue  # torch.optim.AdamW, bitsandbytes...: not torchtune's to check
        sig = tt.component(path, version.table)
        name = path.rsplit(".", 1)[-1]
        shown = f"{name}.__init__()" if sig and sig.get("kind") == "class" else f"{name}()"
        if sig is None:
            elsewhere = [v for v in tv.versions() if tt.component(path, v) is not None]
            if elsewhere:
                yield other_version(key, path, version, elsewhere)
                if version.known:
                    continue
                sig = tt.component(path, elsewhere[-1])
                if sig is None or key in MODEL_KEYS:
                    continue
            elif key in MODEL_KEYS:
                continue  # a builder torchtune does not ship, read from config.json
            else:
                module = path.rpartition(".")[0]
                components = tt.data(version.table)["components"]
                known = [k for k in components if k.startswith(module + ".")]
                close = difflib.get_close_matches(path, known, n=1, cutoff=0.6)
                use = [Fix((f"{key}._component_={c}",), f"use {c}") for c in close]
                yield _error(
                    "torchtune-component-unknown",
                    (f"{key}._component_",),
                    f"{key}._component_={path}: no torchtune version has such a component "
                    f"({version.label}: {tt.source(version.table)}), so config.instantiate "
                    f'fails with "InstantiationError: {instantiation_error(path, version.table)}"',
                    f"did you mean {close[0]}?" if close else "name a torchtune component",
                    *use,
                )
                continue
        if "params" not in sig:
            continue  # torchao's quantizers, classes without their own __init__: unchecked
        params = list(sig["params"])
        given = [k for k in node if k != "_component_"]
        if not sig.get("var_kwargs"):
            for arg in given:
                if arg in params:
                    continue
                other = [v for v in tv.versions() if arg in params_of(path, v)]
                if other and not version.known:
                    yield Finding(
                        "torchtune-unexpected-argument",
                        "warning",
                        (f"{key}.{arg}",),
                        f"{key}.{arg}: {path} takes {arg} in {tv.span(other)}, not in "
                        f"{version.label} ({version.origin}): with a torchtune that lacks it "
                        f'config.instantiate fails with "TypeError: {shown} got an unexpected '
                        f"keyword argument '{arg}'\"",
                        "state the version the run uses (`# requires: torchtune==X` or "
                        f"--framework-version), or drop {key}.{arg}",
                    )
                    continue
                also = f" ({tv.span(other)} takes it)" if other else ""
                close = difflib.get_close_matches(arg, params, n=1, cutoff=0.7)
                value = node[arg]
                fixes = (
                    (
                        Fix(
                            (f"~{key}.{arg}", f"{key}.{close[0]}={_yaml(value)}"),
                            f"spell it {close[0]}",
                        ),
                    )
                    if close and not isinstance(value, dict | list)
                    else (Fix((f"~{key}.{arg}",), f"drop {arg}"),)
                )
                yield _error(
                    "torchtune-unexpected-argument",
                    (f"{key}.{arg}",),
                    f"{key}.{arg}: {path} of {version.label} does not take {arg}{also}, and "
                    "config.instantiate passes "
                    f'every key of {key} to it: "TypeError: {shown} got an unexpected keyword '
                    f"argument '{arg}'\" before training starts (torchtune/config/"
                    "_instantiate.py)",
                    f"did you mean {close[0]}?" if close else f"remove {key}.{arg}",
                    *fixes,
                )
        passed = PASSED.get(section, ())
        missing = [r for r in sig.get("required", []) if r not in given and r not in passed]
        kwonly = set(sig.get("kwonly", []))
        # Python names the positional ones first (ceval.c missing_arguments)
        positional = [m for m in missing if m not in kwonly]
        group, kind = (positional, "positional") if positional else (missing, "keyword-only")
        if missing:
            yield _error(
                "torchtune-missing-argument",
                (f"{key}._component_",),
                f'{key}: {path} needs {", ".join(missing)}: "TypeError: {shown} missing '
                f"{len(group)} required {kind} argument{'s' if len(group) > 1 else ''}: "
                f'{_names(group)}"',
                f"set {', '.join(f'{key}.{m}' for m in missing)}",
            )


def _names(names: list[str]) -> str:
    """Python's list of missing arguments: 'a', 'a' and 'b', 'a', 'b', and 'c'."""
    quoted = [repr(n) for n in names]
    if len(quoted) <= 2:
        return " and ".join(quoted)
    return ", ".join(quoted[:-1]) + ", and " + quoted[-1]


def _and(items: list[str]) -> str:
    return " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]


def _yaml(value: Any) -> str:
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


def missing_key_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """Keys the recipe reads as ``cfg.key`` (no default): OmegaConf raises
    "ConfigAttributeError: Missing key <key>" when the config lacks them."""
    recipe = recipe_of(native)
    version = tv.resolve(native)
    keys = tt.recipe_keys(recipe, version.table)
    if keys is None:
        return
    has = {v: tt.recipe_keys(recipe, v) for v in tv.versions()}
    for key in keys["required"]:
        if key in native.data:
            continue
        where = [v for v, k in has.items() if k is not None and key in k["required"]]
        everywhere = len(where) == sum(k is not None for k in has.values())
        error = f'"omegaconf.errors.ConfigAttributeError: Missing key {key}" (recipes/{recipe}.py)'
        if version.known or everywhere:
            yield _error(
                "torchtune-missing-key",
                (key,),
                f"recipe {recipe} of {version.label} ({version.origin}) reads cfg.{key}, "
                f"which this config does not set: {error}",
                f"set {key}",
            )
        else:
            yield Finding(
                "torchtune-missing-key",
                "warning",
                (key,),
                f"recipe {recipe} reads cfg.{key} in {tv.span(where)}, and this config does "
                f"not set it ({version.label} read, {version.origin}): with those versions "
                f"{error}; the others do not read it",
                f"set {key}, or state the version (`# requires: torchtune==X`)",
            )
    model = native.get("model")
    if not isinstance(model, dict):
        return
    # a required builder argument is config.instantiate's TypeError first (component_rules)
    builder_sig = tt.component(str(model.get("_component_")), version.table) or {}
    for key in keys.get("model_required", []):
        if key not in model and key not in builder_sig.get("required", []):
            yield _error(
                "torchtune-missing-key",
                ("model._component_",),
                f"recipe {recipe} reads cfg_model.{key} in _setup_model, and model has no "
                f'{key}: "omegaconf.errors.ConfigAttributeError: Missing key {key}"'
                + (
                    f" ({model.get('_component_')} is not a LoRA builder; {recipe} needs one "
                    "such as lora_<model>)"
                    if "lora_attn_modules" not in model
                    else ""
                ),
                f"set model.{key}",
            )


def collate_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """_setup_data (recipes/lora_finetune_single_device.py) calls the collate as
    ``partial(collate_fn, padding_idx=tokenizer.pad_id, ignore_idx=loss_fn.ignore_index)``
    unless the dataset is packed, and refuses a left-padding one."""
    collate = native.get("collate_fn")
    if collate is None:
        return
    text = str(collate)
    # packed or not: _setup_data refuses left_pad_sequence before it looks at packing
    # (bd2a0fc7 recipes/lora_finetune_single_device.py:536; 0.6.1: :546)
    if is_packed(native) and "left_pad_sequence" not in text:
        return
    if "left_pad_sequence" in text:
        yield _error(
            "torchtune-collate",
            ("collate_fn",),
            f'collate_fn={text}: the recipe raises "RuntimeError: left_pad_sequence collator '
            'is only for inference."',
            f"use collate_fn={PADDED_COLLATE}",
            Fix((f"collate_fn={PADDED_COLLATE}",), "pad each batch to its longest sample"),
        )
    elif "default_collate" in text:
        batch = native.get("batch_size", 1)
        ragged = (
            f"; and even called without them, default_collate stacks torchtune's unpadded "
            f"token lists as they are, so with batch_size={batch} the first batch of samples "
            'of different lengths fails with "RuntimeError: each element in list of batch '
            'should be of equal size"'
            if isinstance(batch, int) and batch > 1
            else ""
        )
        yield _error(
            "torchtune-collate",
            ("collate_fn", "batch_size"),
            f"collate_fn={text}: the recipe calls it as partial(collate_fn, padding_idx=..., "
            'ignore_idx=...), and the first batch fails with "TypeError: default_collate() '
            f"got an unexpected keyword argument 'padding_idx'\"{ragged}",
            f"use torchtune's collate_fn={PADDED_COLLATE} (pads each batch to its longest "
            "sample), or dataset.packed=true",
            Fix((f"collate_fn={PADDED_COLLATE}",), "pad each batch to its longest sample"),
            Fix(("~collate_fn",), f"the recipe's default, {PADDED_COLLATE}"),
        )


def max_seq_len_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """tokenizer.max_seq_len against the model's max_seq_len (TransformerDecoder.forward,
    torchtune/modules/transformer.py _validate_inputs); packing needs a max_seq_len
    (torchtune/datasets/_sft.py and siblings)."""
    limit = native.get("tokenizer.max_seq_len")
    if is_packed(native) and limit is None:
        yield _error(
            "torchtune-packed-max-seq-len",
            ("dataset.packed", "tokenizer.max_seq_len"),
            "dataset.packed=true with tokenizer.max_seq_len unset: the dataset builder raises "
            '"ValueError: PackedDataset requires a max_seq_len to be set on the tokenizer."',
            "set tokenizer.max_seq_len (the pack length), or dataset.packed=false",
            *(
                (Fix((f"tokenizer.max_seq_len={run.model.block_size}",), "packs of the context"),)
                if run is not None and run.model.block_size <= 8192
                else (Fix(("tokenizer.max_seq_len=4096",), "packs of 4096 tokens"),)
            ),
            Fix(("dataset.packed=false",), "no packing"),
        )
    if run is not None and limit is None and not is_packed(native):
        # No cut: torchtune's tokenizers truncate only when max_seq_len is set
        # (torchtune/modules/transforms/tokenizers/_utils.py truncate, called from
        # tokenize_messages), and TransformerDecoder._validate_inputs (torchtune/modules/
        # transformer.py) refuses a batch longer than the model's max_seq_len.
        block = run.model.block_size
        yield Finding(
            "torchtune-max-seq-len",
            "warning",
            ("tokenizer.max_seq_len",),
            f"tokenizer.max_seq_len is unset, so torchtune cuts no sample: a batch whose "
            f"longest sample is above the max_seq_len={block} of "
            f"{native.get('model._component_')} fails in TransformerDecoder.forward with "
            f'"ValueError: seq_len (<length>) of input tensor should be smaller than '
            f'max_seq_len ({block})" (check your data with `cfgcheck data`)',
            f"set tokenizer.max_seq_len<={block}",
            fixes=(Fix((f"tokenizer.max_seq_len={block}",), f"cut samples to {block}"),),
        )
    if run is None or not isinstance(limit, int):
        return
    block = run.model.block_size
    if limit > block:
        model = native.get("model._component_")
        yield _error(
            "torchtune-max-seq-len",
            ("tokenizer.max_seq_len", "model._component_"),
            f"tokenizer.max_seq_len={limit} is above the max_seq_len={block} that {model} "
            f"builds: the tokenizer keeps samples up to {limit} tokens, and the first batch "
            f'longer than {block} fails in TransformerDecoder.forward with "ValueError: '
            f'seq_len ({limit}) of input tensor should be smaller than max_seq_len ({block})"',
            f"set tokenizer.max_seq_len<={block}",
            Fix((f"tokenizer.max_seq_len={block}",), f"cut samples to the model's {block}"),
        )


def lora_module_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """lora_attn_modules in torchtune's names (LORA_ATTN_MODULES: q_proj, k_proj, v_proj,
    output_proj). The builders test ``"q_proj" in lora_modules`` and so on, so another name is
    silently ignored; an empty list raises "Must pass one or more of ..."; apply_lora_to_output
    on a tied output raises in the llama3.2 builders."""
    model = native.get("model")
    if not isinstance(model, dict) or "lora_attn_modules" not in model:
        return
    modules = model.get("lora_attn_modules")
    if not isinstance(modules, list):
        return
    known = list(LORA_ATTN)
    unknown = [str(m) for m in modules if not isinstance(m, str) or m not in LORA_ATTN]
    valid = [m for m in modules if isinstance(m, str) and m in LORA_ATTN]
    extra = [
        what
        for key, what in (("apply_lora_to_mlp", "the MLP"), ("apply_lora_to_output", "the output"))
        if model.get(key)
    ]
    others = bool(extra)
    renamed = {"o_proj": "output_proj", "out_proj": "output_proj", "q": "q_proj", "k": "k_proj"}
    fixed = [
        renamed.get(m) or next(iter(difflib.get_close_matches(m, known, 1)), None)
        for m in modules
        if isinstance(m, str)
    ]
    suggestion = list(dict.fromkeys(m for m in fixed if m))
    fixes = (Fix((f"model.lora_attn_modules=[{','.join(suggestion)}]",), "torchtune's names"),)
    if not modules:
        yield _error(
            "torchtune-lora-modules",
            ("model.lora_attn_modules",),
            'model.lora_attn_modules is empty: the builder raises "ValueError: Must pass one '
            f'or more of {known} as lora_modules"',
            "list at least one of q_proj, k_proj, v_proj, output_proj",
            Fix(("model.lora_attn_modules=[q_proj,v_proj]",), "LoRA on q and v"),
        )
    elif unknown and not valid and not others:
        yield _error(
            "torchtune-lora-modules",
            ("model.lora_attn_modules",),
            f"model.lora_attn_modules={modules}: torchtune names the attention projections "
            f"{', '.join(known)}, and its builders ignore any other name, so no layer gets an "
            'adapter, nothing trains, and the first backward fails with "RuntimeError: '
            'element 0 of tensors does not require grad and does not have a grad_fn"',
            f"use torchtune's names: {', '.join(suggestion or ['q_proj', 'v_proj'])}",
            *fixes,
        )
    elif unknown and _saves_peft_config(native):
        # The recipe's save_checkpoint puts get_lora_module_names(lora_attn_modules, ...) in
        # the adapter config as given, and FullModelHFCheckpointer.save_checkpoint converts it
        # with convert_weights.tune_to_peft_adapter_config, which raises on a name outside its
        # table (pytorch/torchtune bd2a0fc7 torchtune/training/checkpointing/_checkpointer.py:989,
        # torchtune/models/convert_weights.py:251; 0.6.1: convert_weights.py:242): the run
        # trains its first epoch, then fails saving it (Phi-3/4 and Llama 3.2 Vision skip it).
        yield _error(
            "torchtune-lora-modules",
            ("model.lora_attn_modules", "checkpointer._component_"),
            f"model.lora_attn_modules lists {', '.join(unknown)}, which torchtune does not "
            f"name ({', '.join(known)}): its builders skip them, training runs with adapters "
            f"on {_and(valid + extra)} only, and saving the first epoch fails in "
            f'FullModelHFCheckpointer with "ValueError: Unknown target module {unknown[0]}" '
            "(convert_weights.tune_to_peft_adapter_config), losing the epoch",
            f"use torchtune's names: {', '.join(suggestion)}",
            *fixes,
        )
    elif unknown:
        yield Finding(
            "torchtune-lora-modules",
            "warning",
            ("model.lora_attn_modules",),
            f"model.lora_attn_modules lists {', '.join(unknown)}, which torchtune does not "
            f"name ({', '.join(known)}): its builders silently skip them, so those projections "
            f"get no adapter; only {_and(valid + extra)} get adapters",
            f"use torchtune's names: {', '.join(suggestion)}",
            fixes=fixes,
        )
    tied = run is not None and run.model.tie_embeddings
    if model.get("apply_lora_to_output") and tied and "llama3_2" in str(model.get("_component_")):
        yield _error(
            "torchtune-lora-output-tied",
            ("model.apply_lora_to_output",),
            f"apply_lora_to_output=true on {model.get('_component_')}, whose output is tied "
            'to the embedding: the builder raises "ValueError: apply_lora_to_output is '
            "currently not supporting in llama3.2 1b and 3b,as the projection layer weights "
            'are tied to the embeddings"',
            "set model.apply_lora_to_output=false",
            Fix(("model.apply_lora_to_output=false",), "no LoRA on the tied output"),
        )


# FullModelHFCheckpointer.save_checkpoint skips the PEFT adapter config for these model types
# (torchtune/training/checkpointing/_checkpointer.py:978-985 at bd2a0fc7).
NO_PEFT_CONFIG = ("PHI3_MINI", "PHI4", "LLAMA3_VISION")


def _saves_peft_config(native: NativeConfig) -> bool:
    return (
        "FullModelHFCheckpointer" in str(native.get("checkpointer._component_"))
        and native.get("checkpointer.model_type") not in NO_PEFT_CONFIG
    )


def recipe_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """dtype fp16 and activation offloading without checkpointing (the recipes' __init__),
    and a single-device recipe launched with torchrun (torchtune/_cli/run.py)."""
    recipe = recipe_of(native)
    dtype = native.get("dtype")
    if dtype is not None and dtype not in DTYPES:
        yield _error(
            "torchtune-dtype",
            ("dtype",),
            f'dtype={dtype}: training.get_dtype raises "ValueError: Dtype {dtype} must be '
            f'one of {", ".join(DTYPES)} for finetuning." (torchtune/training/precision.py)',
            "set dtype=bf16 (or fp32)",
            Fix(("dtype=bf16",), "bf16 weights"),
        )
    if dtype == "fp16":
        yield _error(
            "torchtune-fp16",
            ("dtype",),
            'dtype=fp16: the recipe raises "ValueError: fp16 precision is not supported in '
            'this recipe. Please use fp32 or bf16."',
            "set dtype=bf16 (or fp32)",
            Fix(("dtype=bf16",), "bf16 weights"),
        )
    if native.get("enable_activation_offloading") and not native.get(
        "enable_activation_checkpointing"
    ):
        yield _error(
            "torchtune-offloading",
            ("enable_activation_offloading", "enable_activation_checkpointing"),
            "enable_activation_offloading without activation checkpointing: the recipe raises "
            '"RuntimeError: enable_activation_offloading should only be True when '
            'enable_activation_checkpointing is True"',
            "set enable_activation_checkpointing=true",
            Fix(("enable_activation_checkpointing=true",), "checkpoint and offload"),
            Fix(("enable_activation_offloading=false",), "no offloading"),
        )
    launch = tt.launch(native)
    distributed = tt.supports_distributed(recipe, tt.version_of(native))
    if launch.nproc_per_node * launch.nnodes > 1 and not distributed:
        yield _error(
            "torchtune-recipe-not-distributed",
            (LAUNCH_PATH,),
            f"--nproc_per_node {launch.nproc_per_node} with recipe {recipe}: tune run stops "
            f'with "Recipe {recipe} does not support distributed training.Please run without '
            'torchrun commands." (torchtune/_cli/run.py)',
            f"run {recipe.replace('single_device', 'distributed')} for several GPUs, or one "
            "process",
        )


RULES: tuple[NativeRule, ...] = (
    component_rules,
    version_key_rules,
    missing_key_rules,
    collate_rules,
    max_seq_len_rules,
    lora_module_rules,
    recipe_rules,
)
