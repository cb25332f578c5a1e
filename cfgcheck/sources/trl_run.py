"""What one TRL config is run as: the TRL version, the trainer (`trl sft`, `trl dpo`, ...), the
recipe script that reads it, and the keys and defaults all of them accept (see
:mod:`cfgcheck.sources.trl_versions` for how each is decided).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources import trl_versions as tv
from cfgcheck.sources.base import NativeConfig
from cfgcheck.sources.trl_versions import KeySet, Trainer, Version


@dataclass(frozen=True)
class TrlRun:
    version: Version
    trainer: Trainer
    recipe: str | None
    keys: KeySet
    script_fields: dict[str, Any]  # --script-args FILE.py:Class
    config_class: str  # SFTConfig, DPOConfig, ... (for messages)

    def default(self, key: str, fallback: Any = None) -> Any:
        """The default of ``key`` in this version and trainer (its literal in TRL's source)."""
        if key in self.recipe_defaults:
            return self.recipe_defaults[key]
        value = self.keys.defaults.get(key, fallback)
        return fallback if isinstance(value, str) and value.startswith("<no literal") else value

    @property
    def recipe_defaults(self) -> dict[str, Any]:
        return {**self.keys.recipe, **self.script_fields}

    def reads(self, key: str) -> bool:
        return self.keys.knows(key) or key in self.script_fields

    def where(self, key: str) -> str:
        """``DPOConfig max_length=1024 (TRL 0.18.2)`` for a default location."""
        return f"{self.config_class} {key}={self.default(key)!r} (TRL {self.version.table})"

    @property
    def command(self) -> str:
        return f"trl {self.trainer.name}" if self.trainer.cli else f"{self.config_class}"


def _script_fields(spec: str) -> dict[str, Any]:
    """``FILE.py:Class``: the fields the class (and its bases in the same file) declares."""
    from cfgcheck import safeio
    from cfgcheck.sources.pydataclass import NO_DEFAULT, classes

    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ConfigLoadError(f"--script-args {spec!r}: expected FILE.py:ClassName")
    found = classes(safeio.read_text(path, 2_000_000), path)
    if name not in found:
        raise ConfigLoadError(f"--script-args {spec}: {path} defines no class {name}")

    def fields(cls: str, seen: frozenset[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for base in found[cls].bases:
            if base in found and base not in seen:
                out.update(fields(base, seen | {base}))
        out.update(found[cls].fields)
        return out

    return {k: (None if v == NO_DEFAULT else v) for k, v in fields(name, frozenset({name})).items()}


def run_of(native: NativeConfig) -> TrlRun:
    opts = native.options
    keys = set(native.data)
    # The recipe first guess uses the newest trainer list (recipe pins are then applied).
    newest = tv.versions()[-1]
    first = tv.choose_trainer(native.file, keys, newest, opts.get("trainer"))
    recipe = tv.recipe_for(native.file, keys, first.name, opts.get("recipe"))
    version = tv.resolve_version(opts.get("framework_version"), native.text, recipe)
    trainer = tv.choose_trainer(native.file, keys, version.table, opts.get("trainer"))
    script = _script_fields(opts["script_args"]) if opts.get("script_args") else {}
    config_class = tv.config_class(version.table, trainer.name)
    return TrlRun(
        version,
        trainer,
        recipe,
        tv.keyset(version, trainer.name, recipe),
        script,
        config_class,
    )
