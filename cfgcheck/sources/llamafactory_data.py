"""LLaMA-Factory's checks of the files a config names: the datasets it looks up in
``dataset_dir/dataset_info.json`` (``src/llamafactory/data/parser.py`` get_dataset_list), the
DeepSpeed JSON transformers opens, and the data traps (no do_train, packing without
neat_packing) (hiyouga/LLaMA-Factory at ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30)."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from cfgcheck.findings import Finding, Fix
from cfgcheck.locations import display_path
from cfgcheck.sources import llamafactory_files as files
from cfgcheck.sources.base import NativeConfig
from cfgcheck.sources.llamafactory_args import stage
from cfgcheck.sources.llamafactory_rules import PARSER, quote, refusal

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig


def data_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """The datasets LLaMA-Factory would look up, do_train, and packing without isolation."""

    trains = bool(native.get("do_train"))
    if not any(native.get(k) for k in ("do_train", "do_eval", "do_predict")):
        yield Finding(
            "llamafactory-no-do-train",
            "warning",
            ("do_train",),
            "do_train is not set (TrainingArguments defaults it to False): LLaMA-Factory loads "
            "the model and data, trains nothing and saves nothing (train/sft/workflow.py "
            "runs trainer.train() only `if training_args.do_train`)",
            "set do_train=true",
            fixes=(Fix(("do_train=true",), "train"),),
        )
    if trains and not native.get("dataset"):
        yield refusal(
            "llamafactory-no-dataset",
            ("dataset", "do_train"),
            quote("Please specify dataset for training.", PARSER),
            "set dataset to names registered in dataset_dir/dataset_info.json",
        )
    yield from _registry(native)
    if stage(native) == "sft" and native.get("packing") and not native.get("neat_packing"):
        yield Finding(
            "llamafactory-packing-contamination",
            "warning",
            ("packing", "neat_packing"),
            "packing=true without neat_packing: LLaMA-Factory concatenates samples into "
            "cutoff_len rows with an all-ones attention mask (data/processor/supervised.py "
            "PackedSupervisedDatasetProcessor), so each sample attends to the samples packed "
            "before it; neat_packing builds the block-diagonal mask (data/collator.py)",
            "set neat_packing=true (packing without cross-attention)",
            fixes=(Fix(("neat_packing=true",), "packed samples isolated"),),
        )


def _registry(native: NativeConfig) -> Iterator[Finding]:
    registry = files.datasets(native)
    if registry is None or registry.online:
        return
    names = [("dataset", n) for n in files.split_names(native.get("dataset"))]
    names += [("eval_dataset", n) for n in files.split_names(native.get("eval_dataset"))]
    shown = display_path(registry.info_path) if registry.info_path else files.DATA_CONFIG
    if registry.info_missing:
        yield refusal(
            "llamafactory-dataset-info-missing",
            ("dataset_dir", "dataset"),
            f"{files.DATA_CONFIG} is not in dataset_dir ({registry.info_path}): "
            + quote(f"Cannot open {registry.info_path} ...", "data/parser.py get_dataset_list"),
            "point dataset_dir at the folder holding dataset_info.json (relative to the folder "
            "llamafactory-cli runs in), or dataset_dir=ONLINE for Hub datasets",
        )
        return
    known = sorted(registry.entries)
    for key, name in names:
        if name in registry.entries:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        given = files.split_names(native.get(key))
        fixed = ",".join(close[0] if n == name else n for n in given) if close else ""
        yield refusal(
            "llamafactory-dataset-undefined",
            (key, "dataset_dir"),
            f"{key} names {name!r}, which {shown} does not define: "
            + quote(
                f"Undefined dataset {name} in dataset_info.json.", "data/parser.py get_dataset_list"
            ),
            f"register {name} in dataset_info.json"
            + (f", or did you mean {close[0]}?" if close else ""),
            (Fix((f"{key}={fixed}",), f"use {close[0]}"),) if close else (),
        )


def deepspeed_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """transformers reads the DeepSpeed JSON at start (HfTrainerDeepSpeedConfig)."""
    if not isinstance(native.get("deepspeed"), str):
        return
    _, why = files.deepspeed_stage(native)
    if why == "missing":
        yield refusal(
            "llamafactory-deepspeed-missing",
            ("deepspeed",),
            f"deepspeed={native.get('deepspeed')} does not exist relative to the working "
            "directory, where llamafactory-cli opens it: transformers refuses to start "
            '("Expected a string path to an existing deepspeed config, or a dictionary, or a '
            'base64 encoded string", integrations/deepspeed.py HfDeepSpeedConfig)',
            "fix the path (LLaMA-Factory's configs are in examples/deepspeed/), or run "
            "cfgcheck from the folder you launch llamafactory-cli in",
        )
