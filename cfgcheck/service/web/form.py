"""The page's inputs: one form, read from a POST body (``application/x-www-form-urlencoded``)
or from the query string of a shared URL, and turned into the body ``POST /v1/validate``
takes, so the page runs exactly the service's validation (:mod:`cfgcheck.service.runner`).

Nothing here reads a file: the config is the text the form carries, a preset is a config-group
choice of the server's own config directory (screened like any compose request's overrides).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from typing import get_args
from urllib.parse import parse_qsl, urlencode

from cfgcheck.schema.trainer import Finetuning, Optimizer, Precision, Strategy
from cfgcheck.service.errors import RequestError
from cfgcheck.service.models import MAX_OVERRIDE_CHARS, MAX_OVERRIDES

# Formats of a pasted config: cfgcheck's own run config (YAML or JSON), or a native one
# (the "format" of a NativeRequest, cfgcheck.service.models).
FORMATS: dict[str, str] = {
    "cfgcheck": "cfgcheck run config (YAML or JSON)",
    "litgpt": "LitGPT",
    "axolotl": "Axolotl",
    "trl": "TRL (SFTConfig / TrainingArguments)",
    "torchtune": "torchtune",
    "llamafactory": "LLaMA-Factory",
    "python": "Python script or notebook (read, never run)",
    "hf-config": "Hugging Face config.json (the model; the rest from the preset below)",
}
MODES = ("paste", "preset")
# The knobs of a preset: form field -> (override key, choices or None for a number/list).
CHOICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "finetuning": ("trainer.finetuning", get_args(Finetuning)),
    "precision": ("trainer.precision", get_args(Precision)),
    "optimizer": ("trainer.optimizer", get_args(Optimizer)),
    "strategy": ("trainer.strategy", get_args(Strategy)),
    "checkpointing": ("trainer.gradient_checkpointing", ("true", "false")),
}
NUMBERS: dict[str, tuple[str, int, int]] = {
    "micro_batch_size": ("trainer.micro_batch_size", 1, 65536),
    "max_seq_length": ("data.max_seq_length", 1, 10_000_000),
    "lora_rank": ("trainer.lora.rank", 1, 65536),
    "devices": ("trainer.devices", 1, 1024),
}
GROUPS = ("model", "tokenizer", "trainer")
PASTE_FIELDS = ("format", "config", "filename")
PRESET_FIELDS = (*GROUPS, *CHOICES, *NUMBERS, "lora_targets")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_TARGET = re.compile(r"^[A-Za-z0-9_.]+$")
MAX_FIELDS = 64
MAX_GPU_CHARS = 40
# A shared URL longer than this is not offered (uvicorn refuses request heads over 16 KiB).
MAX_SHARE_CHARS = 8000


@dataclass
class PageForm:
    """Every input of the page, as text (what the form sent; empty when not set)."""

    mode: str = "paste"
    format: str = "cfgcheck"
    config: str = ""
    filename: str = ""
    overrides: str = ""
    gpu: str = ""
    model: str = ""
    tokenizer: str = ""
    trainer: str = ""
    finetuning: str = ""
    precision: str = ""
    optimizer: str = ""
    strategy: str = ""
    checkpointing: str = ""
    micro_batch_size: str = ""
    max_seq_length: str = ""
    lora_rank: str = ""
    lora_targets: str = ""
    devices: str = ""
    pick: str = ""  # a GPU picked in the "fits on" table (a submit button): becomes ``gpu``
    problems: list[str] = field(default_factory=list)

    @property
    def submitted(self) -> bool:
        """Whether there is anything to check (a blank page shows only the form)."""
        return self.mode == "preset" or bool(self.config.strip())

    def query(self) -> str:
        """The inputs as a query string (the shareable URL): the fields of the mode that are
        set."""
        unused = {"problems"}
        if self.mode == "preset":
            unused |= set(PASTE_FIELDS)
        elif self.format != "hf-config":  # a config.json takes the preset's other sections
            unused |= set(PRESET_FIELDS)
        pairs = [(f.name, getattr(self, f.name)) for f in fields(self) if f.name not in unused]
        return urlencode([(k, v) for k, v in pairs if v and not (k == "mode" and v == "paste")])

    def override_lines(self) -> list[str]:
        return [line.strip() for line in self.overrides.splitlines() if line.strip()]


def parse_form(raw: str, limit: int) -> PageForm:
    """The form in ``raw`` (a urlencoded body or query string), at most ``limit`` characters.
    Unknown fields are refused (400); values out of range are collected in ``problems``."""
    if len(raw) > limit:
        raise RequestError(413, f"the form is {len(raw)} characters, over the limit of {limit}")
    try:
        pairs = parse_qsl(raw, keep_blank_values=True, max_num_fields=MAX_FIELDS, errors="strict")
    except ValueError as e:
        raise RequestError(400, f"malformed form: {e}") from None
    names = {f.name for f in fields(PageForm)} - {"problems"}
    form = PageForm()
    for key, value in pairs:
        if key not in names:
            raise RequestError(400, f"unknown form field {key[:40]!r}")
        if "\x00" in value:
            raise RequestError(400, f"form field {key} holds a NUL character")
        setattr(form, key, value.replace("\r\n", "\n") if key == "config" else value.strip())
    _screen(form)
    return form


def _screen(form: PageForm) -> None:
    bad = form.problems
    if form.pick:
        form.gpu, form.pick = form.pick, ""
    if form.mode not in MODES:
        bad.append(f"mode must be one of {', '.join(MODES)}")
        form.mode = "paste"
    if form.format not in FORMATS:
        bad.append(f"format must be one of {', '.join(FORMATS)}")
        form.format = "cfgcheck"
    for name in ("filename", *GROUPS):
        value = getattr(form, name)
        if value and (len(value) > 200 or not _NAME.match(value)):
            bad.append(f"{name} must be a plain name (letters, digits, _ . -)")
            setattr(form, name, "")
    if len(form.gpu) > MAX_GPU_CHARS:
        bad.append(f"gpu must be at most {MAX_GPU_CHARS} characters")
        form.gpu = ""
    for name, (_, choices) in CHOICES.items():
        value = getattr(form, name)
        if value and value not in choices:
            bad.append(f"{name} must be one of {', '.join(choices)}")
            setattr(form, name, "")
    for name, (_, low, high) in NUMBERS.items():
        value = getattr(form, name)
        if value and not (value.isdigit() and low <= int(value) <= high):
            bad.append(f"{name} must be a whole number from {low} to {high}")
            setattr(form, name, "")
    targets = [t.strip() for t in form.lora_targets.split(",") if t.strip()]
    if any(not _TARGET.match(t) or len(t) > 100 for t in targets) or len(targets) > 64:
        bad.append("lora_targets must be module names separated by commas (q_proj, v_proj)")
        form.lora_targets = ""
    lines = form.override_lines()
    if len(lines) > MAX_OVERRIDES or any(len(o) > MAX_OVERRIDE_CHARS for o in lines):
        bad.append(
            f"at most {MAX_OVERRIDES} overrides of at most {MAX_OVERRIDE_CHARS} characters each"
        )
        form.overrides = ""


def knob_overrides(form: PageForm) -> list[str]:
    """The preset's choices and knobs as ``key=value`` overrides of the run config."""
    out = [f"{group}={getattr(form, group)}" for group in GROUPS if getattr(form, group)]
    for name, (key, _) in CHOICES.items():
        if getattr(form, name):
            out.append(f"{key}={getattr(form, name)}")
    for name, (key, _, _) in NUMBERS.items():
        if getattr(form, name):
            out.append(f"{key}={getattr(form, name)}")
    targets = [t.strip() for t in form.lora_targets.split(",") if t.strip()]
    if targets:
        out.append(f"trainer.lora.targets=[{','.join(targets)}]")
    return out


def request_body(form: PageForm) -> tuple[bytes, str]:
    """The body and parser (``json``/``yaml``) of the ``POST /v1/validate`` request the form
    stands for: the pasted run config itself, a native request, or a compose request."""
    if form.mode == "preset":
        overrides = knob_overrides(form) + form.override_lines()
        if form.gpu:
            overrides.append(f"trainer.gpu.name={form.gpu}")
        return json.dumps({"config_name": "config", "overrides": overrides}).encode(), "json"
    if form.format == "cfgcheck":
        return form.config.encode(), "yaml"  # YAML reads JSON too
    native: dict[str, object] = {
        "format": form.format,
        "config": form.config,
        "overrides": form.override_lines(),
    }
    native["filename"] = shown_filename(form)
    if form.gpu:
        native["gpu"] = form.gpu
    return json.dumps(native).encode(), "json"


def shown_filename(form: PageForm) -> str:
    """The name findings' locations give the pasted file."""
    if form.filename:
        return form.filename
    return {"python": "config.py", "hf-config": "config.json"}.get(form.format, "config.yaml")
