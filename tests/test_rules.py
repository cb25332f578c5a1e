"""Every built-in rule: it fires on the bad config (naming both values) and not on the fix."""

from __future__ import annotations

from typing import Any

import pytest

from cfgcheck import Finding, validate
from cfgcheck.rules import all_rules, rule
from cfgcheck.rules._registry import DuplicateRuleError


def fired(cfg: dict[str, Any], rule_id: str) -> list[Finding]:
    return validate(cfg).by_rule(rule_id)


def only(cfg: dict[str, Any], rule_id: str) -> Finding:
    (f,) = fired(cfg, rule_id)
    return f


# --- registry ---------------------------------------------------------------------------


def test_rule_ids_are_unique_kebab_case_and_documented() -> None:
    ids = [r.id for r in all_rules()]
    assert len(ids) == len(set(ids))
    for r in all_rules():
        assert r.summary, f"{r.id} has no docstring summary"


def test_duplicate_rule_id_is_refused() -> None:
    with pytest.raises(DuplicateRuleError, match="seq-len-over-block-size"):
        rule("seq-len-over-block-size", requires=("model",))(lambda cfg: [])


@pytest.mark.parametrize("bad", ["Seq_len", "seq len", "-x", "x-"])
def test_malformed_rule_id_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="kebab-case"):
        rule(bad, requires=("model",))


def test_unknown_required_section_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown sections"):
        rule("some-rule", requires=("optimizer",))


# --- seq-len-over-block-size ------------------------------------------------------------


def test_seq_len_over_block_size(cfg: dict[str, Any]) -> None:
    cfg["data"]["max_seq_length"] = 3063
    f = only(cfg, "seq-len-over-block-size")
    assert f.severity == "error"
    assert f.paths == ("data.max_seq_length", "model.block_size")
    assert "Cannot attend to 3063, block size is only 2048" in f.message
    assert "data.max_seq_length<=2048" in f.hint


def test_seq_len_equal_to_block_size_passes(cfg: dict[str, Any]) -> None:
    cfg["data"]["max_seq_length"] = 2048
    assert not fired(cfg, "seq-len-over-block-size")


def test_pad_multiple_over_block_size(cfg: dict[str, Any]) -> None:
    cfg["data"].update(max_seq_length=2040, pad_to_multiple_of=96)  # rounds up to 2112
    f = only(cfg, "pad-multiple-over-block-size")
    assert "2040" in f.message and "2112" in f.message and "2048" in f.message
    cfg["data"]["max_seq_length"] = 1920
    assert not fired(cfg, "pad-multiple-over-block-size")


def test_pad_multiple_mismatch(cfg: dict[str, Any]) -> None:
    cfg["data"]["pad_to_multiple_of"] = 12  # max_seq_length 1024 = 85 x 12 + 4
    f = only(cfg, "pad-multiple-mismatch")
    assert f.paths == ("data.max_seq_length", "data.pad_to_multiple_of", "data.truncation")
    assert "truncation length (1024) is not a multiple of pad_to_multiple_of (12)" in f.message
    assert "data.max_seq_length=1020" in f.hint


def test_pad_multiple_mismatch_names_max_length_when_set(cfg: dict[str, Any]) -> None:
    cfg["data"].update(pad_to_multiple_of=64, max_length=1000)
    f = only(cfg, "pad-multiple-mismatch")
    assert "data.max_length=1000" in f.message and "data.max_length=960" in f.hint


@pytest.mark.parametrize(
    "data",
    [
        {"pad_to_multiple_of": 64},  # 1024 = 16 x 64
        {"pad_to_multiple_of": 12, "padding": "do_not_pad", "collator": "padded"},
        {"pad_to_multiple_of": 12, "truncation": False},
    ],
)
def test_pad_multiple_mismatch_passes(cfg: dict[str, Any], data: dict[str, Any]) -> None:
    cfg["data"].update(data)
    assert not fired(cfg, "pad-multiple-mismatch")


# --- vocab-mismatch ---------------------------------------------------------------------


def test_tokenizer_larger_than_embedding_rows(cfg: dict[str, Any]) -> None:
    cfg["tokenizer"]["vocab_size"] = 32001
    f = only(cfg, "vocab-mismatch")
    assert "32001" in f.message and "32000" in f.message
    assert "index out of range in self" in f.message


def test_tokenizer_fits_padded_rows_but_differs_from_model_vocab(cfg: dict[str, Any]) -> None:
    cfg["model"].update(padding_multiple=512, vocab_size=32000)
    cfg["tokenizer"]["vocab_size"] = 32010  # < 32256 rows, != 32000
    f = only(cfg, "vocab-mismatch")
    assert f.paths == ("tokenizer.vocab_size", "model.vocab_size")
    assert "32010" in f.message and "32000" in f.message


