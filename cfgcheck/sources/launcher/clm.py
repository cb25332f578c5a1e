"""transformers' causal-LM example ``examples/pytorch/language-modeling/run_clm.py``
(huggingface/transformers at 00d481d18f91, copied in
tests/sources/native/launch/published/transformers_clm/run_clm.py), modelled from its source:

- ``tokenize_function`` (lines 503-512) tokenizes the texts batched, with no padding and no
  truncation; ``group_texts`` (556-570) concatenates them and cuts rows of exactly
  ``block_size`` tokens (the remainder dropped, ``labels`` = ``input_ids``), and the Trainer
  gets ``default_data_collator`` (642): every row stacks without padding, and every row is
  ``block_size`` tokens long, which sizes the memory;
- ``block_size`` (530-553): ``--block_size B`` runs at ``min(B, tokenizer.model_max_length)``
  (a larger ``B`` is capped, with a logged warning); without it, at
  ``tokenizer.model_max_length``, or ``min(1024, max_position_embeddings)`` when that is above
  ``config.max_position_embeddings`` (1024 for a config without one). A block above the
  model's positions fails at the first forward (GPT-2's learned position table:
  ``IndexError: index out of range in self``);
- ``DataTrainingArguments.__post_init__`` (227-239): ``ValueError: Need either a dataset name
  or a training/validation file.``, and ``--train_file`` / ``--validation_file`` must end in
  csv, json or txt (an ``assert``); ``ModelArguments.__post_init__`` (157-161):
  ``--config_overrides`` with ``--config_name`` or ``--model_name_or_path`` is a ValueError.

The entry point is recognised by what it does (a ``group_texts`` function and a
``block_size`` field), each ``__post_init__`` check by its message in the entry point's own
source: run_mlm.py, run_plm.py and copies of run_clm.py get the checks they make.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Finding, Location

if TYPE_CHECKING:
    from cfgcheck.sources.base import Builder
    from cfgcheck.sources.launcher import LaunchConfig
    from cfgcheck.sources.launcher.entry import Entry

RULE = "launch-entry-refuses"
NO_DATA = "Need either a dataset name or a training/validation file."
EXTENSIONS = ("csv", "json", "txt")
OVERRIDES = "--config_overrides can't be used in combination with --config_name or"
VERY_LARGE = int(1e30)  # tokenization_utils_base VERY_LARGE_INTEGER: no model_max_length given


def packing_function(entry: Entry) -> Location | None:
    """Where the entry point defines ``group_texts`` (concatenate, cut ``block_size`` rows),
    when its parser also declares ``block_size``."""
    if "block_size" not in entry.fields:
        return None
    for unit in entry.code.units:
        for node in ast.walk(unit.tree):
            if isinstance(node, ast.FunctionDef) and node.name == "group_texts":
                return Location(entry.file, node.lineno)
    return None


def _says(entry: Entry, text: str) -> Location | None:
    """Where the entry point's source has a string holding ``text``."""
    for unit in entry.code.units:
        for node in ast.walk(unit.tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and text in node.value
            ):
                return Location(entry.file, node.lineno)
    return None


def post_init_problems(n: LaunchConfig) -> list[Finding]:
    """The argument dataclasses' ``__post_init__`` refusals (see the module)."""
    entry = n.entry
    if entry is None or entry.parser != "HfArgumentParser":
        return []
    out: list[Finding] = []
    data_flags = ("dataset_name", "train_file", "validation_file")
    where = _says(entry, NO_DATA)
    if (
        where is not None
        and all(k in entry.fields for k in data_flags)
        and not any(n.value(k) for k in data_flags)
        and not any(k in n.unknown for k in data_flags)
    ):
        out.append(
            Finding(
                RULE,
                "error",
                data_flags,
                f"no --dataset_name, --train_file or --validation_file: "
                f"DataTrainingArguments.__post_init__ ({where.file}:{where.line}) stops the run "
                f'with "ValueError: {NO_DATA}"',
                "give the data: --dataset_name NAME (a Hub dataset) or --train_file FILE "
                "(csv, json or txt)",
                locations={"dataset_name": Location(n.file, n.launch.line if n.launch else None)},
            )
        )
    for key in ("train_file", "validation_file"):
        value = n.value(key)
        said = _says(entry, f"`{key}` should be a csv, a json or a txt file.")
        if said is None or not isinstance(value, str) or key in n.unknown:
            continue
        extension = value.split(".")[-1]
        if extension not in EXTENSIONS:
            out.append(
                Finding(
                    RULE,
                    "error",
                    (key,),
                    f"--{key} {value}: its extension {extension!r} is not csv, json or txt, and "
                    f"DataTrainingArguments.__post_init__ ({said.file}:{said.line}) stops the "
                    f'run with "AssertionError: `{key}` should be a csv, a json or a txt file."',
                    "convert the file to JSON lines (.json) or plain text (.txt), or load it "
                    "as a dataset (--dataset_name)",
                )
            )
    said = _says(entry, OVERRIDES)
    if said is not None and n.value("config_overrides") is not None:
        clash = [k for k in ("config_name", "model_name_or_path") if n.value(k) is not None]
        if clash:
            out.append(
                Finding(
                    RULE,
                    "error",
                    ("config_overrides", *clash),
                    f"--config_overrides with --{clash[0]}: ModelArguments.__post_init__ "
                    f'({said.file}:{said.line}) stops the run with "ValueError: {OVERRIDES} '
                    '--model_name_or_path"',
                    "--config_overrides changes a config built from --model_type (training from "
                    "scratch); to change a pretrained model's config, edit its config.json",
                )
            )
    return out


