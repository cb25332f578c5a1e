"""Expressions of the static reader: what a piece of code evaluates to, as far as literals go
(see :mod:`cfgcheck.sources.code.values`). Statements and calls are in
:mod:`cfgcheck.sources.code.walker`, which builds on this class.
"""

from __future__ import annotations

import ast
import builtins
from typing import Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Location
from cfgcheck.sources.code.calls import Program
from cfgcheck.sources.code.text import CodeFile, Unit
from cfgcheck.sources.code.values import (
    Entries,
    Func,
    Known,
    Ref,
    Unknown,
    Value,
    binop,
    compare,
    formatted,
    unary,
)

_BUILTINS = frozenset(dir(builtins))
MAX_CALL_DEPTH = 8
MAX_STEPS = 200_000

OPAQUE = {
    "os.environ": "os.environ (set when the code runs)",
    "os.getenv": "os.getenv(...) (set when the code runs)",
    "os.environ.get": "os.environ.get(...) (set when the code runs)",
    "input": "input() (typed when the code runs)",
    "sys.argv": "sys.argv (given when the code runs)",
}


class Frame:
    def __init__(self, parent: Frame | None, function: str | None) -> None:
        self.names: dict[str, Value] = {}
        self.parent = parent
        self.function = function
        self.returned: Value | None = None

    def lookup(self, name: str) -> Value | None:
        frame: Frame | None = self
        while frame is not None:
            if name in frame.names:
                return frame.names[name]
            frame = frame.parent
        return None


class Expressions:
    """Evaluates expressions in a frame; :class:`~cfgcheck.sources.code.walker.Reader` adds
    statements and calls."""

    code: CodeFile
    program: Program
    steps: int
    pending: list[Func]

    def call(self, node: ast.Call, frame: Frame, unit: Unit) -> Value:
        raise NotImplementedError

    def bind(
        self, target: ast.expr, value: Value, frame: Frame, unit: Unit, node: ast.expr | None
    ) -> None:
        raise NotImplementedError

    def tick(self, node: ast.AST) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            line = getattr(node, "lineno", "?")
            raise ConfigLoadError(
                f"{self.code.file}: more than {MAX_STEPS} steps to read (line {line}); not read"
            )

    def loc(self, node: ast.AST, unit: Unit) -> Location:
        return self.code.location(unit, getattr(node, "lineno", None))

    def dotted(self, node: ast.expr, frame: Frame, resolve: bool = True) -> str | None:
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

    def expr(self, node: ast.expr | None, frame: Frame, unit: Unit) -> Value:
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
            if node.id in OPAQUE:
                return Unknown(OPAQUE[node.id], where)
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
                if name in OPAQUE:
                    return Unknown(OPAQUE[name], where)
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

    def fstring(self, node: ast.JoinedStr, frame: Frame, unit: Unit) -> Value:
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

    def dict_literal(self, node: ast.Dict, frame: Frame, unit: Unit) -> Value:
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

    def subscript(self, node: ast.Subscript, frame: Frame, unit: Unit) -> Value:
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
