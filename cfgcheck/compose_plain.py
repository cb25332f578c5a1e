"""Composing a plain ``conf/`` tree without Hydra, where the result is provably Hydra's.

Importing Hydra and composing with it is about 0.16 s of CPU, half of a first ``cfgcheck
check`` (``python -X importtime``; benchmarks/cold_start.py). Most trees use a small part of
Hydra: a primary config whose defaults list picks one option per config group, group files
without defaults lists or package headers, value overrides ``key=value``. For those,
:func:`compose_plain` merges the files itself and returns the composed config resolved, as
:mod:`cfgcheck.compose_cache` stores it: a plain dict, the same verdicts as Hydra's
``DictConfig``. It answers ``None`` (compose with Hydra) whenever anything could differ:

* the process may see configs the directory does not hold: structured configs in Hydra's
  ``ConfigStore``, a ``hydra_plugins`` package (search-path plugins), ``searchpath`` in a file
  or an override;
* a file Hydra would read that is not plain: a ``# @package`` header, a BOM or a carriage
  return, a top level that is not a mapping, a key that is not a string, a value that is not
  JSON data (``!!binary``, dates), ``???`` (MISSING), a non-finite float, a duplicate key
  (Hydra's loader refuses it: so does this one, then Hydra reports it);
* a defaults list with anything but ``- group: option`` entries (one per group, a plain
  option name whose file exists, no ``optional``/``override`` keywords, no ``@package``, no
  nested group) and exactly one ``_self_`` (Hydra warns when it is missing); a group config
  with a defaults list of its own; a group or key named ``hydra`` (Hydra's own node);
* merges where OmegaConf does more than replace or recurse: a mapping onto a scalar or a
  list (and back), a value onto an interpolation (``ConfigLoaderImpl`` dereferences it);
* an override outside a small, exactly transcribed part of Hydra's grammar
  (:func:`cfgcheck.overrides.parse_override`; hydra/grammar/OverrideLexer.g4, hydra-core
  1.3): ``key=value``, ``+key=value`` on a key
  that does not exist, ``++key=value``, ``group=option`` on a group of the defaults list,
  with an unquoted value of letters, digits and ``_./+-`` (an int, float, bool or string
  exactly as Hydra's lexer reads it; ``null``, ``inf`` and ``nan`` excluded);
* interpolations other than absolute ``${a.b}`` references between keys (resolvers, relative
  keys, escapes, nesting), a reference to a mapping or list, a broken or cyclic one, or a
  ``cfgcheck:`` mapping node with interpolations (they locate its values: Hydra's path).

A first check with findings needs two more things from Hydra, also answered here for such a
tree: the files the composition is made of, in merge order (:func:`plain_files`, for
:func:`cfgcheck.locations.composed_files`), and the fixes' ``key=value`` overrides parsed
(:func:`cfgcheck.overrides.parse_override`, for :mod:`cfgcheck.fixcheck` too).

The merge follows ``ConfigLoaderImpl._compose_config_from_defaults_list`` and
``BaseContainer._map_merge`` (omegaconf/basecontainer.py), the overrides
``ConfigLoaderImpl._apply_overrides_to_config`` (hydra/_internal/config_loader_impl.py).
``tests/test_compose_plain.py`` checks the result equals Hydra's composition, resolved, on
every shipped tree and the test fixture trees, the files and overrides Hydra's defaults list,
and the override values Hydra's own parser.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfgcheck.overrides import PlainOverride, parse_override

_GROUP = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_OPTION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
_HEADER = re.compile(r"^\s*#\s*@", re.MULTILINE)

_FULL_REFERENCE = re.compile(r"\$\{([^${}]*)\}\Z")
_REFERENCE = re.compile(r"\$\{([^${}]*)\}")
_ABSOLUTE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def references(tree: Any, out: set[str]) -> bool:
    """Collect the keys every interpolation string under ``tree`` reads into ``out``; False
    when one is anything but absolute ``${a.b}`` references."""
    if isinstance(tree, dict):
        return all(references(k, out) and references(v, out) for k, v in tree.items())
    if isinstance(tree, list):
        return all(references(v, out) for v in tree)
    if not isinstance(tree, str) or "$" not in tree:
        return True
    if "\\" in tree:
        return False
    inner = _REFERENCE.findall(tree)
    if "${" in _REFERENCE.sub("", tree) or not all(_ABSOLUTE.fullmatch(r) for r in inner):
        return False
    out.update(inner)
    return True


def copy_plain(tree: Any) -> Any:
    """A deep copy of plain dicts and lists (their leaves are immutable scalars)."""
    if isinstance(tree, dict):
        return {k: copy_plain(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [copy_plain(v) for v in tree]
    return tree


class _Unplain(Exception):
    """Something only Hydra's path can decide: compose with Hydra."""


