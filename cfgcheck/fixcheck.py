"""Every fix a finding offers is checked before it is shown.

A rule proposes :class:`~cfgcheck.findings.Fix` objects (plain ``key=value`` overrides); here
each one is applied to the composed config, exactly as Hydra applies it on the command line
(values parsed by Hydra's own override grammar), and the config is validated again. A fix is
kept when it removes its finding (no finding of the same rule on the same paths is left) and
introduces no new error. When none of a finding's fixes works alone, a combination is
offered instead: a fix that removes the finding but causes another error, together with a fix
of that error (fp16 on a T4 raises the memory past the card: fp16 *and* activation
checkpointing), or else two of the finding's own fixes together. When none fits either, the
finding carries no fix and its hint stays the guide. "New" errors exclude rules that could not
run before because a section they read failed the schema (:func:`new_errors`).

Overrides that change what Hydra composes (a group choice such as ``model=llama-3-8b``)
cannot be applied to a composed config: such fixes are kept as proposed (the fixes corpus
test composes them for real).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from cfgcheck.findings import CheckResult, Finding, Fix

Validator = Callable[[Mapping[str, Any]], CheckResult]
# How a fix is tried: apply its overrides to the config, then the findings of the result.
Apply = Callable[[Mapping[str, Any], Sequence[str]], Mapping[str, Any]]
Revalidate = Callable[[Mapping[str, Any]], list[Finding]]

MAX_PAIRS = 12  # unions of two fixes tried per finding when no single fix works
# Findings whose fixes are checked (each check validates the config again); the fixes of any
# further finding are dropped, so a config with thousands of findings costs a bounded number
# of validations, not one per finding.
MAX_CHECKED_FINDINGS = 64


# What the config's source can express: a native format has keys for some settings only
# (LitGPT's finetune configs have no activation-checkpointing switch). Set by the native source
# around its validation (:func:`expressible_only`); rules that search for fixes (the memory
# fixes) and :func:`verified` keep only the fixes whose every override it accepts.
_EXPRESSIBLE: ContextVar[Callable[[str], bool] | None] = ContextVar(
    "cfgcheck_expressible", default=None
)


@contextmanager
def expressible_only(accepts: Callable[[str], bool]) -> Iterator[None]:
    """Within the block, fixes are limited to overrides ``accepts`` takes."""
    token = _EXPRESSIBLE.set(accepts)
    try:
        yield
    finally:
        _EXPRESSIBLE.reset(token)


def expressible_filter() -> Callable[[str], bool] | None:
    """The active :func:`expressible_only` predicate, or None (every override)."""
    return _EXPRESSIBLE.get()


_VERIFY: ContextVar[bool] = ContextVar("cfgcheck_verify_fixes", default=True)


@contextmanager
def verifying(on: bool) -> Iterator[None]:
    """Within the block, :func:`verified` checks fixes (``on``) or leaves them as proposed
    (a caller that checks them its own way, or needs only the findings)."""
    token = _VERIFY.set(on)
    try:
        yield
    finally:
        _VERIFY.reset(token)


def _expressible(fixes: Iterable[Fix]) -> list[Fix]:
    accepts = _EXPRESSIBLE.get()
    return [f for f in fixes if accepts is None or all(map(accepts, f.overrides))]


class _Unappliable(Exception):
    """An override this module cannot apply to a composed config."""


SCHEMA_RULES = frozenset({"unknown-key", "missing-key", "invalid-value"})


def _key(f: Finding) -> tuple[str, tuple[str, ...]]:
    return (f.rule, f.paths)


def _blocked(findings: Iterable[Finding]) -> frozenset[str]:
    """Rules that could not run: they need a section the schema rejected."""
    from cfgcheck.rules import all_rules

    broken = {f.paths[0].split(".")[0] for f in findings if f.rule in SCHEMA_RULES and f.paths}
    return frozenset(r.id for r in all_rules() if r.requires & broken)


def new_errors(before: Sequence[Finding], after: Sequence[Finding]) -> list[Finding]:
    """Errors of ``after`` that ``before`` did not have. A rule that could not run before (a
    section it reads failed the schema) is not new when it fires once the section is fixed:
    the fix revealed it, it did not cause it."""
    seen = {_key(f) for f in before if f.severity == "error"}
    blocked = _blocked(before)
    return [
        f for f in after if f.severity == "error" and _key(f) not in seen and f.rule not in blocked
    ]


@functools.cache
def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


@functools.lru_cache(maxsize=1024)
def _parse(override: str, any_key: bool = False) -> Any:
    from cfgcheck.overrides import parse_override, plain_key, plain_overrides

    if any_key and "=" in override and "." in override.partition("=")[0]:
        pass  # a dotted key of a team's tree (cfgcheck.project.mapping): a value override
    elif plain_key(override) is None and not override.startswith(("~", "+")):
        raise _Unappliable(override)  # a group choice or a key outside the sections
    text = plain_overrides([override])[0]
    plain = parse_override(text)  # Hydra's reading of a plain key=value, without Hydra
    if plain is not None:
        return plain
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        return _parser().parse_override(text)
    except (HydraException, OmegaConfBaseException) as e:
        raise _Unappliable(override) from e


def apply_overrides(
    raw: Mapping[str, Any], overrides: Sequence[str], *, any_key: bool = False
) -> dict[str, Any]:
    """A copy of the composed config ``raw`` with value overrides applied as Hydra applies
    them (``key=value`` / ``++key=value`` set, ``~key`` deletes). Raises :class:`_Unappliable`
    for group choices, sweeps and keys that cannot be reached. ``any_key``: a dotted key
    outside cfgcheck's sections is a value too (a team's tree with a mapping node)."""
    out: dict[str, Any] = copy.deepcopy(dict(raw))
    for text in overrides:
        o = _parse(text, any_key)
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


@dataclasses.dataclass(frozen=True)
class _Trial:
    """How a fix is tried on one config."""

    raw: Mapping[str, Any]
    apply: Apply
    revalidate: Revalidate


def _outcome(
    trial: _Trial, fix: Fix, finding: Finding, before: Sequence[Finding]
) -> list[Finding] | None:
    """The errors ``fix`` introduces (``[]``: it works), or None when it cannot be applied.
    A fix that leaves its finding in place "introduces" that finding."""
    from cfgcheck.errors import ConfigLoadError

    try:
        fixed = trial.apply(trial.raw, fix.overrides)
    except _Unappliable:
        return None
    try:
        after = trial.revalidate(fixed)
    except ConfigLoadError as e:  # e.g. a model.pretrained that names nothing usable
        return [Finding("invalid-value", "error", ("<root>",), str(e), "")]
    left = [f for f in after if _key(f) == _key(finding)]
    return left or new_errors(before, after)


def _combined(a: Fix, b: Fix) -> Fix:
    return a.combined(b)


def _checked(trial: _Trial, finding: Finding, before: Sequence[Finding]) -> tuple[Fix, ...]:
    kept: list[Fix] = []
    broken: list[tuple[Fix, list[Finding]]] = []
    candidates = _expressible(finding.fixes)
    for fix in candidates:
        outcome = _outcome(trial, fix, finding, before)
        if not outcome:  # works, or a group choice this module cannot apply
            kept.append(fix)
        elif not any(_key(f) == _key(finding) for f in outcome):
            broken.append((fix, outcome))
    if kept:
        return tuple(dict.fromkeys(kept))
    # No fix works alone: a fix that removes the finding but causes another error, together
    # with a fix of that error (fp16 on a T4, and a smaller batch to fit the fp16 run) ...
    tries = 0
    for fix, caused in broken:
        for extra in _expressible(caused[0].fixes):
            tries += 1
            if tries > MAX_PAIRS:
                return ()
            both = _combined(fix, extra)
            if _outcome(trial, both, finding, before) == []:
                return (both,)
    # ... or two of the finding's own fixes together.
    for a, b in itertools.islice(itertools.combinations(candidates, 2), MAX_PAIRS):
        if _outcome(trial, _combined(a, b), finding, before) == []:
            return (_combined(a, b),)
    return ()


def verified(
    raw: Mapping[str, Any],
    result: CheckResult,
    *,
    apply: Apply | None = None,
    revalidate: Revalidate | None = None,
) -> CheckResult:
    """``result`` with every error and warning finding's fixes checked (see module docstring).

    By default a fix is applied to ``raw`` with :func:`apply_overrides` and the result
    validated with :func:`cfgcheck.validate.validate_plain`; a team's mapped tree passes its
    own ``apply`` and ``revalidate`` (:mod:`cfgcheck.project.mapping`), a team's schema its
    own ``revalidate``."""
    if not _VERIFY.get() or not any(f.fixes for f in result.findings if f.severity != "info"):
        return result

    def plain(fixed: Mapping[str, Any]) -> list[Finding]:
        from cfgcheck.validate import validate_plain

        return validate_plain(fixed).findings

    trial = _Trial(raw, apply or apply_overrides, revalidate or plain)
    before = result.findings
    shared = _SharedChecks(raw, before) if apply is None and revalidate is None else None
    findings: list[Finding] = []
    checked = 0
    for f in result.findings:
        if f.fixes and f.severity != "info":
            checked += 1
            if checked > MAX_CHECKED_FINDINGS:
                fixes: tuple[Fix, ...] = ()
            else:
                reused = shared.checked(trial, f) if shared is not None else None
                fixes = reused if reused is not None else _checked(trial, f, before)
            f = dataclasses.replace(f, fixes=fixes)
        findings.append(f)
    return dataclasses.replace(result, findings=findings)


class _SharedChecks:
    """Within :func:`cfgcheck.reuse.shared_scope` (a sweep), a finding's fixes are checked
    once per distinct finding, config and findings before. The config's top-level keys that
    are not sections (``seed``, ``name``, ``output_dir``) are left out of the key unless a fix
    sets them: no built-in rule reads them and each is validated alone, the same before and
    after the fix, so they cannot change an outcome (a seed sweep shares every verification).
    Only the default way of trying fixes is shared, and not while a native source limits
    the fixes."""

    def __init__(self, raw: Mapping[str, Any], before: Sequence[Finding]) -> None:
        from cfgcheck.reuse import current_scope

        self._scope = current_scope() if _EXPRESSIBLE.get() is None else None
        self._raw = raw
        self._before = before
        self._before_key = tuple((f.rule, f.severity, f.paths, f.message) for f in before)
        # the config's key by the top-level keys a finding's fixes set (most set none but
        # sections': one key for every finding of the config)
        self._kept: dict[frozenset[str], Hashable] = {}

    def checked(self, trial: _Trial, finding: Finding) -> tuple[Fix, ...] | None:
        """The checked fixes (shared), or None when they cannot be shared: check them."""
        from cfgcheck.reuse import Unkeyable, frozen
        from cfgcheck.schema.run import SECTIONS

        if self._scope is None:
            return None
        touched = frozenset(
            o.lstrip("~+").split("=", 1)[0].split(".", 1)[0]
            for fix in finding.fixes
            for o in fix.overrides
        )
        try:
            config = self._kept.get(touched)
            if config is None:
                kept = {k: v for k, v in self._raw.items() if k in SECTIONS or k in touched}
                config = self._kept[touched] = frozen(kept)
            key = (
                config,
                self._before_key,
                (finding.rule, finding.severity, finding.paths, finding.message),
                finding.fixes,
            )
        except Unkeyable:
            return None
        fixes: tuple[Fix, ...] = self._scope.fixes.get_or(
            key, lambda: _checked(trial, finding, self._before)
        )
        return fixes


def overrides_of(fixes: Iterable[Fix]) -> list[str]:
    """Every override of ``fixes``, in order, without repeats."""
    return list(dict.fromkeys(o for fix in fixes for o in fix.overrides))
