"""The files a LLaMA-Factory config names: the DeepSpeed JSON (``deepspeed``) and the
dataset registry (``dataset_dir``/``dataset_info.json``).

``llamafactory-cli train FILE`` opens both relative to the working directory: transformers
reads ``TrainingArguments.deepspeed`` as a path (``HfTrainerDeepSpeedConfig``), and
``get_dataset_list`` opens ``os.path.join(dataset_dir, "dataset_info.json")``
(hiyouga/LLaMA-Factory ``src/llamafactory/data/parser.py``); ``_load_single_dataset``
(``data/loader.py``) reads a ``file_name`` entry as ``os.path.join(dataset_dir, file_name)``.
cfgcheck resolves them the same way, reads only files inside the project (the working
directory, or the config's own folder), bounded (:mod:`cfgcheck.safeio`), and reads nothing for
a config that came over the network (no file on disk).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cfgcheck import safeio
from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources.base import NativeConfig
from cfgcheck.sources.reader import Document

DATA_CONFIG = "dataset_info.json"  # extras/constants.py DATA_CONFIG
MAX_JSON_BYTES = 2_000_000
MAX_FOLDER_FILES = 10_000
# data/parser.py get_dataset_list: these keys make a dataset remote (nothing local to read)
REMOTE_KEYS = ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name")


def roots(native: NativeConfig) -> list[Path]:
    """Where cfgcheck may read: the working directory and the config file's folder."""
    out = [Path.cwd().resolve()]
    if native.origin is not None:
        out.append(native.origin.resolve().parent)
    return out


def project_path(native: NativeConfig, key: str, value: str) -> Path:
    """``value`` (set at native ``key``) resolved as llamafactory-cli does (relative to the
    working directory), refused with one line when it leaves the project."""
    where = native.loc(key)
    prefix = f"{where}: " if where else ""
    allowed = roots(native)
    if "\x00" in value or len(value) > 4096 or not value.strip():
        raise ConfigLoadError(f"{prefix}{key}={value[:80]!r} is not a usable path")
    try:
        resolved = Path(os.path.realpath(Path.cwd() / value))
    except (OSError, ValueError) as e:
        raise ConfigLoadError(f"{prefix}{key}={value!r} cannot be resolved ({e})") from e
    if not any(resolved.is_relative_to(root) for root in allowed):
        shown = " or ".join(str(r) for r in dict.fromkeys(allowed))
        raise ConfigLoadError(
            f"{prefix}{key}={value!r} is outside the project ({shown}); cfgcheck reads only "
            f"files inside it: run cfgcheck from the folder you run llamafactory-cli in"
        )
    reason = safeio.path_problem(resolved, allow_dir=True)  # a FIFO, a device: never opened
    if reason and reason != "does not exist":
        raise ConfigLoadError(f"{prefix}{key}={value!r} {reason}")
    return resolved


def read_json(native: NativeConfig, key: str, path: Path) -> Any:
    """A bounded JSON file named by native ``key``; one line when it is malformed."""
    where = native.loc(key)
    prefix = f"{where}: " if where else ""
    try:
        text = safeio.read_text(path, MAX_JSON_BYTES)
        return safeio.load_json_text(text, safeio.shown(path))
    except ConfigLoadError as e:
        raise ConfigLoadError(f"{prefix}{key}: {e}") from e


def deepspeed_stage(native: NativeConfig) -> tuple[int | None, str | None]:
    """(ZeRO stage, why it is unknown): from an inline dict, or the JSON file the path names
    (read when the config is a file on disk). A missing file is ``(None, "missing")``."""
    value = native.get("deepspeed")
    if isinstance(value, dict):
        return _stage_of(value), None
    if not isinstance(value, str) or native.origin is None:
        return None, None
    path = project_path(native, "deepspeed", value)
    if not path.is_file():
        return None, "missing"
    return _stage_of(read_json(native, "deepspeed", path)), None