_ABSENT = object()  # a key a mapping does not hold


@dataclass(frozen=True)
class Composition:
    """A plain composition: the config (resolved), and what Hydra's defaults list says it is
    made of (as :class:`cfgcheck.locations.ComposedFiles` holds it)."""

    config: dict[str, Any]
    files: list[tuple[Path, str]]  # (config file, package) in merge order
    choices: dict[str, str]  # group -> option, in the order Hydra records them
    overrides: list[PlainOverride]  # the value overrides, in command-line order


def _loader() -> Any:
    """OmegaConf's YAML loader (``omegaconf._utils.get_yaml_loader``, omegaconf 2.3), built
    without importing OmegaConf: SafeLoader with duplicate keys refused, YAML 1.2-style floats
    (``1e-4``) and no timestamps. ``tests/test_compose_plain.py`` compares it to OmegaConf's."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            keys = set()
            for key_node, _value_node in node.value:
                if key_node.tag != yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                    continue
                if key_node.value in keys:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key_node.value}",
                        key_node.start_mark,
                    )
                keys.add(key_node.value)
            return super().construct_mapping(node, deep=deep)

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            """^(?:
         [-+]?[0-9]+(?:_[0-9]+)*\\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
        |\\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
        |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\\.[0-9_]*
        |[-+]?\\.(?:inf|Inf|INF)
        |\\.(?:nan|NaN|NAN))$""",
            re.X,
        ),
        list("-+0123456789."),
    )
    Loader.yaml_implicit_resolvers = {
        key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for key, resolvers in Loader.yaml_implicit_resolvers.items()
    }
    return Loader


def _plain_data(tree: Any) -> bool:
    """JSON data with string keys, finite floats and no MISSING (``???``) value."""
    if isinstance(tree, dict):
        return all(isinstance(k, str) and _plain_data(v) for k, v in tree.items())
    if isinstance(tree, list):
        return all(_plain_data(v) for v in tree)
    if isinstance(tree, float):
        return math.isfinite(tree)
    if isinstance(tree, str):
        return tree != "???"
    return tree is None or isinstance(tree, int)  # bool is an int


class _Tree:
    """The files of one config directory, as Hydra would load them."""

    def __init__(self, directory: Path, texts: Mapping[Path, bytes]) -> None:
        self.directory = directory
        self.texts = texts
        self.loader = _loader()

    def load(self, relative: str) -> dict[str, Any]:
        data = self.texts.get(self.directory / relative)
        if data is None or data.startswith(b"\xef\xbb\xbf") or b"\r" in data:
            raise _Unplain
        text = data.decode("utf-8")
        if _HEADER.search(text):
            raise _Unplain
        import yaml

        try:
            tree = yaml.load(text, Loader=self.loader)
        except (yaml.YAMLError, ValueError, TypeError, RecursionError, OverflowError) as e:
            raise _Unplain from e
        if tree is None:
            tree = {}
        if not isinstance(tree, dict) or not _plain_data(tree) or "hydra" in tree:
            raise _Unplain
        copied: dict[str, Any] = copy_plain(tree)  # YAML aliases share objects; merges must not
        return copied


def _defaults(primary: dict[str, Any]) -> list[tuple[str, str] | None]:
    """The primary's defaults list: ``(group, option)``, ``None`` for ``_self_``."""
    raw = primary.pop("defaults", [])
    if not isinstance(raw, list):
        raise _Unplain
    out: list[tuple[str, str] | None] = []
    for entry in raw:
        if entry == "_self_":
            out.append(None)
            continue
        if not isinstance(entry, dict) or len(entry) != 1:
            raise _Unplain
        ((group, option),) = entry.items()
        if not isinstance(option, str) or not _GROUP.match(group) or group == "hydra":
            raise _Unplain
        out.append((group, option))
    groups = [d[0] for d in out if d is not None]
    if (raw and out.count(None) != 1) or len(set(groups)) != len(groups):
        raise _Unplain  # no _self_ (Hydra warns), two, or a group chosen twice
    return out


