"""The expansion of ``model.pretrained``: the one step every entry point runs (it is called by
:func:`cfgcheck.validate`, which ``cfgcheck check``, sweeps, the service and ``@cfgcheck.main``
all go through).

The folder decides the shape: its values fill the ``model`` section, each located at the
folder's file and key. A shape key the config also writes must agree; where it does not, a
``pretrained-shape-mismatch`` finding names both values and where each came from, and the
folder's value is used (the checkpoint's weights have that shape). Two keys are settings rather
than weight shapes: a ``block_size`` below the folder's maximum positions is a cap, and a
``padded_vocab_size`` above its rows declares a resized embedding
(``model.resize_token_embeddings``). ``tokenizer.path`` defaults to the folder when it holds
tokenizer files. The caller's mapping is never modified.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Finding, Fix, Location

if TYPE_CHECKING:  # the readers load only for a config that names a folder (cold start)
    from cfgcheck.models.hf import Value
    from cfgcheck.models.resolve import ModelSource

RULE = "pretrained-shape-mismatch"
# Keys that describe the run, not the checkpoint: the config's value is kept without a word.
_NOT_SHAPE = frozenset({"name", "source"})
# Keys whose null means "derive it" in the schema: a null in the config leaves them to the folder.
_DERIVED = frozenset({"padded_vocab_size", "n_query_groups", "head_size", "intermediate_size"})


@dataclass(frozen=True)
class Expanded:
    """The config with ``model.pretrained`` expanded (a new mapping), and what came of it."""

    config: Any
    source: ModelSource | None = None
    # Dotted config path -> where the folder set its value.
    locations: Mapping[str, Location] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()


def expand_pretrained(raw: Any) -> Expanded:
    """Expand ``model.pretrained`` in a plain config. Raises ``ConfigLoadError`` (one line)
    when it names nothing usable; a config without it is returned as is."""
    model = raw.get("model") if isinstance(raw, Mapping) else None
    ref = model.get("pretrained") if isinstance(model, Mapping) else None
    if not isinstance(model, Mapping) or not isinstance(ref, str) or not ref.strip():
        return Expanded(raw)
    from cfgcheck.models.files import ModelFolderError
    from cfgcheck.models.resolve import resolve_pretrained

    try:
        source = resolve_pretrained(ref.strip())
    except ModelFolderError as e:
        raise ConfigLoadError(str(e)) from e
    merged, locations, findings = _merge(model, source)
    config = {**raw, "model": merged}
    if source.adapter is not None:
        _adapter_settings(config, source, locations)
    tokenizer = raw.get("tokenizer")
    unset = tokenizer is None or (isinstance(tokenizer, Mapping) and tokenizer.get("path") is None)
    if source.tokenizer is not None and unset:
        config["tokenizer"] = {**(tokenizer or {}), "path": str(source.tokenizer)}
        locations["tokenizer.path"] = Location(_shown(source.tokenizer))
    return Expanded(config, source, locations, tuple(findings))


def _adapter_settings(
    config: dict[str, Any], source: ModelSource, locations: dict[str, Location]
) -> None:
    """A PEFT adapter folder's r, lora_alpha, target_modules and lora_dropout fill
    ``trainer.lora`` where the config does not set them (and ``trainer.finetuning`` is lora
    unless set)."""
    adapter = source.adapter
    assert adapter is not None  # checked by the caller
    trainer = config.get("trainer")
    trainer = dict(trainer) if isinstance(trainer, Mapping) else {}
    lora = trainer.get("lora")
    lora = dict(lora) if isinstance(lora, Mapping) else {}
    shown = _shown(Path(adapter.file))
    for key, value in adapter.values.items():
        if lora.get(key) is None:
            lora[key] = value.value
            locations[f"trainer.lora.{key}"] = Location(shown, adapter.lines.get(value.key))
    trainer["lora"] = lora
    if trainer.get("finetuning") is None:
        trainer["finetuning"] = "lora"
        locations["trainer.finetuning"] = Location(shown)
    config["trainer"] = trainer


def value_location(source: ModelSource, value: Value) -> Location:
    """Where the folder's ``value`` came from: the file and key line, or the default."""
    if value.default_of is not None:
        return Location(f"<default of {value.default_of}>")
    if source.kind == "preset":
        return Location(source.file)
    return Location(_shown(Path(source.file)), source.line(value))


