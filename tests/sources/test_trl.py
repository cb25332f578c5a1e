"""TRL configs: the published CLI examples, a real TrainingArguments dump, SFTConfig's
overrides of TrainingArguments, the renamed max_seq_length, and the TRL rule profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources import check_native, load_native
from tests.conftest import requires
from tests.sources.support import (
    applying_fixes_clears,
    example,
    is_default,
    line_of,
    located_at,
    needs_model,
    one,
    write,
)

EXAMPLE = example("trl", "example_config.yaml")
CLIS = example("trl", "clis-sft_config.yaml")
# A model the registry knows today, for the tests of mappings (the examples use Qwen2.5-0.5B).
TINY = "model_name_or_path=TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"
V116 = {"framework_version": "1.16.0"}


@pytest.mark.parametrize(
    "file", [pytest.param(f, marks=needs_model("trl", f)) for f in (EXAMPLE, CLIS)]
)
def test_published_examples_pass(file: Path) -> None:
    result = check_native(file, "trl", gpu="H100")
    assert result.ok, [(f.rule, f.message) for f in result.errors]


def test_published_example_with_a_known_model_passes() -> None:
    result = check_native(EXAMPLE, "trl", [TINY], gpu="H100")
    assert result.ok, [(f.rule, f.message) for f in result.errors]
    loaded = load_native(EXAMPLE, "trl", [TINY])
    assert loaded.config["trainer"]["learning_rate"] == 0.0001
    location = loaded.source_map.lookup("trainer.learning_rate")
    assert location is not None and location.line == line_of(EXAMPLE, "learning_rate")


def test_sft_config_defaults(tmp_path: Path) -> None:
    loaded = load_native(
        write(tmp_path, "min.yaml", "model_name_or_path: mistralai/Mistral-7B-v0.1\n"), "trl"
    )
    cfg, smap = loaded.config, loaded.source_map
    d, t = cfg["data"], cfg["trainer"]
    assert d["max_seq_length"] == 1024 and d["truncation"] is True  # SFTConfig.max_length
    assert (d["collator"], d["padding"]) == ("padded", "longest")
    assert t["gradient_checkpointing"] is True  # _BaseConfig overrides TrainingArguments' False
    assert (
        t["precision"] == "bf16-mixed"
    )  # bf16 = not fp16 over float32 weights (ModelConfig.dtype)
    assert t["learning_rate"] == 2e-5  # SFTConfig overrides TrainingArguments' 5e-5
    assert (t["micro_batch_size"], t["gradient_accumulation_steps"]) == (8, 1)
    assert (t["finetuning"], t["optimizer"], t["loss_chunking"]) == ("full", "adamw", "chunked")
    assert cfg["seed"] == 42
    for path in (
        "data.max_seq_length",
        "trainer.gradient_checkpointing",
        "trainer.precision",
        "trainer.learning_rate",
        "trainer.micro_batch_size",
        "trainer.loss_chunking",
    ):
        assert is_default(smap.lookup(path), "TRL"), path


def test_peft_and_quantization_keys(tmp_path: Path) -> None:
    text = (
        "model_name_or_path: mistralai/Mistral-7B-v0.1\nuse_peft: true\nload_in_4bit: true\n"
        "lora_target_modules: [q_proj, k_proj]\ndtype: bfloat16\nmax_length: null\n"
        "attn_implementation: flash_attention_2\npacking: true\n"
    )
    cfg = load_native(write(tmp_path, "peft.yaml", text), "trl").config
    t = cfg["trainer"]
    assert (t["finetuning"], t["quantization"]) == ("qlora", "nf4")
    assert t["lora"] == {"rank": 16, "alpha": 32, "dropout": 0.05, "targets": ["q_proj", "k_proj"]}
    assert t["precision"] == "bf16-true" and t["attention"] == "flash"
    # max_length: null -> no truncation; the model's context is the limit
    assert cfg["data"]["truncation"] is False and cfg["data"]["max_seq_length"] == 32768
    assert cfg["data"]["collator"] == "packed"


def test_max_length_default_silently_cuts() -> None:
    result = check_native(EXAMPLE, "trl", [TINY], gpu="H100")
    finding = one(result, "trl-max-length-truncates")
    assert finding.severity == "warning" and "1024" in finding.message
    applying_fixes_clears(EXAMPLE, "trl", [TINY], finding)


def test_renamed_max_seq_length(tmp_path: Path) -> None:
    planted = write(tmp_path, "old.yaml", EXAMPLE.read_text() + "max_seq_length: 2048\n")
    # the version stated (installed or not, TRL 1.16 has no max_seq_length): an error
    result = check_native(planted, "trl", [TINY], gpu="H100", options=V116)
    unknown = one(result, "unknown-native-key")
    assert unknown.severity == "error" and "renamed max_seq_length -> max_length" in unknown.message
    located_at(unknown, "max_seq_length", planted, line_of(planted, "max_seq_length"))
    cut = one(result, "trl-max-length-truncates")
    assert "max_seq_length=2048" in cut.message
    assert result.config is not None and result.config.data.max_seq_length == 1024
    for finding in (unknown, cut):
        applying_fixes_clears(planted, "trl", [TINY], finding)
    fixed = check_native(planted, "trl", [TINY, *cut.fixes[0].overrides], gpu="H100")
    assert fixed.config is not None and fixed.config.data.max_seq_length == 2048


def test_pad_findings_follow_the_trl_profile(tmp_path: Path) -> None:
    # TRL pads with eos when the tokenizer has none, and masks labels by position
    result = check_native(EXAMPLE, "trl", [TINY, "pad_token=</s>"], gpu="H100")
    assert not result.by_rule("pad-token-missing") and not result.by_rule("pad-is-eos")


@requires("transformers")
def test_a_real_training_arguments_dump(tmp_path: Path) -> None:
    from transformers import TrainingArguments

    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=1e-4,
        report_to="none",
    )
    dump = write(tmp_path, "training_args.json", args.to_json_string())
    with pytest.raises(ConfigLoadError, match="names no model: set model_name_or_path"):
        check_native(dump, "trl")
    result = check_native(dump, "trl", [TINY], gpu="H100")
    assert not result.by_rule("unknown-native-key"), [f.message for f in result.findings]
    assert result.ok, [(f.rule, f.message) for f in result.errors]
    t = result.config.trainer if result.config else None
    assert t is not None and (t.micro_batch_size, t.gradient_accumulation_steps) == (4, 2)
    # a dump spells every field: gradient_checkpointing False and bf16 False are explicit there
    assert t.gradient_checkpointing is False and t.precision == "32-true"
    assert json.loads(dump.read_text())["per_device_train_batch_size"] == 4
