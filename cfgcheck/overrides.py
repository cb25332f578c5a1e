"""Plain ``key=value`` overrides for every schema key.

Hydra refuses ``trainer.lora.rank=16`` ("Could not override ... use +") when no YAML file of
the composition spells ``trainer.lora.rank``, although the schema knows the key and gives it a
default. cfgcheck's own fixes are written as plain ``key=value`` too. :func:`plain_overrides`
is the one place that bridges the two, used by every entry point that hands overrides to
Hydra (``check``, ``--sweep``, ``memory``, ``data``, ``hook``, the service, ``@cfgcheck.main``):

- a plain value override of a key inside a config section (``trainer.lora.rank=16``,
  ``tokenizer.path=...``) or of a top-level schema key (``seed=1``) becomes Hydra's
  ``++key=value``: set the key, adding it when the tree does not spell it. For a key the tree
  does spell, that is exactly what the plain override does. A misspelled key under a section
  (``trainer.lora.rnak=16``) is added too, and validation reports it as ``unknown-key`` with a
  did-you-mean and the known keys;
- the same keys under a ``cfgcheck:`` mapping node (``cfgcheck.data.max_length=2048``, see
  :mod:`cfgcheck.project.mapping`) become ``++`` too;
- everything else keeps Hydra's meaning: group choices (``model=llama-3-8b``, a key without a
  dot that names a section), ``+``/``++``/``~`` overrides, ``key@package=...``, ``group/sub=...``,
  ``hydra.*`` and keys outside the schema.

Pure string work: the composition cache calls it without importing Hydra.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import BaseModel

# A plain value override: a dotted key of identifier-like parts, then '=' (no prefix, no
# '@package', no '/'): Hydra's grammar for keys is wider, and anything else stays as it is.
_PLAIN = re.compile(r"^([A-Za-z_][\w-]*(?:\.[\w-]+)*)=(.*)$", re.DOTALL)


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``annotation`` (``X``, ``X | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = model_of(arg)
        if found is not None:
            return found
    return None


def _walk(model: type[BaseModel], prefix: str) -> Iterable[str]:
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        sub = model_of(field.annotation)
        if sub is not None:
            yield from _walk(sub, path + ".")


@functools.cache
def schema_paths() -> tuple[str, ...]:
    """Every dotted path the run config schema defines, sections and nested models included."""
    from cfgcheck.schema.run import RunConfig

    return tuple(_walk(RunConfig, ""))


@functools.cache
def _sections() -> frozenset[str]:
    from cfgcheck.schema.run import SECTIONS

    return frozenset(SECTIONS)


def plain_key(override: str) -> str | None:
    """The key of a plain ``key=value`` override that :func:`plain_overrides` turns into
    ``++key=value``, or None when the override keeps Hydra's meaning."""
    match = _PLAIN.match(override)
    if match is None:
        return None
    key = match.group(1)
    if key.startswith("cfgcheck."):  # a key of the mapping node (cfgcheck.project.mapping)
        return key if plain_key(f"{key[len('cfgcheck.') :]}={match.group(2)}") else None
    head = key.split(".", 1)[0]
    if "." in key:
        return key if head in _sections() else None
    # A key without a dot: a top-level schema value (seed, name, output_dir). Sections are
    # config groups (model=llama-3-8b), so they keep Hydra's meaning.
    return key if key in schema_paths() and key not in _sections() else None


def plain_overrides(overrides: Sequence[str]) -> list[str]:
    """``overrides`` with every plain override of a schema key written as ``++key=value``
    (see the module docstring). Idempotent."""
    return [f"++{o}" if plain_key(o) is not None else o for o in overrides]


def user_spelling(overrides: Sequence[str]) -> list[str]:
    """The inverse of :func:`plain_overrides`: ``++key=value`` back to ``key=value`` where the
    rewrite would produce it (same meaning either way), for display."""
    return [o[2:] if o.startswith("++") and plain_key(o[2:]) else o for o in overrides]


def original_override(override: str, originals: Sequence[str]) -> str:
    """How the user wrote ``override`` (an element of ``plain_overrides(originals)``)."""
    if override.startswith("++") and override[2:] in originals:
        return override[2:]
    return override