def _json(path: Path) -> dict[str, Any] | None:
    from cfgcheck import safeio

    try:
        data = json.loads(safeio.read_text(path))
    except (ConfigLoadError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _folder(n: LaunchConfig, ref: Any) -> Path | None:
    """The local folder ``ref`` names (relative to where the script runs), or its Hub-cache
    snapshot."""
    from cfgcheck.hfcache import cached_snapshot

    if not isinstance(ref, str) or not ref:
        return None
    local = n.root / ref
    if local.is_dir():
        return local
    return cached_snapshot(ref) if "\x00" not in ref else None


def _tokenizer_length(n: LaunchConfig) -> int | None:
    """``tokenizer.model_max_length`` of the tokenizer run_clm loads (``--tokenizer_name``, else
    ``--model_name_or_path``: its tokenizer_config.json; without the key, transformers' very
    large default); None when the file is not there."""
    folder = _folder(n, n.value("tokenizer_name") or n.value("model_name_or_path"))
    data = _json(folder / "tokenizer_config.json") if folder else None
    if data is None:
        return None
    value = data.get("model_max_length", VERY_LARGE)
    return int(value) if isinstance(value, int | float) and value > 0 else VERY_LARGE


def _positions(n: LaunchConfig) -> int | None:
    """``config.max_position_embeddings`` of the config run_clm builds (``--config_name``, else
    ``--model_name_or_path``; GPT-2's ``n_positions`` is its attribute_map alias), 1024 for a
    config without one (run_clm.py 530-534); None when config.json is not there."""
    folder = _folder(n, n.value("config_name") or n.value("model_name_or_path"))
    data = _json(folder / "config.json") if folder else None
    if data is None:
        return None
    for key in ("max_position_embeddings", "n_positions"):
        if isinstance(data.get(key), int):
            return int(data[key])
    return 1024


def block_length(b: Builder, n: LaunchConfig, at: Any) -> None:
    """``data.max_seq_length``: the block run_clm cuts (see the module); ``at`` gives a key's
    location (the flag, or the field's default)."""
    given = n.value("block_size")
    if "block_size" in n.unknown:
        n.unknown_paths["data.max_seq_length"] = "block_size"
    tokenizer, positions = _tokenizer_length(n), _positions(n)
    lines = "run_clm.py 536-553"
    if isinstance(given, int):
        if tokenizer is None:
            b.set("data.max_seq_length", given, at("block_size"))
            if positions is None or given > positions:
                # min(B, model_max_length) decides whether the positions are exceeded
                n.unknown_paths["data.max_seq_length"] = "block_size"
                n.problems.append(
                    Finding(
                        "launch-unknown-value",
                        "warning",
                        ("block_size",),
                        f"--block_size {given}: the entry point runs at min(--block_size, the "
                        f"tokenizer's model_max_length) ({lines}), and cfgcheck could not read "
                        "the tokenizer's tokenizer_config.json, so the checks of the length "
                        "(the model's positions, the memory) are left out",
                        "give a model folder or Hub-cache entry that holds the tokenizer files",
                    )
                )
            return
        b.set("data.max_seq_length", min(given, tokenizer), at("block_size"))
        return
    if tokenizer is not None:
        block = tokenizer
        if positions is not None and block > positions:
            block = min(1024, positions) if positions > 0 else 1024
        if block < VERY_LARGE:
            b.set("data.max_seq_length", block, at("block_size"))
            return
    if positions is not None:
        # the tokenizer's length, or min(1024, positions): never above the positions
        why = f"block_size: the tokenizer's model_max_length, at most the model's ({lines})"
        b.set("data.max_seq_length", positions, b.default_location(why))
        return
    b.defer("data.max_seq_length", "model.block_size", "block_size: the model's context")


def apply_packing(b: Builder, n: LaunchConfig, where: Location) -> None:
    """run_clm's rows: unpadded tokenizer output, concatenated and cut to the block; the
    remainder is dropped, so no row is ever padded and no pad token is needed."""
    from cfgcheck.sources.profiles import Adjustment

    b.set("data.padding", "do_not_pad", where)
    b.set("data.collator", "packed", where)
    b.set("data.truncation", False, where)
    note = (
        f"group_texts ({where.file}:{where.line}) drops the remainder shorter than block_size, "
        "so no row is padded"
    )
    n.adjustments.append(Adjustment("pad-token-missing", None, note))


CRASH = (
    "; in transformers, rows of exactly block_size tokens past the positions fail at the first "
    'forward of a model with a learned position table (GPT-2, OPT): "IndexError: index out of '
    'range in self"'
)


def with_crash(finding: Finding) -> Finding:
    """A ``seq-len-over-block-size`` finding with what run_clm's rows do to the model."""
    import dataclasses

    return dataclasses.replace(finding, message=finding.message + CRASH)
