"""Helpers for the native-format tests: the copied upstream configs and line lookups."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult, Finding, Location
from cfgcheck.sources import check_native

NATIVE = Path(__file__).resolve().parent / "native"


def example(fmt: str, name: str) -> Path:
    return NATIVE / fmt / name


def line_of(path: Path, key: str) -> int:
    """The 1-based line of the first ``key:`` (at any indent) in ``path``."""
    pattern = re.compile(rf"^\s*(- )?{re.escape(key)}\s*:")
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if pattern.match(line):
            return number
    raise AssertionError(f"{key} not in {path}")


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def one(result: CheckResult, rule: str) -> Finding:
    found = result.by_rule(rule)
    assert len(found) == 1, [(f.rule, f.message) for f in result.findings]
    return found[0]


def located_at(finding: Finding, path: str, file: Path, line: int) -> None:
    location = finding.locations[path]
    assert location is not None, finding
    assert Path(location.file).resolve() == file.resolve(), location
    assert location.line == line, (location, line)


def is_default(location: Location | None, framework: str) -> bool:
    return location is not None and location.file.startswith(f"default of {framework} ")


def applying_fixes_clears(file: Path, fmt: str, overrides: Sequence[str], finding: Finding) -> None:
    """Each fix of ``finding``, pasted after ``overrides``, removes it and adds no error."""
    assert finding.fixes, finding
    for fix in finding.fixes:
        after = check_native(file, fmt, [*overrides, *fix.overrides], gpu="H100")
        assert not after.by_rule(finding.rule), (fix, [f.message for f in after.findings])
        assert after.ok, (fix, [(f.rule, f.message) for f in after.errors])


def resolvable(fmt: str, file: Path) -> bool:
    try:
        check_native(file, fmt)
    except ConfigLoadError as e:
        if "not a cfgcheck preset" in str(e) or "does not know this model" in str(e):
            return False
        raise
    return True


def needs_model(fmt: str, file: Path) -> pytest.MarkDecorator:
    """Skip until cfgcheck resolves the file's model (presets / model folders, issue 9)."""
    return pytest.mark.skipif(
        not resolvable(fmt, file), reason=f"{file.name}: its model is not resolvable yet"
    )
