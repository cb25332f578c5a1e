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


# What else Hydra and OmegaConf raise on hostile or careless input (``defaults: 42`` is a
# ValueError, ``model=null`` a TypeError or ValueError, a self-including defaults list a
# RecursionError, a file vanishing mid-read an OSError): all mean "cannot compose".
INPUT_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    RecursionError,
    OverflowError,
    OSError,
    UnicodeError,
)


def primary_config(config_dir: str | Path, config_name: str) -> tuple[Path, str]:
    """The resolved config directory and the primary config's name (without ``.yaml``).

    Raises :class:`ConfigLoadError` when the directory or the primary config is missing.
    """
    from cfgcheck.safeio import path_problem, shown

    try:
        directory = Path(config_dir).expanduser().resolve()
    except (RuntimeError, OSError) as e:  # ~nosuchuser, a symlink loop
        raise ConfigLoadError(f"config directory {shown(config_dir)}: {one_line(e)}") from e
    reason = path_problem(directory, allow_dir=True)
    if reason or not directory.is_dir():
        raise ConfigLoadError(
            f"config directory not found: {shown(config_dir)} {reason or 'is not a directory'}"
        )
    name = config_name.removesuffix(".yaml")
    primary = directory / f"{name}.yaml"
    if ".." in Path(name).parts or Path(name).is_absolute():
        # Only the config directory is screened (safeio.screen_config_dir) and searched.
        raise ConfigLoadError(
            f"--config-name {shown(config_name)} climbs out of the config directory: name a "
            f"config inside {shown(config_dir)}, or pass its folder as --config-dir"
        )
    reason = path_problem(primary)
    if reason:
        shown_primary = shown(Path(config_dir) / f"{name}.yaml")
        if reason == "does not exist":
            raise ConfigLoadError(f"primary config not found: {shown_primary}")
        raise ConfigLoadError(f"primary config {shown_primary} {reason}")
    return directory, name


@contextmanager
def hydra_session(config_dir: str | Path, config_name: str) -> Iterator[str]:
    """Hydra initialized on ``config_dir`` for the ``with`` block; yields the primary config's
    name. Hydra's global state is cleared before and after, so sessions never leak into each
    other. Raises :class:`ConfigLoadError` when the directory or the primary config is missing,
    or when a config file fails :func:`cfgcheck.safeio.screen_config_dir` (every file is
    screened before Hydra, whose YAML loader has no bounds, reads any).
    """
    from cfgcheck.safeio import screen_config_dir

    directory, name = primary_config(config_dir, config_name)
    screen_config_dir(directory)

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
    primary config is missing, a YAML file is malformed, unsafe (see
    :func:`cfgcheck.safeio.screen_config_dir`: every config file is screened before Hydra
    reads any) or an override is bad.
    """
    screen_overrides(overrides)
    from cfgcheck.overrides import plain_overrides

    try:
        with hydra_session(config_dir, config_name) as name:
            from hydra import compose as hydra_compose

            cfg = hydra_compose(config_name=name, overrides=plain_overrides(overrides))
    except compose_errors(*INPUT_ERRORS) as e:
        raise ConfigLoadError(override_error(e)) from e
    from cfgcheck.interpolation_cost import check_composed

    check_composed(cfg, f"{name}.yaml composed with its overrides")  # before anything resolves
    return cfg


def override_error(e: BaseException) -> str:
    """:func:`one_line` of a composition error; Hydra's "Could not override 'x'" (a key that
    is neither in the tree nor in the schema) also names the schema key closest to ``x``."""
    text = _user_spelling(one_line(e))
    if "LexerNoViableAltException" in text or "mismatched input" in text:
        return (
            f"{text} (quote a value with special characters for Hydra, and the whole override "
            "for the shell: \"tokenizer.pad_token='<|end_of_text|>'\")"
        )
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


_REWRITTEN = re.compile(r"\+\+([A-Za-z_][\w-]*(?:\.[\w-]+)*=)")


def _user_spelling(text: str) -> str:
    """Hydra's message with each ``++key=`` that :func:`~cfgcheck.overrides.plain_overrides`
    added written back as the user wrote it (``key=``): the rewrite is internal."""
    from cfgcheck.overrides import plain_key

    return _REWRITTEN.sub(lambda m: m.group(1) if plain_key(m.group(1)) else m.group(0), text)


MAX_OVERRIDE_CHARS = 4_096  # Hydra parses a 4 KB list in ~0.8 s, superlinearly beyond
_MAX_OVERRIDE_NESTING = 32


def screen_overrides(overrides: Sequence[str]) -> None:
    """Bound override strings before Hydra's grammar parser (recursive, slow on long nested
    input) sees them: their length and their bracket nesting."""
    for text in overrides:
        if len(text) > MAX_OVERRIDE_CHARS:
            raise ConfigLoadError(
                f"override {text[:40]!r}... is longer than {MAX_OVERRIDE_CHARS} characters; "
                f"put long values in a config file"
            )
        depth = deepest = 0
        for ch in text:
            if ch in "[{(":
                depth += 1
                deepest = max(deepest, depth)
            elif ch in "]})":
                depth -= 1
        if deepest > _MAX_OVERRIDE_NESTING or text.count("${") > _MAX_OVERRIDE_NESTING:
            raise ConfigLoadError(
                f"override {text[:40]!r}... nests deeper than {_MAX_OVERRIDE_NESTING} levels"
            )


def load_yaml(path: str | Path) -> Any:
    """Load an already-composed run config from one YAML (or JSON) file, bounded (see
    :mod:`cfgcheck.safeio`). Raises :class:`ConfigLoadError` with one line."""
    from cfgcheck.safeio import load_file

    return load_file(path)
