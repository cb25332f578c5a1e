"""Mistakes planted in published TRL configs (TRL's own CLI example, alignment-handbook and
open-r1 recipes; sources in native/trl/SOURCES.md): each is found at the native file:line
that holds it, with a message that quotes what TRL or transformers really do (each failure
is reproduced with the real classes in test_trl_trainers_ground_truth.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cfgcheck.sources import check_native
from tests.sources.support import NATIVE, line_of, located_at

TRL = NATIVE / "trl"
ZERO3 = str(TRL / "accelerate" / "ah-zero3.yaml")
ZEPHYR = TRL / "alignment-handbook" / "zephyr-7b-beta--sft--config_full.yaml"
GRPO = TRL / "open-r1" / "Qwen2.5-1.5B-Instruct--grpo--config_demo.yaml"
EXAMPLE = TRL / "example_config.yaml"

# (name, file, the stand-in model, options, the planted line, the rule, severity, the key
# located, words of the real failure)
PLANTS = [
    (
        "sequence length past the context",
        ZEPHYR,
        "mistralai/Mistral-7B-v0.1",
        {"framework_version": "0.19.1", "accelerate_config": ZERO3},
        "max_seq_length: 65536",
        "trl-positions-past-context",
        "warning",
        "max_seq_length",
        "rotary angles for any position",
    ),
    (
        "padding_free without packing",
        EXAMPLE,
        "Qwen/Qwen2.5-0.5B",
        {},
        "padding_free: true",
        "trl-padding-free-max-length",
        "error",
        "padding_free",
        "`max_length` is not enforced",
    ),
    (
        "padding_free on sdpa in an older TRL",
        EXAMPLE,
        "Qwen/Qwen2.5-0.5B",
        {"framework_version": "0.20.0"},
        "padding_free: true",
        "trl-padding-free-attention",
        "warning",
        "padding_free",
        "is not set to 'flash_attention_2'",
    ),
    (
        "LoRA targets of another architecture",
        TRL / "alignment-handbook" / "zephyr-7b-beta--sft--config_qlora.yaml",
        "mistralai/Mistral-7B-v0.1",
        {"framework_version": "0.19.1", "accelerate_config": ZERO3},
        "lora_target_modules: [c_attn, q_proj]",
        "lora-target-unknown",
        "warning",
        "trainer.lora.targets",
        "silently trains no adapter",
    ),
    (
        "fp16 and bf16 together",
        ZEPHYR,
        "mistralai/Mistral-7B-v0.1",
        {"framework_version": "0.19.1", "accelerate_config": ZERO3},
        "fp16: true",
        "trl-fp16-and-bf16",
        "error",
        "fp16",
        "At most one of fp16 and bf16 can be True",
    ),
    (
        "GRPO batch not a multiple of num_generations",
        GRPO,
        "Qwen/Qwen2.5-1.5B",
        {"framework_version": "0.18.0", "accelerate_config": ZERO3},
        "num_generations: 24",
        "trl-grpo-generation-batch",
        "error",
        "num_generations",
        "must be evenly divisible by the number of generations per prompt",
    ),
    (
        "a key of the wrong TRL version",
        ZEPHYR,
        "mistralai/Mistral-7B-v0.1",
        {"framework_version": "0.19.1", "accelerate_config": ZERO3},
        "dtype: bfloat16",
        "unknown-native-key",
        "error",
        "dtype",
        "Unknown arguments from config file",
    ),
]


def plant(tmp: Path, source: Path, line: str) -> Path:
    """``source`` with ``line`` replacing the line of the same key (appended if absent)."""
    key = line.split(":", 1)[0]
    lines = source.read_text().splitlines()
    for i, text in enumerate(lines):
        if text.startswith(f"{key}:"):
            lines[i] = line
            end = i + 1  # drop a block value's continuation lines
            while end < len(lines) and lines[end].startswith(("  ", "- ")):
                del lines[end]
            break
    else:
        lines.append(line)
    out = tmp / f"{source.parent.name}-{source.name}"
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.parametrize(
    ("name", "source", "model", "options", "line", "rule", "severity", "key", "quote"),
    PLANTS,
    ids=[p[0] for p in PLANTS],
)
def test_a_planted_mistake_is_found_at_its_line(
    tmp_path: Path,
    name: str,
    source: Path,
    model: str,
    options: dict[str, str],
    line: str,
    rule: str,
    severity: str,
    key: str,
    quote: str,
) -> None:
    clean = check_native(source, "trl", [f"model_name_or_path={model}"], "H100", options)
    assert not clean.by_rule(rule), name
    file = plant(tmp_path, source, line)
    result = check_native(file, "trl", [f"model_name_or_path={model}"], "H100", options)
    found = [f for f in result.by_rule(rule) if key in f.paths]
    assert len(found) == 1, [(f.rule, f.message) for f in result.findings]
    assert found[0].severity == severity
    assert quote in found[0].message
    assert "Cannot attend" not in found[0].message  # LitGPT's guard is not TRL's
    native_key = "lora_target_modules" if key == "trainer.lora.targets" else key
    located_at(found[0], key, file, line_of(file, native_key))


def test_the_grpo_recipe_is_clean_before_planting() -> None:
    options = {"framework_version": "0.18.0", "accelerate_config": ZERO3}
    result = check_native(GRPO, "trl", ["model_name_or_path=Qwen/Qwen2.5-1.5B"], "H100", options)
    assert result.ok, [(f.rule, f.message) for f in result.errors]
