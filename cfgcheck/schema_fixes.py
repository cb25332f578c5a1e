"""Fixes for the schema findings (``unknown-key``, ``missing-key``, ``invalid-value``).

Each function proposes plain ``key=value`` / ``~key`` overrides; :mod:`cfgcheck.fixcheck`
keeps only those that remove the finding without a new error.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from cfgcheck.findings import Fix
from cfgcheck.overrides import format_value


def field_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> FieldInfo | None:
    """The pydantic field at ``loc`` (``("trainer", "lora", "rank")``), if the schema has it."""
    from cfgcheck.overrides import model_of

    model: type[BaseModel] | None = root
    info: FieldInfo | None = None
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        info = model.model_fields[part]
        model = model_of(info.annotation)
    return info


def _get(raw: Mapping[str, Any], path: str) -> Any:
    node: Any = raw
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _set(path: str, value: Any, summary: str) -> Fix | None:
    text = format_value(value)
    return None if text is None else Fix((f"{path}={text}",), summary)


def unknown_key_fixes(path: str, value: Any, known: list[str]) -> tuple[Fix, ...]:
    """Rename a misspelled key to the closest known one, or remove it."""
    parent, _, name = path.rpartition(".")
    out: list[Fix] = []
    close = difflib.get_close_matches(name, known, n=1)
    text = format_value(value)
    if close and text is not None:
        target = f"{parent}.{close[0]}" if parent else close[0]
        out.append(Fix((f"~{path}", f"{target}={text}"), f"rename {path} to {target}"))
    out.append(Fix((f"~{path}",), f"remove {path}"))
    return tuple(out)


# Required keys that have a safe value to propose (a model shape never has one: it must come
# from the model's config.json).
def _missing_candidates(path: str, raw: Mapping[str, Any]) -> list[Any]:
    if path == "trainer.micro_batch_size":
        return [1]
    if path == "data.max_seq_length":
        block = _get(raw, "model.block_size")
        return [v for v in (block if isinstance(block, int) else None, 2048, 1024) if v]
    return []


def missing_key_fixes(path: str, raw: Mapping[str, Any]) -> tuple[Fix, ...]:
    out = [_set(path, v, f"set {path}={v}") for v in _missing_candidates(path, raw)]
    return tuple(f for f in out if f is not None)


def typed_value(text: str, kind: str) -> Any:
    """``text`` read as ``kind`` (int, float, bool), or None when it is not one."""
    s = text.strip()
    try:
        if kind == "int":
            return int(s)
        if kind == "float":
            value = float(s)
            return value if math.isfinite(value) else None
    except ValueError:
        return None
    if kind == "bool" and s.lower() in ("true", "false"):
        return s.lower() == "true"
    return None


def invalid_value_fixes(
    path: str, err_type: str, value: Any, ctx: Mapping[str, Any], info: FieldInfo | None
) -> tuple[Fix, ...]:
    """The value written right (``'2048'`` -> ``2048``), the nearest allowed value for a bound,
    the closest allowed choice, or the schema default."""
    candidates: list[tuple[Any, str]] = []
    kind = err_type.split("_")[0]
    if isinstance(value, str) and kind in ("int", "float", "bool"):
        typed = typed_value(value, kind)
        if typed is not None:
            candidates.append((typed, f"write {path}={typed} without quotes"))
    if err_type == "literal_error" and info is not None:
        choices = [str(c) for c in _literal_choices(info.annotation)]
        close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.4)
        if close:
            candidates.append((close[0], f"set {path}={close[0]}"))
    for bound, step in (("gt", 1), ("ge", 0), ("lt", -1), ("le", 0)):
        if bound in ctx and isinstance(ctx[bound], int | float):
            limit = ctx[bound]
            if isinstance(value, int) and not isinstance(value, bool) and isinstance(limit, int):
                candidates.append((limit + step, f"set {path}={limit + step}"))
    if info is not None and info.default is not PydanticUndefined:
        candidates.append((info.default, f"set {path} to its default"))
    out = [_set(path, v, s) for v, s in candidates]
    return tuple(dict.fromkeys(f for f in out if f is not None))


def _literal_choices(annotation: Any) -> list[Any]:
    from typing import Literal, get_args, get_origin

    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    out: list[Any] = []
    for arg in get_args(annotation):
        out += _literal_choices(arg)
    return out
