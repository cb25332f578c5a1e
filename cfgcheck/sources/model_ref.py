"""The model of a native config: its reference (checkpoint folder or Hub id) becomes
``model.pretrained``, which cfgcheck's model resolution turns into a shape (local folder, local
Hugging Face cache, or a preset by Hub id).

Until that resolution is part of the schema (``ModelConfig.pretrained``), a Hub id is resolved
against the shipped ``conf/model/*.yaml`` files by the ``source`` URL each one cites, so the
adapters work end to end today; the bridge steps aside as soon as the field exists.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Location
from cfgcheck.sources.base import Builder
from cfgcheck.sources.reader import read_document

_CONF_MODELS = Path(__file__).resolve().parents[2] / "conf" / "model"


def set_model(b: Builder, key: str, ref: str | None) -> None:
    """Fill the ``model`` section from native ``key`` (its value ``ref``)."""
    native = b.native
    if not ref:
        raise ConfigLoadError(
            f"{native.file}: the {b.label} config names no model: set {key} "
            f"(a local model folder or a Hub id such as Qwen/Qwen2.5-0.5B), in the file or "
            f"as the override {key}=<folder or Hub id>"
        )
    from cfgcheck.schema.model import ModelConfig

    location = native.loc(key)
    if "pretrained" in ModelConfig.model_fields:
        b.set("model.pretrained", ref, location)
        return
    shipped = _shipped_models().get(ref.lower())
    if shipped is None:
        where = f"{location}: " if location else ""
        known = ", ".join(sorted(_shipped_ids().values()))
        raise ConfigLoadError(
            f"{where}{key}={ref!r}: cfgcheck does not know this model: provide a local model "
            f"folder with its config.json, or one of the known Hub ids ({known})"
        )
    doc = read_document(shipped)
    for name, value in doc.data.items():
        b.set(f"model.{name}", value, Location(doc.file, doc.lines.get(name)))


@cache
def _shipped_ids() -> dict[Path, str]:
    """Shipped model file -> the Hub id its ``source`` URL names."""
    out: dict[Path, str] = {}
    if not _CONF_MODELS.is_dir():
        return out
    for file in sorted(_CONF_MODELS.glob("*.yaml")):
        source = str(read_document(file).data.get("source") or "")
        marker = "huggingface.co/"
        if marker in source:
            parts = source.split(marker, 1)[1].split("/")
            if len(parts) >= 2:
                out[file] = f"{parts[0]}/{parts[1]}"
    return out


def _shipped_models() -> dict[str, Path]:
    return {hub_id.lower(): file for file, hub_id in _shipped_ids().items()}
