"""The local Hugging Face caches, read only and never downloaded into.

``huggingface_hub`` keeps a repository as ``<hub cache>/<kind>s--ORG--NAME/``: ``refs/main``
names the commit whose files lie in ``snapshots/<commit>/`` (links into ``blobs/``;
``huggingface_hub/file_download.py`` ``try_to_load_from_cache``). The hub cache is
``HF_HUB_CACHE``, else ``HUGGINGFACE_HUB_CACHE``, else ``HF_HOME/hub``, else
``$XDG_CACHE_HOME/huggingface/hub`` (default ``~/.cache``), as ``huggingface_hub/constants.py``
computes it. Model folders (:mod:`cfgcheck.models.resolve`) and Hub datasets
(:mod:`cfgcheck.data.hub`) are both looked up here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def _path(value: str) -> Path:
    return Path(os.path.expandvars(value)).expanduser()


def hf_home() -> Path:
    """``HF_HOME``, else ``$XDG_CACHE_HOME/huggingface`` (default ``~/.cache/huggingface``)."""
    env = os.environ
    if env.get("HF_HOME"):
        return _path(env["HF_HOME"])
    return _path(str(Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"))


def hub_cache_dir() -> Path:
    """The Hugging Face Hub cache directory, as huggingface_hub/constants.py computes it."""
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    return _path(hub) if hub else hf_home() / "hub"


def cached_snapshot(
    repo_id: str,
    kind: Literal["model", "dataset"] = "model",
    cache: Path | None = None,
    newest: bool = False,
) -> Path | None:
    """The snapshot folder of ``repo_id``'s ``main`` revision in the local cache, if any.
    ``newest``: without a readable ``refs/main`` (a pinned revision was downloaded), the
    newest snapshot there is."""
    from cfgcheck.safeio import UnsafeInput, read_bytes

    repo = (cache or hub_cache_dir()) / f"{kind}s--{repo_id.replace('/', '--')}"
    snapshots = repo / "snapshots"
    try:  # bounded, regular files only: a FIFO named refs/main is never opened
        commit = read_bytes(repo / "refs" / "main", 4096).decode("ascii", "replace").strip()
    except (OSError, UnsafeInput):
        commit = ""
    if _COMMIT.match(commit) and (snapshots / commit).is_dir():
        return snapshots / commit
    if not newest:
        return None
    try:
        found = sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    return found[-1] if found else None
