"""Project settings: ``[tool.cfgcheck]`` in the nearest ``pyproject.toml``, or ``.cfgcheck.toml``.

```toml
[tool.cfgcheck]
config-dir = "configs"           # relative to this file
config-name = "train"
schema = "my_pkg.conf:MyRun"     # a cfgcheck.RunConfig subclass
select = ["seq-len-over-block-size", "vocab-mismatch"]   # only these rule ids
ignore = ["lora-settings-unused"]
gpu = "A100-80GB"                # the GPU when the config names none (or GiB: "24")
[tool.cfgcheck.severity]
gpu-memory = "warning"
[tool.cfgcheck.per-file-ignores]
"configs/experiment/*.yaml" = ["gpu-memory"]
```

The search starts at the config directory when a caller names one, else at the current
directory, and walks up; in each directory ``.cfgcheck.toml`` wins over ``pyproject.toml``, and
a ``pyproject.toml`` without a ``[tool.cfgcheck]`` table is passed over (as ruff does). The
service never reads a project's file. An unknown setting, a rule id nothing emits or a bad value
is one :class:`~cfgcheck.errors.ConfigLoadError` line with a did-you-mean (exit 2).

Finding the file costs a few ``stat`` calls; ``tomllib`` is imported only when one exists.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult, Location, Severity

PYPROJECT = "pyproject.toml"
DOTFILE = ".cfgcheck.toml"
KEYS = (
    "config-dir",
    "config-name",
    "schema",
    "select",
    "ignore",
    "severity",
    "per-file-ignores",
    "gpu",
)
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")


@dataclass(frozen=True)
class DefaultGpu:
    """The GPU a run is meant for when its config names none, and where that was said."""

    value: str
    where: str

    def fill(self, run: Any) -> Any:
        """``run`` (a plain run config) with ``trainer.gpu`` set when it has none."""
        trainer = run.get("trainer") if isinstance(run, Mapping) else None
        if not isinstance(trainer, Mapping) or trainer.get("gpu") is not None:
            return run
        try:
            gpu: dict[str, Any] = {"memory_gib": float(self.value)}
        except ValueError:
            gpu = {"name": self.value}
        return {**run, "trainer": {**trainer, "gpu": gpu}}

    def location(self) -> Location:
        return Location(f"<{self.where}>", None)


@dataclass(frozen=True)
class Settings:
    """What a project's settings file says (all empty: no file)."""

    file: Path | None = None
    config_dir: str | None = None
    config_name: str | None = None
    schema: str | None = None
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    severity: Mapping[str, Severity] = field(default_factory=dict)
    per_file_ignores: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    gpu: str | None = None

    @property
    def root(self) -> Path:
        return self.file.parent if self.file is not None else Path.cwd()

    @property
    def label(self) -> str:
        if self.file is None:
            return "settings"
        table = "" if self.file.name == DOTFILE else " [tool.cfgcheck]"
        return f"{self.file}{table}"

    @property
    def default_gpu(self) -> DefaultGpu | None:
        return None if self.gpu is None else DefaultGpu(self.gpu, f"{self.label} gpu")

    def resolved_config_dir(self) -> str | None:
        if self.config_dir is None:
            return None
        return str(self.root / self.config_dir)

    def with_cli(
        self, select: Sequence[str] | None = None, ignore: Sequence[str] | None = None
    ) -> Settings:
        """The command line's ``--select`` / ``--ignore`` win over the file: each replaces the
        file's list, and a rule the command line selects is never ignored by the file."""
        if select is None and ignore is None:
            return self
        for ids, flag in ((select, "--select"), (ignore, "--ignore")):
            if ids:
                check_rule_ids(ids, flag)
        chosen = tuple(select) if select else self.select
        dropped = tuple(ignore) if ignore is not None else self.ignore
        if select:
            dropped = tuple(i for i in dropped if i not in select)
        return dataclasses.replace(self, select=chosen, ignore=dropped)

    def apply(self, result: CheckResult, cwd: Path | None = None) -> CheckResult:
        """``result`` after ``select`` / ``ignore`` / ``per-file-ignores`` and the severity
        overrides (the exit status follows the new severities)."""
        if not (self.select is not None or self.ignore or self.severity or self.per_file_ignores):
            return result
        base = cwd or Path.cwd()
        kept = []
        for f in result.findings:
            if self.select is not None and f.rule not in self.select:
                continue
            if f.rule in self.ignore or self._file_ignored(f.rule, f.locations.values(), base):
                continue
            severity = self.severity.get(f.rule)
            kept.append(f if severity is None else dataclasses.replace(f, severity=severity))
        from cfgcheck.findings import sort_findings

        return dataclasses.replace(result, findings=sort_findings(kept))

    def _file_ignored(self, rule: str, locations: Iterable[Location | None], cwd: Path) -> bool:
        for location in locations:
            if location is None or location.file.startswith("<"):
                continue
            path = (cwd / location.file).resolve()
            try:
                shown = path.relative_to(self.root.resolve()).as_posix()
            except ValueError:
                shown = path.as_posix()
            for pattern, ids in self.per_file_ignores.items():
                if rule in ids and fnmatch.fnmatch(shown, pattern):
                    return True
        return False


