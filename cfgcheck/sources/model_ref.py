"""The model of a native config: its reference (checkpoint folder or Hub id) becomes
``model.pretrained``, which cfgcheck's model resolution (:mod:`cfgcheck.models`) turns into a
shape: a local folder, the local Hugging Face cache, or a preset by Hub id. A reference it
cannot resolve is named by the native key and line (see
:func:`cfgcheck.sources.native.native_model_errors`).
"""

from __future__ import annotations

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources.base import Builder


def set_model(b: Builder, key: str, ref: str | None) -> None:
    """Fill the ``model`` section from native ``key`` (its value ``ref``)."""
    b.model_key = key
    if not ref:
        raise ConfigLoadError(
            f"{b.native.file}: the {b.label} config names no model: set {key} "
            f"(a local model folder or a Hub id such as Qwen/Qwen2.5-0.5B), in the file or "
            f"as the override {key}=<folder or Hub id>"
        )
    b.set("model.pretrained", ref, b.native.loc(key))
