"""LLaMA-Factory's arguments as it reads and derives them: the generated defaults, choices,
version-bound keys and template names (``keys/llamafactory*.txt``, written by
scripts/gen_llamafactory_keys.py from hiyouga/LLaMA-Factory at
ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30), and what ``get_train_args``
(``src/llamafactory/hparams/parser.py``) derives from them."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from cfgcheck.sources import llamafactory_files as files
from cfgcheck.sources.base import NativeConfig


def _keys_file(name: str) -> str:
    return resources.files("cfgcheck.sources").joinpath("keys", name).read_text("utf-8")


@cache
def defaults() -> dict[str, Any]:
    """key -> LLaMA-Factory's default (``keys/llamafactory.defaults.txt``)."""
    text = _keys_file("llamafactory.defaults.txt")
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, rest = line.partition(" = ")
        out[key], _ = json.JSONDecoder().raw_decode(rest)
    return out


@cache
def choices() -> dict[str, list[Any]]:
    """key -> the values its Literal or enum type allows."""
    text = _keys_file("llamafactory.defaults.txt")
    out: dict[str, list[Any]] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(" = ")
        if sep and "  choices " in rest:
            out[key] = json.loads(rest.split("  choices ", 1)[1].split("  # ", 1)[0])
    return out


@cache
def version_bound() -> dict[str, list[str]]:
    """key -> the transformers releases that have it, for a key only some of them have."""
    text = _keys_file("llamafactory.defaults.txt")
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(" = ")
        if sep and "  only " in rest:
            out[key] = json.loads(rest.split("  only ", 1)[1].split("  # ", 1)[0])
    return out


def value(n: NativeConfig, key: str) -> Any:
    """The key's value, or LLaMA-Factory's default."""
    return n.get(key) if n.is_set(key) else defaults().get(key)


def stage(n: NativeConfig) -> str:
    return str(value(n, "stage"))


def packing(n: NativeConfig) -> bool:
    """DataArguments: neat_packing sets packing; get_train_args: packing None -> stage pt."""
    if n.get("neat_packing"):
        return True
    if n.is_set("packing"):
        return bool(n.get("packing"))
    return stage(n) == "pt"


def pair_factor(n: NativeConfig) -> int:
    """Sequences a batch holds per sample: 2 for pairwise stages (chosen and rejected)."""
    return 2 if stage(n) in ("dpo", "rm") else 1


def zero_stage(n: NativeConfig) -> int | None:
    """The DeepSpeed ZeRO stage (the JSON the config names, or a dict); by the file name when
    the file cannot be read here (a service request)."""
    if not n.get("deepspeed"):
        return None
    found, _ = files.deepspeed_stage(n)
    if found is not None:
        return found
    text = str(n.get("deepspeed")).lower()
    for level in (3, 2, 1, 0):
        if f"z{level}" in text or f"zero{level}" in text or f"zero_{level}" in text:
            return level
    return None


@cache
def templates() -> frozenset[str]:
    """The chat template names LLaMA-Factory registers (keys/llamafactory.templates.txt)."""
    text = _keys_file("llamafactory.templates.txt")
    return frozenset(x.strip() for x in text.splitlines() if x.strip() and x[0] != "#")
