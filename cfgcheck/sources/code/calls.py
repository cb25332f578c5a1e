"""The call matcher: every call of a script or notebook, with its arguments' values.

:func:`read_program` walks the units in execution order with a symbol table:

- ``import x as y`` / ``from x import y as z`` give names their dotted meaning, so
  ``L.Trainer`` is ``lightning.Trainer`` and ``FastLanguageModel.from_pretrained`` is
  ``unsloth.FastLanguageModel.from_pretrained``;
- assignments bind names (tuple unpacking, ``+=``, ``self.x`` inside a class);
- ``if`` with a literal test takes its branch only (``if False:`` blocks of the Unsloth
  notebooks are dead code); any other test reads both branches and a name they set
  differently is :class:`~cfgcheck.sources.code.values.Unknown` after the ``if``;
- a call of a function the file defines runs its body with the arguments bound (keyword
  arguments passed through, ``**kwargs`` included) and returns its ``return`` value; a call
  of a class the file defines runs its ``__init__`` and then its other methods;
- loops, ``with`` and ``try`` bodies are read once; their targets are unknown.

Functions and methods never called (a function handed to ``dataset.map``, a Lightning
module's ``train_dataloader``) are read at the end with unknown parameters. Nothing is ever
imported or executed. Reading is bounded (call depth, statements visited).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from cfgcheck.findings import Location
from cfgcheck.sources.code.text import CodeFile, Unit
from cfgcheck.sources.code.values import Func, Klass, Value, plain


@dataclass(frozen=True, eq=False)
class Arg:
    """One argument of a call: its value, the expression written, and where."""

    value: Value
    node: ast.expr
    location: Location
    keyword: ast.keyword | None = None  # the ``name=value`` node (None: positional)


@dataclass(eq=False)
class CallSite:
    """One call the code makes, as written (``name`` is the callee's dotted name after the
    imports; a method on a recorded result is ``<that call's name>().<method>``)."""

    name: str
    node: ast.Call
    unit: Unit
    location: Location
    args: list[Arg] = field(default_factory=list)
    kwargs: dict[str, Arg] = field(default_factory=dict)
    receiver: Value | None = None  # the object a method is called on
    function: str | None = None  # the file's function the call lies in, if any
    written: str = ""  # the callee as the code spells it (``tokenizer``, ``ds.map``)
    # The innermost ``if`` whose test is not known: the call happens only on one branch.
    condition: Location | None = None
    end: Location | None = None  # where the call's closing parenthesis is

    def tail(self, n: int = 1) -> str:
        """The last ``n`` dotted parts of the callee (``FastLanguageModel.from_pretrained``)."""
        return ".".join(self.name.split(".")[-n:])

    def arg(self, keyword: str, position: int | None = None) -> Arg | None:
        """The argument passed as ``keyword=`` or at ``position``."""
        if keyword in self.kwargs:
            return self.kwargs[keyword]
        if position is not None and position < len(self.args):
            return self.args[position]
        return None


@dataclass
class Program:
    """What the reader found: every call in execution order, and the functions handed over."""

    code: CodeFile
    calls: list[CallSite] = field(default_factory=list)
    functions: dict[str, Func] = field(default_factory=dict)
    classes: dict[str, Klass] = field(default_factory=dict)
    # Attribute assignments (``tokenizer.pad_token = tokenizer.eos_token``): target as
    # written, value, where.
    attributes: list[tuple[str, Value, Location]] = field(default_factory=list)

    def find(self, *tails: str) -> list[CallSite]:
        """The calls whose callee ends with one of ``tails`` (dotted, compared part-wise)."""
        out = []
        for call in self.calls:
            parts = call.name.split(".")
            for tail in tails:
                want = tail.split(".")
                if parts[-len(want) :] == want:
                    out.append(call)
                    break
        return out

    def inside(self, func: Func) -> list[CallSite]:
        """The calls made in the body of ``func``."""
        return [c for c in self.calls if c.function == func.name]


def read_program(code: CodeFile) -> Program:
    """Read ``code`` (see the module); raises :class:`ConfigLoadError` past the bounds."""
    from cfgcheck.sources.code.walker import Reader

    reader = Reader(code)
    reader.run()
    return reader.program


def literal(value: Value) -> Any:
    """The literal of ``value``, or raise ValueError."""
    return plain(value)