def test_padded_rows_below_vocab(cfg: dict[str, Any]) -> None:
    cfg["model"]["padded_vocab_size"] = 31000
    findings = fired(cfg, "vocab-mismatch")
    paths = [f.paths for f in findings]
    assert ("model.padded_vocab_size", "model.vocab_size") in paths
    assert any("31000" in f.message and "32000" in f.message for f in findings)


def test_matching_vocab_passes(cfg: dict[str, Any]) -> None:
    assert not fired(cfg, "vocab-mismatch")


def test_unknown_tokenizer_size_is_not_guessed(cfg: dict[str, Any]) -> None:
    cfg["tokenizer"]["vocab_size"] = None
    assert not fired(cfg, "vocab-mismatch")


# --- ragged-batch -----------------------------------------------------------------------


def test_ragged_batch_longest_padding_with_default_collate(cfg: dict[str, Any]) -> None:
    cfg["data"].update(padding="longest", collator="default")
    f = only(cfg, "ragged-batch")
    assert f.paths == ("data.padding", "data.collator", "trainer.micro_batch_size")
    assert "expected sequence of length" in f.message
    assert "each element in list of batch should be of equal size" in f.message
    assert "data.collator=padded" in f.hint


@pytest.mark.parametrize(
    "fix",
    [
        {"data": {"collator": "padded"}},
        {"data": {"collator": "packed"}},
        {"data": {"padding": "max_length", "truncation": True}},
        {"trainer": {"micro_batch_size": 1, "global_batch_size": 4}},
    ],
)
def test_ragged_batch_fixes(cfg: dict[str, Any], fix: dict[str, dict[str, Any]]) -> None:
    cfg["data"].update(padding="longest", collator="default")
    for section, values in fix.items():
        cfg[section].update(values)
    assert not fired(cfg, "ragged-batch")


def test_max_length_padding_without_truncation(cfg: dict[str, Any]) -> None:
    cfg["data"].update(padding="max_length", truncation=False, collator="default")
    f = only(cfg, "ragged-batch")
    assert "data.truncation" in f.paths and "truncation=true" in f.hint


def test_max_length_above_max_seq_length(cfg: dict[str, Any]) -> None:
    """Every sample is padded and cut to exactly 2048 tokens: batches stack (no ragged-batch),
    but sequences longer than max_seq_length reach the model."""
    cfg["data"].update(padding="max_length", collator="default", max_length=2048)
    assert not fired(cfg, "ragged-batch")
    f = only(cfg, "max-length-over-max-seq-length")
    assert f.severity == "warning"
    assert "2048" in f.message and "1024" in f.message


# --- batch arithmetic, strategy ---------------------------------------------------------


def test_batch_size_mismatch_suggests_accumulation(cfg: dict[str, Any]) -> None:
    cfg["trainer"]["global_batch_size"] = 32  # 4 x 4 x 1 x 1 = 16
    f = only(cfg, "batch-size-mismatch")
    assert "32" in f.message and "= 16" in f.message
    assert "gradient_accumulation_steps=8" in f.hint


def test_batch_size_not_a_multiple(cfg: dict[str, Any]) -> None:
    cfg["trainer"]["global_batch_size"] = 18
    assert "multiple of 4" in only(cfg, "batch-size-mismatch").hint


def test_global_batch_size_unset_is_fine(cfg: dict[str, Any]) -> None:
    cfg["trainer"]["global_batch_size"] = None
    assert not fired(cfg, "batch-size-mismatch")


def test_single_strategy_on_many_devices(cfg: dict[str, Any]) -> None:
    cfg["trainer"].update(devices=8, global_batch_size=128)
    f = only(cfg, "strategy-device-count")
    assert f.severity == "error" and "8" in f.message


def test_sharding_strategy_on_one_device_is_a_warning(cfg: dict[str, Any]) -> None:
    cfg["trainer"]["strategy"] = "fsdp"
    assert only(cfg, "strategy-device-count").severity == "warning"


# --- shapes -----------------------------------------------------------------------------


def test_head_size_mismatch(cfg: dict[str, Any]) -> None:
    cfg["model"]["n_head"] = 30
    f = only(cfg, "head-size-mismatch")
    assert "2048" in f.message and "30" in f.message


