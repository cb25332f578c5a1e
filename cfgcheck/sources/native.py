"""Checking a native framework config: read it, map it, validate it, and report in its terms.

``load_native`` yields the plain run config and its :class:`~cfgcheck.locations.SourceMap`
(file:line of the native file, the override, or "default of <framework> <where>");
``check_native`` validates that config with cfgcheck's rules like any other source, then adds
the format's own findings (unknown keys, the framework's refusals), applies the format's rule
profile, and rewrites each fix in the format's keys.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult, Finding, Location, sort_findings
from cfgcheck.locations import SourceMap, display_path, locate
from cfgcheck.schema.run import SECTIONS
from cfgcheck.sources.base import Builder, Format, NativeConfig
from cfgcheck.sources.profiles import apply_profile
from cfgcheck.sources.reader import Document, get_dotted, read_document, set_dotted
from cfgcheck.sources.unknown import unknown_keys


def formats() -> dict[str, Format]:
    """``--from`` name -> format (imported on first use)."""
    from cfgcheck.sources import (
        axolotl,
        launcher,
        litgpt,
        llamafactory,
        llamafactory_v1,
        python,
        torchtune,
        trl,
    )

    return {
        f.name: f
        for f in (
            litgpt.FORMAT,
            axolotl.FORMAT,
            trl.FORMAT,
            llamafactory.FORMAT,
            llamafactory_v1.FORMAT,
            python.FORMAT,
            torchtune.FORMAT,
            launcher.FORMAT,
        )
    }


def get_format(name: str) -> Format:
    known = formats()
    if name not in known:
        raise ConfigLoadError(f"unknown format {name!r}: use one of {', '.join(known)}")
    return known[name]


@dataclass(frozen=True)
class Loaded:
    """A native config mapped onto cfgcheck: the plain run config and where each value came
    from (cfgcheck paths and the native keys both)."""

    format: Format
    native: NativeConfig
    config: dict[str, Any]
    source_map: SourceMap
    model_key: str | None = None
    # What it was loaded from, so that a fix can be checked by loading it again with the fix.
    document: Document | None = None
    overrides: tuple[str, ...] = ()
    gpu: str | None = None


def load_native(
    path: str | Path,
    fmt: str,
    overrides: Sequence[str] = (),
    gpu: str | None = None,
    options: Mapping[str, str] | None = None,
) -> Loaded:
    """Read ``path`` in format ``fmt`` (``litgpt``, ``axolotl``, ``trl``) with native
    ``key=value`` overrides; ``gpu`` (a GPU name or GiB) is the GPU the run is meant for,
    which no native format spells. Raises :class:`ConfigLoadError` (one line) when the file
    cannot be read or names no model cfgcheck can resolve. ``options`` are what the command
    line states about the run that the file does not spell (``trainer``,
    ``framework_version``, ``accelerate_config``...)."""
    if fmt == "python":  # code, not a document: read statically (cfgcheck.sources.code)
        from cfgcheck.sources.python import load_python

        return load_python(path, overrides, gpu)
    if fmt == "launch":  # a shell script and its entry point, read statically
        from cfgcheck.sources.launcher import load_launch

        return load_launch(path, overrides, gpu, dict(options or {}))
    return load_document(
        read_document(path, display_path(Path(path))), fmt, overrides, gpu, options
    )


def load_document(
    doc: Document,
    fmt: str,
    overrides: Sequence[str] = (),
    gpu: str | None = None,
    options: Mapping[str, str] | None = None,
) -> Loaded:
    """:func:`load_native` of an already-read document (the service parses request text)."""
    if fmt == "llamafactory" and _llamafactory_v1(doc, options or {}):
        fmt = "llamafactory-v1"  # USE_V1=1: another trainer, another file format
    spec = get_format(fmt)
    native = NativeConfig.from_document(fmt, doc, overrides, options)
    loaded = build_loaded(spec, native, Builder(native, spec.label), gpu)
    return dataclasses.replace(loaded, document=doc, overrides=tuple(overrides))


def _llamafactory_v1(doc: Document, options: Mapping[str, str]) -> bool:
    """``--framework-version v1`` (or ``v0``), else the file's keys
    (:func:`cfgcheck.sources.llamafactory_v1.is_v1`)."""
    flag = str(options.get("framework_version") or "").lower()
    if flag in ("v1", "1"):
        return True
    if flag in ("v0", "0"):
        return False
    from cfgcheck.sources.llamafactory_v1 import is_v1

    return isinstance(doc.data, dict) and is_v1(doc.data)


# A check that the caller (the service) runs on what a native config names before anything
# reads a file: on the native keys before the builder runs (a builder may look at a folder),
# then on the run config before the model is resolved (a length left to the model resolves
# model.pretrained here, before the caller's own check of the loaded config).
Screen = Callable[[Mapping[str, Any]], None]
_SCREEN: ContextVar[tuple[Screen, Screen] | None] = ContextVar("native_screen", default=None)


@contextmanager
def screened(native: Screen, run: Screen) -> Iterator[None]:
    """Within the block, every native config loaded passes ``native`` (given the native
    mapping) before its builder runs and ``run`` (given the run config) before its model is
    resolved; either raises to refuse it."""
    token = _SCREEN.set((native, run))
    try:
        yield
    finally:
        _SCREEN.reset(token)


def build_loaded(spec: Format, native: NativeConfig, builder: Builder, gpu: str | None) -> Loaded:
    """Run ``spec``'s builder on ``native`` and resolve what follows the model (the document
    it came from, to load it again with a fix, is the caller's to add)."""
    screen = _SCREEN.get()
    if screen is not None:
        screen[0](native.data)
    spec.build(builder)
    if gpu:
        where = Location(f"<--gpu {gpu}>", None)
        try:
            builder.set("trainer.gpu.memory_gib", float(gpu), where)
        except ValueError:
            builder.set("trainer.gpu.name", gpu, where)
    if screen is not None:
        screen[1](builder.config)
    _resolve_deferred(builder)
    smap = builder.smap
    for key, location in native.where.items():
        if key.split(".")[0] not in SECTIONS and key not in smap.entries:
            smap.set(key, location, covering=False)
    return Loaded(spec, native, builder.config, smap, builder.model_key, gpu=gpu)


