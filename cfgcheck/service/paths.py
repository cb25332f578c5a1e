"""Confining the files a submitted config makes validation read to the allowed roots.

Checked before validation runs (validation may open ``tokenizer.path`` and dataset files):
a path is refused when it has a ``..`` component, starts with ``~``, names a remote location,
or lies outside every allowed root once symlinks are resolved; so is anything but a regular
file or folder (a FIFO would block the reading thread forever). For a folder, the entries
directly inside it (the files a tokenizer folder is read from) must pass the same checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

# Sections whose file keys validation may read, and the keys that name files there.
PATH_SECTIONS: tuple[str, ...] = ("model", "tokenizer", "data")
# ``pretrained``: the model folders (``model.pretrained``) the models engineer adds.
PATH_KEY = re.compile(r"^(?:.*_)?(?:path|paths|file|files|dir|dirs|pretrained)$")
# Files transformers loads together with the folder holding them.
FOLDER_READ_FILES = frozenset({"tokenizer.model", "tokenizer.json"})
# The file form of a model folder: model.pretrained=<dir>/config.json reads <dir>'s other
# files too (cfgcheck.models.expand: model_config.yaml, the tokenizer files).
FOLDER_FILE_KEYS = re.compile(r"^(?:.*_)?pretrained$")
# Native keys a format's builder reads or looks at before the run config exists: LitGPT's
# checkpoint_dir (cfgcheck/sources/litgpt.py checkpoint_ref: is it a folder?), a DeepSpeed
# JSON file (cfgcheck/sources/deepspeed.py), LLaMA-Factory's dataset_dir.
NATIVE_READ_KEYS = frozenset({"checkpoint_dir", "deepspeed", "dataset_dir"})
# An absolute path in a message (a Hub cache, a home directory).
_ABSOLUTE = re.compile(r"(?<![\w.:/~-])/[^\s'\"(),;:]+")


def path_values(config: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(dotted path, value)`` for every file path the config's sections name."""
    for section in PATH_SECTIONS:
        body = config.get(section)
        if isinstance(body, Mapping):
            yield from _walk(section, body)


def _walk(prefix: str, body: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for key, value in body.items():
        path = f"{prefix}.{key}"
        if isinstance(value, Mapping):
            yield from _walk(path, value)
        elif isinstance(key, str) and PATH_KEY.match(key):
            if isinstance(value, str):
                yield path, value
            elif isinstance(value, list):
                yield from ((f"{path}[{i}]", v) for i, v in enumerate(value) if isinstance(v, str))


def refused_paths(
    config: Mapping[str, Any], roots: Sequence[Path], cwd: Path | None = None
) -> list[str]:
    """One message per path of ``config`` that is not confined to ``roots``
    (:func:`cfgcheck.safeio.confinement_problem`, the one confinement every read goes through).

    A file that a library loads *with its folder* is confined with that folder:
    ``<dir>/tokenizer.model`` and ``<dir>/tokenizer.json`` make transformers'
    ``AutoTokenizer.from_pretrained(<dir>)`` read every tokenizer file of ``<dir>``
    (see :func:`cfgcheck.tokenizer.hf.load_auto_tokenizer`), so ``<dir>``'s entries must stay
    inside the roots too.
    """
    from cfgcheck.safeio import confinement_problem

    base = cwd or Path.cwd()
    refused = []
    for where, value in path_values(config):
        reason = confinement_problem(value, roots, base)
        key = where.rsplit(".", 1)[-1].split("[")[0]
        name = PurePath(value).name
        if reason is None and (
            name in FOLDER_READ_FILES or (FOLDER_FILE_KEYS.match(key) and "." in name)
        ):
            parent = str(PurePath(value).parent)
            reason = confinement_problem(parent, roots, base)
            if reason:
                reason = f"is read with its folder, and that folder {reason}"
        if reason:
            refused.append(f"{where}={value!r} {reason}")
    return refused


def refused_native_paths(
    native: Mapping[str, Any], roots: Sequence[Path], cwd: Path | None = None
) -> list[str]:
    """:func:`refused_paths` of the files a native config's builder reads itself
    (``NATIVE_READ_KEYS``, top-level keys: torchtune's ``checkpointer.checkpoint_dir`` is
    never read for a request), before the builder runs."""
    from cfgcheck.safeio import confinement_problem

    base = cwd or Path.cwd()
    refused = []
    for key, value in native.items():  # the builders read these at the top level only
        if key in NATIVE_READ_KEYS and isinstance(value, str):
            reason = confinement_problem(value, roots, base)
            if reason:
                refused.append(f"{key}={value!r} {reason}")
        elif key == "dataset_dir" and isinstance(value, Mapping):
            refused += _registry_files(value, roots, base)
    return sorted(refused)


def _registry_files(registry: Mapping[str, Any], roots: Sequence[Path], base: Path) -> list[str]:
    """LLaMA-Factory's registry given inline (``dataset_dir`` as a mapping, which its
    ``get_dataset_list`` accepts): every ``file_name`` is a file (or folder) the builder
    looks at and lists (cfgcheck.sources.llamafactory_files.local_files), so each is
    confined, its folder's entries too, before the builder runs."""
    from cfgcheck.safeio import confinement_problem

    refused = []
    for name, entry in registry.items():
        file_name = entry.get("file_name") if isinstance(entry, Mapping) else None
        if isinstance(file_name, str):
            reason = confinement_problem(file_name, roots, base)
            if reason:
                refused.append(f"dataset_dir.{name}.file_name={file_name!r} {reason}")
    return refused


def hide_outside(message: str, roots: Sequence[Path]) -> str:
    """``message`` with every absolute path outside ``roots`` shown as ``<server path>``: a
    reply never tells a client where the server keeps its files (a Hub cache under a home
    directory, the Python installation)."""

    def shown(match: re.Match[str]) -> str:
        text = match.group()
        path = Path(text)
        inside = any(path == root or root in path.parents for root in roots)
        return text if inside else "<server path>"

    return _ABSOLUTE.sub(shown, message)
