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
import builtins
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Location
from cfgcheck.sources.code.text import CodeFile, Unit
from cfgcheck.sources.code.values import (
    Entries,
    Func,
    Klass,
    Known,
    Obj,
    Ref,
    Unknown,
    Value,
    binop,
    compare,
    formatted,
    plain,
    unary,
)

_BUILTINS = frozenset(dir(builtins))
MAX_CALL_DEPTH = 8
MAX_STEPS = 200_000

_OPAQUE = {
    "os.environ": "os.environ (set when the code runs)",
    "os.getenv": "os.getenv(...) (set when the code runs)",
    "os.environ.get": "os.environ.get(...) (set when the code runs)",
    "input": "input() (typed when the code runs)",
    "sys.argv": "sys.argv (given when the code runs)",
}


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


class _Frame:
    def __init__(self, parent: _Frame | None, function: str | None) -> None:
        self.names: dict[str, Value] = {}
        self.parent = parent
        self.function = function
        self.returned: Value | None = None

    def lookup(self, name: str) -> Value | None:
        frame: _Frame | None = self
        while frame is not None:
            if name in frame.names:
                return frame.names[name]
            frame = frame.parent
        return None


def read_program(code: CodeFile) -> Program:
    """Read ``code`` (see the module); raises :class:`ConfigLoadError` past the bounds."""
    reader = _Reader(code)
    reader.run()
    return reader.program


