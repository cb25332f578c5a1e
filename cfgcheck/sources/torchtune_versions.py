"""Which torchtune a config is read for, and torchtune's tables in that version.

The newest tables (``keys/torchtune.json``) are pytorch/torchtune's main (its ``version.txt``
says 0.7.0, unreleased); ``keys/torchtune_versions.json`` holds each release people pin (0.5.0,
0.6.0, 0.6.1: the releases on PyPI) as what differs from main. Both are generated from the git
tags by ``scripts/gen_torchtune_builders.py``, never typed by hand.

Which version: ``--framework-version``; else a ``# requires: torchtune==X`` comment in the
file; either states the version the run uses, and what that version lacks is an error. Else the
installed ``torchtune`` (its distribution metadata, never imported), else the newest: their
tables are read, but the version is *not known* (cfgcheck often runs where the training does
not: a pre-commit hook, CI), so what holds only in some versions is a warning naming them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources.base import NativeConfig

_PIN = re.compile(r"#\s*requires:?[^\n]*?\btorchtune\s*==\s*([0-9][0-9.]*)", re.I)


@dataclass(frozen=True)
class Version:
    """The torchtune version a config is read for."""

    table: str  # the tables used: a release (0.6.1) or the newest (main's 0.7.0)
    wanted: str  # the version asked for
    origin: str  # how it was decided, for messages
    known: bool  # stated (flag, pin): what holds only in other versions is an error

    @property
    def label(self) -> str:
        return label(self.table)


def _read(name: str) -> dict[str, Any]:
    text = resources.files("cfgcheck.sources").joinpath("keys", name).read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def _releases() -> dict[str, Any]:
    releases: dict[str, Any] = _read("torchtune_versions.json")["releases"]
    return releases


@cache
def _newest() -> dict[str, Any]:
    return _read("torchtune.json")


def newest() -> str:
    return str(_newest()["version"])


def version_tuple(version: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", version)[:3]
    return tuple(int(p) for p in parts) if parts else (0,)


def versions() -> list[str]:
    """Every version with tables, oldest first (the newest is main's)."""
    return sorted({*_releases(), newest()}, key=version_tuple)


def label(version: str) -> str:
    """``torchtune 0.6.1`` for a release; main, unreleased, named as such with its commit."""
    if version in _releases():
        return f"torchtune {version}"
    commit = str(_newest()["source"]).rsplit(" ", 1)[-1][:8]
    return f"torchtune main ({version} unreleased, {commit})"


@cache
def tables(version: str | None = None) -> dict[str, Any]:
    """torchtune's tables (builders, components, recipes, registry, checks) in ``version``
    (None: the newest): main's, with the release's differences applied."""
    base = _newest()
    release = _releases().get(version or "")
    if release is None:
        return base
    out = dict(base, source=release["source"], version=release["version"])
    for section, entries in release["changed"].items():
        merged = {k: v for k, v in base[section].items() if k not in release["removed"][section]}
        merged.update(entries)
        out[section] = merged
    return out


def _nearest(version: str, options: list[str]) -> str:
    """The tables of ``version``'s release line (same major.minor), else the newest below."""
    same = [v for v in options if version_tuple(v)[:2] == version_tuple(version)[:2]]
    if same:
        return same[-1]
    below = [v for v in options if version_tuple(v) <= version_tuple(version)]
    return below[-1] if below else options[0]


@cache
def _installed() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version("torchtune")
    except importlib.metadata.PackageNotFoundError:
        return None


def resolve(native: NativeConfig) -> Version:
    """The torchtune version ``native`` is read for (see the module)."""
    options = versions()
    flag = native.options.get("framework_version")
    wanted, origin, known = options[-1], "no version stated: the newest cfgcheck knows", False
    pin = _PIN.search(native.text)
    installed = None if flag or pin else _installed()
    if flag:
        if not re.fullmatch(r"v?\d+(\.\d+){0,2}\S*", flag):
            raise ConfigLoadError(f"--framework-version {flag!r}: expected a version like 0.6.1")
        wanted, origin, known = flag.lstrip("v"), f"--framework-version {flag}", True
    elif pin:
        wanted, origin, known = pin.group(1), f"the file's pin torchtune=={pin.group(1)}", True
    elif installed:
        wanted, origin = installed, f"the installed torchtune {installed}, not stated"
    return Version(_nearest(wanted, options), wanted, origin, known)


def span(found: list[str]) -> str:
    """``torchtune 0.5.0 to 0.6.1`` style range of versions (main named as such)."""
    if not found:
        return "no torchtune version"
    if len(found) == 1:
        return label(found[0])
    last = found[-1] if found[-1] in _releases() else "main"
    return f"torchtune {found[0]} to {last}"
