"""The rule registry.

A rule is one small function ``(RunConfig) -> Iterable[Problem]`` registered with
:func:`rule` under a stable kebab-case id, together with the config sections it reads.
A rule runs only when every section it needs passed the schema, so a type error in
``trainer`` does not hide a ``seq-len-over-block-size`` between ``model`` and ``data``.

The same decorator is public (``@cfgcheck.rule``): a team's rules register here too, from its
own code or from an installed package's ``cfgcheck.rules`` entry point (loaded on first use by
:func:`all_rules` / :func:`run_rules`, see :mod:`cfgcheck.project.plugins`). A team rule may
require a section of the team's own schema (``requires=["eval"]``); it runs when the schema
in use has that section and it passed.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from pydantic import BaseModel

from cfgcheck.findings import Finding, Fix, Severity
from cfgcheck.reuse import Pins, Scope, Unkeyable, current_scope, number_of, pinned
from cfgcheck.schema.run import SECTIONS, RunConfig


@dataclass(frozen=True)
class Problem:
    """What a rule function yields; the registry stamps it with the rule id."""

    severity: Severity
    paths: tuple[str, ...]
    message: str
    hint: str
    fixes: tuple[Fix, ...] = ()


RuleFunc = Callable[[RunConfig], Iterable[Problem]]

_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_SECTION = re.compile(r"^[A-Za-z_]\w*$")


@dataclass(frozen=True)
class Rule:
    id: str
    requires: frozenset[str]
    func: RuleFunc
    summary: str
    # The rule's whole docstring (what ``cfgcheck explain`` prints for a team rule).
    doc: str = ""

    @functools.cached_property  # asked for every rule of every check
    def builtin(self) -> bool:
        """Shipped with cfgcheck (explained in cfgcheck/rules/explanations.py)."""
        return self.func.__module__.startswith("cfgcheck.")

    def check(self, config: RunConfig) -> Iterator[Finding]:
        if self.builtin:
            for p in self.func(config):
                yield Finding(self.id, p.severity, p.paths, p.message, p.hint, fixes=p.fixes)
            return
        yield from self._check_team(config)

    def _check_team(self, config: RunConfig) -> Iterator[Finding]:
        """A team rule's findings; its failure is one line naming it, never a traceback."""
        from cfgcheck.errors import ConfigLoadError

        where = f"rule {self.id} ({self.func.__module__}.{self.func.__qualname__})"
        try:
            problems = list(self.func(config))
        except Exception as e:
            raise ConfigLoadError(f"{where} failed: {type(e).__name__}: {e}") from e
        for p in problems:
            if not isinstance(p, Problem) or p.severity not in ("error", "warning", "info"):
                raise ConfigLoadError(
                    f"{where} yielded {p!r}: a rule yields cfgcheck.Problem(severity, paths, "
                    f"message, hint, fixes) with severity error, warning or info"
                )
            paths = (p.paths,) if isinstance(p.paths, str) else tuple(p.paths)
            yield Finding(self.id, p.severity, paths, p.message, p.hint, fixes=tuple(p.fixes))


class DuplicateRuleError(ValueError):
    pass


_RULES: dict[str, Rule] = {}


def rule(
    rule_id: str, *, requires: Iterable[str], open_sections: bool = False
) -> Callable[[RuleFunc], RuleFunc]:
    """Register a rule function. Refuses a malformed id, an unknown section (any section name
    with ``open_sections``: see :func:`team_rule`) or a duplicate."""
    needed = frozenset([requires] if isinstance(requires, str) else requires)
    if not isinstance(rule_id, str) or not _ID.match(rule_id):
        raise ValueError(f"rule id {rule_id!r} is not kebab-case")
    bad = sorted(str(s) for s in needed if not isinstance(s, str) or not _SECTION.match(s))
    if bad:
        raise ValueError(f"rule {rule_id!r} requires sections that are not names: {bad}")
    unknown = needed - SECTIONS.keys()
    if unknown and not open_sections:
        raise ValueError(f"rule {rule_id!r} requires unknown sections {sorted(unknown)}")

    def register(func: RuleFunc) -> RuleFunc:
        if rule_id in _RULES:
            raise DuplicateRuleError(
                f"rule id {rule_id!r} registered twice ({_RULES[rule_id].func.__module__} "
                f"and {func.__module__})"
            )
        doc = inspect.cleandoc(func.__doc__ or "")
        summary = doc.splitlines()[0] if doc else ""
        _RULES[rule_id] = Rule(rule_id, needed, func, summary, doc)
        return func

    return register


