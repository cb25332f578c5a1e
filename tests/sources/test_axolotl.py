"""Axolotl configs: published examples pass, mappings and schema / normalize_config defaults,
planted mistakes at the native line, Axolotl's own refusals, and the Axolotl rule profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from cfgcheck.sources import check_native, load_native
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

MISTRAL = example("axolotl", "mistral-lora.yml")
FSDP = example("axolotl", "llama-2-qlora-fsdp.yml")
MINIMAL = "base_model: mistralai/Mistral-7B-v0.1\nlearning_rate: 0.0002\n"


@pytest.mark.parametrize(
    "name", ["mistral-lora.yml", "mistral-qlora.yml", "llama-2-qlora-fsdp.yml"]
)
def test_published_examples_pass(name: str) -> None:
    result = check_native(example("axolotl", name), "axolotl", gpu="H100")
    assert result.ok and not result.warnings, [(f.rule, f.message) for f in result.findings]


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=needs_model("axolotl", example("axolotl", n)))
        for n in ("llama-3-lora-1b.yml", "tiny-llama-lora.yml")
    ],
)
def test_published_examples_needing_newer_presets(name: str) -> None:
    result = check_native(example("axolotl", name), "axolotl", gpu="H100")
    assert result.ok, [(f.rule, f.message) for f in result.errors]


def test_mapping_of_the_mistral_lora_example() -> None:
    loaded = load_native(MISTRAL, "axolotl")
    cfg, smap = loaded.config, loaded.source_map
    assert cfg["model"] == {"pretrained": "mistralai/Mistral-7B-v0.1"}
    d, t = cfg["data"], cfg["trainer"]
    assert (d["max_seq_length"], d["collator"], d["padding"]) == (8192, "packed", "max_length")
    assert (t["finetuning"], t["quantization"]) == ("lora", "int8")  # load_in_8bit: true
    assert (
        t["lora"]["rank"] == 32
        and t["lora"]["alpha"] == 16
        and t["lora"]["targets"] == ["all-linear"]
    )
    assert (t["micro_batch_size"], t["gradient_accumulation_steps"]) == (2, 4)
    assert (t["optimizer"], t["attention"], t["gradient_checkpointing"]) == (
        "adamw_8bit",
        "flash",
        True,
    )
    assert t["precision"] == "bf16-true" and t["framework"] == "hf"
    for path, key in [
        ("data.max_seq_length", "sequence_len"),
        ("data.collator", "sample_packing"),
        ("trainer.quantization", "load_in_8bit"),
        ("trainer.lora.targets", "lora_target_linear"),
        ("trainer.optimizer", "optimizer"),
        ("trainer.attention", "attn_implementation"),
        ("trainer.precision", "bf16"),
        ("model.pretrained", "base_model"),
    ]:
        location = smap.lookup(path)
        assert location is not None and location.line == line_of(MISTRAL, key), (path, location)


def test_schema_and_normalize_config_defaults(tmp_path: Path) -> None:
    loaded = load_native(write(tmp_path, "min.yml", MINIMAL), "axolotl")
    cfg, smap = loaded.config, loaded.source_map
    d, t = cfg["data"], cfg["trainer"]
    assert d["max_seq_length"] == 512 and d["truncation"] is True  # excess_length_strategy drop
    assert (d["collator"], d["padding"]) == ("padded", "longest")
    assert (t["micro_batch_size"], t["gradient_accumulation_steps"], t["devices"]) == (1, 1, 1)
    assert (t["finetuning"], t["quantization"], t["optimizer"]) == ("full", "none", "adamw")
    assert (t["precision"], t["attention"], t["loss_chunking"]) == ("bf16-true", "sdpa", "none")
    assert t["gradient_checkpointing"] is False and t["strategy"] == "single"
    for path in (
        "data.max_seq_length",
        "trainer.micro_batch_size",
        "trainer.optimizer",
        "trainer.precision",
        "trainer.gradient_checkpointing",
    ):
        assert is_default(smap.lookup(path), "Axolotl"), path
    assert "sequence_len=512" in str(smap.lookup("data.max_seq_length"))


def test_derived_and_alternative_keys(tmp_path: Path) -> None:
    text = MINIMAL + (
        "micro_batch_size: 4\nbatch_size: 32\nflash_attention: true\nload_in_4bit: true\n"
        "adapter: qlora\nlora_r: 8\nlora_target_modules: q_proj\nchunked_cross_entropy: true\n"
        "deepspeed: deepspeed_configs/zero3_bf16.json\n"
        "sample_packing: true\npad_to_sequence_len: false\n"
    )
    t = load_native(write(tmp_path, "alt.yml", text), "axolotl").config
    tr = t["trainer"]
    assert tr["gradient_accumulation_steps"] == 8  # normalize_config: batch_size // micro
    assert tr["attention"] == "flash"  # legacy flash_attention -> flash_attention_2
    assert (tr["finetuning"], tr["quantization"]) == ("qlora", "nf4-dq")
    assert tr["lora"]["targets"] == ["q_proj"] and tr["loss_chunking"] == "chunked"
    assert tr["strategy"] == "zero3"
    assert (t["data"]["collator"], t["data"]["padding"]) == ("packed", "longest")


def test_sequence_len_over_the_context_is_a_warning(tmp_path: Path) -> None:
    # Axolotl raises max_position_embeddings to sequence_len and trains on (the finding quotes
    # its log line; LitGPT's "Cannot attend to" guard is not Axolotl's)
    result = check_native(MISTRAL, "axolotl", ["sequence_len=40000"], gpu="H100")
    finding = one(result, "axolotl-positions-past-context")
    assert finding.severity == "warning" and "max_position_embeddings" in finding.message
    assert not result.by_rule("seq-len-over-block-size")
    planted = write(
        tmp_path,
        "long.yml",
        MISTRAL.read_text().replace("sequence_len: 8192", "sequence_len: 40000"),
    )
    located_at(
        one(check_native(planted, "axolotl", gpu="H100"), "axolotl-positions-past-context"),
        "sequence_len",
        planted,
        line_of(planted, "sequence_len"),
    )


def test_deepspeed_with_fsdp(tmp_path: Path) -> None:
    planted = write(
        tmp_path, "ds.yml", FSDP.read_text() + "deepspeed: deepspeed_configs/zero2.json\n"
    )
    finding = one(check_native(planted, "axolotl", gpu="H100"), "axolotl-deepspeed-with-fsdp")
    assert finding.severity == "error"
    located_at(finding, "fsdp", planted, line_of(planted, "fsdp"))
    located_at(finding, "deepspeed", planted, line_of(planted, "deepspeed"))
    applying_fixes_clears(planted, "axolotl", [], finding)


def test_fsdp2_with_a_bitsandbytes_8bit_optimizer() -> None:
    overrides = ["optimizer=adamw_bnb_8bit", "fsdp_version=2"]
    finding = one(
        check_native(FSDP, "axolotl", overrides, gpu="H100"), "axolotl-fsdp-8bit-optimizer"
    )
    assert "adamw_torch_8bit" in finding.message
    applying_fixes_clears(FSDP, "axolotl", overrides, finding)


def test_more_than_one_cross_entropy_option() -> None:
    overrides = ["chunked_cross_entropy=true", "cut_cross_entropy=true"]
    finding = one(
        check_native(MISTRAL, "axolotl", overrides, gpu="H100"), "axolotl-cross-entropy-conflict"
    )
    assert finding.severity == "error"
    applying_fixes_clears(MISTRAL, "axolotl", overrides, finding)


def test_sample_packing_without_an_isolating_attention(tmp_path: Path) -> None:
    planted = write(
        tmp_path,
        "pack.yml",
        MISTRAL.read_text().replace("attn_implementation: flash_attention_2\n", ""),
    )
    finding = one(check_native(planted, "axolotl", gpu="H100"), "axolotl-packing-attention")
    assert finding.severity == "warning"
    located_at(finding, "sample_packing", planted, line_of(planted, "sample_packing"))
    applying_fixes_clears(planted, "axolotl", [], finding)
    # sdpa isolates packed samples in Axolotl (attn_decontaminates_packing)
    assert not check_native(planted, "axolotl", ["attn_implementation=sdpa"]).by_rule(
        "axolotl-packing-attention"
    )


def test_unknown_key_is_a_warning_with_did_you_mean(tmp_path: Path) -> None:
    planted = write(
        tmp_path,
        "typo.yml",
        MISTRAL.read_text().replace("sequence_len: 8192", "sequence_length: 8192"),
    )
    result = check_native(planted, "axolotl", gpu="H100")
    finding = one(result, "unknown-native-key")
    assert finding.severity == "warning" and "did you mean sequence_len" in finding.hint
    located_at(finding, "sequence_length", planted, line_of(planted, "sequence_length"))
    applying_fixes_clears(planted, "axolotl", [], finding)
    # the dropped key really is dropped: the default 512 applies
    assert result.config is not None and result.config.data.max_seq_length == 512


def test_special_tokens_map_to_the_tokenizer() -> None:
    loaded = load_native(example("axolotl", "llama-2-qlora-fsdp.yml"), "axolotl")
    assert "tokenizer" in loaded.config
