"""Fixes of cfgcheck's rules rewritten in each format's keys: every translatable change,
pasted as a native override, really sets the cfgcheck value it stands for."""

from __future__ import annotations

from typing import Any

import pytest

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources import load_native
from cfgcheck.sources.native import _native_fixes, get_format
from cfgcheck.sources.reader import get_dotted
from tests.sources.support import example

FILES = {
    "litgpt": example("litgpt", "tiny-llama-lora.yaml"),
    "axolotl": example("axolotl", "mistral-lora.yml"),
    "trl": example("trl", "example_config.yaml"),
    "llamafactory": example("llamafactory", "examples/train_lora/llama3_lora_sft.yaml"),
}
BASE = {
    "trl": [
        "model_name_or_path=TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T",
        "use_peft=true",
    ]
}

CHANGES: list[tuple[str, str, Any]] = [
    ("data.max_seq_length", "1000", 1000),
    ("trainer.micro_batch_size", "3", 3),
    ("trainer.gradient_accumulation_steps", "5", 5),
    ("trainer.global_batch_size", "24", 24),
    ("trainer.gradient_checkpointing", "true", True),
    ("trainer.learning_rate", "0.001", 0.001),
    ("trainer.lora.rank", "4", 4),
    ("trainer.precision", "32-true", "32-true"),
    ("trainer.quantization", "none", "none"),
    ("trainer.loss_chunking", "chunked", "chunked"),
    ("trainer.attention", "eager", "eager"),
    ("data.collator", "padded", "padded"),
    ("seed", "7", 7),
]


@pytest.mark.parametrize("fmt", list(FILES))
@pytest.mark.parametrize(("path", "value", "expected"), CHANGES)
def test_every_translated_change_sets_its_value(
    fmt: str, path: str, value: str, expected: Any
) -> None:
    native = get_format(fmt).to_native(path, value)
    if native is None:
        pytest.skip(f"{fmt} has no key for {path}")
    if native == "":
        pytest.skip(f"{fmt} derives {path} itself")
    loaded = load_native(FILES[fmt], fmt, [*BASE.get(fmt, []), native])
    assert get_dotted(loaded.config, path) == expected, native


def test_untranslatable_fixes_are_dropped_and_the_hint_names_native_keys() -> None:
    loaded = load_native(FILES["litgpt"], "litgpt")
    finding = Finding(
        "gpu-memory",
        "error",
        ("trainer.micro_batch_size",),
        "m",
        "h",
        fixes=(
            Fix(("trainer.micro_batch_size=2", "data.max_seq_length=256"), "smaller"),
            Fix(("trainer.gradient_checkpointing=true",), "LitGPT has no switch for it"),
        ),
    )
    (out,) = _native_fixes([finding], loaded.format, loaded.native)
    assert [f.overrides for f in out.fixes] == [
        ("train.micro_batch_size=2", "train.max_seq_length=256")
    ]
    assert out.hint.endswith("train.micro_batch_size=2 train.max_seq_length=256)")