def _merge(dest: dict[str, Any], src: dict[str, Any]) -> None:
    for key, value in src.items():
        if key not in dest:
            dest[key] = value
            continue
        old = dest[key]
        if isinstance(old, dict) and isinstance(value, dict):
            _merge(old, value)
        elif isinstance(old, str) and "${" in old:
            raise _Unplain  # OmegaConf dereferences an interpolation it merges onto
        elif old is None or value is None or type(old) is type(value) is list:
            dest[key] = value
        elif isinstance(old, dict | list) or isinstance(value, dict | list):
            raise _Unplain
        else:
            dest[key] = value


def _set(tree: dict[str, Any], key: str, value: Any, prefix: str | None) -> None:
    """One value override, as ``_apply_overrides_to_config`` applies it (``++``: force add,
    ``+``: add a key that does not exist, none: change a key that exists)."""
    parts = key.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.get(part, _ABSENT)
        if child is _ABSENT and prefix:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise _Unplain
        node = child
    last = parts[-1]
    old = node.get(last, _ABSENT)
    if (old is _ABSENT and not prefix) or (old is not _ABSENT and prefix == "+"):
        raise _Unplain  # Hydra's "Could not override" / "Could not append" (or a None)
    if isinstance(old, dict | list):
        raise _Unplain
    node[last] = value


def _resolve(tree: Any, root: dict[str, Any], depth: int = 0) -> Any:
    """``tree`` with every ``${a.b}`` resolved, as ``OmegaConf.to_container(resolve=True)``
    resolves references between keys."""
    if isinstance(tree, dict):
        return {k: _resolve(v, root, depth) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_resolve(v, root, depth) for v in tree]
    if not isinstance(tree, str) or "${" not in tree:
        return tree
    if depth > 32:
        raise _Unplain  # a cycle, or a chain OmegaConf would follow to the same error
    full = _FULL_REFERENCE.match(tree)
    if full:
        return _resolve(_lookup(root, full.group(1)), root, depth + 1)

    def text(match: re.Match[str]) -> str:
        value = _resolve(_lookup(root, match.group(1)), root, depth + 1)
        return str(value)

    return _REFERENCE.sub(text, tree)


def _lookup(root: dict[str, Any], path: str) -> Any:
    node: Any = root
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise _Unplain  # a broken reference: Hydra's path reports it
        node = node[part]
    if isinstance(node, dict | list):
        raise _Unplain
    return node


def usable() -> bool:
    """Whether this process may compose without Hydra (nothing registered in Hydra's
    ConfigStore, no ``hydra_plugins`` installed)."""
    from cfgcheck.compose_cache import _config_store_in_use

    return not _config_store_in_use() and importlib.util.find_spec("hydra_plugins") is None


