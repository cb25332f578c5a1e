"""The model of a native config: its reference (checkpoint folder or Hub id) becomes
``model.pretrained``, which cfgcheck's model resolution turns into a shape (local folder, local
Hugging Face cache, or a preset by Hub id).

Until that resolution is part of the schema (``ModelConfig.pretrained``), a Hub id is resolved
with the preset registry (:func:`cfgcheck.models.presets.find_preset`), so the adapters work end
to end today; this step goes away as soon as the field exists.
"""

from __future__ import annotations

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Location
from cfgcheck.sources.base import Builder


def set_model(b: Builder, key: str, ref: str | None) -> None:
    """Fill the ``model`` section from native ``key`` (its value ``ref``)."""
    native = b.native
    b.model_key = key
    if not ref:
        raise ConfigLoadError(
            f"{native.file}: the {b.label} config names no model: set {key} "
            f"(a local model folder or a Hub id such as Qwen/Qwen2.5-0.5B), in the file or "
            f"as the override {key}=<folder or Hub id>"
        )
    from cfgcheck.models.presets import all_presets, find_preset
    from cfgcheck.schema.model import ModelConfig

    location = native.loc(key)
    if "pretrained" in ModelConfig.model_fields:
        b.set("model.pretrained", ref, location)
        return
    preset = find_preset(ref)
    if preset is None:
        where = f"{location}: " if location else ""
        known = ", ".join(hub for p in all_presets() for hub in p.hub_ids[:1])
        raise ConfigLoadError(
            f"{where}{key}={ref!r}: cfgcheck does not know this model: provide a local model "
            f"folder with its config.json, or a known Hub id ({known}, or their mirrors)"
        )
    shape = Location(f"preset {preset.name} (cfgcheck/models/presets.py, {preset.source})")
    for name, value in preset.config.items():
        b.set(f"model.{name}", value, shape)
    # The native key chose the preset: the model's name is located there.
    b.set("model.name", preset.name, location)
