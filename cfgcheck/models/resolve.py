"""``model.pretrained``: a model folder, a Hub id in the local Hugging Face cache, or a preset.

Resolution never downloads. In order:

1. a local folder holding a Hugging Face ``config.json`` or a LitGPT ``model_config.yaml``
   (or the path of one of those files);
2. a Hub id (``ORG/NAME``) found in the local Hugging Face cache, laid out as huggingface_hub
   writes it (``huggingface_hub/file_download.py``, ``try_to_load_from_cache``):
   ``<cache>/models--ORG--NAME/refs/main`` holds the commit whose folder
   ``snapshots/<commit>/`` holds the files (:mod:`cfgcheck.hfcache`);
3. a name or Hub id of cfgcheck's preset registry (:mod:`cfgcheck.models.presets`).

Anything else is a :class:`ModelFolderError` naming what to provide.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from cfgcheck.hfcache import cached_snapshot, hub_cache_dir
from cfgcheck.models.files import ModelFolderError, read_json, read_yaml
from cfgcheck.models.hf import Value, hf_model, special_token_ids
from cfgcheck.models.litgpt import litgpt_model

HF_CONFIG = "config.json"
LITGPT_CONFIG = "model_config.yaml"
# A PEFT adapter (peft/config.py PeftConfigMixin.save_pretrained writes adapter_config.json):
# base_model_name_or_path names the base model, r / lora_alpha / target_modules / lora_dropout
# its LoRA settings (peft/tuners/lora/config.py LoraConfig).
ADAPTER_CONFIG = "adapter_config.json"
_ADAPTER_KEYS = {"rank": "r", "alpha": "lora_alpha", "targets": "target_modules",
                 "dropout": "lora_dropout"}  # fmt: skip
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")
GENERATION_CONFIG = "generation_config.json"
# huggingface_hub's repo id grammar (validate_repo_id): ORG/NAME of word characters, . and -.
_HUB_ID = re.compile(r"^[\w.-]{1,96}/[\w.-]{1,96}$")
# A Hub id without an organisation (gpt2, gpt2-xl, bert-base-uncased: the Hub's first models,
# cached by huggingface_hub as models--gpt2): looked up in the cache only.
_LEGACY_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}$")


@dataclass(frozen=True)
class AdapterSource:
    """A PEFT adapter folder's LoRA settings (``trainer.lora`` keys) and where they are."""

    file: str
    values: Mapping[str, Value]
    lines: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelSource:
    """What ``model.pretrained`` resolved to: the ``model`` keys it decides and where from."""

    ref: str  # model.pretrained as written
    kind: Literal["hf", "litgpt", "preset"]
    file: str  # the config file read (absolute), or "<preset NAME>"
    values: Mapping[str, Value]
    lines: Mapping[str, int] = field(default_factory=dict)  # file key -> line
    folder: Path | None = None
    tokenizer: Path | None = None  # the folder, when it holds tokenizer files
    adapter: AdapterSource | None = None  # model.pretrained named a PEFT adapter folder

    @property
    def trained_vocab_declared(self) -> bool:
        """Whether ``vocab_size`` is the trained tokenizer's length (LitGPT, presets), not
        only the embedding rows (a Hugging Face config.json)."""
        return "vocab_size" in self.values

    def line(self, value: Value) -> int | None:
        return self.lines.get(value.key) if value.default_of is None else None


def resolve_pretrained(ref: str) -> ModelSource:
    """Resolve ``model.pretrained``; raises :class:`ModelFolderError` with a one-line reason."""
    if "\x00" in ref or "\n" in ref or len(ref) > 4096:
        raise ModelFolderError(f"model.pretrained={_short(ref)!r} is not a path or a Hub id")
    try:
        path = Path(ref).expanduser()
        if path.is_file() and path.name in (HF_CONFIG, LITGPT_CONFIG):
            path = path.parent
        folder = path.resolve() if path.is_dir() else None
    except (OSError, RuntimeError) as e:  # a name too long, a symlink loop, no home dir
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ModelFolderError(f"model.pretrained={_short(ref)}: {reason}") from e
    if folder is not None:
        return _folder_source(ref, folder)
    if _HUB_ID.match(ref) or _LEGACY_HUB_ID.match(ref):
        snapshot = cached_snapshot(ref)
        if snapshot is not None:
            return _folder_source(ref, snapshot)
    preset = _preset_source(ref)
    if preset is not None:
        return preset
    if _HUB_ID.match(ref):
        raise ModelFolderError(
            f"model.pretrained={ref}: not in the Hugging Face cache ({hub_cache_dir()}) and "
            f"not a cfgcheck preset; download it first (huggingface-cli download {ref}) or "
            f"give a local folder holding {HF_CONFIG} or {LITGPT_CONFIG}"
        )
    raise ModelFolderError(
        f"model.pretrained={_short(ref)}: no such folder and not a Hub id (ORG/NAME) or cfgcheck "
        f"preset; give a local folder holding {HF_CONFIG} or {LITGPT_CONFIG}"
    )