def suggest_key(key: str) -> str | None:
    """The schema path closest to a misspelled ``key``, if one is close."""
    close = difflib.get_close_matches(key, schema_paths(), n=1, cutoff=0.75)
    return close[0] if close else None


_HYDRA_UNQUOTED = re.compile(r"^[A-Za-z0-9_./:+-][\w./:+-]*$")


def format_value(value: Any) -> str | None:
    """``value`` as Hydra's override grammar reads it back (``16``, ``true``, ``null``,
    ``[q_proj,v_proj]``, ``'a b'``), or None for a value it cannot spell (a mapping)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if _HYDRA_UNQUOTED.match(value) and value.lower() not in ("true", "false", "null"):
            try:
                float(value)
            except ValueError:
                return value
        escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        return f"'{escaped}'"
    if isinstance(value, list | tuple):
        parts = [format_value(v) for v in value]
        if any(p is None for p in parts):
            return None
        return "[" + ",".join(p for p in parts if p is not None) + "]"
    return None


# -- reading Hydra's override grammar -----------------------------------------------------------
# The reading of what format_value writes, for cfgcheck.compose_plain (a tree composed without
# Hydra) and cfgcheck.fixcheck (a fix applied without Hydra); anything else goes to Hydra's
# parser. tests/test_compose_plain.py compares both with Hydra's OverridesParser.

_KEY = re.compile(r"(\+\+|\+)?([A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*)=(.*)\Z")
# Hydra's override lexer in VALUE_MODE, transcribed (hydra/grammar/OverrideLexer.g4): a value
# of these characters lexes into ID, INT, FLOAT and UNQUOTED_CHAR tokens only; one token
# that is an INT, FLOAT or BOOL is that type, anything else the text as a string.
_UNQUOTED = re.compile(r"[A-Za-z0-9_./+-]+\Z")
_INT_U = r"(?:0|[1-9](?:_?[0-9])*)"
_DIGITS = r"[0-9](?:_?[0-9])*"
_POINT = rf"(?:{_INT_U}\.|(?:{_INT_U})?\.{_DIGITS})"
_EXPONENT = rf"(?:(?:{_INT_U}|{_POINT})[eE][+-]?{_DIGITS})"
_FLOAT = re.compile(rf"[+-]?(?:{_POINT}|{_EXPONENT}|[Ii][Nn][Ff]|[Nn][Aa][Nn])\Z")
_INT = re.compile(rf"[+-]?{_INT_U}\Z")
_BOOL = re.compile(r"(?:[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])\Z")
_NULL = re.compile(r"[Nn][Uu][Ll][Ll]\Z")
NO_VALUE = object()  # what override_value answers for a value it leaves to Hydra's parser


def override_value(text: str) -> Any:
    """The value Hydra's override parser reads from ``text`` (what follows ``key=``), or
    :data:`NO_VALUE` when ``text`` is outside the transcribed part of the grammar."""
    if not _UNQUOTED.match(text):
        return NO_VALUE
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        value = float(text)
        return value if math.isfinite(value) else NO_VALUE
    if _BOOL.match(text):
        return text.lower() == "true"
    if _NULL.match(text):
        return NO_VALUE
    return text


@dataclass(frozen=True)
class PlainOverride:
    """A value override as Hydra's parser reads it, for the readers of parsed overrides
    (:mod:`cfgcheck.locations`, :mod:`cfgcheck.fixcheck`): the members they use of Hydra's
    ``Override``."""

    input_line: str
    key_or_group: str
    parsed: Any
    prefix: str | None  # "+" (add), "++" (force add) or None (change)

    def value(self) -> Any:
        return self.parsed

    def is_delete(self) -> bool:
        return False

    def is_sweep_override(self) -> bool:
        return False

    def is_hydra_override(self) -> bool:
        return False


def parse_override(text: str) -> PlainOverride | None:
    """``key=value``, ``+key=value`` or ``++key=value`` with a value of the transcribed part of
    Hydra's grammar (:func:`override_value`), parsed; None for anything else (Hydra's parser)."""
    match = _KEY.match(text)
    if match is None:
        return None
    prefix, key, raw = match.groups()
    value = override_value(raw)
    if value is NO_VALUE or key.split(".")[0] == "hydra":
        return None
    return PlainOverride(text, key, value, prefix)
