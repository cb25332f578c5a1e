"""Source locations: which file and line, or which command-line override, set each value.

A :class:`SourceMap` is built from Hydra's own defaults list (the config files composed, in
merge order, each with its final package, ``# @package`` headers and ``_self_`` placement
included) and the line marks of each file's YAML nodes. The last writer wins, as in Hydra's
merge; command-line value overrides come last and are reported as
``<override data.max_seq_length=3063>`` with no line. A value nobody set (a schema default, a
derived field) has no location.

It is only built when a check has findings, so a clean check pays nothing for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfgcheck.compose import compose_errors, hydra_session
from cfgcheck.findings import CheckResult, Location

if TYPE_CHECKING:
    import yaml


@dataclass
class SourceMap:
    """Dotted config path -> where its value was last set."""

    entries: dict[str, Location] = field(default_factory=dict)
    # Paths whose value replaces everything beneath it (scalars, lists, overrides): a path
    # under one of them (``data.paths.0``) is located where the whole value was set.
    covering: set[str] = field(default_factory=set)

    def set(self, path: str, location: Location, covering: bool) -> None:
        if covering:
            self._drop_children(path)
            self.covering.add(path)
        else:
            self.covering.discard(path)
        self.entries[path] = location

    def delete(self, path: str) -> None:
        self._drop_children(path)
        self.entries.pop(path, None)
        self.covering.discard(path)

    def lookup(self, path: str) -> Location | None:
        if path in self.entries:
            return self.entries[path]
        parts = path.split(".")
        for i in range(len(parts) - 1, 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in self.covering:
                return self.entries[prefix]
        return None

    def _drop_children(self, path: str) -> None:
        below = path + "."
        for key in [k for k in self.entries if k.startswith(below)]:
            del self.entries[key]
            self.covering.discard(key)


def display_path(path: Path, cwd: Path | None = None) -> str:
    """``path`` relative to the current directory when it lies under it, else absolute."""
    base = (cwd or Path.cwd()).resolve()
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _record_node(
    smap: SourceMap, node: yaml.Node, prefix: str, file: str, *, root: bool = False
) -> None:
    """Record every key of a YAML mapping node under ``prefix`` (the file's package)."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return
    for key_node, value_node in node.value:
        key = str(key_node.value)
        if root and key == "defaults":
            continue  # Hydra consumes the defaults list; it is not part of the config
        path = _join(prefix, key)
        location = Location(file, key_node.start_mark.line + 1)
        is_mapping = isinstance(value_node, yaml.MappingNode)
        smap.set(path, location, covering=not is_mapping)
        if is_mapping:
            _record_node(smap, value_node, path, file)


def _record_override_value(smap: SourceMap, path: str, value: Any, location: Location) -> None:
    if isinstance(value, Mapping):
        # A dict override merges into the existing node, like a YAML mapping.
        smap.set(path, location, covering=False)
        for key, sub in value.items():
            _record_override_value(smap, _join(path, str(key)), sub, location)
    else:
        smap.set(path, location, covering=True)


@dataclass(frozen=True)
class ComposedFiles:
    """What Hydra's defaults list says a composition is made of."""

    # (config file, final package) in merge order; only files of a ``file://`` search path.
    files: list[tuple[Path, str]]
    # Group -> chosen option (``{"model": "tinyllama-1.1b", ...}``; ``None`` when unset).
    choices: dict[str, str | None]
    # The value overrides (Hydra ``Override`` objects), in command-line order.
    config_overrides: list[Any]


def composed_files(
    config_dir: str | Path, config_name: str, overrides: Sequence[str] = ()
) -> ComposedFiles:
    """The config files a composition merges, from Hydra's defaults list (no merging done).

    Raises Hydra's own exceptions for a composition that fails. A plain tree is read without
    Hydra (:func:`cfgcheck.compose_plain.plain_files`: the same list).
    """
    from cfgcheck.compose_plain import plain_files

    plain = plain_files(config_dir, config_name, overrides)
    if plain is not None:
        return ComposedFiles(plain.files, dict(plain.choices), list(plain.overrides))
    from hydra._internal.config_repository import CachingConfigRepository
    from hydra._internal.defaults_list import create_defaults_list
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from cfgcheck.overrides import plain_overrides

    with hydra_session(config_dir, config_name) as name:
        loader: Any = GlobalHydra.instance().config_loader()
        repo = CachingConfigRepository(loader.repository)
        parsed = OverridesParser.create().parse_overrides(plain_overrides(overrides))
        # Hydra's own config is in the list (a primary may select a hydra/ option that
        # overrides Hydra's groups, hydra/job_logging=default may be on the command line),
        # and its files are left out: they are never part of the run config.
        defaults = create_defaults_list(
            repo=repo,
            config_name=name,
            overrides_list=parsed,
            prepend_hydra=True,
            skip_missing=False,
        )
        files: list[tuple[Path, str]] = []
        for result_default in defaults.defaults:
            package = result_default.package or ""
            if result_default.config_path is None or package.split(".")[0] == "hydra":
                continue
            loaded = repo.load_config(result_default.config_path)
            source = getattr(loaded, "path", "") if loaded is not None else ""
            if source.startswith("file://"):
                base = Path(source.removeprefix("file://"))
                file = base / f"{result_default.config_path}.yaml"
                files.append((file, result_default.package or ""))
        return ComposedFiles(
            files,
            {
                k: v
                for k, v in defaults.overrides.known_choices.items()
                if k.split("/")[0] != "hydra"
            },
            [o for o in defaults.overrides.config_overrides if not o.is_hydra_override()],
        )


def source_map(
    config_dir: str | Path,
    config_name: str,
    overrides: Sequence[str] = (),
    cwd: Path | None = None,
) -> SourceMap:
    """The source map of a composition; call it with arguments that compose successfully.

    Files outside ``config_dir``'s file search path (package or structured configs) are not
    mapped, so their values have no location.
    """
    import yaml

    from cfgcheck.overrides import original_override
    from cfgcheck.safeio import read_text

    composed = composed_files(config_dir, config_name, overrides)
    smap = SourceMap()
    for file, package in composed.files:
        text = read_text(file)  # screened with the whole directory by hydra_session
        node = yaml.compose(text, Loader=_loader())
        if node is not None:
            _record_node(smap, node, package, display_path(file, cwd), root=True)
    for override in composed.config_overrides:
        path = override.key_or_group
        if override.is_delete():
            smap.delete(path)
            continue
        shown = original_override(override.input_line, overrides)
        location = Location(f"<override {shown}>", None)
        _record_override_value(smap, path, override.value(), location)
    return smap


def _loader() -> Any:
    """libyaml's loader when PyYAML was built with it (several times faster)."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def locate(result: CheckResult, smap: SourceMap) -> CheckResult:
    """``result`` with each finding's paths located in ``smap`` (``None`` when unknown).

    A location the finding already carries (a value from a model folder, located at the
    folder's file by :func:`cfgcheck.validate`) is kept.
    """
    findings = [
        dataclasses.replace(f, locations={p: f.locations.get(p) or smap.lookup(p) for p in f.paths})
        for f in result.findings
    ]
    return dataclasses.replace(result, findings=findings)


def with_locations(
    result: CheckResult,
    config_dir: str | Path,
    config_name: str,
    overrides: Sequence[str] = (),
) -> CheckResult:
    """Attach source locations to ``result``'s findings; free when there are none.

    Locations are a convenience: if the source map cannot be built, findings stay unlocated.
    """
    if not result.findings:
        return result
    try:
        smap = source_map(config_dir, config_name, overrides)
    except compose_errors(OSError, ValueError):
        return result
    return locate(result, smap)
