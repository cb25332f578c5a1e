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
    config_dir: str | Path = "conf",
    config_name: str = "config",
    overrides: Sequence[str] = (),
) -> CheckResult:
    """Compose a config with Hydra and validate it; findings carry source locations.

    ``config_dir`` may instead be a training script or notebook (``train.py``,
    ``finetune.ipynb``): it is read statically as ``cfgcheck check --from python`` reads it
    (``overrides`` then in its native keys, ``args.per_device_train_batch_size=1``).

    Compositions are cached by content (see :mod:`cfgcheck.compose_cache`), so a repeated
    check of an unchanged tree does not import Hydra unless it has findings to locate.
    """
    if str(config_dir).endswith((".py", ".ipynb")) and Path(config_dir).is_file():
        # A run written as code (a script or notebook): read statically, never executed.
        from cfgcheck.sources import check_native as check_native_file

        return check_native_file(config_dir, "python", overrides)
    from cfgcheck.compose_cache import compose_cached
    from cfgcheck.locations import with_locations

    result = validate(compose_cached(config_dir, config_name, overrides))
    return with_locations(result, config_dir, config_name, overrides)


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
    raise AttributeError(f"module 'cfgcheck' has no attribute {name!r}")


if TYPE_CHECKING:
    from cfgcheck.hydra import main

__all__ = [
    "CheckResult",
    "ConfigError",
    "ConfigLoadError",
    "Finding",
    "Fix",
    "RunConfig",
    "check",
    "check_native",
    "compose",
    "load_yaml",
    "main",
    "validate",
]
