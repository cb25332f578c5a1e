"""A content-keyed cache of Hydra compositions, for the ``cfgcheck check`` fast path.

Importing Hydra and composing costs about 0.15 s, half of a check; pre-commit hooks and CI
check the same tree over and over. (A first check of a plain tree composes without Hydra,
:mod:`cfgcheck.compose_plain`; a hit still spares it the screening and parsing of every file.)
A composition is a pure function of the config files, the
primary config's name, the overrides and the installed Hydra/OmegaConf, so the key hashes all
of them: every ``*.yaml``/``*.yml`` under the config directory, byte for byte.

What is stored is the composed container. Interpolations that call a resolver
(``${oc.env:...}``) are stored unresolved and resolved by OmegaConf on every run, since they
read the environment. A container whose interpolations only reference other keys
(``outputs/${name}``) depends on nothing but the composition, so it is stored resolved, and a
hit then needs neither Hydra nor OmegaConf. Nothing is stored when
- the config uses a resolver other than OmegaConf's own ``oc.*`` (``${hydra:...}``,
  ``${now:...}``, or a custom one: those need the Hydra context or code that may change), or
- Hydra may read configs from outside the config directory: a config file or an override
  mentions ``searchpath`` (``hydra.searchpath``; a plain text test, on the safe side), or a
  ``hydra_plugins`` package is installed (search-path plugins live there; hydra-core itself
  ships none). The key does not cover such files.
- the process has structured configs registered in Hydra's ``ConfigStore`` (a library caller
  inside a Hydra app): code the key does not cover. Such a process does not read the cache
  either.

``CFGCHECK_NO_CACHE=1`` turns the cache off; ``CFGCHECK_CACHE_DIR`` moves it (default
``$XDG_CACHE_HOME/cfgcheck`` or ``~/.cache/cfgcheck``). Unreadable or corrupt entries are
ignored and rewritten; writes are atomic; a hit touches its entry, and each store keeps the
:data:`MAX_ENTRIES` most recently used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cfgcheck.compose import compose, primary_config
from cfgcheck.diskcache import cache_root, read_entry, write_entry
from cfgcheck.safeio import Limits

# Bump when the stored layout changes, or what a composition must pass (2: the safeio screen,
# so entries composed before it are not reused; 3: a tree with a ``cfgcheck:`` mapping node
# keeps its interpolations, which locate its values).
FORMAT = 3
MAX_ENTRIES = 256  # stores prune the least recently used entries beyond this
# an entry is a composed config: far below the bounds every config file is read under
_ENTRY_LIMITS = Limits(max_bytes=64 << 20, max_depth=256, max_nodes=4_000_000, max_keys=500_000)
_RESOLVER_CALL = re.compile(r"\$\{\s*[A-Za-z_][\w.]*\s*:")
_FOREIGN_RESOLVER = re.compile(r"\$\{\s*(?!oc\.)[A-Za-z_][\w.]*\s*:")


def cache_dir() -> Path | None:
    """Where compositions are cached, or ``None`` when caching is off."""
    root = cache_root()
    if root is None or importlib.util.find_spec("hydra_plugins"):
        return None
    return root / "compose"


_HYDRA_OWN_NODES = {"hydra", "_dummy_empty_config_.yaml"}


def _config_store_in_use() -> bool:
    """Whether code in this process registered configs in Hydra's ConfigStore (checked
    without importing Hydra: if it was never imported, nothing was registered)."""
    store = sys.modules.get("hydra.core.config_store")
    if store is None:
        return False
    return any(name not in _HYDRA_OWN_NODES for name in store.ConfigStore.instance().repo)


def _installed(package: str) -> str:
    """Identity of an installed package without importing it: its origin file's stat."""
    spec = importlib.util.find_spec(package)
    origin = spec.origin if spec is not None else None
    if origin is None:
        return f"{package}:none"
    st = os.stat(origin)
    return f"{package}:{origin}:{st.st_size}:{st.st_mtime_ns}"


def cache_key(directory: Path, name: str, overrides: Sequence[str]) -> str | None:
    """sha256 over everything a composition depends on, or ``None`` when the composition may
    read files outside ``directory``. Raises OSError on unreadable files."""
    return _key_and_bytes(directory, name, overrides)[0]


def _key_and_bytes(
    directory: Path, name: str, overrides: Sequence[str]
) -> tuple[str | None, dict[Path, bytes] | None]:
    """:func:`cache_key`, and the bytes of every file it read, by path (``None`` with the key),
    so that a miss screens and composes them without walking and reading the tree again."""
    if any("searchpath" in o for o in overrides):
        return None, None
    from cfgcheck import __version__
    from cfgcheck.overrides import plain_overrides

    overrides = plain_overrides(overrides)  # the key covers what Hydra composes
    h = hashlib.sha256()
    for part in (
        f"format={FORMAT}",
        f"cfgcheck={__version__}",
        _installed("hydra"),
        _installed("omegaconf"),
        str(directory),
        name,
        json.dumps(list(overrides)),
    ):
        h.update(part.encode() + b"\0")
    from cfgcheck.safeio import config_files, read_bytes

    # Every file Hydra may read, behind symlinked files and folders too (their content is
    # what is hashed, so an edit behind a link is a new key); links out of the tree refused.
    read: dict[Path, bytes] = {}
    for path in config_files(directory):
        data = read_bytes(path)  # bounded; a FIFO, device or dangling link: one-line error
        if b"searchpath" in data:
            return None, None
        read[path] = data
        h.update(path.relative_to(directory).as_posix().encode() + b"\0")
        h.update(data + b"\0")
    _note_marks(directory, read)
    return h.hexdigest(), read