NONE = Settings()


def find_file(start: Path | None = None) -> Path | None:
    """The nearest settings file at or above ``start`` (default: the current directory)."""
    try:
        here = (start or Path.cwd()).resolve()
    except (OSError, RuntimeError):
        return None
    if not here.is_dir():
        here = here.parent
    for directory in (here, *here.parents):
        dotfile = directory / DOTFILE
        if dotfile.is_file():
            return dotfile
        pyproject = directory / PYPROJECT
        if pyproject.is_file() and _has_table(pyproject):
            return pyproject
    return None


def _has_table(pyproject: Path) -> bool:
    from cfgcheck.safeio import path_problem

    if path_problem(pyproject):  # a FIFO or device named pyproject.toml is never opened
        return False
    try:
        with pyproject.open("rb") as f:
            head = f.read(2_000_000)
    except OSError:
        return False
    return b"tool.cfgcheck" in head


def find_settings(start: str | Path | None = None) -> Settings:
    """The settings of the project around ``start`` (see the module docstring); ``NONE``
    when there is no settings file. ``CFGCHECK_NO_SETTINGS=1`` turns the lookup off."""
    if os.environ.get("CFGCHECK_NO_SETTINGS"):
        return NONE
    path = find_file(Path(start) if start is not None else None)
    return NONE if path is None else load_settings(path)


def load_settings(path: Path) -> Settings:
    """Read and check one settings file. Raises :class:`ConfigLoadError` (one line)."""
    import tomllib

    from cfgcheck.locations import display_path
    from cfgcheck.safeio import read_text

    shown = display_path(path)
    try:
        doc = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as e:
        raise ConfigLoadError(f"{shown}: not valid TOML: {e}") from e
    if path.name == DOTFILE:
        table: Any = doc.get("tool", {}).get("cfgcheck", doc) if "tool" in doc else doc
        where = shown
    else:
        table = doc.get("tool", {}).get("cfgcheck", {})
        where = f"{shown} [tool.cfgcheck]"
    if not isinstance(table, dict):
        raise ConfigLoadError(f"{where}: must be a table of settings")
    return _parse(table, path, where)


def _close(word: str, choices: Iterable[str]) -> str:
    options = list(choices)
    match = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else f" (known: {', '.join(options)})"


def _strings(value: Any, where: str, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigLoadError(f"{where}: {name} must be a list of rule ids (strings)")
    return tuple(value)


def _string(value: Any, where: str, name: str) -> str:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ConfigLoadError(f"{where}: {name} must be a string")
    return str(value)


def _parse(table: dict[str, Any], path: Path, where: str) -> Settings:
    for key in table:
        if key not in KEYS:
            raise ConfigLoadError(f"{where}: unknown setting {key!r}{_close(key, KEYS)}")
    select = table.get("select")
    severity_table = table.get("severity", {})
    if not isinstance(severity_table, dict):
        raise ConfigLoadError(f'{where}: severity must be a table of rule-id = "severity"')
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict):
        raise ConfigLoadError(f"{where}: per-file-ignores must be a table of glob = [rule ids]")
    severity: dict[str, Severity] = {}
    for rule, level in severity_table.items():
        if level not in SEVERITIES:
            raise ConfigLoadError(
                f"{where}: severity of {rule} must be one of {', '.join(SEVERITIES)}, got {level!r}"
            )
        severity[rule] = cast(Severity, level)
    settings = Settings(
        file=path,
        config_dir=_string(table["config-dir"], where, "config-dir")
        if "config-dir" in table
        else None,
        config_name=_string(table["config-name"], where, "config-name")
        if "config-name" in table
        else None,
        schema=_string(table["schema"], where, "schema") if "schema" in table else None,
        select=None if select is None else _strings(select, where, "select"),
        ignore=_strings(table.get("ignore", []), where, "ignore"),
        severity=severity,
        per_file_ignores={
            str(glob): _strings(ids, where, f"per-file-ignores {glob!r}")
            for glob, ids in per_file.items()
        },
        gpu=_string(table["gpu"], where, "gpu") if "gpu" in table else None,
    )
    ids = [*(settings.select or ()), *settings.ignore, *settings.severity]
    ids += [i for group in settings.per_file_ignores.values() for i in group]
    check_rule_ids(ids, where)
    return settings


def known_rule_ids() -> list[str]:
    """Every finding id cfgcheck can emit, team rules included."""
    from cfgcheck.rules.explanations import emitted_ids

    return emitted_ids()


def check_rule_ids(ids: Iterable[str], where: str) -> None:
    """Raise :class:`ConfigLoadError` for the first id nothing emits, with a did-you-mean."""
    ids = list(ids)
    if not ids:
        return
    known = known_rule_ids()
    for rule_id in ids:
        if rule_id not in known:
            match = difflib.get_close_matches(rule_id, known, n=1)
            hint = f" (did you mean {match[0]!r}?)" if match else "; `cfgcheck rules` lists them"
            raise ConfigLoadError(f"{where}: unknown rule id {rule_id!r}{hint}")
