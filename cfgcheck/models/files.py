"""Bounded reading of a model folder's config file, with the line of every key.

One reading function, :func:`read_text`, so the bounded reader of ``cfgcheck.safeio`` can
replace it in one place. Every failure is a :class:`ModelFolderError` with a one-line message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Real config.json / model_config.yaml files are a few KiB (a large id2label table stays well
# under a MiB); the cap only stops a hostile or mistaken path.
MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 32


class ModelFolderError(ValueError):
    """A model folder, its config file or a Hub id cannot be used. One-line message."""


@dataclass(frozen=True)
class ConfigFile:
    """A parsed config file: its top-level mapping and the line of each (dotted) key."""

    path: Path
    data: Mapping[str, Any]
    lines: Mapping[str, int]


def read_text(path: Path, limit: int = MAX_BYTES) -> str:
    """The UTF-8 text of ``path``, refusing more than ``limit`` bytes, read by
    :func:`cfgcheck.safeio.read_text` (a FIFO, device or dangling link is named, never opened;
    a UTF-8 BOM is dropped; UTF-16 and latin-1 are named)."""
    from cfgcheck.errors import ConfigLoadError
    from cfgcheck.safeio import read_text as bounded_read_text

    try:
        return bounded_read_text(path, limit)
    except ConfigLoadError as e:
        raise ModelFolderError(str(e)) from e


def read_json(path: Path) -> ConfigFile:
    """A JSON object file (a ``config.json``), depth-bounded, with the line of every key."""
    text = read_text(path)
    lines = _json_key_lines(text, path)  # also bounds the depth before json.loads recurses
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ModelFolderError(f"{path} is not valid JSON: {str(e).splitlines()[0]}") from e
    if not isinstance(data, dict):
        raise ModelFolderError(f"{path} must hold a JSON object, not {type(data).__name__}")
    return ConfigFile(path, data, lines)


def read_yaml(path: Path) -> ConfigFile:
    """A YAML mapping file (LitGPT's ``model_config.yaml``), with the line of each top key."""
    import yaml

    from cfgcheck.errors import ConfigLoadError
    from cfgcheck.safeio import screen_yaml

    text = read_text(path)
    try:  # libyaml's composer recurses on the C stack: depth, aliases and tags bounded first
        screen_yaml(text, str(path))
    except ConfigLoadError as e:
        raise ModelFolderError(str(e)) from e
    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        node = yaml.compose(text, Loader=loader)
        data = yaml.load(text, Loader=loader)
    except (yaml.YAMLError, RecursionError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelFolderError(f"{path} is not valid YAML: {first}") from e
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise ModelFolderError(f"{path} must hold a YAML mapping, not {type(data).__name__}")
    lines = {str(k.value): k.start_mark.line + 1 for k, _ in node.value}
    return ConfigFile(path, data, lines)


def _json_key_lines(text: str, path: Path) -> dict[str, int]:
    """``{"a": 3, "a.b": 4}``: the line of each object key whose ancestors are all objects.

    A single pass over the characters (strings skipped, escapes honoured); refuses nesting
    deeper than :data:`MAX_DEPTH`. Malformed text is left to ``json.loads`` to report.
    """
    lines: dict[str, int] = {}
    # Per open container: the dotted path of an object whose ancestors are objects, else None.
    stack: list[str | None] = []
    pending: str | None = None  # the path of the key whose value comes next
    expect_key = False
    line, i, n = 1, 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif c == '"':
            start, start_line = i + 1, line
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                elif text[i] == "\n":
                    line += 1
                i += 1
            parent = stack[-1] if stack else None
            if expect_key and parent is not None:
                key = text[start:i]
                pending = f"{parent}.{key}" if parent else key
                lines[pending] = start_line
            expect_key = False
        elif c in "{[":
            if len(stack) >= MAX_DEPTH:
                raise ModelFolderError(f"{path} is nested deeper than {MAX_DEPTH} levels")
            if c == "{":
                stack.append("" if not stack else pending)
                expect_key = True
            else:
                stack.append(None)
            pending = None
        elif c in "}]":
            if stack:
                stack.pop()
            expect_key = False
            pending = None
        elif c == ",":
            expect_key = bool(stack) and stack[-1] is not None
            pending = None
        i += 1
    return lines