def compose_plain(
    directory: Path, name: str, overrides: Sequence[str], texts: Mapping[Path, bytes]
) -> dict[str, Any] | None:
    """The composition of ``name`` (a primary config of the resolved, screened ``directory``,
    whose config files' bytes are ``texts``) with ``overrides``, resolved, or ``None``:
    compose with Hydra (see the module docstring). Raises what Hydra's path raises after
    composing (:func:`cfgcheck.interpolation_cost.check_cost`)."""
    composition = composition_of(directory, name, overrides, texts)
    return composition.config if composition is not None else None


def composition_of(
    directory: Path, name: str, overrides: Sequence[str], texts: Mapping[Path, bytes]
) -> Composition | None:
    """:func:`compose_plain` with what the composition is made of, or None."""
    if "/" in name or any("searchpath" in o for o in overrides):
        return None
    if any(b"searchpath" in data for data in texts.values()):
        return None
    try:
        return _compose(directory, name, overrides, _Tree(directory, texts))
    except _Unplain:
        return None


def _compose(directory: Path, name: str, overrides: Sequence[str], files: _Tree) -> Composition:
    from cfgcheck.overrides import plain_overrides

    primary = files.load(f"{name}.yaml")
    defaults = _defaults(primary)
    choices: dict[str, str] = {}
    values: list[PlainOverride] = []
    for text in plain_overrides(overrides):
        parsed = parse_override(text)
        if parsed is None:
            raise _Unplain
        key = parsed.key_or_group
        # Hydra's Overrides: a key naming a folder of the search path is a group choice.
        if os.path.isdir(os.path.realpath(os.path.join(directory, key))):
            if parsed.prefix or key in choices or not isinstance(parsed.value(), str):
                raise _Unplain
            choices[key] = parsed.value()
        else:
            values.append(parsed)
    known = {d[0] for d in defaults if d is not None}
    if not known.issuperset(choices):
        raise _Unplain  # Hydra's "Could not override 'x'. No match in the defaults list."
    tree: dict[str, Any] = {}
    merged: list[tuple[Path, str]] = []
    chosen: dict[str, str] = {}
    for default in defaults or [None]:
        if default is None:
            _merge(tree, primary)
            merged.append((directory / f"{name}.yaml", ""))
            continue
        group, option = default
        option = choices.get(group, option)
        if not _OPTION.match(option) or option.endswith((".yaml", ".yml")):
            raise _Unplain
        content = files.load(f"{group}/{option}.yaml")
        if "defaults" in content:
            raise _Unplain
        _merge(tree, {group: content})
        merged.append((directory / f"{group}/{option}.yaml", group))
        chosen[group] = option
    for override in values:
        _set(tree, override.key_or_group, override.value(), override.prefix)

    from cfgcheck.interpolation_cost import check_cost

    check_cost(tree, f"{name}.yaml composed with its overrides")  # as compose() does
    found: set[str] = set()
    if not references(tree, found):
        raise _Unplain
    if found and "cfgcheck" in tree:
        raise _Unplain  # a mapping node's interpolations locate its values
    config = {k: _resolve(v, tree) for k, v in tree.items()} if found else tree
    # Hydra records the choices as it walks the defaults list, last entry first.
    order = dict(reversed(chosen.items()))
    return Composition(config, merged, order, values)


def plain_files(
    config_dir: str | Path, config_name: str, overrides: Sequence[str]
) -> Composition | None:
    """What a composition is made of, without Hydra where :func:`composition_of` applies
    (for :func:`cfgcheck.locations.composed_files`); None: ask Hydra's defaults list. Raises
    what ``composed_files`` raises before Hydra runs (a missing or unsafe tree)."""
    from cfgcheck.compose import primary_config
    from cfgcheck.interpolation_cost import InterpolationBudget
    from cfgcheck.safeio import screen_config_dir

    directory, name = primary_config(config_dir, config_name)
    texts = screen_config_dir(directory)
    if not usable():
        return None
    try:
        return composition_of(directory, name, overrides, texts)
    except InterpolationBudget:
        return None  # composed_files does not resolve: let Hydra's list answer
