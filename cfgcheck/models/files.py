"""Reading a model folder's config file through :mod:`cfgcheck.safeio` (size, depth, node and
tag bounds, FIFOs and devices refused), with the line of every key for locations.

Every failure is a :class:`ModelFolderError` with a one-line message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfgcheck import safeio

# Real config.json / model_config.yaml files are a few KiB (a large id2label table stays well
# under a MiB); the cap only stops a hostile or mistaken path.
MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 32
LIMITS = safeio.Limits(max_bytes=MAX_BYTES, max_depth=MAX_DEPTH)


class ModelFolderError(ValueError):
    """A model folder, its config file or a Hub id cannot be used. One-line message."""


@dataclass(frozen=True)
class ConfigFile:
    """A parsed config file: its top-level mapping and the line of each (dotted) key."""

    path: Path
    data: Mapping[str, Any]
    lines: Mapping[str, int]


def read_text(path: Path) -> str:
    """The UTF-8 text of ``path``, within the safeio "model-config" cap (:data:`MAX_BYTES`
    unless ``CFGCHECK_MAX_MODEL_CONFIG_BYTES`` says otherwise; the one reading function)."""
    try:
        return safeio.decode(safeio.read_capped(path, "model-config"), safeio.shown(path))
    except safeio.UnsafeInput as e:
        raise ModelFolderError(str(e)) from e


def read_json(path: Path) -> ConfigFile:
    """A JSON object file (a ``config.json``), depth-bounded, with the line of every key."""
    text = read_text(path)
    lines = _json_key_lines(text, path)  # also bounds the depth before json.loads recurses
    try:
        data = safeio.load_json_text(text, str(path), LIMITS)
    except safeio.UnsafeInput as e:
        raise ModelFolderError(str(e)) from e
    if not isinstance(data, dict):
        raise ModelFolderError(f"{path} must hold a JSON object, not {type(data).__name__}")
    return ConfigFile(path, data, lines)


def read_yaml(path: Path) -> ConfigFile:
    """A YAML mapping file (LitGPT's ``model_config.yaml``), with the line of each top key."""
    import yaml

    text = read_text(path)
    try:
        data = safeio.load_yaml_text(text, str(path), LIMITS)  # screened before any parse
    except safeio.UnsafeInput as e:
        raise ModelFolderError(str(e)) from e
    if not isinstance(data, dict):
        raise ModelFolderError(f"{path} must hold a YAML mapping, not {type(data).__name__}")
    node = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    pairs = node.value if isinstance(node, yaml.MappingNode) else []
    lines = {str(k.value): k.start_mark.line + 1 for k, _ in pairs}
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