class _Reader:
    def __init__(self, code: CodeFile) -> None:
        self.code = code
        self.program = Program(code)
        self.globals = _Frame(None, None)
        self.globals.names["__name__"] = Known("__main__")  # the file run as a script
        self.steps = 0
        self.depth = 0
        self.running: set[int] = set()
        self.ran: set[int] = set()
        self.pending: list[Func] = []
        self.classes: list[tuple[Klass, dict[str, Value] | None]] = []
        self.conditions: list[Location] = []  # the ifs whose test is unknown, innermost last

    # -- walking -----------------------------------------------------------------------------
    def run(self) -> None:
        for unit in self.code.units:
            self.block(unit.tree.body, self.globals, unit)
        # Functions never called (handed to dataset.map, used as callbacks), and the methods
        # of the file's classes that were never instantiated: read with unknown parameters.
        for func in self.pending:
            if id(func.node) not in self.ran:
                self.invoke(func, [], {}, None)
        for klass, attrs in list(self.classes):
            if attrs is None:
                self.instantiate(klass, [], {})

    def tick(self, node: ast.AST) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            line = getattr(node, "lineno", "?")
            raise ConfigLoadError(
                f"{self.code.file}: more than {MAX_STEPS} steps to read (line {line}); not read"
            )

    def loc(self, node: ast.AST, unit: Unit) -> Location:
        return self.code.location(unit, getattr(node, "lineno", None))

    def block(self, body: list[ast.stmt], frame: _Frame, unit: Unit) -> None:
        for stmt in body:
            if frame.returned is not None:
                return
            self.stmt(stmt, frame, unit)

    def stmt(self, s: ast.stmt, frame: _Frame, unit: Unit) -> None:
        self.tick(s)
        if isinstance(s, ast.Import):
            for alias in s.names:
                if alias.asname:
                    frame.names[alias.asname] = Ref(alias.name)
                else:
                    top = alias.name.split(".")[0]
                    frame.names[top] = Ref(top)
        elif isinstance(s, ast.ImportFrom):
            base = "." * s.level + (s.module or "")
            for alias in s.names:
                if alias.name != "*":
                    frame.names[alias.asname or alias.name] = Ref(f"{base}.{alias.name}")
        elif isinstance(s, ast.Assign):
            value = self.expr(s.value, frame, unit)
            for target in s.targets:
                self.bind(target, value, frame, unit, s.value)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.bind(s.target, self.expr(s.value, frame, unit), frame, unit, s.value)
        elif isinstance(s, ast.AugAssign):
            current = self.expr(s.target, frame, unit)
            operand = self.expr(s.value, frame, unit)
            self.bind(s.target, self.arith(s.op, current, operand, s, unit), frame, unit, None)
        elif isinstance(s, ast.Expr):
            self.expr(s.value, frame, unit)
        elif isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef):
            func = Func(s, unit, s.name, frame)
            frame.names[s.name] = func
            self.program.functions.setdefault(s.name, func)
            self.pending.append(func)
        elif isinstance(s, ast.ClassDef):
            bases = tuple(self.dotted(b, frame) or "" for b in s.bases)
            klass = Klass(s, unit, bases)
            frame.names[s.name] = klass
            self.classes.append((klass, None))
        elif isinstance(s, ast.If):
            self.branch(s, frame, unit)
        elif isinstance(s, ast.For | ast.AsyncFor):
            self.expr(s.iter, frame, unit)
            self.bind(s.target, Unknown("a loop variable", self.loc(s, unit)), frame, unit, None)
            self.block(s.body, frame, unit)
            self.block(s.orelse, frame, unit)
        elif isinstance(s, ast.While):
            self.expr(s.test, frame, unit)
            self.block(s.body, frame, unit)
            self.block(s.orelse, frame, unit)
        elif isinstance(s, ast.With | ast.AsyncWith):
            for item in s.items:
                self.expr(item.context_expr, frame, unit)
                if item.optional_vars is not None:
                    why = Unknown("a with-statement's value", self.loc(s, unit))
                    self.bind(item.optional_vars, why, frame, unit, None)
            self.block(s.body, frame, unit)
        elif isinstance(s, ast.Try):
            self.block(s.body, frame, unit)
            for handler in s.handlers:
                self.block(handler.body, frame, unit)
            self.block(s.orelse, frame, unit)
            self.block(s.finalbody, frame, unit)
        elif isinstance(s, ast.Return):
            value = self.expr(s.value, frame, unit) if s.value is not None else Known(None)
            if frame.function is not None:
                frame.returned = value
        elif isinstance(s, ast.Delete):
            for target in s.targets:
                if isinstance(target, ast.Name):
                    frame.names.pop(target.id, None)

    def branch(self, s: ast.If, frame: _Frame, unit: Unit) -> None:
        test = self.expr(s.test, frame, unit)
        if isinstance(test, Known):
            self.block(s.body if test.value else s.orelse, frame, unit)
            return
        before = dict(frame.names)
        where = self.loc(s, unit)
        self.conditions.append(where)
        try:
            self.block(s.body, frame, unit)
            after_body = dict(frame.names)
            returned = frame.returned
            frame.names = dict(before)
            frame.returned = None
            self.block(s.orelse, frame, unit)
        finally:
            self.conditions.pop()
        for name in set(after_body) | set(frame.names):
            a, b = after_body.get(name), frame.names.get(name)
            if a is b or (isinstance(a, Known) and isinstance(b, Known) and a.value == b.value):
                continue
            if a is None or b is None:
                frame.names[name] = a or b  # type: ignore[assignment]
                if before.get(name) is None:
                    continue
            frame.names[name] = Unknown(
                f"{name}, set differently depending on the condition of the if at {where}",
                where,
            )
        if returned is not None and frame.returned is None:
            frame.returned = returned

    def bind(
        self, target: ast.expr, value: Value, frame: _Frame, unit: Unit, node: ast.expr | None
    ) -> None:
        if isinstance(value, Known) and value.origin is None and node is not None:
            value = Known(value.value, self.loc(node, unit))
        if isinstance(target, ast.Name):
            frame.names[target.id] = value
        elif isinstance(target, ast.Tuple | ast.List):
            for i, element in enumerate(target.elts):
                item: Value
                if isinstance(value, Known) and isinstance(value.value, list | tuple):
                    seq = value.value
                    item = Known(seq[i]) if i < len(seq) else Unknown("unpacked", None)
                elif isinstance(value, Obj):
                    item = Obj(value.call, i)
                else:
                    item = Unknown(f"an item unpacked from {target.lineno}", self.loc(target, unit))
                self.bind(element, item, frame, unit, None)
        elif isinstance(target, ast.Attribute):
            dotted = self.dotted(target, frame, resolve=False)
            if dotted and dotted.startswith("self."):
                frame.names[dotted] = value
            self.program.attributes.append(
                (ast.unparse(target)[:80], value, self.loc(target, unit))
            )

    # -- expressions -------------------------------------------------------------------------
    def dotted(self, node: ast.expr, frame: _Frame, resolve: bool = True) -> str | None:
        """``a.b.c`` of a name/attribute chain, the first name resolved through the imports."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        head = node.id
        if resolve:
            bound = frame.lookup(head)
            if isinstance(bound, Ref):
                head = bound.name
        return ".".join([head, *reversed(parts)])

    def expr(self, node: ast.expr | None, frame: _Frame, unit: Unit) -> Value:
        if node is None:
            return Known(None)
        self.tick(node)
        where = self.loc(node, unit)
        if isinstance(node, ast.Constant):
            return Known(node.value)
        if isinstance(node, ast.Name):
            bound = frame.lookup(node.id)
            if bound is not None:
                return bound
            if node.id in _OPAQUE:
                return Unknown(_OPAQUE[node.id], where)
            if node.id in _BUILTINS:
                return Ref(node.id)
            return Unknown(f"{node.id}, a name the file does not assign before this", where)
        if isinstance(node, ast.Attribute):
            dotted = self.dotted(node, frame, resolve=False)
            if dotted and dotted.startswith("self."):
                bound = frame.lookup(dotted)
                if bound is not None:
                    return bound
            base = self.expr(node.value, frame, unit)
            if isinstance(base, Ref):
                name = f"{base.name}.{node.attr}"
                if name in _OPAQUE:
                    return Unknown(_OPAQUE[name], where)
                return Ref(name)
            return Unknown(
                f"an attribute ({ast.unparse(node)}) of a value known when it runs", where
            )
        if isinstance(node, ast.BinOp):
            left = self.expr(node.left, frame, unit)
            right = self.expr(node.right, frame, unit)
            return self.arith(node.op, left, right, node, unit)
        if isinstance(node, ast.UnaryOp):
            operand = self.expr(node.operand, frame, unit)
            if isinstance(operand, Known):
                try:
                    return Known(unary(node.op, operand.value))
                except ValueError:
                    pass
            return self.unknown_from(operand, node, unit)
        if isinstance(node, ast.BoolOp):
            values = [self.expr(v, frame, unit) for v in node.values]
            if all(isinstance(v, Known) for v in values):
                result: Any = None
                for v in values:
                    result = v.value  # type: ignore[union-attr]
                    if isinstance(node.op, ast.And) and not result:
                        break
                    if isinstance(node.op, ast.Or) and result:
                        break
                return Known(result)
            return self.unknown_from(
                next(v for v in values if not isinstance(v, Known)), node, unit
            )
        if isinstance(node, ast.Compare):
            values = [self.expr(v, frame, unit) for v in [node.left, *node.comparators]]
            if all(isinstance(v, Known) for v in values):
                try:
                    return Known(compare(node.ops, [v.value for v in values]))  # type: ignore[union-attr]
                except ValueError:
                    pass
            return Unknown(f"the comparison {ast.unparse(node)[:80]}", where)
        if isinstance(node, ast.IfExp):
            test = self.expr(node.test, frame, unit)
            body = self.expr(node.body, frame, unit)
            orelse = self.expr(node.orelse, frame, unit)
            if isinstance(test, Known):
                return body if test.value else orelse
            return Unknown(f"{ast.unparse(node)[:80]} (depends on a condition)", where)
        if isinstance(node, ast.JoinedStr):
            return self.fstring(node, frame, unit)
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items = [self.expr(e, frame, unit) for e in node.elts]
            if any(isinstance(e, ast.Starred) for e in node.elts):
                return Unknown("a starred sequence", where)
            bad = next((v for v in items if not isinstance(v, Known)), None)
            if bad is not None:
                return self.unknown_from(bad, node, unit)
            literal = [v.value for v in items]  # type: ignore[union-attr]
            if isinstance(node, ast.Tuple):
                return Known(tuple(literal))
            return Known(literal if isinstance(node, ast.List) else set(literal))
        if isinstance(node, ast.Dict):
            return self.dict_literal(node, frame, unit)
        if isinstance(node, ast.Subscript):
            return self.subscript(node, frame, unit)
        if isinstance(node, ast.Call):
            return self.call(node, frame, unit)
        if isinstance(node, ast.Lambda):
            func = Func(node, unit, f"<lambda line {node.lineno}>", frame)
            self.pending.append(func)
            return func
        if isinstance(node, ast.NamedExpr):
            value = self.expr(node.value, frame, unit)
            self.bind(node.target, value, frame, unit, node.value)
            return value
        if isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            for gen in node.generators:
                self.expr(gen.iter, frame, unit)
            return Unknown("a comprehension", where)
        if isinstance(node, ast.Await):
            self.expr(node.value, frame, unit)
        return Unknown(f"{ast.unparse(node)[:80]}", where)

    def unknown_from(self, value: Value, node: ast.expr, unit: Unit) -> Unknown:
        if isinstance(value, Unknown):
            return value
        text = ast.unparse(node)
        return Unknown(text if len(text) <= 80 else text[:77] + "...", self.loc(node, unit))

    def arith(
        self, op: ast.operator, left: Value, right: Value, node: ast.AST, unit: Unit
    ) -> Value:
        where = self.loc(node, unit)
        if isinstance(left, Known) and isinstance(right, Known):
            try:
                return Known(binop(op, left.value, right.value))
            except ValueError:
                pass
        for side in (left, right):
            if isinstance(side, Unknown):
                return side
        text = ast.unparse(node) if isinstance(node, ast.expr) else "an operation"
        return Unknown(f"{text[:80]} (not computed from literals)", where)

    def fstring(self, node: ast.JoinedStr, frame: _Frame, unit: Unit) -> Value:
        out: list[str] = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(str(part.value))
                continue
            if not isinstance(part, ast.FormattedValue):
                return Unknown("an f-string", self.loc(node, unit))
            value = self.expr(part.value, frame, unit)
            spec = self.expr(part.format_spec, frame, unit) if part.format_spec else Known("")
            if not isinstance(value, Known) or not isinstance(spec, Known):
                return self.unknown_from(
                    value if not isinstance(value, Known) else spec, node, unit
                )
            try:
                out.append(formatted(value.value, part.conversion, str(spec.value)))
            except ValueError:
                return Unknown(f"the f-string {ast.unparse(node)[:60]}", self.loc(node, unit))
        return Known("".join(out))

    def dict_literal(self, node: ast.Dict, frame: _Frame, unit: Unit) -> Value:
        items: dict[str, Value] = {}
        nodes: dict[str, ast.expr] = {}
        for key, value_node in zip(node.keys, node.values, strict=False):
            value = self.expr(value_node, frame, unit)
            if key is None:  # {**other}
                if isinstance(value, Entries):
                    items.update(value.items)
                    nodes.update(value.nodes)
                    continue
                if isinstance(value, Known) and isinstance(value.value, dict):
                    for k, v in value.value.items():
                        items[str(k)] = Known(v)
                        nodes[str(k)] = value_node
                    continue
                return self.unknown_from(value, node, unit)
            k = self.expr(key, frame, unit)
            if not isinstance(k, Known) or not isinstance(k.value, str | int | float | bool):
                return Unknown("a dict with computed keys", self.loc(node, unit))
            items[str(k.value)] = value
            nodes[str(k.value)] = value_node
        return self.entries(items, nodes, unit)

    @staticmethod
    def entries(items: dict[str, Value], nodes: dict[str, ast.expr], unit: Unit) -> Value:
        if all(isinstance(v, Known) for v in items.values()):
            return Entries(items, nodes, unit)
        return Entries(items, nodes, unit)

    def subscript(self, node: ast.Subscript, frame: _Frame, unit: Unit) -> Value:
        base = self.expr(node.value, frame, unit)
        index = self.expr(node.slice, frame, unit)
        where = self.loc(node, unit)
        if isinstance(base, Unknown):
            return base
        if isinstance(index, Known):
            if isinstance(base, Entries) and str(index.value) in base.items:
                return base.items[str(index.value)]
            if isinstance(base, Known):
                try:
                    return Known(base.value[index.value])
                except (KeyError, IndexError, TypeError):
                    pass
        return Unknown(f"{ast.unparse(node)[:80]} (a value the code computes when it runs)", where)

    # -- calls -------------------------------------------------------------------------------
    def callee(self, func: ast.expr, frame: _Frame, unit: Unit) -> tuple[Value, str, Value | None]:
        """The callee's value, its dotted name and the receiver of a method (evaluated once)."""
        if isinstance(func, ast.Attribute):
            dotted = self.dotted(func, frame, resolve=False)
            bound = frame.lookup(dotted) if dotted and dotted.startswith("self.") else None
            if bound is not None:
                return bound, self.name_of(bound, dotted or "?"), None
            receiver = self.expr(func.value, frame, unit)
            if isinstance(receiver, Ref):
                value: Value = Ref(f"{receiver.name}.{func.attr}")
                return value, f"{receiver.name}.{func.attr}", None
            if isinstance(receiver, Obj):
                return receiver, f"{self.name_of(receiver, '?')}.{func.attr}", receiver
            return receiver, f"{ast.unparse(func.value)[:60]}.{func.attr}", receiver
        value = self.expr(func, frame, unit)
        return value, self.name_of(value, ast.unparse(func)[:60]), None

    @staticmethod
    def name_of(value: Value, written: str) -> str:
        if isinstance(value, Ref):
            return value.name
        if isinstance(value, Func):
            return value.name
        if isinstance(value, Klass):
            return value.node.name
        if isinstance(value, Obj):
            index = "" if value.index is None else f"[{value.index}]"
            return f"{value.call.name}(){index}"
        return written

    def call(self, node: ast.Call, frame: _Frame, unit: Unit) -> Value:
        callee, name, receiver = self.callee(node.func, frame, unit)
        if receiver is not None:  # a method: the callee is the receiver's, not a function
            callee = Ref(name) if isinstance(receiver, Ref) else Unknown(name)
        site = CallSite(
            name,
            node,
            unit,
            self.loc(node, unit),
            receiver=receiver,
            function=self._function_of(frame),
            end=self.code.location(unit, node.end_lineno),
            written=ast.unparse(node.func)[:80],
            condition=self.conditions[-1] if self.conditions else None,
        )
        for a in node.args:
            if isinstance(a, ast.Starred):
                self.expr(a.value, frame, unit)
                site.args.append(Arg(Unknown("*args", self.loc(a, unit)), a, self.loc(a, unit)))
                continue
            site.args.append(Arg(self.expr(a, frame, unit), a, self.loc(a, unit)))
        for kw in node.keywords:
            value = self.expr(kw.value, frame, unit)
            if kw.arg is not None:
                site.kwargs[kw.arg] = Arg(value, kw.value, self.loc(kw, unit), kw)
                continue
            for k, v, n, u in self.unpacked(value, kw, unit):  # **kwargs
                site.kwargs.setdefault(k, Arg(v, n, self.code.location(u, n.lineno), None))
        if name in _OPAQUE or name.startswith(("os.environ", "os.getenv")):
            return Unknown(
                _OPAQUE.get(name, f"{name}(...) (set when the code runs)"), site.location
            )
        self.program.calls.append(site)
        if isinstance(callee, Func):
            return self.invoke(callee, site.args, site.kwargs, site)
        if isinstance(callee, Klass):
            self.instantiate(callee, site.args, site.kwargs)
            return Obj(site)
        if name == "dict" and not site.args:
            return self.entries(
                {k: a.value for k, a in site.kwargs.items()},
                {k: a.node for k, a in site.kwargs.items()},
                unit,
            )
        if name in ("int", "float", "str", "bool") and len(site.args) == 1:
            arg = site.args[0].value
            if isinstance(arg, Known):
                try:
                    return Known(
                        {"int": int, "float": float, "str": str, "bool": bool}[name](arg.value)
                    )
                except (TypeError, ValueError):
                    pass
            elif isinstance(arg, Unknown):
                return arg
        for value in [*(a.value for a in site.args), *(a.value for a in site.kwargs.values())]:
            if isinstance(value, Func):
                self.pending.append(value)
        return Obj(site)

    def unpacked(
        self, value: Value, kw: ast.keyword, unit: Unit
    ) -> Iterator[tuple[str, Value, ast.expr, Unit]]:
        if isinstance(value, Entries):
            for k, v in value.items.items():
                yield k, v, value.nodes.get(k, kw.value), value.unit or unit
        elif isinstance(value, Known) and isinstance(value.value, dict):
            for k, v in value.value.items():
                yield str(k), Known(v), kw.value, unit

    @staticmethod
    def _function_of(frame: _Frame) -> str | None:
        f: _Frame | None = frame
        while f is not None:
            if f.function is not None:
                return f.function
            f = f.parent
        return None

    def invoke(
        self,
        func: Func,
        args: list[Arg],
        kwargs: Mapping[str, Arg],
        site: CallSite | None,
        self_names: dict[str, Value] | None = None,
    ) -> Value:
        key = id(func.node)
        where = site.location if site else None
        if key in self.running or self.depth >= MAX_CALL_DEPTH:
            return Unknown(f"the result of {func.name}(...) (recursive or nested too deep)", where)
        self.ran.add(key)
        frame = _Frame(func.scope if isinstance(func.scope, _Frame) else self.globals, func.name)
        if self_names is not None:
            frame.names.update(self_names)
        self.bind_params(func, args, kwargs, frame, self_names is not None)
        self.running.add(key)
        self.depth += 1
        try:
            if isinstance(func.node, ast.Lambda):
                result = self.expr(func.node.body, frame, func.unit)
            else:
                self.block(func.node.body, frame, func.unit)
                result = frame.returned if frame.returned is not None else Known(None)
        finally:
            self.depth -= 1
            self.running.discard(key)
        if self_names is not None:
            self_names.update({k: v for k, v in frame.names.items() if k.startswith("self.")})
        return result

    def bind_params(
        self,
        func: Func,
        args: list[Arg],
        kwargs: Mapping[str, Arg],
        frame: _Frame,
        method: bool,
    ) -> None:
        a = func.node.args
        positional = [*a.posonlyargs, *a.args]
        if method and positional:
            frame.names[positional[0].arg] = Ref("self")
            positional = positional[1:]
        defaults: dict[str, ast.expr] = {}
        for p, d in zip(reversed(positional), reversed(a.defaults), strict=False):
            defaults[p.arg] = d
        for p, kw_default in zip(a.kwonlyargs, a.kw_defaults, strict=False):
            if kw_default is not None:
                defaults[p.arg] = kw_default
        used: set[str] = set()
        for i, p in enumerate([*positional, *a.kwonlyargs]):
            value: Value
            if i < len(positional) and i < len(args):
                value = args[i].value
            elif p.arg in kwargs:
                value = kwargs[p.arg].value
                used.add(p.arg)
            elif p.arg in defaults:
                value = self.expr(defaults[p.arg], self.globals, func.unit)
            else:
                value = Unknown(
                    f"the parameter {p.arg} of {func.name}", self.code.location(func.unit, p.lineno)
                )
            frame.names[p.arg] = value
        if a.vararg is not None:
            frame.names[a.vararg.arg] = Unknown("*args", None)
        if a.kwarg is not None:
            extra = {k: v for k, v in kwargs.items() if k not in used and k not in frame.names}
            frame.names[a.kwarg.arg] = Entries(
                {k: v.value for k, v in extra.items()},
                {k: v.node for k, v in extra.items()},
                func.unit,
            )

    def instantiate(self, klass: Klass, args: list[Arg], kwargs: Mapping[str, Arg]) -> None:
        attrs: dict[str, Value] = {}
        self.classes = [(k, attrs if k is klass else a) for k, a in self.classes]
        methods = [
            s for s in klass.node.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        init = next((m for m in methods if m.name == "__init__"), None)
        prefix = klass.node.name
        if init is not None:
            func = Func(init, klass.unit, f"{prefix}.__init__")
            self.invoke(func, args, kwargs, None, attrs)
        for method in methods:
            if method is not init:
                func = Func(method, klass.unit, f"{prefix}.{method.name}")
                self.invoke(func, [], {}, None, attrs)
                self.ran.add(id(method))


def literal(value: Value) -> Any:
    """The literal of ``value``, or raise ValueError."""
    return plain(value)
