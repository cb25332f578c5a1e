"""Validation: schema errors become findings, then every rule whose sections passed runs."""

from __future__ import annotations

import dataclasses
import difflib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from cfgcheck.compose import one_line
from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult, Finding, sort_findings
from cfgcheck.models.expand import Expanded, expand_pretrained
from cfgcheck.rules import run_rules
from cfgcheck.schema.run import SECTIONS, RunConfig

if TYPE_CHECKING:
    from cfgcheck.project.settings import DefaultGpu


def to_plain(config: Any) -> Any:
    """A plain ``dict`` from a mapping or an OmegaConf ``DictConfig`` (interpolations resolved)."""
    if type(config).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        try:
            return OmegaConf.to_container(config, resolve=True, throw_on_missing=True)
        except OmegaConfBaseException as e:
            raise ConfigLoadError(f"cannot resolve the config: {one_line(e)}") from e
    return config


def _one_edit(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by one insertion, deletion, substitution or swap of neighbours."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def owned_keys(keys: Iterable[Any], schema: type[RunConfig] = RunConfig) -> list[Any]:
    """The top-level keys cfgcheck checks: the schema's own, and a name one edit away from
    one of them (``tokenizr``, ``seeed``: reported as ``unknown-key`` with a did-you-mean). Any
    other top-level section (``optimizer``, ``logger``, ``paths``...) belongs to the project."""
    fields = schema.model_fields
    return [
        k
        for k in keys
        if k in fields or (isinstance(k, str) and any(_one_edit(k, s) for s in fields))
    ]


def _section_model(schema: type[RunConfig], name: str) -> type[BaseModel] | None:
    from cfgcheck.overrides import model_of

    field = schema.model_fields.get(name)
    return model_of(field.annotation) if field is not None else None


def owned(config: Any, schema: type[RunConfig] = RunConfig) -> Any:
    """The part of a composed config cfgcheck checks (:func:`owned_keys`), as a plain dict,
    interpolations resolved (in the whole tree, so ``${paths.data_dir}`` still resolves)."""
    if type(config).__module__.startswith("omegaconf"):
        from omegaconf import DictConfig, OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        if not isinstance(config, DictConfig):
            return to_plain(config)
        try:
            out: dict[str, Any] = {}
            for key in owned_keys(list(config.keys()), schema):
                value = config[key]
                out[str(key)] = (
                    OmegaConf.to_container(value, resolve=True, throw_on_missing=True)
                    if OmegaConf.is_config(value)
                    else value
                )
            return out
        except OmegaConfBaseException as e:
            raise ConfigLoadError(f"cannot resolve the config: {one_line(e)}") from e
    if isinstance(config, Mapping):
        return {k: config[k] for k in owned_keys(list(config), schema)}
    return config


def _may_have_node(config: Any) -> bool:
    """Whether a config has the ``cfgcheck:`` mapping node (the module loads only then)."""
    if isinstance(config, Mapping) and "cfgcheck" not in config:
        return False
    from cfgcheck.project.mapping import has_node

    return has_node(config)


def validate(
    config: Mapping[str, Any] | Any,
    schema: type[RunConfig] | None = None,
    *,
    gpu: DefaultGpu | None = None,
) -> CheckResult:
    """Validate a composed run config (plain mapping or ``DictConfig``) and run every rule.

    Never stops at the first problem: schema errors in one section do not hide rules
    between the sections that passed. ``model.pretrained`` is expanded first (the folder's
    shape fills the model section; see :mod:`cfgcheck.models.expand`); a folder or Hub id
    that cannot be used raises ``ConfigLoadError``. Every fix a finding offers has been
    checked to remove it without a new error (see :mod:`cfgcheck.fixcheck`).

    Top-level sections the schema does not own pass unchecked (:func:`owned_keys`). A config
    with a top-level ``cfgcheck:`` node is validated through it, in the team's keys (see
    :mod:`cfgcheck.project.mapping`). ``schema``: a team's subclass of
    :class:`~cfgcheck.RunConfig` (default: the built-in one). ``gpu``: the GPU a project's
    settings name, used when the config names none.
    """
    from cfgcheck.fixcheck import verified

    if _may_have_node(config):
        from cfgcheck.project.mapping import validate_mapped

        return validate_mapped(config, schema, gpu)
    raw = owned(config, schema or RunConfig)
    filled = gpu.fill(raw) if gpu is not None else raw
    result = validate_plain(filled, schema)
    if filled is not raw and gpu is not None:
        result = at_default_gpu(result, gpu)
        raw = filled
    if not isinstance(raw, Mapping):
        return result
    if schema is None or schema is RunConfig:
        return verified(raw, result)

    def revalidate(fixed: Mapping[str, Any]) -> list[Finding]:
        return validate_plain(fixed, schema).findings

    return verified(raw, result, revalidate=revalidate)


def at_default_gpu(result: CheckResult, gpu: DefaultGpu) -> CheckResult:
    """Locate ``trainer.gpu`` values at the settings that supplied them."""
    findings = [
        dataclasses.replace(
            f,
            locations={
                **{
                    p: gpu.location()
                    for p in f.paths
                    if p == "trainer.gpu" or p.startswith("trainer.gpu.")
                },
                **f.locations,
            },
        )
        for f in result.findings
    ]
    return dataclasses.replace(result, findings=findings)


def validate_plain(raw: Any, schema: type[RunConfig] | None = None) -> CheckResult:
    """:func:`validate` of a plain composed config, with the fixes as the rules proposed them."""
    expanded = expand_pretrained(raw)
    return _located_at_folder(_validate(expanded.config, schema or RunConfig), expanded)


def _located_at_folder(result: CheckResult, expanded: Expanded) -> CheckResult:
    """Add the expansion's findings, and locate the values that came from the model folder at
    the folder's file (a reporter's source map fills the remaining paths)."""
    if expanded.source is None:
        return result
    where = expanded.locations
    located = [
        dataclasses.replace(
            f, locations={**{p: where[p] for p in f.paths if p in where}, **f.locations}
        )
        for f in result.findings
    ]
    # The expansion's own findings locate the config's side with the reporter's source map.
    findings = [*expanded.findings, *located]
    return dataclasses.replace(result, findings=sort_findings(findings))


def sections_of(schema: type[RunConfig]) -> dict[str, type[BaseModel]]:
    """The sections of a run config schema: its fields that are pydantic models."""
    if schema is RunConfig:
        return dict(SECTIONS)
    out: dict[str, type[BaseModel]] = {}
    for name in schema.model_fields:
        model = _section_model(schema, name)
        if model is not None:
            out[name] = model
    return out


def _validate(raw: Any, schema: type[RunConfig] = RunConfig) -> CheckResult:
    if not isinstance(raw, Mapping):
        finding = Finding(
            "invalid-value",
            "error",
            ("<root>",),
            f"the run config must be a mapping of sections, got {type(raw).__name__}",
            f"write a mapping with the sections {', '.join(SECTIONS)}",
        )
        return CheckResult([finding])
    raw = {k: raw[k] for k in owned_keys(list(raw), schema)}
    sections = sections_of(schema)
    try:
        run = schema.model_validate(raw)
    except ValidationError as e:
        findings = list(_schema_findings(e, schema, raw))
        broken = {str(err["loc"][0]) for err in e.errors() if err["loc"]}
        valid: dict[str, Any] = {
            name: model.model_validate(raw[name])
            for name, model in sections.items()
            if name not in broken and name in raw
        }
        partial = schema.model_construct(**valid)
        findings += run_rules(partial, valid)
        return CheckResult(sort_findings(findings))
    _build_traced(run)
    return CheckResult(sort_findings(run_rules(run, sections)), config=run)


def _build_traced(run: RunConfig) -> None:
    """A model read generically (``model.hf_config``) is built before any rule needs it: a
    missing transformers or an unbuildable config is one load error, not a rule's crash."""
    if run.model.hf_config is None:
        return
    from cfgcheck.memory.modules import traced
    from cfgcheck.memory.traced import TraceError

    try:
        traced(run.model)
    except TraceError as e:
        raise ConfigLoadError(f"model.hf_config of {run.model.name}: {e}") from e


# Unknown keys reported one by one under each mapping; the rest are one finding. Each one
# costs a did-you-mean search and a fix that is checked by validating again, so 19,000
# unknown keys would otherwise cost 19,000 validations of 19,000 keys.
MAX_UNKNOWN_KEYS = 20


def _schema_findings(
    error: ValidationError, root: type[BaseModel], raw: Mapping[str, Any]
) -> Iterator[Finding]:
    from cfgcheck import schema_fixes

    errors = error.errors()
    unknown: dict[tuple[int | str, ...], list[str]] = {}
    crowded = {  # mappings with more unknown keys than are reported one by one
        loc
        for loc, count in Counter(
            e["loc"][:-1] for e in errors if e["type"] == "extra_forbidden"
        ).items()
        if count > MAX_UNKNOWN_KEYS
    }
    for err in errors:
        path = ".".join(str(p) for p in err["loc"]) or "<root>"
        kind = err["type"]
        if kind == "extra_forbidden":
            seen = unknown.setdefault(err["loc"][:-1], [])
            seen.append(str(err["loc"][-1]))
            if len(seen) > MAX_UNKNOWN_KEYS:
                continue
            owner = _model_at(root, err["loc"])
            yield Finding(
                "unknown-key",
                "error",
                (path,),
                f"unknown key {path} (value {err['input']!r}): nothing reads it, so a "
                f"misspelled setting is silently ignored",
                _unknown_key_hint(err, root),
                # Under a crowded mapping no single fix can leave it clean: removing one key
                # brings the next one into the report, so no fix is offered.
                fixes=()
                if err["loc"][:-1] in crowded
                else schema_fixes.unknown_key_fixes(
                    path, err["input"], list(owner.model_fields) if owner else []
                ),
            )
        elif kind == "missing":
            fixes = schema_fixes.missing_key_fixes(path, raw)
            yield Finding(
                "missing-key",
                "error",
                (path,),
                f"required key {path} is missing",
                f"set {path} in its config group file or with the override {path}=<value>"
                + (
                    ""
                    if fixes
                    else " (no value can be guessed: take it from the model's "
                    "config.json or your run's plan)"
                ),
                fixes=fixes,
            )
        else:
            yield Finding(
                "invalid-value",
                "error",
                (path,),
                f"{path}={err['input']!r} is invalid: {err['msg']}",
                _invalid_value_hint(err, path),
                fixes=schema_fixes.invalid_value_fixes(
                    path,
                    kind,
                    err["input"],
                    err.get("ctx") or {},
                    schema_fixes.field_at(root, err["loc"]),
                ),
            )
    for parent, names in unknown.items():
        if len(names) > MAX_UNKNOWN_KEYS:
            yield _more_unknown_keys(parent, names[MAX_UNKNOWN_KEYS:], root)


def _more_unknown_keys(
    parent: tuple[int | str, ...], names: list[str], root: type[BaseModel]
) -> Finding:
    """One finding for the unknown keys under ``parent`` past the first ``MAX_UNKNOWN_KEYS``."""
    where = ".".join(str(p) for p in parent) or "<root>"
    shown = ", ".join(n if len(n) <= 40 else n[:40] + "..." for n in names[:5])
    owner = _model_at(root, (*parent, ""))
    known = f"; known keys under {where}: {', '.join(owner.model_fields)}" if owner else ""
    return Finding(
        "unknown-key",
        "error",
        (where,),
        f"{len(names)} more unknown keys under {where} ({shown}, ...): nothing reads them; "
        f"only the first {MAX_UNKNOWN_KEYS} are reported one by one",
        f"remove them{known}",
    )


def _model_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The pydantic model that owns the last element of ``loc``."""
    model: type[BaseModel] | None = root
    for part in loc[:-1]:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        model = (
            annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel)
            else None
        )
    return model


def _unknown_key_hint(err: ErrorDetails, root: type[BaseModel]) -> str:
    loc = err["loc"]
    parent = ".".join(str(p) for p in loc[:-1])
    owner = _model_at(root, loc)
    if owner is None:
        return f"remove {'.'.join(str(p) for p in loc)}"
    known = list(owner.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    where = f" under {parent}" if parent else ""
    if close:
        return f"did you mean {parent + '.' if parent else ''}{close[0]}? Known keys{where}: " + (
            ", ".join(known)
        )
    return f"remove it; known keys{where}: " + ", ".join(known)


def _invalid_value_hint(err: ErrorDetails, path: str) -> str:
    ctx = err.get("ctx") or {}
    if err["type"] == "size_bound":  # cfgcheck.schema.bounds
        return f"set {path} to the real value, at most {ctx['maximum']}"
    if err["type"] == "literal_error" and "expected" in ctx:
        return f"set {path} to one of {ctx['expected']}"
    kind = err["type"].split("_")[0]
    if kind in ("int", "float", "bool") and isinstance(err["input"], str):
        from cfgcheck.schema_fixes import typed_value

        if typed_value(err["input"], kind) is not None:
            return f"write {path} without quotes, as a{'n' if kind == 'int' else ''} {kind}"
        what = {"int": "a whole number", "float": "a number", "bool": "true or false"}[kind]
        return f"set {path} to {what}: {err['input']!r} is text"
    return f"set {path} to a valid value ({err['msg'].lower()})"
