"""What every native-format adapter shares: the native config with its locations, the builder
that writes cfgcheck's run config together with its source map, and the format description.

A value in the built config is located either at the native file's line that set it, at the
command-line override, or at ``default of <framework> <where>`` for an implicit value the
framework fills itself (each such default cites the upstream code in its adapter).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfgcheck.findings import Finding, Location, Severity
from cfgcheck.locations import SourceMap
from cfgcheck.sources.reader import (
    Document,
    get_dotted,
    parse_override,
    set_dotted,
    walk_keys,
)

if TYPE_CHECKING:
    from cfgcheck.schema.model import ModelConfig
    from cfgcheck.schema.run import RunConfig
    from cfgcheck.sources.profiles import Profile


@dataclass
class NativeConfig:
    """A native config after command-line overrides, and where each native key was set."""

    format: str
    file: str
    data: dict[str, Any]
    where: dict[str, Location] = field(default_factory=dict)
    origin: Path | None = None  # the file on disk; None when the text came over the network

    @classmethod
    def from_document(cls, fmt: str, doc: Document, overrides: Sequence[str]) -> NativeConfig:
        native = cls(fmt, doc.file, copy.deepcopy(doc.data), origin=doc.origin)
        native.where = {key: Location(doc.file, line) for key, line in doc.lines.items()}
        for text in overrides:
            if text.startswith("~"):  # delete a key, as in Hydra
                key = text[1:].partition("=")[0]
                native.delete(key)
                continue
            key, value = parse_override(text)
            native.delete(key)
            set_dotted(native.data, key, value)
            location = Location(f"<override {text}>", None)
            native.where[key] = location
            if isinstance(value, dict):
                for sub, _ in walk_keys(value, key):
                    native.where[sub] = location
        return native

    def get(self, key: str, default: Any = None) -> Any:
        return get_dotted(self.data, key, default)

    def delete(self, key: str) -> None:
        parent, _, last = key.rpartition(".")
        node = get_dotted(self.data, parent) if parent else self.data
        if isinstance(node, dict):
            node.pop(last, None)
        for k in [k for k in self.where if k == key or k.startswith(key + ".")]:
            del self.where[k]

    def is_set(self, key: str) -> bool:
        """The key is present with a non-null value (YAML ``key:`` alone means unset)."""
        return self.get(key) is not None

    def loc(self, key: str) -> Location | None:
        """Where ``key`` (or the nearest parent that replaced it) was set."""
        parts = key.split(".")
        for i in range(len(parts), 0, -1):
            location = self.where.get(".".join(parts[:i]))
            if location is not None:
                return location
        return None


class Builder:
    """Writes cfgcheck's plain run config and records where each value came from."""

    def __init__(self, native: NativeConfig, label: str) -> None:
        self.native = native
        self.label = label
        self.config: dict[str, Any] = {"model": {}, "tokenizer": {}, "data": {}, "trainer": {}}
        self.smap = SourceMap()
        # cfgcheck path -> what it defaults to once the model is known ("model.block_size").
        self.deferred: dict[str, tuple[str, Location]] = {}
        # Steps that need the resolved model shape (architecture's module names).
        self.after_model: list[Callable[[Builder, ModelConfig], None]] = []
        # The native key naming the model (checkpoint_dir, base_model, model_name_or_path).
        self.model_key: str | None = None

    def set(self, path: str, value: Any, location: Location | None) -> None:
        set_dotted(self.config, path, value)
        if location is not None:
            self.smap.set(path, location, covering=True)

    def default(self, path: str, value: Any, where: str) -> None:
        """An implicit value: ``where`` names the upstream code that sets it."""
        self.set(path, value, self.default_location(where))

    def default_location(self, where: str) -> Location:
        return Location(f"default of {self.label} {where}", None)

    def take(
        self,
        path: str,
        key: str,
        default: Any,
        where: str,
        convert: Callable[[Any], Any] = lambda v: v,
    ) -> Any:
        """``path`` from native ``key`` when set, else the framework's ``default``."""
        if self.native.is_set(key):
            value = convert(self.native.get(key))
            self.set(path, value, self.native.loc(key))
        else:
            value = convert(default)
            self.default(path, value, where)
        return value

    def from_key(self, path: str, key: str, value: Any) -> None:
        """``path`` set to ``value``, derived from native ``key`` (located there)."""
        self.set(path, value, self.native.loc(key))

    def defer(self, path: str, to: str, where: str) -> None:
        """``path`` takes the value of ``to`` once the model is resolved (e.g. the block)."""
        self.deferred[path] = (to, self.default_location(where))


NativeRule = Callable[[NativeConfig, "RunConfig | None"], Iterable[Finding]]


@dataclass(frozen=True)
class Format:
    """One native format: how its keys map to cfgcheck and what the framework does itself."""

    name: str  # the --from value
    label: str  # the framework's name in messages
    framework: str  # trainer.framework
    keys: frozenset[str]  # every key the framework reads (dotted for nested ones)
    build: Callable[[Builder], None]
    # cfgcheck "path=value" -> the same change in native keys (several: one per line), "" when
    # the framework makes it by itself, or None when it has none.
    to_native: Callable[[str, str], str | None]
    profile: Callable[[NativeConfig], Profile]
    rules: tuple[NativeRule, ...] = ()
    # Keys the framework renamed: old -> new.
    renamed: dict[str, str] = field(default_factory=dict)
    # What the framework does with a key it does not know, and where that is in its code.
    unknown_severity: Severity = "warning"
    unknown_behaviour: str = ""
    # Dotted prefixes whose sub-keys are free-form (optimizer init_args, deepspeed dicts...).
    open_prefixes: tuple[str, ...] = ()
    # A fix's cfgcheck value as the native config counts it, before to_native (LLaMA-Factory's
    # DPO batch holds each pair's chosen and rejected sequences: 2 per sample).
    fix_value: Callable[[NativeConfig, str, str], str] | None = None
