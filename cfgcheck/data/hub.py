"""A Hugging Face Hub dataset (``data.hub_dataset``, e.g. TRL's ``dataset_name``) found in the
local Hugging Face caches, never downloaded.

Two caches are looked in, in this order:

1. the Hub cache that ``huggingface_hub`` fills (:mod:`cfgcheck.hfcache`):
   ``datasets--ORG--NAME/refs/main`` names the revision whose files lie in
   ``snapshots/<revision>/`` (the newest snapshot when there is no ``refs/main``).
   The files of the split are chosen as ``datasets`` chooses them: the README's ``configs``
   (``config_name``, ``data_files`` with a ``split`` and ``path`` patterns) when it has them,
   else the file or folder names carrying a split keyword (``datasets/data_files.py``
   ``SPLIT_KEYWORDS``, ``KEYWORDS_IN_FILENAME_BASE_PATTERNS``, datasets 5.2), else every
   data file as ``train``;
2. the ``datasets`` library's Arrow cache (``HF_DATASETS_CACHE``, else ``HF_HOME/datasets``):
   ``ORG___NAME/CONFIG/VERSION/HASH/NAME-SPLIT[-NNNNN-of-NNNNN].arrow``, what
   ``load_dataset`` wrote after preparing the dataset (``datasets/builder.py``
   ``_relative_data_dir``, ``arrow_writer`` shard names).
"""

from __future__ import annotations

import fnmatch
import glob
import itertools
import os
import re
from pathlib import Path
from typing import Any

from cfgcheck.hfcache import cached_snapshot, hf_home, hub_cache_dir

# datasets/data_files.py (datasets 5.2): the words that name a split in a file or folder name,
# and the characters around them.
SPLIT_KEYWORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
_SEP = r"[-._ 0-9]"
MAX_FILES = 10_000  # a snapshot listing is bounded like a LLaMA-Factory dataset folder
# The README front matter read for ``configs`` (its YAML header only; the card is text).
MAX_README_BYTES = 1 << 20


class NotCached(LookupError):
    """The dataset is not in the local caches: the message says where it was looked for."""


