"""Every fix a finding offers is checked before it is shown.

A rule proposes :class:`~cfgcheck.findings.Fix` objects (plain ``key=value`` overrides); here
each one is applied to the composed config, exactly as Hydra applies it on the command line
(values parsed by Hydra's own override grammar), and the config is validated again. A fix is
kept when it removes its finding (no finding of the same rule on the same paths is left) and
introduces no new error. When none of a finding's fixes works alone, the smallest union of
two of them that does is offered instead (Gemma-2B on a T4 needs fp16 *and* less memory);
when none fits either, the finding carries no fix and its hint stays the guide.

Overrides that change what Hydra composes (a group choice such as ``model=llama-3-8b``)
cannot be applied to a composed config: such fixes are kept as proposed (the fixes corpus
test composes them for real).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cfgcheck.findings import CheckResult, Finding, Fix

Validator = Callable[[Mapping[str, Any]], CheckResult]

MAX_PAIRS = 12  # unions of two fixes tried per finding when no single fix works


class _Unappliable(Exception):
    """An override this module cannot apply to a composed config."""


def _key(f: Finding) -> tuple[str, tuple[str, ...]]:
    return (f.rule, f.paths)


def _parse(override: str) -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from cfgcheck.overrides import plain_key, plain_overrides

    if plain_key(override) is None and not override.startswith(("~", "+")):
        raise _Unappliable(override)  # a group choice or a key outside the sections
    try:
        return OverridesParser.create().parse_override(plain_overrides([override])[0])
    except (HydraException, OmegaConfBaseException) as e:
        raise _Unappliable(override) from e


def apply_overrides(raw: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of the composed config ``raw`` with value overrides applied as Hydra applies
    them (``key=value`` / ``++key=value`` set, ``~key`` deletes). Raises :class:`_Unappliable`
    for group choices, sweeps and keys that cannot be reached."""
    out: dict[str, Any] = copy.deepcopy(dict(raw))
    for text in overrides:
        o = _parse(text)
        if o.is_sweep_override():
            raise _Unappliable(text)
        parts = o.key_or_group.split(".")
        node: Any = out
        for part in parts[:-1]:
            if o.is_delete() and not isinstance(node.get(part), dict):
                raise _Unappliable(text)
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        if o.is_delete():
            if parts[-1] not in node:
                raise _Unappliable(text)
            del node[parts[-1]]
        else:
            node[parts[-1]] = o.value()
    return out


def _works(
    raw: Mapping[str, Any], fix_overrides: Sequence[str], finding: Finding, before: set[Any]
) -> bool | None:
    """Whether the overrides remove ``finding`` and add no error; None: cannot be applied."""
    from cfgcheck.validate import validate_plain

    try:
        fixed = apply_overrides(raw, fix_overrides)
    except _Unappliable:
        return None
    after = validate_plain(fixed).findings
    if any(_key(f) == _key(finding) for f in after):
        return False
    return not any(f.severity == "error" and _key(f) not in before for f in after)


def _checked(raw: Mapping[str, Any], finding: Finding, before: set[Any]) -> tuple[Fix, ...]:
    kept: list[Fix] = []
    for fix in finding.fixes:
        if _works(raw, fix.overrides, finding, before) is not False:
            kept.append(fix)
    if kept or len(finding.fixes) < 2:
        return tuple(dict.fromkeys(kept))
    pairs = itertools.islice(itertools.combinations(finding.fixes, 2), MAX_PAIRS)
    for a, b in pairs:
        overrides = (*a.overrides, *b.overrides)
        if _works(raw, overrides, finding, before):
            return (Fix(overrides, f"{a.summary}, and {b.summary}"),)
    return ()


def verified(raw: Mapping[str, Any], result: CheckResult) -> CheckResult:
    """``result`` with every error and warning finding's fixes checked (see module docstring)."""
    if not any(f.fixes for f in result.findings if f.severity != "info"):
        return result
    before = {_key(f) for f in result.findings if f.severity == "error"}
    findings: list[Finding] = []
    for f in result.findings:
        if f.fixes and f.severity != "info":
            f = dataclasses.replace(f, fixes=_checked(raw, f, before))
        findings.append(f)
    return dataclasses.replace(result, findings=findings)


def overrides_of(fixes: Iterable[Fix]) -> list[str]:
    """Every override of ``fixes``, in order, without repeats."""
    return list(dict.fromkeys(o for fix in fixes for o in fix.overrides))