# Files holding a ``# cfgcheck:`` comment, noted while the key reads every file, so the inline
# suppressions (cfgcheck.project.suppressions) need not read the tree again.
SUPPRESSION_MARK = re.compile(rb"#\s*cfgcheck\s*:")
_MARKED: dict[Path, list[Path]] = {}


def _note_marks(directory: Path, read: dict[Path, bytes]) -> None:
    _MARKED[directory] = [path for path, data in read.items() if SUPPRESSION_MARK.search(data)]


def marked_files(directory: Path) -> list[Path] | None:
    """The files of ``directory`` with a ``# cfgcheck:`` comment, when this process has just
    read them all for a cache key; None otherwise."""
    return _MARKED.get(directory)


def _needs_omegaconf(text: str) -> bool:
    """Interpolations or MISSING (``???``) values: resolve through OmegaConf, as uncached."""
    return "${" in text or '"???"' in text


def _load(path: Path) -> Any | None:
    entry = read_entry(path, _ENTRY_LIMITS)
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or "config" not in entry:
        return None
    if not entry.get("omegaconf"):
        return entry["config"]
    from omegaconf import OmegaConf

    return OmegaConf.create(entry["config"])


def _store(path: Path, entry: dict[str, Any]) -> None:
    write_entry(path, entry, MAX_ENTRIES)


def _survives_json(container: Any) -> bool:
    try:
        return bool(json.loads(json.dumps(container)) == container)
    except (TypeError, ValueError, RecursionError):
        return False


def _entry(cfg: Any) -> dict[str, Any] | None:
    """The cache entry of a composed config, or ``None`` when it uses a resolver that only
    Hydra or the user's code registers, or does not survive a JSON round trip unchanged
    (integer keys)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    container = OmegaConf.to_container(cfg, resolve=False)
    try:
        text = json.dumps(container)
    except (TypeError, ValueError):  # bytes, dates, NaN keys...: not stored, composed each run
        return None
    if _FOREIGN_RESOLVER.search(text) or not _survives_json(container):
        return None
    # A mapping node's interpolations say which team key holds each value: keep them.
    mapped = isinstance(container, dict) and "cfgcheck" in container
    if (
        _needs_omegaconf(text)
        and not mapped
        and not _RESOLVER_CALL.search(text)
        and '"???"' not in text
    ):
        try:  # only references between keys: resolve them once, here
            resolved = OmegaConf.to_container(cfg, resolve=True)
        except OmegaConfBaseException:
            resolved = None  # a broken reference: fails the same way at every validation
        if resolved is not None and _survives_json(resolved):
            return {"format": FORMAT, "omegaconf": False, "config": resolved}
    return {"format": FORMAT, "omegaconf": _needs_omegaconf(text), "config": container}


def _compose_plain(
    directory: Path, name: str, overrides: Sequence[str], read: dict[Path, bytes] | None
) -> Any | None:
    """The composition without Hydra where it is provably Hydra's (see
    :mod:`cfgcheck.compose_plain`), after the same screens as :func:`compose`; else None.
    ``read``: the files' bytes, when the cache key has just read them all."""
    from cfgcheck.compose import screen_overrides
    from cfgcheck.compose_plain import compose_plain, usable

    if not usable():
        return None
    screen_overrides(overrides)
    from cfgcheck.safeio import screen_config_dir

    screened = screen_config_dir(directory, read=read)
    _note_marks(directory, screened)  # the inline suppressions need not read the tree again
    return compose_plain(directory, name, overrides, screened)


def compose_cached(config_dir: str | Path, config_name: str, overrides: Sequence[str] = ()) -> Any:
    """The composed config: from the cache when the same inputs were composed before (a plain
    dict, or a ``DictConfig`` when it holds interpolations), else composed without Hydra where
    that is provably Hydra's result (:mod:`cfgcheck.compose_plain`: a plain dict), else with
    Hydra (a ``DictConfig``), and stored. Same verdicts, same :class:`ConfigLoadError` as
    :func:`compose`.
    """
    directory, name = primary_config(config_dir, config_name)
    _MARKED.pop(directory, None)  # noted again below when the key reads the files
    where = None if _config_store_in_use() else cache_dir()
    key = read = None
    if where is not None:
        try:
            key, read = _key_and_bytes(directory, name, overrides)
        except OSError:
            key = None  # an unreadable file: let Hydra report it
    if key is not None and where is not None:
        hit = _load(where / f"{key}.json")
        if hit is not None:
            return hit
    plain = _compose_plain(directory, name, overrides, read)
    if plain is not None:
        if key is not None and where is not None and _survives_json(plain):
            _store(where / f"{key}.json", {"format": FORMAT, "omegaconf": False, "config": plain})
        return plain
    cfg = compose(directory, name, overrides)
    entry = _entry(cfg)
    if entry is not None and key is not None and where is not None:
        _store(where / f"{key}.json", entry)
    return cfg