def deepspeed_document(native: NativeConfig) -> tuple[Document, bool] | None:
    """The DeepSpeed config ``deepspeed`` names, with its lines, found as
    :func:`deepspeed_stage` finds it: (document, whether it is a separate file); None when
    it is not set or cannot be read here."""
    value = native.get("deepspeed")
    if isinstance(value, dict):
        from cfgcheck.sources.deepspeed import load

        return load(native)
    if not isinstance(value, str) or native.origin is None:
        return None
    path = project_path(native, "deepspeed", value)
    if not path.is_file():
        return None
    from cfgcheck.sources.reader import read_document

    try:
        return read_document(path), True
    except ConfigLoadError:
        return None  # deepspeed_stage reports the malformed file


def _stage_of(config: Any) -> int | None:
    zero = config.get("zero_optimization") if isinstance(config, dict) else None
    stage = zero.get("stage") if isinstance(zero, dict) else None
    return stage if isinstance(stage, int) and not isinstance(stage, bool) else None


@dataclass
class Datasets:
    """What ``dataset`` / ``eval_dataset`` name, as LLaMA-Factory finds them."""

    info_path: Path | None = None  # dataset_info.json, when local
    info_missing: bool = False  # named datasets but no readable dataset_info.json
    entries: dict[str, Any] = field(default_factory=dict)  # the registry (name -> attributes)
    online: bool = False  # dataset_dir ONLINE / REMOTE:: every name is a Hub dataset


def split_names(value: Any) -> list[str]:
    """data_args.py split_arg: a comma-separated string (or a list) of names."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",")]
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def datasets(native: NativeConfig) -> Datasets | None:
    """The registry the config's datasets come from; None when it cannot be read here (a
    config sent over the network, or no dataset named)."""
    names = split_names(native.get("dataset")) + split_names(native.get("eval_dataset"))
    directory = native.get("dataset_dir", "data")
    if isinstance(directory, dict):  # get_dataset_list accepts the registry itself
        return Datasets(entries=directory)
    if not names or native.origin is None or not isinstance(directory, str):
        return None
    if directory == "ONLINE" or directory.startswith("REMOTE:"):
        return Datasets(online=True)
    folder = project_path(native, "dataset_dir", directory)
    info = folder / DATA_CONFIG
    if not info.is_file():
        return Datasets(info_path=info, info_missing=True)
    registry = read_json(native, "dataset_dir", info)
    if not isinstance(registry, dict):
        raise ConfigLoadError(f"{safeio.shown(info)}: expected a mapping of dataset names")
    return Datasets(info_path=info, entries=registry)


def local_files(native: NativeConfig, registry: Datasets, names: list[str]) -> list[str]:
    """The local data files of ``names`` (``file_name`` entries; a folder gives its files),
    relative to the working directory as llamafactory-cli opens them."""
    directory = native.get("dataset_dir", "data")
    base = directory if isinstance(directory, str) else "."
    out: list[str] = []
    for name in names:
        entry = registry.entries.get(name)
        if not isinstance(entry, dict) or any(k in entry for k in REMOTE_KEYS):
            continue
        file_name = entry.get("file_name")
        if not isinstance(file_name, str):
            continue
        relative = os.path.join(base, file_name)
        path = project_path(native, "dataset", relative)
        if path.is_dir():  # _load_single_dataset reads every file of the folder
            with os.scandir(path) as listing:
                entries = list(itertools.islice(listing, MAX_FOLDER_FILES + 1))
            if len(entries) > MAX_FOLDER_FILES:
                raise ConfigLoadError(
                    f"{safeio.shown(path)} (dataset {name}) holds more than {MAX_FOLDER_FILES} "
                    "entries; cfgcheck does not list it"
                )
            out += sorted(os.path.join(relative, e.name) for e in entries if e.is_file())
        else:
            out.append(relative)
    return out