def _merge(
    model: Mapping[str, Any], source: ModelSource
) -> tuple[dict[str, Any], dict[str, Location], list[Finding]]:
    merged = dict(model)
    locations: dict[str, Location] = {}
    findings: list[Finding] = []
    for key, value in source.values.items():
        path = f"model.{key}"
        where = value_location(source, value)
        if key not in model or (model[key] is None and key in _DERIVED):
            merged[key] = value.value
            locations[path] = where
            continue
        given = model[key]
        if key in _NOT_SHAPE or _same(given, value.value):
            continue
        finding = _mismatch(key, given, value, where, source)
        if finding is not None:
            findings.append(finding)
            if key != "block_size":  # a longer block is the run's setting: warned, kept
                merged[key] = value.value
                locations[path] = where
    # A folder given as a path is named after it; one found in the Hub cache by its id, and a
    # Hub cache snapshot given as a path (models--ORG--NAME/snapshots/<commit>) by its repo id.
    local = source.folder is not None and source.folder.name == Path(source.ref).name
    name = source.folder.name if local and source.folder else source.ref
    if source.folder is not None and local:
        name = snapshot_repo_id(source.folder) or name
    if source.adapter is not None:  # named after the adapter, its folder or its Hub id
        folder = Path(source.adapter.file).parent
        name = snapshot_repo_id(folder) or (folder.name if Path(source.ref).is_dir() else name)
    merged.setdefault("name", name)
    merged.setdefault("source", source.file)
    return merged, locations, findings


def snapshot_repo_id(folder: Path) -> str | None:
    """``ORG/NAME`` of a Hub cache snapshot folder (``models--ORG--NAME/snapshots/<commit>``,
    as huggingface_hub lays it out), else None."""
    repo = folder.parent.parent.name
    if folder.parent.name != "snapshots" or not repo.startswith("models--"):
        return None
    parts = repo.removeprefix("models--").split("--")
    return "/".join(parts) if len(parts) == 2 and all(parts) else None


def _mismatch(
    key: str, given: Any, value: Value, where: Location, source: ModelSource
) -> Finding | None:
    """The finding for a config value that contradicts the folder, or ``None`` where the
    config's value is a legitimate setting (a shorter block, a resized embedding)."""
    numbers = _is_int(given) and _is_int(value.value)
    if key == "padded_vocab_size" and numbers and given > value.value:
        return None  # a resized embedding (resize_token_embeddings) keeps the checkpoint's rows
    if key == "block_size" and numbers and given < value.value:
        return None  # training on shorter sequences than the model supports
    said = f"{value.key}={_text(value.value)}"
    said += f" ({where})" if value.default_of is None else f" (the {where.file[1:-1]})"
    message = (
        f"model.{key}={_text(given)} but model.pretrained={source.ref} says {said}: "
        f"the checkpoint's weights have the folder's shape, so the folder's value is used"
    )
    severity: Any = "error"
    if key == "block_size":
        learned = source.values.get("architecture")
        severity = "error" if learned is not None and learned.value == "gpt2" else "warning"
        message = (
            f"model.block_size={given} is longer than the {said} of model.pretrained="
            f"{source.ref}: "
            + (
                "GPT-2's learned position embeddings have no row past it (IndexError)"
                if severity == "error"
                else "positions past it were never trained (RoPE runs, quality degrades)"
            )
        )
    override = f"model.{key}={_text(value.value)}"
    return Finding(
        RULE,
        severity,
        (f"model.{key}", "model.pretrained"),
        message,
        f"remove model.{key} from the config (the folder decides it; a model group that "
        f"spells a whole shape is dropped with '~model' before +model.pretrained=...), set "
        f"{override}, or point model.pretrained at the checkpoint whose shape you mean",
        locations={"model.pretrained": where},
        fixes=(Fix((override,), f"take {key} from the model folder"),),
    )


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(a == b)


def _text(v: Any) -> str:
    """A value as a Hydra override writes it (``true``, ``null``, ``0.5``, ``llama``)."""
    if isinstance(v, str):
        return v
    return json.dumps(v)


def _shown(path: Path) -> str:
    from cfgcheck.locations import display_path

    return display_path(path)