def _short(ref: str) -> str:
    """``ref`` cut to a length fit for a one-line message."""
    return ref if len(ref) <= 120 else ref[:117] + "..."


def _folder_source(ref: str, folder: Path) -> ModelSource:
    try:
        names = (HF_CONFIG, LITGPT_CONFIG, GENERATION_CONFIG, ADAPTER_CONFIG, *TOKENIZER_FILES)
        stamp = tuple(_mtime(folder / n) for n in names)
    except OSError as e:
        raise ModelFolderError(f"cannot read {folder}: {e.strerror or e}") from e
    return _read_folder(ref, folder, stamp)


def _mtime(path: Path) -> int:
    return path.stat().st_mtime_ns if path.exists() else -1


@lru_cache(maxsize=64)
def _read_folder(ref: str, folder: Path, stamp: tuple[int, ...]) -> ModelSource:
    """Cached by the files' modification times, so a sweep reads the folder once."""
    del stamp  # part of the cache key only
    tokenizer = folder if any((folder / n).is_file() for n in TOKENIZER_FILES) else None
    litgpt = folder / LITGPT_CONFIG
    if litgpt.is_file():  # a LitGPT checkpoint folder (it may also keep the HF config.json)
        parsed = read_yaml(litgpt)
        values = litgpt_model(parsed.data, str(litgpt))
        # `litgpt download` keeps the Hub's config.json and generation_config.json beside it
        _generation_ids(folder / HF_CONFIG, values)
        _generation_ids(folder / GENERATION_CONFIG, values)
        return ModelSource(ref, "litgpt", str(litgpt), values, parsed.lines, folder, tokenizer)
    hf = folder / HF_CONFIG
    if hf.is_file():
        parsed = read_json(hf)
        values = hf_model(parsed.data, str(hf))
        _generation_ids(folder / GENERATION_CONFIG, values)
        return ModelSource(ref, "hf", str(hf), values, parsed.lines, folder, tokenizer)
    adapter = folder / ADAPTER_CONFIG
    if adapter.is_file():
        return _adapter_source(ref, adapter, tokenizer)
    raise ModelFolderError(
        f"model.pretrained={ref}: {folder} holds neither {HF_CONFIG} nor {LITGPT_CONFIG} "
        f"(nor a PEFT {ADAPTER_CONFIG})"
    )


def _generation_ids(path: Path, values: dict[str, Value]) -> None:
    """Special-token ids of another file of the folder (``generation_config.json``: what
    ``generate`` stops on): an id ``values`` lacks is taken from it, and its eos ids join those
    already there (Llama 3.1 Instruct stops on three)."""
    if not path.is_file():
        return
    gen = special_token_ids(read_json(path).data)
    for key, ids in gen.items():
        if key not in values:
            values[key] = Value(ids, f"{path.name} {key}")
        elif key == "eos_token_id":
            have = values[key].value
            merged = list(dict.fromkeys([*_ids(have), *_ids(ids)]))
            if merged != _ids(have):
                values[key] = Value(merged, values[key].key)


def _ids(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _adapter_source(ref: str, path: Path, tokenizer: Path | None) -> ModelSource:
    """An adapter folder: its base model (``base_model_name_or_path``, resolved as any
    model.pretrained: a folder, the local Hub cache, a preset) and its LoRA settings."""
    parsed = read_json(path)
    base = parsed.data.get("base_model_name_or_path")
    if not isinstance(base, str) or not base.strip():
        raise ModelFolderError(f"{path}: base_model_name_or_path must name the base model")
    try:
        source = resolve_pretrained(base.strip())
    except ModelFolderError as e:
        raise ModelFolderError(f"{path}: base_model_name_or_path={base}: {e}") from e
    if source.adapter is not None:
        raise ModelFolderError(f"{path}: base_model_name_or_path={base} is itself an adapter")
    values: dict[str, Value] = {}
    for ours, theirs in _ADAPTER_KEYS.items():
        v = parsed.data.get(theirs)
        if ours == "targets":
            if isinstance(v, str) and v.lower() == "all-linear":
                v = ["all-linear"]
            elif isinstance(v, list) and all(isinstance(x, str) for x in v):
                v = sorted(v)  # PEFT keeps a set (saved in no particular order)
            else:
                continue  # a regex string: PEFT's full match, not a cfgcheck target list
        elif isinstance(v, bool) or not isinstance(v, int | float):
            continue
        values[ours] = Value(v, theirs)
    adapter = AdapterSource(str(path), values, parsed.lines)
    return replace(source, ref=ref, adapter=adapter, tokenizer=tokenizer or source.tokenizer)


def _preset_source(ref: str) -> ModelSource | None:
    from cfgcheck.models.presets import find_preset

    preset = find_preset(ref)
    if preset is None:
        return None
    values: dict[str, Any] = {
        k: Value(v, k) for k, v in preset.config.items() if k not in ("name", "source")
    }
    values["name"] = Value(preset.name, "name")
    return ModelSource(ref, "preset", f"<preset {preset.name}>", values)
