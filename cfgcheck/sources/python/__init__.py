"""``--from python``: a run written as code (an Unsloth notebook, a Trainer script, a
Lightning module), read statically and checked like any other source.

The file is read by the shared static reader (:mod:`cfgcheck.sources.code`: never imported,
never executed); the calls it makes become native keys ``<group>.<argument>``
(:mod:`.collect`), located at the keyword (file:line, or file, cell, line in a notebook); the
keys map onto cfgcheck's sections as each library behaves (:mod:`.build`, citing their
source). The rules run unchanged; afterwards (:mod:`.edits`) every fix is rewritten as an edit
of the code and kept only when the edited code, read again, clears the finding.

A value the reader cannot know (a call's result, ``os.environ``, ``input()``) is a
``python-unknown-value`` warning at its line; findings that would rest on it are dropped
rather than guessed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Finding, Location
from cfgcheck.sources.base import Builder, Format, NativeConfig
from cfgcheck.sources.code import CodeFile, Program, parse_code, read_code, read_program
from cfgcheck.sources.python.collect import Collected, collect
from cfgcheck.sources.reader import Document

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig
    from cfgcheck.sources.native import Loaded
    from cfgcheck.sources.profiles import Profile

GROUPS = (
    "load",
    "bnb",
    "peft",
    "args",
    "trainer",
    "tokenize",
    "map",
    "dataset",
    "loader",
    "lightning",
)
UNKNOWN_RULE = "python-unknown-value"
# Colab's runtime types (notebook metadata ``colab.gpuType``) as cfgcheck's GPU table names
# them: Colab's A100 runtime has 40 GB, its V100 16 GB (Colab's runtime type menu).
COLAB_GPUS = {"A100": "A100-40GB", "V100": "V100-16GB"}


class NoTrainingRun(ConfigLoadError):
    """The code builds no trainer: nothing to check (the hook skips such files)."""


@dataclass
class CodeConfig(NativeConfig):
    """A native config read from code: the keys, plus what the reader found."""

    code: CodeFile | None = None
    program: Program | None = None
    collected: Collected = field(default_factory=Collected)
    overrides: tuple[str, ...] = ()
    gpu_name: str | None = None
    gpu_location: Location | None = None
    # cfgcheck path -> the native key it was taken from; paths resting on unknown values.
    path_keys: dict[str, str] = field(default_factory=dict)
    unknown_paths: dict[str, str] = field(default_factory=dict)
    cli_gpu: str | None = None
    verify: bool = True  # rewrite fixes as code edits and re-check them (not when re-checking)

    @property
    def gpu_bf16(self) -> bool | None:
        """Whether the declared GPU runs bfloat16 (None: no GPU known)."""
        if not self.gpu_name:
            return None
        from cfgcheck.memory.devices import lookup

        spec = lookup(self.gpu_name)
        return None if spec is None else spec.bf16


def code_of(b: Builder) -> CodeConfig:
    """The code config a python-format builder works on."""
    if not isinstance(b.native, CodeConfig):
        raise TypeError("the python format builds only what load_code read")
    return b.native


class CodeBuilder(Builder):
    """A builder that remembers which native key each path came from (for code edits) and
    which paths rest on a value the code computes when it runs."""

    @property
    def code(self) -> CodeConfig:
        return code_of(self)

    def take(self, path: str, key: str, default: Any, where: str, convert: Any = None) -> Any:
        self.code.path_keys[path] = key
        unknown = self.code.collected.unknown.get(key)
        if unknown is not None and not self.native.is_set(key):
            self.code.unknown_paths[path] = key
            self.set(path, default if convert is None else convert(default), self.native.loc(key))
            return default
        if convert is None:
            return super().take(path, key, default, where)
        return super().take(path, key, default, where, convert)

    def from_key(self, path: str, key: str, value: Any) -> None:
        self.code.path_keys[path] = key
        super().from_key(path, key, value)

    def guard(self, path: str, *keys: str) -> None:
        """``path`` was decided from ``keys``: when one of them is unknown (and not given on
        the command line), ``path`` rests on a value the code computes when it runs."""
        for key in keys:
            if key in self.code.collected.unknown and not self.native.is_set(key):
                self.code.unknown_paths.setdefault(path, key)
                return


def read_python(path: str | Path, shown: str | None = None) -> CodeFile:
    from cfgcheck.locations import display_path

    return read_code(path, shown or display_path(Path(path)))


def load_python(path: str | Path, overrides: Sequence[str] = (), gpu: str | None = None) -> Loaded:
    """Read a script or notebook and map it (see the module); :class:`ConfigLoadError` (one
    line) when it cannot be read, is not valid Python, builds no trainer or loads no model."""
    return load_code(read_python(path), overrides, gpu)


def load_text(
    text: str,
    shown: str,
    overrides: Sequence[str] = (),
    gpu: str | None = None,
    verify: bool = True,
) -> Loaded:
    """:func:`load_python` of a script or notebook body (the service's requests)."""
    return load_code(parse_code(text, shown), overrides, gpu, verify)


def load_code(
    code: CodeFile, overrides: Sequence[str] = (), gpu: str | None = None, verify: bool = True
) -> Loaded:
    from cfgcheck.sources.native import build_loaded

    program = read_program(code)
    collected = collect(program)
    if not _trains(program, collected):
        raise NoTrainingRun(
            f"{code.file}: no training run found: the code builds no trainer (transformers "
            "Trainer, TRL SFTTrainer/DPOTrainer/GRPOTrainer..., Unsloth, Lightning Trainer or "
            "Fabric); nothing to check"
        )
    base = NativeConfig.from_document("python", Document(code.file, collected.data), overrides)
    where = dict(collected.where)
    for key, location in base.where.items():
        if location.file.startswith("<override"):
            where[key] = location
            collected.unknown.pop(key, None)
    native = CodeConfig(
        "python",
        code.file,
        base.data,
        where,
        code=code,
        program=program,
        collected=collected,
        overrides=tuple(overrides),
        cli_gpu=gpu,
        verify=verify,
    )
    if not gpu and code.gpu:
        native.gpu_name = COLAB_GPUS.get(code.gpu, code.gpu)
        native.gpu_location = Location(f"{code.file} metadata colab.gpuType={code.gpu}", None)
        if native.gpu_name.upper().startswith("V2") or "TPU" in native.gpu_name.upper():
            native.gpu_name = native.gpu_location = None  # a TPU runtime
    elif gpu and not gpu.replace(".", "", 1).isdigit():
        native.gpu_name = gpu
    spec = dataclasses.replace(FORMAT, to_native=_to_native_for(native))
    return build_loaded(spec, native, CodeBuilder(native, spec.label), gpu)


def _trains(program: Program, collected: Collected) -> bool:
    return bool(
        "trainer" in collected.calls
        or "lightning" in collected.calls
        or (
            program.find("fit", "train")
            and ("loader" in collected.calls or "args" in collected.calls)
        )
    )


def trains_text(text: str) -> bool:
    """A cheap test before parsing: does the text build a trainer at all (the hook)?"""
    from cfgcheck.sources.python.collect import LIGHTNING, TRAINERS

    names = {t.split(".")[-1] for t in (*TRAINERS, *LIGHTNING)}
    return any(f"{name}(" in text or f"{name} (" in text for name in names)


def _to_native_for(native: CodeConfig) -> Any:
    def to_native(path: str, value: str) -> str | None:
        from cfgcheck.sources.python.edits import native_change

        return native_change(native, path, value)

    return to_native


def unknown_values(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """One warning per value the code computes when it runs, where a check needed it."""
    if not isinstance(native, CodeConfig):
        return
    paths: dict[str, list[str]] = {}
    for path, key in sorted(native.unknown_paths.items()):
        paths.setdefault(key, []).append(path)
    for key, resting in paths.items():
        unknown = native.collected.unknown[key]
        origin = f" ({unknown.location})" if unknown.location else ""
        yield Finding(
            UNKNOWN_RULE,
            "warning",
            (key,),
            f"{key.split('.')[-1]} is {unknown.why}{origin}: cfgcheck reads the code "
            f"without running it, so {' and '.join(resting)} "
            f"{'is' if len(resting) == 1 else 'are'} not known and the checks that need "
            f"{'it' if len(resting) == 1 else 'them'} are left out",
            f"write a literal there, or give it on the command line: {key}=VALUE",
        )


def finish(loaded: Loaded, findings: list[Finding]) -> list[Finding]:
    from cfgcheck.sources.python.edits import with_edits

    native = loaded.native
    if not isinstance(native, CodeConfig):
        return findings
    from cfgcheck.sources.code.resting import rests_on

    kept = [f for f in findings if f.rule == UNKNOWN_RULE or not rests_on(f, native.unknown_paths)]
    return with_edits(loaded, kept) if native.verify else kept


def profile(native: NativeConfig) -> Profile:
    from cfgcheck.sources.python.profiles import profile_of

    return profile_of(native)


def _to_native(path: str, value: str) -> str | None:
    return None  # replaced per file (see load_code)


FORMAT = Format(
    name="python",
    label="the libraries",  # "default of the libraries unsloth/models/loader.py ..."
    framework="hf",
    keys=frozenset(),
    build=lambda b: _build(b),
    to_native=_to_native,
    profile=profile,
    rules=(unknown_values,),
    open_prefixes=GROUPS,
    finish=finish,
    verifies_fixes=True,
)


def _build(b: Builder) -> None:
    from cfgcheck.sources.python.build import build

    build(b)
