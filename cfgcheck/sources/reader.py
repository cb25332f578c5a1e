"""Reading a native framework config file: bounded YAML (or JSON) with the line of every key.

All file reading of the sources layer goes through :func:`read_document`, and all parsing
through :func:`parse_document`: the bytes and the event stream are bounded by
:mod:`cfgcheck.safeio` (size, special files, encodings, nesting, aliases, tags), then values
are built from the YAML node tree by a bounded walk that records each key's line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cfgcheck import safeio
from cfgcheck.errors import ConfigLoadError

MAX_BYTES = 1_000_000
MAX_DEPTH = 32
MAX_VALUES = 20_000
MAX_OVERRIDE_CHARS = 10_000


@dataclass(frozen=True)
class Document:
    """A native config file: its plain data and the 1-based line of each dotted key."""

    file: str  # as shown to the user
    data: dict[str, Any]
    lines: dict[str, int] = field(default_factory=dict)
    origin: Path | None = None  # the file on disk (None for text a service request sent)


def read_document(path: str | Path, display: str | None = None) -> Document:
    """Read ``path`` as a YAML mapping. Raises :class:`ConfigLoadError` (one line) when the
    file is missing or not a regular file, too large, not UTF-8, malformed, too deep or not a
    mapping."""
    shown = display or str(path)
    doc = parse_document(safeio.read_text(path, MAX_BYTES), shown)
    return Document(doc.file, doc.data, doc.lines, Path(path))


def parse_document(text: str, shown: str) -> Document:
    """:func:`read_document` of text already in memory (shown as ``shown``)."""
    data, lines = parse_yaml(text, shown)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigLoadError(f"{shown}: expected a mapping of keys, got {type(data).__name__}")
    return Document(shown, data, lines)


_LIMITS = safeio.Limits(max_bytes=MAX_BYTES, max_depth=MAX_DEPTH, max_nodes=MAX_VALUES)


def parse_yaml(text: str, where: str) -> tuple[Any, dict[str, int]]:
    """Bounded YAML parse of ``text``: (value, {dotted key: line})."""
    import yaml

    safeio.screen_yaml(text, where, _LIMITS)
    try:
        loader = yaml.SafeLoader(text)  # raises on unprintable characters
    except yaml.YAMLError as e:
        raise ConfigLoadError(f"malformed YAML in {where}: {_one_line(e)}") from e
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        walker = _Walker(loader, where)
        value = walker.build(node, "", 0)
        return value, walker.lines
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError) as e:
        if isinstance(e, ConfigLoadError):
            raise
        raise ConfigLoadError(f"malformed YAML in {where}: {_one_line(e)}") from e
    finally:
        loader.dispose()


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


class _Walker:
    def __init__(self, loader: Any, where: str) -> None:
        self.loader = loader
        self.where = where
        self.count = 0
        self.lines: dict[str, int] = {}

    def build(self, node: Any, path: str, depth: int) -> Any:
        import yaml

        self.count += 1
        if self.count > MAX_VALUES:
            raise ConfigLoadError(f"{self.where}: more than {MAX_VALUES:,} values")
        if depth > MAX_DEPTH:
            raise ConfigLoadError(f"{self.where}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, yaml.MappingNode):
            self.loader.flatten_mapping(node)  # YAML merge keys (<<)
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key = self.loader.construct_object(key_node)
                if not isinstance(key, str | int | float | bool):
                    line = key_node.start_mark.line + 1
                    raise ConfigLoadError(f"{self.where}:{line}: a key must be a plain scalar")
                key = str(key)
                sub = f"{path}.{key}" if path else key
                self.lines.setdefault(sub, key_node.start_mark.line + 1)
                out[key] = self.build(value_node, sub, depth + 1)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, f"{path}.{i}", depth + 1) for i, item in enumerate(node.value)]
        value = self.loader.construct_object(node)
        if value is None or isinstance(value, str | int | float | bool):
            return value
        return str(value)  # dates, binary: kept as text, never as Python objects


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` (dotted key, YAML value) -> (key, value); one-line error otherwise."""
    if len(text) > MAX_OVERRIDE_CHARS:
        raise ConfigLoadError(f"override longer than {MAX_OVERRIDE_CHARS:,} characters")
    key, sep, raw = text.partition("=")
    key = key.strip().lstrip("-")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigLoadError(f"bad override {text!r}: expected key=value, e.g. sequence_len=4096")
    value, _ = parse_yaml(raw, f"override {text!r}") if raw.strip() else (None, {})
    return key, value


def walk_keys(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every (dotted key, value) of nested mappings, parents before children."""
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        yield path, value
        if isinstance(value, Mapping):
            yield from walk_keys(value, path)


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``a.b.c`` in nested dicts, creating (or replacing non-dict) parents."""
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def get_dotted(data: Mapping[str, Any], key: str, default: Any = None) -> Any:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def has_dotted(data: Mapping[str, Any], key: str) -> bool:
    sentinel = object()
    return get_dotted(data, key, sentinel) is not sentinel


def first_set(data: Mapping[str, Any], keys: Iterable[str]) -> str | None:
    """The first of ``keys`` whose value is set and not null."""
    for key in keys:
        if get_dotted(data, key) is not None:
            return key
    return None
