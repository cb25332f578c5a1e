"""Reporters render a :class:`~cfgcheck.findings.CheckResult`; chosen by name from a registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from cfgcheck.findings import CheckResult

Reporter = Callable[[CheckResult, TextIO], None]

_REPORTERS: dict[str, Reporter] = {}


class DuplicateReporterError(ValueError):
    pass


def register(name: str) -> Callable[[Reporter], Reporter]:
    def add(func: Reporter) -> Reporter:
        if name in _REPORTERS:
            raise DuplicateReporterError(f"reporter {name!r} registered twice")
        _REPORTERS[name] = func
        return func

    return add


def get_reporter(name: str) -> Reporter:
    _load_builtin()
    try:
        return _REPORTERS[name]
    except KeyError:
        raise ValueError(f"unknown report format {name!r}; known: {', '.join(formats())}") from None


def formats() -> list[str]:
    _load_builtin()
    return sorted(_REPORTERS)


def _load_builtin() -> None:
    from cfgcheck.report import github, json_report, text  # noqa: F401  (registers on import)
