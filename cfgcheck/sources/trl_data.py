"""The dataset a TRL script loads, for ``--scan-data``: ``load_dataset(script_args.dataset_name,
name=script_args.dataset_config)`` then ``dataset[script_args.dataset_train_split]``
(trl/scripts/sft.py and the other trl/scripts of TRL 1.16; ``ScriptArguments`` in
trl/scripts/utils.py: ``dataset_train_split="train"``).

``datasets.load_dataset`` reads a local folder when ``dataset_name`` names one (relative to the
working directory; datasets/load.py ``dataset_module_factory``: ``os.path.isdir(path)``), and
otherwise the Hub dataset of that id. A local folder becomes ``data.paths`` (its data files of
the split, chosen as ``datasets`` chooses them: :func:`cfgcheck.data.hub.split_of`), confined
to the working directory and the config's folder like every path cfgcheck reads
(:func:`cfgcheck.safeio.confinement_problem`); a Hub id becomes ``data.hub_dataset``, which the
scan reads from the local Hugging Face cache only (:mod:`cfgcheck.data.hub`). A config that
came over the network (no file on disk) names no local folder: nothing is looked at.
"""

from __future__ import annotations

import os
from pathlib import Path

from cfgcheck import safeio
from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources.base import Builder
from cfgcheck.sources.llamafactory_files import roots

SCRIPT = "trl/scripts/utils.py ScriptArguments"


def apply(b: Builder) -> None:
    n = b.native
    name = n.get("dataset_name")
    if not isinstance(name, str) or not name.strip() or n.origin is None:
        return
    split = n.get("dataset_train_split", "train")
    split = split if isinstance(split, str) else "train"
    config = n.get("dataset_config")
    if not dataset_files(b, "dataset_name", name, split):
        return
    if isinstance(config, str) and config:
        b.from_key("data.hub_config", "dataset_config", config)
    b.take("data.hub_split", "dataset_train_split", "train", f"{SCRIPT} dataset_train_split")


def dataset_files(b: Builder, key: str, name: str, split: str) -> bool:
    """``name`` (at native ``key``): a local folder's files of ``split`` as ``data.paths``
    (False: it is local, nothing more to set), else a Hub id as ``data.hub_dataset`` (True);
    False for anything else. One line and exit 2 for a folder outside the project."""
    from cfgcheck.data.hub import data_files, is_hub_id, split_of

    n = b.native
    where = n.loc(key)
    prefix = f"{where}: " if where else ""
    base = Path.cwd()
    local = base / name
    if local.exists():
        reason = safeio.confinement_problem(name, roots(n), base, folder_entries=False)
        if reason:
            raise ConfigLoadError(
                f"{prefix}{key}={name!r} {reason}; cfgcheck reads only files inside the "
                "working directory and the config's folder"
            )
    if local.is_dir():
        chosen = split_of(data_files(local), split)
        if chosen:
            b.from_key("data.paths", key, [os.path.join(name, r) for r in chosen])
        return False
    if local.is_file():
        b.from_key("data.paths", key, [name])
        return False
    if not is_hub_id(name):
        return False
    b.from_key("data.hub_dataset", key, name)
    return True
