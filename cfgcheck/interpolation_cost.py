"""The cost of resolving a config's ``${...}`` interpolations, counted before anything resolves.

OmegaConf resolves an interpolation by copying what it names: a list of ten ``${a}`` where
``a`` is a list of ten ``${b}`` ... nine levels deep is 10^9 values from a 1 KB file, and
Hydra resolves ``hydra.searchpath`` and defaults entries while it composes. This module walks
the *unresolved* tree and counts the values a full resolution would produce, every reference
followed once (memoized by path), so the count itself is linear in the tree and the number of
references; it stops as soon as the budget is crossed. Resolver calls (``${oc.env:X}``) count
one value plus their arguments. It is the one screen for every entry point: config files
before Hydra reads them (:func:`cfgcheck.safeio.screen_config_dir`), and the composed tree
before anything resolves it (:func:`cfgcheck.compose.compose`, used by the CLI, the hook and
the service).

The budget is :data:`MAX_VALUES` (``CFGCHECK_MAX_INTERPOLATED_VALUES`` changes it): a real
training config resolves to a few hundred values.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from cfgcheck.budget import check as check_budget
from cfgcheck.errors import ConfigLoadError

MAX_VALUES = 1_000_000
MAX_CHAIN = 32  # references followed through references


class InterpolationBudget(ConfigLoadError):
    """Resolving the config's interpolations would cost more than the budget. One line."""


def budget() -> int:
    raw = os.environ.get("CFGCHECK_MAX_INTERPOLATED_VALUES", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else MAX_VALUES


def references(text: str) -> Iterator[str]:
    """The bodies of the outermost ``${...}`` in ``text`` (braces matched, quotes ignored)."""
    i = text.find("${")
    while i >= 0:
        depth, j = 0, i
        while j < len(text):
            if text.startswith("${", j):
                depth += 1
                j += 2
                continue
            if text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        yield text[i + 2 : j]
        i = text.find("${", j + 1) if j < len(text) else -1


class _Counter:
    def __init__(self, tree: Any, where: str, limit: int, prefixes: tuple[str, ...]) -> None:
        self.tree, self.where, self.limit, self.prefixes = tree, where, limit, prefixes
        self.memo: dict[str, int] = {}
        self.active: set[str] = set()
        self.steps = 0

    def refuse(self, path: str) -> InterpolationBudget:
        return InterpolationBudget(
            f"{self.where}: resolving the interpolations (at {path or '<root>'}) would produce "
            f"more than {self.limit:,} values; not resolved (CFGCHECK_MAX_INTERPOLATED_VALUES "
            "changes the budget)"
        )

    def lookup(self, path: str) -> tuple[str, Any] | None:
        stripped = [path[len(p) + 1 :] for p in self.prefixes if path.startswith(p + ".")]
        candidates = [path, *stripped]
        for cand in candidates:
            node: Any = self.tree
            ok = True
            for part in cand.replace("[", ".").replace("]", "").split("."):
                if isinstance(node, dict) and part in node:
                    node = node[part]
                elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                    node = node[int(part)]
                else:
                    ok = False
                    break
            if ok:
                return cand, node
        return None

    def ref_cost(self, body: str, here: str, chain: int) -> int:
        """The values one ``${body}`` found at path ``here`` resolves to."""
        head = body.split("{", 1)[0]
        if ":" in head:  # a resolver call: one value, plus its arguments' references
            return 1 + sum(self.ref_cost(b, here, chain) for b in references(body))
        target = body.strip()
        if target.startswith("."):  # relative to the node holding the string
            dots = len(target) - len(target.lstrip("."))
            parent = here.split(".")[: max(len(here.split(".")) - dots, 0)]
            target = ".".join([*parent, target.lstrip(".")]) if parent else target.lstrip(".")
        if target in self.memo:
            return self.memo[target]
        if chain > MAX_CHAIN:
            raise InterpolationBudget(
                f"{self.where}: interpolations refer through more than {MAX_CHAIN} levels "
                f"(at {here}); not resolved"
            )
        found = self.lookup(target)
        if found is None or found[0] in self.active:  # unknown or a cycle: OmegaConf's error
            return 1
        path, node = found
        self.active.add(path)
        try:
            cost = self.node_cost(node, path, chain + 1)
        finally:
            self.active.discard(path)
        self.memo[target] = cost
        return cost

    def node_cost(self, node: Any, path: str, chain: int) -> int:
        """The values ``node`` (at ``path``) resolves to, every reference expanded."""
        cost = 0
        stack: list[tuple[Any, str]] = [(node, path)]
        while stack:
            value, here = stack.pop()
            cost += 1
            if isinstance(value, dict):
                stack.extend((v, f"{here}.{k}" if here else str(k)) for k, v in value.items())
            elif isinstance(value, list):
                stack.extend((v, f"{here}.{i}") for i, v in enumerate(value))
            elif isinstance(value, str) and "${" in value:
                cost += sum(self.ref_cost(b, here, chain) for b in references(value))
            if cost > self.limit:
                raise self.refuse(here)
            self.steps += 1
            if not self.steps & 4095:
                check_budget("counting interpolations")
        return cost


def check_cost(
    tree: Any, where: str, *, limit: int | None = None, prefixes: tuple[str, ...] = ()
) -> int:
    """The values resolving ``tree`` (plain dicts and lists, interpolations unresolved) would
    produce, or :class:`InterpolationBudget` once that passes ``limit`` (:func:`budget`).
    ``prefixes``: packages the tree sits under in the composed config (``model`` for
    ``conf/model/x.yaml``), so ``${model.a}`` written in that file finds ``a``."""
    counter = _Counter(tree, where, limit or budget(), prefixes)
    return counter.node_cost(tree, "", 0)


def check_composed(cfg: Any, where: str, limit: int | None = None) -> None:
    """:func:`check_cost` on an unresolved OmegaConf config."""
    from omegaconf import OmegaConf

    tree = OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False)
    check_cost(tree, where, limit=limit)
