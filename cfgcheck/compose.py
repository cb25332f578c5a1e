"""Composing a run config from a Hydra ``conf/`` tree, and loading plain YAML files.

Composition never instantiates anything: ``_target_`` keys are data here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfgcheck.errors import ConfigLoadError

if TYPE_CHECKING:
    from omegaconf import DictConfig

DEFAULT_CONFIG_DIR = "conf"
DEFAULT_CONFIG_NAME = "config"


def one_line(e: BaseException) -> str:
    """An exception message on one line, without Hydra's search-path dump."""
    text = str(e).split("Config search path:")[0]
    return " ".join(text.split()) or type(e).__name__


def compose_errors(*extra: type[Exception]) -> tuple[type[Exception], ...]:
    """What Hydra, OmegaConf and YAML raise on a bad config or override (imported lazily),
    plus the ``extra`` exception types a caller also treats as "cannot compose"."""
    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return (HydraException, OmegaConfBaseException, yaml.YAMLError, *extra)


def primary_config(config_dir: str | Path, config_name: str) -> tuple[Path, str]:
    """The resolved config directory and the primary config's name (without ``.yaml``).

    Raises :class:`ConfigLoadError` when the directory or the primary config is missing.
    """
    directory = Path(config_dir).expanduser().resolve()
    if not directory.is_dir():
        raise ConfigLoadError(f"config directory not found: {config_dir}")
    name = config_name.removesuffix(".yaml")
    if not (directory / f"{name}.yaml").is_file():
        raise ConfigLoadError(f"primary config not found: {Path(config_dir) / name}.yaml")
    return directory, name


@contextmanager
def hydra_session(config_dir: str | Path, config_name: str) -> Iterator[str]:
    """Hydra initialized on ``config_dir`` for the ``with`` block; yields the primary config's
    name. Hydra's global state is cleared before and after, so sessions never leak into each
    other. Raises :class:`ConfigLoadError` when the directory or the primary config is missing.
    """
    directory, name = primary_config(config_dir, config_name)

    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(
            config_dir=str(directory), version_base="1.3", job_name="cfgcheck"
        ):
            yield name
    finally:
        GlobalHydra.instance().clear()


def compose(
    config_dir: str | Path = DEFAULT_CONFIG_DIR,
    config_name: str = DEFAULT_CONFIG_NAME,
    overrides: Sequence[str] = (),
) -> DictConfig:
    """Compose ``config_name`` from ``config_dir`` with Hydra override strings.

    Raises :class:`ConfigLoadError` with a one-line message when the directory or the
    primary config is missing, a YAML file is malformed or an override is bad.
    """
    from cfgcheck.overrides import plain_overrides

    try:
        with hydra_session(config_dir, config_name) as name:
            from hydra import compose as hydra_compose

            return hydra_compose(config_name=name, overrides=plain_overrides(overrides))
    except compose_errors() as e:
        raise ConfigLoadError(override_error(e)) from e


def override_error(e: BaseException) -> str:
    """:func:`one_line` of a composition error; Hydra's "Could not override 'x'" (a key that
    is neither in the tree nor in the schema) also names the schema key closest to ``x``."""
    text = one_line(e)
    match = re.match(r"Could not (?:override|append to config)\. ?'?([\w.-]+)'?", text)
    match = match or re.match(r"Could not override '([\w.-]+)'", text)
    if match is None:
        return text
    from cfgcheck.overrides import suggest_key

    key = match.group(1)
    close = suggest_key(key)
    if close is None or close == key:
        return text
    return f"{text} (did you mean {close}?)"


def load_yaml(path: str | Path) -> Any:
    """Load an already-composed run config from one YAML (or JSON) file."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigLoadError(f"cannot read {p}: {e.strerror or e}") from e
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigLoadError(f"malformed YAML in {p}: {one_line(e)}") from e