def datasets_cache() -> Path:
    """The ``datasets`` library's cache folder (datasets/config.py: HF_DATASETS_CACHE)."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return Path(os.environ["HF_DATASETS_CACHE"]).expanduser()
    return hf_home() / "datasets"


def is_hub_id(name: str) -> bool:
    """``name`` reads as a Hub dataset id (``NAME`` or ``ORG/NAME``), not a path."""
    return bool(re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name)) and ".." not in name


def cached_files(repo: str, config: str | None = None, split: str = "train") -> list[Path]:
    """The local files of ``split`` of the Hub dataset ``repo``; :class:`NotCached` when no
    cache holds it, naming the folders looked in."""
    snapshot = cached_snapshot(repo, "dataset", newest=True)
    if snapshot is not None:
        files = snapshot_files(snapshot, config, split)
        if files:
            return files
    arrow = _arrow_files(repo, config, split)
    if arrow:
        return arrow
    what = f"{repo}" + (f" (config {config})" if config else "") + f", split {split}"
    raise NotCached(
        f"the Hub dataset {what} is not in the local Hugging Face cache "
        f"({hub_cache_dir()}, {datasets_cache()}), and cfgcheck never downloads"
    )


def data_files(root: Path) -> list[str]:
    """The data files below ``root`` (relative POSIX paths, sorted), as ``datasets`` lists a
    repository or a local folder: hidden files and folders skipped, links followed (a
    snapshot's files link to ``blobs/``). At most :data:`MAX_FILES` entries are looked at."""
    from cfgcheck.data.records import _is_data_file

    listed = []
    for path in itertools.islice(root.rglob("*"), MAX_FILES + 1):
        rel = path.relative_to(root).as_posix()
        hidden = any(part.startswith(".") for part in rel.split("/"))
        if not hidden and _is_data_file(path) and path.is_file():
            listed.append(rel)
    return sorted(listed)


def snapshot_files(root: Path, config: str | None, split: str) -> list[Path]:
    """The data files of ``split`` (and ``config``) below ``root``, as ``datasets`` picks
    them from a repository's files."""
    listed = data_files(root)
    configs = _readme_configs(root)
    if configs:
        chosen = _config(configs, config)
        if chosen is None:
            return []
        patterns = _split_patterns(chosen.get("data_files"), split)
        return [root / r for r in listed if any(_match(r, p) for p in patterns)]
    if config:  # no README configs: a folder named after the config holds its files
        inside = [r for r in listed if r.split("/")[0] == config]
        listed = inside or listed
    return [root / r for r in split_of(listed, split)]


def split_of(files: list[str], split: str) -> list[str]:
    """The files (POSIX paths relative to the dataset folder) ``datasets`` assigns to
    ``split``: those whose name or a folder's name carries one of its keywords; when no file
    names any split, all of them are ``train``."""

    def names(part: str, last: bool) -> set[str]:
        # a file: the keyword then a separator; a folder: the keyword may end the name
        tail = f"{_SEP}.*" if last else f"({_SEP}.*)?"
        return {
            s
            for s, words in SPLIT_KEYWORDS.items()
            if any(re.fullmatch(rf"(.*{_SEP})?{w}{tail}", part) for w in words)
        }

    def splits(rel: str) -> set[str]:
        parts = rel.split("/")
        return set().union(*(names(p, i == len(parts) - 1) for i, p in enumerate(parts)))

    named = {rel: splits(rel) for rel in files}
    if not any(named.values()):
        return list(files) if split == "train" else []
    return [rel for rel in files if split in named[rel]]


def _readme_configs(root: Path) -> list[dict[str, Any]]:
    """The ``configs`` list of the dataset card's YAML header (empty when it has none)."""
    from cfgcheck import safeio

    readme = root / "README.md"
    try:
        text = safeio.read_text(readme, MAX_README_BYTES)
    except (OSError, safeio.UnsafeInput):  # no card, or not one to read
        return []
    if not text.startswith("---"):
        return []
    end = text.find("\n---", 3)
    if end < 0:
        return []
    try:
        header = safeio.load_yaml_text(text[3:end], safeio.shown(readme))
    except safeio.UnsafeInput:
        return []
    configs = header.get("configs") if isinstance(header, dict) else None
    return [c for c in configs if isinstance(c, dict)] if isinstance(configs, list) else []


def _config(configs: list[dict[str, Any]], name: str | None) -> dict[str, Any] | None:
    if name is not None:
        return next((c for c in configs if c.get("config_name") == name), None)
    for c in configs:  # datasets: the one marked default, else "default", else the only one
        if c.get("default") is True or c.get("config_name") == "default":
            return c
    return configs[0] if len(configs) == 1 else None


def _split_patterns(data_files: Any, split: str) -> list[str]:
    """A config's ``data_files`` patterns for ``split`` (a bare pattern or list is train)."""
    if isinstance(data_files, str):
        return [data_files] if split == "train" else []
    if not isinstance(data_files, list):
        return []
    out: list[str] = []
    for item in data_files:
        if isinstance(item, str):
            out += [item] if split == "train" else []
        elif isinstance(item, dict) and item.get("split", "train") == split:
            path = item.get("path")
            out += (
                [path] if isinstance(path, str) else [p for p in path or [] if isinstance(p, str)]
            )
    return out


def _match(rel: str, pattern: str) -> bool:
    """``rel`` matches a ``data_files`` glob (``*`` crosses folders here; ``**/`` may match
    no folder at all)."""
    return fnmatch.fnmatchcase(rel, pattern) or fnmatch.fnmatchcase(rel, pattern.replace("**/", ""))


def _arrow_files(repo: str, config: str | None, split: str) -> list[Path]:
    """The Arrow shards ``load_dataset`` left in the ``datasets`` cache for ``split``."""
    folder = datasets_cache() / repo.replace("/", "___")
    name = config or "default"
    found: list[Path] = []
    try:
        # CONFIG, or CONFIG-HASH when load_dataset was given data_files of its own
        configs = [folder / name, *folder.glob(f"{glob.escape(name)}-*")]
        versions = sorted(
            (v for c in configs for v in c.glob("*/*")), key=lambda p: p.stat().st_mtime
        )
    except OSError:
        return []
    for hashed in reversed(versions):  # the newest prepared copy
        found = sorted(
            p
            for p in hashed.glob("*.arrow")
            if re.fullmatch(rf".+-{re.escape(split)}(-\d+-of-\d+)?\.arrow", p.name)
        )
        if found:
            break
    return found
