"""Values the static reader can know, and the operations it follows on them.

A value is one of:

- :class:`Known`: a Python literal (numbers, strings, booleans, None, and lists, tuples and
  dicts of them), computed from literals only;
- :class:`Ref`: a name the imports give a dotted meaning to (``torch.bfloat16``,
  ``transformers.default_data_collator``, ``unsloth.FastLanguageModel``), never looked up;
- :class:`Obj`: what a recorded call returned (``model``, ``tokenizer``, ``dataset``), known
  only as "the result of that call";
- :class:`Func` / :class:`Klass`: a function or class the file itself defines;
- :class:`Entries`: a dict literal some of whose values are not literals (``**kwargs``);
- :class:`Unknown`: anything else, with why and where (``os.environ``, ``input()``, a call's
  result used as a number). Never a guess.
"""

from __future__ import annotations

import ast
import itertools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cfgcheck.findings import Location

if TYPE_CHECKING:
    from cfgcheck.sources.code.calls import CallSite
    from cfgcheck.sources.code.text import Unit

MAX_STR = 100_000  # a literal string longer than this is not a config value
MAX_POWER = 64


@dataclass(frozen=True)
class Known:
    value: Any
    # Where the literal was written (an assignment read through a name), when not at the use.
    origin: Location | None = None


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True, eq=False)
class Obj:
    call: CallSite
    index: int | None = None  # ``a, b = f()``: which item


@dataclass(frozen=True, eq=False)
class Func:
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    unit: Unit
    name: str
    scope: Any = None  # the frame it was defined in (its closure)


@dataclass(frozen=True, eq=False)
class Klass:
    node: ast.ClassDef
    unit: Unit
    bases: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Entries:
    """A dict literal (or ``dict(...)`` / ``**kwargs``) with string keys and any values."""

    items: Mapping[str, Value]
    nodes: Mapping[str, ast.expr] = field(default_factory=dict)
    unit: Unit | None = None


@dataclass(frozen=True)
class Unknown:
    why: str
    location: Location | None = None


Value = Known | Ref | Obj | Func | Klass | Entries | Unknown


def describe(value: Value) -> str:
    """``value`` in a message."""
    if isinstance(value, Known):
        return repr(value.value)
    if isinstance(value, Ref):
        return value.name
    if isinstance(value, Obj):
        return f"the result of {value.call.name}(...)"
    if isinstance(value, Func | Klass):
        return f"{value.name if isinstance(value, Func) else value.node.name} (defined in the file)"
    if isinstance(value, Entries):
        return "a dict"
    return value.why


_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


def _small(value: Any) -> bool:
    if isinstance(value, str | bytes | list | tuple | dict):
        return len(value) <= MAX_STR
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() <= 256
    return True


def binop(op: ast.operator, left: Any, right: Any) -> Any:
    """``left op right`` on literals; raises ValueError where it would not be a literal, be
    huge (``10**10**10``, ``"x" * 10**9``) or raise."""
    fn = _BINOPS.get(type(op))
    if fn is None:
        raise ValueError("operator")
    if isinstance(op, ast.Pow) and isinstance(right, int) and abs(right) > MAX_POWER:
        raise ValueError("power too large")
    if isinstance(op, ast.LShift) and isinstance(right, int) and right > MAX_POWER:
        raise ValueError("shift too large")
    if isinstance(op, ast.Mult):
        for seq, n in ((left, right), (right, left)):
            too_long = isinstance(seq, str | list | tuple) and isinstance(n, int)
            if too_long and len(seq) * max(n, 0) > MAX_STR:
                raise ValueError("sequence too large")
    if isinstance(op, ast.Mod) and isinstance(left, str):
        raise ValueError("printf formatting")  # %-formatting of anything is not followed
    try:
        out = fn(left, right)
    except (ArithmeticError, TypeError, ValueError) as e:
        raise ValueError(str(e)) from e
    if not _small(out):
        raise ValueError("too large")
    return out


def compare(ops: list[ast.cmpop], values: list[Any]) -> bool:
    for op, (a, b) in zip(ops, itertools.pairwise(values), strict=False):
        fn = _COMPARE.get(type(op))
        if fn is None:
            raise ValueError("comparison")
        try:
            if not fn(a, b):
                return False
        except TypeError as e:
            raise ValueError(str(e)) from e
    return True


def unary(op: ast.unaryop, operand: Any) -> Any:
    try:
        if isinstance(op, ast.USub):
            return -operand
        if isinstance(op, ast.UAdd):
            return +operand
        if isinstance(op, ast.Not):
            return not operand
        if isinstance(op, ast.Invert):
            return ~operand
    except TypeError as e:
        raise ValueError(str(e)) from e
    raise ValueError("operator")


def formatted(value: Any, conversion: int, spec: str) -> str:
    """One ``{value!r:spec}`` of an f-string."""
    if conversion == ord("r"):
        value = repr(value)
    elif conversion == ord("s"):
        value = str(value)
    elif conversion == ord("a"):
        value = ascii(value)
    try:
        out = format(value, spec)
    except (TypeError, ValueError) as e:
        raise ValueError(str(e)) from e
    if len(out) > MAX_STR:
        raise ValueError("too large")
    return out


def plain(value: Value) -> Any:
    """The literal of a :class:`Known` (an :class:`Entries` of literals counts too); raises
    ValueError for anything else."""
    if isinstance(value, Known):
        return value.value
    if isinstance(value, Entries):
        return {k: plain(v) for k, v in value.items.items()}
    raise ValueError("not a literal")
