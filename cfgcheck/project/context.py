"""What every Hydra entry point does around validation: find the project's settings, pick the
config directory, name and schema they give, and after validation locate the findings, apply
the inline suppressions, then the settings' select / ignore / severity / per-file-ignores.

``cfgcheck check`` (and ``--sweep``), ``cfgcheck hook``, ``@cfgcheck.main`` and
:func:`cfgcheck.check` all go through :func:`project` and :meth:`Project.finish`; the service
passes its own (empty) settings and never reads a project's file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cfgcheck.compose import DEFAULT_CONFIG_DIR, DEFAULT_CONFIG_NAME
from cfgcheck.findings import CheckResult
from cfgcheck.project.settings import NONE, Settings, find_settings

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig


@dataclass(frozen=True)
class Project:
    """The settings of one check, and where its config comes from."""

    settings: Settings
    schema: type[RunConfig] | None
    config_dir: str | Path
    config_name: str

    def finish(self, result: CheckResult, overrides: Sequence[str] = ()) -> CheckResult:
        """Locations, inline suppressions, then the settings (see the module docstring)."""
        from cfgcheck.locations import with_locations

        result = with_locations(result, self.config_dir, self.config_name, overrides)
        if _may_suppress(self.config_dir):
            from cfgcheck.project.suppressions import apply_suppressions

            result = apply_suppressions(result, self.config_dir, self.config_name, overrides)
        return self.settings.apply(result)


def _may_suppress(config_dir: str | Path) -> bool:
    """False when the composition cache just read the tree and found no ``# cfgcheck:``."""
    from cfgcheck.compose_cache import marked_files

    try:
        return marked_files(Path(config_dir).resolve()) != []
    except (OSError, RuntimeError):
        return True


def resolve_schema(
    schema: type[RunConfig] | str | None, settings: Settings
) -> type[RunConfig] | None:
    """The schema class a caller passed, or the one the settings name (None: built-in)."""
    if schema is None and settings.schema is None:
        return None
    from cfgcheck.project.schema import check_schema, load_schema

    if isinstance(schema, str):
        return load_schema(schema)
    if schema is not None:
        return check_schema(schema)
    if settings.schema is not None:
        return load_schema(settings.schema, search=(settings.root,))
    return None


def project(
    config_dir: str | Path | None = None,
    config_name: str | None = None,
    *,
    schema: type[RunConfig] | str | None = None,
    settings: Settings | None = None,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
) -> Project:
    """The project of a check: ``settings`` (default: found from ``config_dir``, else the
    current directory), with the command line's ``select`` / ``ignore`` winning; the
    config directory and name the caller gave, else the settings', else ``conf``/``config``."""
    if settings is None:
        settings = find_settings(config_dir)
    settings = settings.with_cli(select, ignore)
    directory = (
        config_dir
        if config_dir is not None
        else settings.resolved_config_dir() or DEFAULT_CONFIG_DIR
    )
    name = config_name or settings.config_name or DEFAULT_CONFIG_NAME
    return Project(settings, resolve_schema(schema, settings), directory, name)


__all__ = ["NONE", "Project", "project"]