def team_rule(rule_id: str, *, requires: Iterable[str]) -> Callable[[RuleFunc], RuleFunc]:
    """``@cfgcheck.rule``: register a team's rule. ``requires`` may name sections of the team's
    own schema (a :class:`RunConfig` subclass); the rule runs when the schema in use has them
    and they passed."""
    return rule(rule_id, requires=requires, open_sections=True)


def unregister(rule_id: str) -> None:
    """Drop a rule (a team's tests register and drop their own)."""
    _RULES.pop(rule_id, None)


def _plugins() -> None:
    from cfgcheck.project.plugins import load_plugins

    load_plugins()


def all_rules() -> list[Rule]:
    _plugins()
    return list(_RULES.values())


def run_rules(config: RunConfig, valid_sections: Iterable[str]) -> Iterator[Finding]:
    """Run every rule whose required sections are all valid.

    Inside :func:`cfgcheck.reuse.shared_scope` (a sweep), a built-in rule's findings are
    reused for a config whose sections that rule reads have the same contents. Not while a
    native source limits the fixes (:func:`cfgcheck.fixcheck.expressible_only`), and never for
    a team's rule (it may read anything)."""
    from cfgcheck.budget import check as check_budget
    from cfgcheck.fixcheck import expressible_filter

    _plugins()
    valid = frozenset(valid_sections)
    scope = current_scope()
    shared = scope is not None and expressible_filter() is None
    pins: Pins = {}
    keys = _Contents(config, pins)
    # The built-in rules never change the config: its sections are keyed once for all of them
    # (reuse.pinned), the keys carried from one rule to the next by ``pins``.
    for r in list(_RULES.values()):
        check_budget(f"running rule {r.id}")  # a service request's CPU budget (cfgcheck.budget)
        if not r.requires <= valid:
            continue
        if not r.builtin:
            yield from r.check(config)
            # a team's rule may read anything, and might change the config: key it afresh
            pins = {}
            keys = _Contents(config, pins)
            continue
        yield from _builtin(r, config, keys, scope if shared else None, pins)


def _builtin(
    r: Rule, config: RunConfig, keys: _Contents, scope: Scope | None, pins: Pins
) -> tuple[Finding, ...]:
    """A built-in rule's findings, reused within a shared scope (see :func:`run_rules`)."""
    if scope is None:
        with pinned(pins):
            return tuple(r.check(config))
    known = scope.rule_reads.setdefault(r.id, [])
    for reads in known:
        key = keys.of(r.id, reads)
        hit = None if key is None else scope.rules.get(key)
        if hit is not None:
            return hit
    recorder = _Recorder(config)
    with pinned(pins):
        found = tuple(r.check(cast(RunConfig, recorder)))
    reads = frozenset(recorder.read)
    key = keys.of(r.id, reads)
    if key is not None:
        if reads not in known:
            known.append(reads)
        scope.rules.get_or(key, lambda: found)
    return found


class _Recorder:
    """A run config that records which of its attributes (sections) a rule reads, so that
    the rule's findings are reused exactly for configs equal on those: a rule may read a
    section it does not require when it is there (``getattr(cfg, "trainer", None)``)."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        self.read.add(name)
        return getattr(self.config, name)


_ABSENT = ("absent",)


class _Contents:
    """Content keys of a config's top-level attributes, each computed once (None: no key):
    numbers that stand for one content each (:func:`cfgcheck.reuse.number_of`)."""

    def __init__(self, config: RunConfig, pins: Pins) -> None:
        self._config = config
        self._pins = pins  # the sections' keys, shared with the rules (reuse.pinned)
        self._keys: dict[str, Hashable | None] = {}
        self._parts: dict[frozenset[str], tuple[tuple[str, Hashable], ...] | None] = {}

    def _attr(self, name: str) -> Hashable | None:
        if name not in self._keys:
            try:
                value = getattr(self._config, name, _ABSENT)
                with pinned(self._pins):  # a section's number is then the estimate's too
                    number = number_of(value)
                # rules read which fields a section was given (head_size given or derived):
                # equal contents with other fields given are other configs to them
                given = value.model_fields_set if isinstance(value, BaseModel) else None
                self._keys[name] = number if given is None else (number, frozenset(given))
            except Unkeyable:  # e.g. a method: the rule reads more than sections
                self._keys[name] = None
        return self._keys[name]

    def of(self, rule_id: str, reads: frozenset[str]) -> Hashable | None:
        if reads not in self._parts:  # rules that read the same sections share the part
            parts = tuple((s, self._attr(s)) for s in sorted(reads))
            self._parts[reads] = None if any(k is None for _, k in parts) else parts
        found = self._parts[reads]
        return None if found is None else (rule_id, found)
