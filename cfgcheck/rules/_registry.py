"""The rule registry.

A rule is one small function ``(RunConfig) -> Iterable[Problem]`` registered with
:func:`rule` under a stable kebab-case id, together with the config sections it reads.
A rule runs only when every section it needs passed the schema, so a type error in
``trainer`` does not hide a ``seq-len-over-block-size`` between ``model`` and ``data``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from cfgcheck.findings import Finding, Fix, Severity
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


@dataclass(frozen=True)
class Rule:
    id: str
    requires: frozenset[str]
    func: RuleFunc
    summary: str

    def check(self, config: RunConfig) -> Iterator[Finding]:
        for p in self.func(config):
            yield Finding(self.id, p.severity, p.paths, p.message, p.hint, fixes=p.fixes)


class DuplicateRuleError(ValueError):
    pass


_RULES: dict[str, Rule] = {}


def rule(rule_id: str, *, requires: Iterable[str]) -> Callable[[RuleFunc], RuleFunc]:
    """Register a rule function. Refuses a malformed id, an unknown section or a duplicate."""
    needed = frozenset(requires)
    if not _ID.match(rule_id):
        raise ValueError(f"rule id {rule_id!r} is not kebab-case")
    unknown = needed - SECTIONS.keys()
    if unknown:
        raise ValueError(f"rule {rule_id!r} requires unknown sections {sorted(unknown)}")

    def register(func: RuleFunc) -> RuleFunc:
        if rule_id in _RULES:
            raise DuplicateRuleError(
                f"rule id {rule_id!r} registered twice ({_RULES[rule_id].func.__module__} "
                f"and {func.__module__})"
            )
        summary = (func.__doc__ or "").strip().splitlines()[0] if func.__doc__ else ""
        _RULES[rule_id] = Rule(rule_id, needed, func, summary)
        return func

    return register


def all_rules() -> list[Rule]:
    return list(_RULES.values())


def run_rules(config: RunConfig, valid_sections: Iterable[str]) -> Iterator[Finding]:
    """Run every rule whose required sections are all valid."""
    valid = frozenset(valid_sections)
    for r in _RULES.values():
        if r.requires <= valid:
            yield from r.check(config)
