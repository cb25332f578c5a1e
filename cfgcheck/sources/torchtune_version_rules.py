"""What differs between torchtune versions: the error a version raises for a component it
lacks, and a finding for a component, argument or key only other versions have (an error when
the version is stated, else a warning naming the versions; see
:mod:`cfgcheck.sources.torchtune_versions`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources import torchtune_data as tt
from cfgcheck.sources import torchtune_versions as tv
from cfgcheck.sources.base import NativeConfig
from cfgcheck.sources.torchtune import recipe_of

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig


def params_of(path: str, version: str) -> list[str]:
    return list((tt.component(path, version) or {}).get("params", []))


def instantiation_error(path: str, version: str) -> str:
    """What torchtune's config._utils._get_component_from_path raises for a ``path`` that
    ``version`` lacks (pytorch/torchtune v0.6.1 torchtune/config/_utils.py:37-107, the same at
    v0.5.0 and main): the first missing part, imported as a module under its parent."""
    data = tt.data(version)
    names = set(data["components"]) | set(data["builders"])
    packages = set(data["packages"])
    modules = packages | {n.rpartition(".")[0] for n in names}
    parts = path.split(".")
    for m in range(1, len(parts)):
        prefix, parent = ".".join(parts[: m + 1]), ".".join(parts[:m])
        if prefix in modules or prefix in names:
            continue
        if parent not in modules:  # an attribute of a class: its AttributeError's own text
            return (
                f"Error loading '{path}': AttributeError(...) Are you sure that '{parts[m]}' "
                f"is an attribute of '{parent}'?"
            )
        why = f"No module named '{prefix}'" + (
            "" if parent in packages else f"; '{parent}' is not a package"
        )
        return (
            f"Error loading '{path}': ModuleNotFoundError(\"{why}\") Are you sure that "
            f"'{parts[m]}' is importable from module '{parent}'?"
        )
    return f"Error loading '{path}'"


def other_version(key: str, path: str, version: tv.Version, elsewhere: list[str]) -> Finding:
    """A component of other torchtune versions: an error when the version is known, else a
    warning naming the versions that have it."""
    error = instantiation_error(path, version.table)
    if version.known:
        return Finding(
            "torchtune-component-unknown",
            "error",
            (f"{key}._component_",),
            f"{key}._component_={path} is in {tv.span(elsewhere)}, not in {version.label} "
            f'({version.origin}): config.instantiate fails with "InstantiationError: {error}"',
            f"use a component {version.label} has, or run {tv.span(elsewhere)}",
        )
    return Finding(
        "torchtune-component-unknown",
        "warning",
        (f"{key}._component_",),
        f"{key}._component_={path} is in {tv.span(elsewhere)}, not in {version.label} "
        f"({version.origin}): with a torchtune that lacks it config.instantiate fails with "
        f'"InstantiationError: {error}"',
        "state the version the run uses (`# requires: torchtune==X` or --framework-version), "
        "or use a component every torchtune has",
    )


def version_key_rules(native: NativeConfig, run: RunConfig | None) -> Iterator[Finding]:
    """A top-level key the recipe reads in other torchtune versions, not in this one: the
    recipe never looks at it (as any key it does not read), so it is silently ignored."""
    recipe = recipe_of(native)
    version = tv.resolve(native)
    keys = tt.recipe_keys(recipe, version.table)
    if keys is None:
        return
    for key in native.data:
        if key in keys["keys"]:
            continue
        where = [
            v for v in tv.versions() if key in (tt.recipe_keys(recipe, v) or {"keys": []})["keys"]
        ]
        if where:
            yield Finding(
                "unknown-native-key",  # the rule of keys a recipe does not read
                "warning",
                (key,),
                f"{key} is read by recipe {recipe} of {tv.span(where)}, not by {version.label}'s "
                f"({version.origin}): that recipe never looks at it, so the setting is "
                "silently ignored",
                f"drop {key}, or run {tv.span(where)}",
                fixes=(Fix((f"~{key}",), f"drop {key}"),),
            )
