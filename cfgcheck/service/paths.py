"""Confining the files a submitted config makes validation read to the allowed roots.

Checked before validation runs (validation may open ``tokenizer.path`` and dataset files):
a path is refused when it has a ``..`` component, starts with ``~``, names a remote location,
or lies outside every allowed root once symlinks are resolved; so is anything but a regular
file or folder (a FIFO would block the reading thread forever). For a folder, the entries
directly inside it (the files a tokenizer folder is read from) must pass the same checks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

# Sections whose file keys validation may read, and the keys that name files there.
PATH_SECTIONS: tuple[str, ...] = ("model", "tokenizer", "data")
PATH_KEY = re.compile(r"^(?:.*_)?(?:path|paths|file|files|dir|dirs)$")
_REMOTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_MAX_FOLDER_ENTRIES = 1000


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
    """One message per path of ``config`` that is not confined to ``roots``."""
    base = cwd or Path.cwd()
    refused = []
    for where, value in path_values(config):
        reason = _refusal(value, roots, base)
        if reason:
            refused.append(f"{where}={value!r} {reason}")
    return refused


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path.is_relative_to(root) for root in roots)


def _refusal(value: str, roots: Sequence[Path], base: Path) -> str | None:
    if not value:
        return None
    if "\x00" in value:
        return "contains a NUL byte"
    if _REMOTE.match(value):
        return "is a remote location; the service reads local files only and never downloads"
    if value.startswith("~"):
        return "starts with '~'; home-directory paths are not accepted"
    if ".." in re.split(r"[\\/]", value):
        return "has a '..' component; paths may not climb out of their directory"
    try:
        resolved = Path(os.path.realpath(base / value))
    except (OSError, ValueError) as e:
        return f"cannot be resolved ({e})"
    if not _inside(resolved, roots):
        how = (
            "leads through a symlink to"
            if Path(os.path.abspath(base / value)) != resolved
            else "is"
        )
        return f"{how} a location outside the directories this service may read"
    if resolved.exists() and not (resolved.is_file() or resolved.is_dir()):
        return "is not a regular file or folder (a device, FIFO or socket is never read)"
    if resolved.is_dir() and not _folder_confined(resolved, roots):
        return (
            "is a folder holding a symlink that leads outside the directories this service "
            "may read, or a device, FIFO or socket"
        )
    return None


def _folder_confined(folder: Path, roots: Sequence[Path]) -> bool:
    try:
        entries = list(os.scandir(folder))[:_MAX_FOLDER_ENTRIES]
    except OSError:
        return True  # unreadable: validation reports it; nothing is read from outside
    for entry in entries:
        target = Path(os.path.realpath(entry.path))
        if entry.is_symlink() and not _inside(target, roots):
            return False
        if target.exists() and not (target.is_file() or target.is_dir()):
            return False
    return True
