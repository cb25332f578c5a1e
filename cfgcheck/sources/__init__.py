"""Sources: where a run config's values come from.

A source yields a plain run config (the four sections) and a
:class:`~cfgcheck.locations.SourceMap` (dotted path -> file:line, override, or "default of
<framework> <where>"), so rules and reporters never know which source it was. The Hydra
``conf/`` tree is one source (:mod:`cfgcheck.compose`, :mod:`cfgcheck.locations`); the native
framework formats are the others:

- ``litgpt``: LitGPT ``config_hub/finetune/*.yaml`` (:mod:`cfgcheck.sources.litgpt`)
- ``axolotl``: Axolotl ``examples/*.yml`` (:mod:`cfgcheck.sources.axolotl`)
- ``trl``: a TRL ``SFTConfig`` YAML or a TrainingArguments dump (:mod:`cfgcheck.sources.trl`)
- ``torchtune``: a ``tune run`` recipe config (:mod:`cfgcheck.sources.torchtune`)
"""

from cfgcheck.sources.native import (
    Loaded,
    check_loaded,
    check_native,
    formats,
    load_document,
    load_native,
)
from cfgcheck.sources.reader import Document, parse_document

FORMAT_NAMES: tuple[str, ...] = (
    "litgpt",
    "axolotl",
    "trl",
    "llamafactory",
    "python",
    "torchtune",
    "launch",
)

__all__ = [
    "FORMAT_NAMES",
    "Document",
    "Loaded",
    "check_loaded",
    "check_native",
    "formats",
    "load_document",
    "load_native",
    "parse_document",
]