def _resolve_deferred(b: Builder) -> None:
    """Values that follow the model (``data.max_seq_length`` = its block, LoRA targets in the
    architecture's module names): validate a probe with placeholders to learn the resolved
    model, then fill them in."""
    if not b.deferred and not b.after_model:
        return
    from cfgcheck.validate import validate

    probe = copy.deepcopy(b.config)
    for path in b.deferred:
        set_dotted(probe, path, 1)
    with native_model_errors(b.native, b.model_key):
        result = validate(probe)
    if result.config is None:
        return  # the schema findings come back from the real validation
    resolved = result.config.model_dump()
    for path, (source, location) in b.deferred.items():
        value = get_dotted(resolved, source)
        if value is not None:
            b.set(path, value, location)
    for step in b.after_model:
        step(b, result.config.model)


def check_native(
    path: str | Path,
    fmt: str,
    overrides: Sequence[str] = (),
    gpu: str | None = None,
    options: Mapping[str, str] | None = None,
) -> CheckResult:
    """Validate a native config file; findings point at its lines and fixes use its keys.
    A launch script gets one verdict per training command (:mod:`.launcher.commands`)."""
    if fmt == "launch":
        from cfgcheck.sources.launcher.commands import check_script

        return check_script(path, overrides, gpu, options)
    return check_loaded(load_native(path, fmt, overrides, gpu, options))


def check_loaded(loaded: Loaded, verify: bool = True) -> CheckResult:
    """Validate a loaded native config, then add the format's findings (see the module).
    With ``verify``, every fix is checked as the user would paste it: the native config loaded
    again with the fix's native overrides and flags (:mod:`cfgcheck.sources.native_fixes`).
    A format that verifies its fixes end to end (the python source re-reads the edited code,
    profile applied) gets them as the rules proposed them, and checks them in ``finish``."""
    from cfgcheck.fixcheck import expressible_only, verifying
    from cfgcheck.sources.native_fixes import native_fixes, verify_native
    from cfgcheck.validate import validate, validate_plain

    spec = loaded.format
    with native_model_errors(loaded.native, loaded.model_key):
        if spec.verifies_fixes:
            result = validate_plain(loaded.config)
        else:
            with (
                expressible_only(lambda o: rewrite(o, spec) is not None),
                verifying(False),  # checked below, in native keys, as the user pastes them
            ):
                result = validate(loaded.config)
    findings: list[Finding] = list(result.findings)
    if spec.unknown is not None:
        findings += spec.unknown(loaded.native, result.config)
    else:
        findings += unknown_keys(loaded.native, spec)
    for rule in spec.rules:
        findings += rule(loaded.native, result.config)
    findings = list(apply_profile(findings, spec.profile(loaded.native)))
    findings = list(native_fixes(findings, spec, loaded.native))
    if verify and loaded.document is not None and not spec.verifies_fixes:
        findings = verify_native(loaded, findings)
    smap = loaded.source_map
    if spec.finish is not None:  # the format's last word (code edits for --from python)
        findings = spec.finish(loaded, findings)
    model_at = loaded.native.loc(loaded.model_key) if loaded.model_key else None
    if model_at is not None:  # the resolved shape comes from the model the native key names
        for f in findings:
            for path in f.paths:
                if path.startswith("model.") and smap.lookup(path) is None:
                    smap.set(path, model_at, covering=True)
    return locate(CheckResult(sort_findings(findings), result.config), smap)


@contextmanager
def native_model_errors(native: NativeConfig, key: str | None) -> Iterator[None]:
    """A model that cannot be resolved is named by the native key and line that set it
    (``lora.yml:3: base_model=...``) instead of ``model.pretrained``."""
    try:
        yield
    except ConfigLoadError as e:
        text = str(e)
        if key is None or not text.startswith("model.pretrained="):
            raise
        where = native.loc(key)
        prefix = f"{where}: " if where else ""
        raise ConfigLoadError(prefix + key + text.removeprefix("model.pretrained")) from e


# The GPU is no key of any native format: the user names it with --gpu (cfgcheck's flag).
_GPU_FLAGS = {"trainer.gpu.name": "--gpu", "trainer.gpu.memory_gib": "--gpu"}


def rewrite(override: str, spec: Format, native: NativeConfig | None = None) -> str | None:
    """``path=value`` in the format's keys (or ``--gpu=VALUE`` for the GPU, which the user
    passes as a flag); ``""`` when the format needs no change for it; None when it cannot
    express it. With ``native``, the format's ``fix_value`` converts the value (LLaMA-Factory
    counts a DPO batch in pairs)."""
    key, sep, value = override.partition("=")
    if not sep:
        return None
    key = key.lstrip("+~")
    if key in _GPU_FLAGS:
        return f"{_GPU_FLAGS[key]}={value}"
    if native is not None and spec.fix_value is not None:
        value = spec.fix_value(native, key, value)
    return spec.to_native(key, value)
