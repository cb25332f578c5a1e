"""Statements and calls of the static reader (see :mod:`cfgcheck.sources.code.calls` for what
it reads and how): a walk of the units in execution order with a symbol table, functions the
file defines run with their arguments bound, classes with their ``__init__``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping

from cfgcheck.findings import Location
from cfgcheck.sources.code.calls import Arg, CallSite, Program
from cfgcheck.sources.code.expressions import MAX_CALL_DEPTH, OPAQUE, Expressions, Frame
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
)


class Reader(Expressions):
    """One reading of a file: :meth:`run` fills :attr:`program`."""

    def __init__(self, code: CodeFile) -> None:
        self.code = code
        self.program = Program(code)
        self.globals = Frame(None, None)
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

    def block(self, body: list[ast.stmt], frame: Frame, unit: Unit) -> None:
        for stmt in body:
            if frame.returned is not None:
                return
            self.stmt(stmt, frame, unit)

    def stmt(self, s: ast.stmt, frame: Frame, unit: Unit) -> None:
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
            self.program.classes.setdefault(s.name, klass)
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

    def branch(self, s: ast.If, frame: Frame, unit: Unit) -> None:
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
        self, target: ast.expr, value: Value, frame: Frame, unit: Unit, node: ast.expr | None
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

    # -- calls -------------------------------------------------------------------------------
    def callee(self, func: ast.expr, frame: Frame, unit: Unit) -> tuple[Value, str, Value | None]:
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

    def call(self, node: ast.Call, frame: Frame, unit: Unit) -> Value:
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
        if name in OPAQUE or name.startswith(("os.environ", "os.getenv")):
            return Unknown(OPAQUE.get(name, f"{name}(...) (set when the code runs)"), site.location)
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
    def _function_of(frame: Frame) -> str | None:
        f: Frame | None = frame
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
        frame = Frame(func.scope if isinstance(func.scope, Frame) else self.globals, func.name)
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
        frame: Frame,
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
