"""The fields of Python dataclasses, read from source text with :mod:`ast` (nothing imported,
nothing executed).

Used twice: ``scripts/trl_keys.py`` builds TRL's per-version key tables from TRL's own
sources with it, and ``cfgcheck check --from trl --script-args FILE.py:Class`` reads the
fields a recipe's training script declares (its ``ScriptArguments`` or ``SFTConfig``
subclass) the same way, without running the user's code.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from cfgcheck.errors import ConfigLoadError

NO_DEFAULT = "<no literal default>"


@dataclass
class ClassInfo:
    """One class body: its base names (last dotted part) and its annotated fields, each with
    its literal default (``NO_DEFAULT`` when the default is not a literal or is missing)."""

    name: str
    bases: list[str]
    fields: dict[str, Any] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)  # field -> its annotation as written
    lines: dict[str, int] = field(default_factory=dict)  # field -> its line


def _literal(node: ast.expr | None) -> Any:
    if node is None:
        return NO_DEFAULT
    if isinstance(node, ast.Call) and _name(node.func) == "field":
        for kw in node.keywords:
            if kw.arg == "default":
                return _literal(kw.value)
        return NO_DEFAULT  # default_factory or required
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NO_DEFAULT
    return value if isinstance(value, str | int | float | bool | type(None)) else NO_DEFAULT


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    return ""


def _is_classvar(annotation: ast.expr) -> bool:
    return _name(annotation) in ("ClassVar", "InitVar")


def classes(source: str, where: str) -> dict[str, ClassInfo]:
    """Every top-level class of ``source`` with its annotated fields (dataclass or not)."""
    try:
        tree = ast.parse(source, filename=where)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ConfigLoadError(f"{where}: not Python source: {e}") from e
    return classes_in(tree)


def classes_in(tree: ast.Module) -> dict[str, ClassInfo]:
    """:func:`classes` of an already-parsed module."""
    found: dict[str, ClassInfo] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        info = ClassInfo(node.name, [_name(b) for b in node.bases])
        for item in node.body:
            if (
                isinstance(item, ast.AnnAssign)
                and isinstance(item.target, ast.Name)
                and not _is_classvar(item.annotation)
            ):
                info.fields[item.target.id] = _literal(item.value)
                info.types[item.target.id] = ast.unparse(item.annotation)
                info.lines[item.target.id] = item.lineno
        found[node.name] = info
    return found


def parser_dataclasses(source: str, where: str) -> list[str] | None:
    """The class names a training script hands its argument parser: ``TrlParser((A, B, C))``,
    ``HfArgumentParser((A, B))`` or ``dataclass_types = (A, B, C)``; None when it has none."""
    try:
        tree = ast.parse(source, filename=where)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return parser_dataclasses_in(tree)


def parser_dataclasses_in(tree: ast.Module) -> list[str] | None:
    """:func:`parser_dataclasses` of an already-parsed module."""
    for node in ast.walk(tree):
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "dataclass_types" for t in node.targets
        ):
            value = node.value
        elif (
            isinstance(node, ast.Call)
            and _name(node.func) in ("TrlParser", "HfArgumentParser", "H4ArgumentParser")
            and node.args
        ):
            value = node.args[0]
        if isinstance(value, ast.Tuple | ast.List):
            names = [_name(e) for e in value.elts]
            if names and all(names):
                return names
    return None