@pytest.mark.parametrize(
    ("framework", "architecture", "severity"),
    [
        ("litgpt", None, None),  # litgpt/config.py asserts only when head_size is None
        ("hf", "mistral", None),  # MistralConfig takes head_dim as given
        ("hf", None, "error"),  # the layout maps to Llama: LlamaConfig refuses it
        ("hf", "gemma2", "error"),
        ("torchtune", None, "warning"),
    ],
)
def test_explicit_head_size_graded_per_framework(
    cfg: dict[str, Any], framework: str, architecture: str | None, severity: str | None
) -> None:
    cfg["model"].update(n_head=30, head_size=64, n_query_groups=5, architecture=architecture)
    cfg["trainer"]["framework"] = framework
    found = fired(cfg, "head-size-mismatch")
    assert [f.severity for f in found] == ([severity] if severity else [])
    for f in found:
        assert f"trainer.framework={framework}" in f.message or framework == "torchtune"
        assert f.fixes and "model.n_head=32" in f.fixes[0].overrides


def test_query_groups_mismatch(cfg: dict[str, Any]) -> None:
    cfg["model"]["n_query_groups"] = 5
    f = only(cfg, "query-groups-mismatch")
    assert "32" in f.message and "5" in f.message


def test_rotary_dims_odd(cfg: dict[str, Any]) -> None:
    cfg["model"]["rotary_fraction"] = 0.3  # 64 * 0.3 = 19.2
    f = only(cfg, "rotary-dims-odd")
    assert "64" in f.message and "0.3" in f.message
    cfg["model"]["rotary_fraction"] = 0.25  # 16 dims
    assert not fired(cfg, "rotary-dims-odd")


# --- fine-tuning ------------------------------------------------------------------------


def test_qlora_needs_4bit(cfg: dict[str, Any]) -> None:
    cfg["trainer"].update(finetuning="qlora", quantization="int8")
    f = only(cfg, "qlora-needs-4bit")
    assert "int8" in f.message and "nf4" in f.hint
    cfg["trainer"]["quantization"] = "nf4"
    assert not fired(cfg, "qlora-needs-4bit")


def test_lora_needs_rank_and_targets(cfg: dict[str, Any]) -> None:
    cfg["trainer"]["lora"].update(rank=None, targets=[])
    paths = sorted(f.paths[1] for f in fired(cfg, "lora-needs-rank"))
    assert paths == ["trainer.lora.rank", "trainer.lora.targets"]


def test_quantized_full_finetuning(cfg: dict[str, Any]) -> None:
    cfg["trainer"].update(finetuning="full", quantization="nf4")
    f = only(cfg, "quantized-full-finetuning")
    assert "nf4" in f.message and "full" in f.message


def test_flash_attention_needs_16_bit(cfg: dict[str, Any]) -> None:
    cfg["trainer"].update(attention="flash", precision="32-true")
    f = only(cfg, "flash-attention-precision")
    assert "32-true" in f.message and "bf16-mixed" in f.hint
    cfg["trainer"]["precision"] = "bf16-mixed"
    assert not fired(cfg, "flash-attention-precision")


def test_lora_settings_unused_with_full_finetuning(cfg: dict[str, Any]) -> None:
    cfg["trainer"]["finetuning"] = "full"
    f = only(cfg, "lora-settings-unused")
    assert f.severity == "info" and "8" in f.message


# --- special tokens ---------------------------------------------------------------------


def test_pad_token_missing(cfg: dict[str, Any]) -> None:
    cfg["tokenizer"].update(pad_token=None, pad_token_id=None)
    f = only(cfg, "pad-token-missing")
    assert "Asking to pad but the tokenizer does not have a padding token" in f.message
    assert "</s>" in f.hint


def test_no_padding_needs_no_pad_token(cfg: dict[str, Any]) -> None:
    cfg["tokenizer"].update(pad_token=None, pad_token_id=None)
    cfg["data"].update(padding="do_not_pad", collator="default")
    cfg["trainer"].update(micro_batch_size=1, global_batch_size=None)
    assert not fired(cfg, "pad-token-missing")


def test_packing_needs_a_pad_id_for_the_last_row(cfg: dict[str, Any]) -> None:
    cfg["tokenizer"].update(pad_token=None, pad_token_id=None)
    cfg["data"].update(padding="do_not_pad", collator="packed")
    (f,) = fired(cfg, "pad-token-missing")
    assert "last row" in f.message


def test_special_token_out_of_range(cfg: dict[str, Any]) -> None:
    cfg["tokenizer"].update(pad_token="<pad>", pad_token_id=32000)
    f = only(cfg, "special-token-out-of-range")
    assert "pad_token_id=32000" in f.message and "32000" in f.message
    assert f.paths == ("tokenizer.pad_token_id", "model.padded_vocab_size")


def test_ignore_index_that_is_a_token(cfg: dict[str, Any]) -> None:
    cfg["data"]["ignore_index"] = 0
    f = only(cfg, "ignore-index-is-token")
    assert f.severity == "warning" and "-100" in f.hint
