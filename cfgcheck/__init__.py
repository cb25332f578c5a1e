"""cfgcheck: catch LLM training configs that would crash, before anything launches.

Public API::

    import cfgcheck
    result = cfgcheck.check("conf", "config", ["data.max_seq_length=3063"])
    result.ok, result.findings
    cfgcheck.validate(plain_dict_or_dictconfig).raise_for_errors()
"""

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfgcheck.compose import compose, load_yaml
from cfgcheck.errors import ConfigError, ConfigLoadError
from cfgcheck.findings import CheckResult, Finding, Fix
from cfgcheck.schema import RunConfig
from cfgcheck.validate import validate

__version__ = "0.1.0"


def check(
    config_dir: str | Path | None = None,
    config_name: str | None = None,
    overrides: Sequence[str] = (),
    *,
    schema: type[RunConfig] | str | None = None,
    settings: "Settings | None" = None,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
) -> CheckResult:
    """Compose a config with Hydra and validate it; findings carry source locations.

    The project's settings (``[tool.cfgcheck]`` of the nearest ``pyproject.toml`` or a
    ``.cfgcheck.toml``, searched from ``config_dir``, else the current directory) supply the
    config directory, name, schema, GPU and rule selection the arguments leave out; pass
    ``settings=cfgcheck.project.settings.NONE`` to ignore them. ``schema``: a
    :class:`RunConfig` subclass (or ``"pkg.mod:Class"``); ``select`` / ``ignore``: rule ids,
    winning over the settings'. Inline ``# cfgcheck: ignore[rule-id]`` suppressions apply.

    ``config_dir`` may instead be a training script or notebook (``train.py``,
    ``finetune.ipynb``): it is read statically as ``cfgcheck check --from python`` reads it
    (``overrides`` then in its native keys, ``args.per_device_train_batch_size=1``).

    Compositions are cached by content (see :mod:`cfgcheck.compose_cache`), so a repeated
    check of an unchanged tree does not import Hydra unless it has findings to locate.
    """
    code = Path(config_dir) if config_dir is not None else None
    if code is not None and code.suffix in (".py", ".ipynb") and code.is_file():
        # A run written as code (a script or notebook): read statically, never executed.
        from cfgcheck.sources import check_native as check_native_file

        return check_native_file(code, "python", overrides)
    from cfgcheck.compose_cache import compose_cached
    from cfgcheck.project.context import project

    p = project(
        config_dir, config_name, schema=schema, settings=settings, select=select, ignore=ignore
    )
    composed = compose_cached(p.config_dir, p.config_name, overrides)
    result = validate(composed, p.schema, gpu=p.settings.default_gpu)
    return p.finish(result, overrides)


def check_native(
    path: str | Path,
    fmt: str,
    overrides: Sequence[str] = (),
    gpu: str | None = None,
) -> CheckResult:
    """Validate a native framework config file (``fmt``: ``litgpt``, ``axolotl``, ``trl``, or
    ``python`` for a script or notebook)
    with overrides in that format's keys (``sequence_len=4096``); findings point at the file's
    lines and their fixes use its keys. See :mod:`cfgcheck.sources`."""
    from cfgcheck.sources import check_native as check_native_file

    return check_native_file(path, fmt, overrides, gpu)


def __getattr__(name: str) -> Any:
    # cfgcheck.main, the @hydra.main drop-in, loads Hydra's launcher code: only on first use.
    if name == "main":
        from cfgcheck.hydra import main

        return main
    # The public rule API, read from the registry on first use: importing the registry before
    # the schema and validate (whose rules import it anyway) costs ~40 ms of pydantic set-up.
    if name == "rule":
        from cfgcheck.rules._registry import team_rule

        return team_rule
    if name == "Problem":
        from cfgcheck.rules._registry import Problem

        return Problem
    raise AttributeError(f"module 'cfgcheck' has no attribute {name!r}")


if TYPE_CHECKING:
    from cfgcheck.hydra import main
    from cfgcheck.project.settings import Settings
    from cfgcheck.rules._registry import Problem
    from cfgcheck.rules._registry import team_rule as rule

__all__ = [
    "CheckResult",
    "ConfigError",
    "ConfigLoadError",
    "Finding",
    "Fix",
    "Problem",
    "RunConfig",
    "check",
    "check_native",
    "compose",
    "load_yaml",
    "main",
    "rule",
    "validate",
]
