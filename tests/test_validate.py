"""validate(): schema errors become findings with dotted paths, and never hide other rules."""

from __future__ import annotations

from typing import Any

import pytest
from omegaconf import OmegaConf

from cfgcheck import CheckResult, ConfigError, ConfigLoadError, RunConfig, validate


def rules_of(result: CheckResult) -> list[str]:
    return [f.rule for f in result.findings]


def test_default_config_is_clean(cfg: dict[str, Any]) -> None:
    result = validate(cfg)
    assert result.ok and result.findings == []
    assert isinstance(result.config, RunConfig)


def test_dictconfig_is_accepted_and_interpolations_resolved(cfg: dict[str, Any]) -> None:
    cfg["output_dir"] = "out/${name}"
    result = validate(OmegaConf.create(cfg))
    assert result.config is not None and result.config.output_dir == "out/tinyllama-alpaca-lora"


def test_unresolvable_interpolation_is_a_load_error(cfg: dict[str, Any]) -> None:
    cfg["output_dir"] = "${nowhere}"
    with pytest.raises(ConfigLoadError, match="cannot resolve"):
        validate(OmegaConf.create(cfg))


def test_unknown_key_with_did_you_mean(cfg: dict[str, Any]) -> None:
    cfg["trainer"]["lora"]["rnak"] = 8
    (f,) = validate(cfg).findings
    assert f.rule == "unknown-key" and f.paths == ("trainer.lora.rnak",)
    assert "did you mean trainer.lora.rank?" in f.hint


def test_wrong_type_names_path_and_value(cfg: dict[str, Any]) -> None:
    cfg["trainer"]["micro_batch_size"] = "4"
    (f,) = validate(cfg).findings
    assert f.rule == "invalid-value" and f.paths == ("trainer.micro_batch_size",)
    assert "'4'" in f.message and "without quotes" in f.hint


def test_literal_choice_hint_lists_the_choices(cfg: dict[str, Any]) -> None:
    cfg["data"]["padding"] = True
    (f,) = validate(cfg).findings
    assert f.paths == ("data.padding",)
    assert "'max_length'" in f.hint and "'longest'" in f.hint


def test_missing_section(cfg: dict[str, Any]) -> None:
    del cfg["tokenizer"]
    result = validate(cfg)
    assert [(f.rule, f.paths) for f in result.findings] == [("missing-key", ("tokenizer",))]


def test_schema_error_does_not_hide_rules_between_valid_sections(cfg: dict[str, Any]) -> None:
    cfg["tokenizer"]["padding_side"] = "middle"  # tokenizer is broken
    cfg["data"]["max_seq_length"] = 3063  # model + data + trainer still checked
    result = validate(cfg)
    assert sorted(rules_of(result)) == ["invalid-value", "seq-len-over-block-size"]
    assert result.config is None


def test_every_problem_is_reported_at_once(cfg: dict[str, Any]) -> None:
    cfg["data"]["max_seq_length"] = 3063
    cfg["tokenizer"]["vocab_size"] = 32001
    cfg["trainer"]["global_batch_size"] = 64
    cfg["seeed"] = 3
    result = validate(cfg)
    assert set(rules_of(result)) == {
        "seq-len-over-block-size",
        "vocab-mismatch",
        "batch-size-mismatch",
        "unknown-key",
    }
    with pytest.raises(ConfigError) as e:
        result.raise_for_errors()
    assert isinstance(e.value, ValueError) and len(e.value.findings) == 4


def test_rules_needing_a_broken_section_are_held_back(cfg: dict[str, Any]) -> None:
    cfg["model"]["n_layers"] = 3  # model fails the schema
    cfg["data"]["max_seq_length"] = 3063  # would be seq-len-over-block-size
    cfg["trainer"]["global_batch_size"] = 64  # trainer-only rule still runs
    assert sorted(rules_of(validate(cfg))) == ["batch-size-mismatch", "unknown-key"]


def test_errors_sort_before_warnings_and_infos(cfg: dict[str, Any]) -> None:
    cfg["trainer"].update(finetuning="full", strategy="ddp")  # info + warning
    cfg["data"]["max_seq_length"] = 4096  # error
    severities = [f.severity for f in validate(cfg).findings]
    assert severities == sorted(severities, key=["error", "warning", "info"].index)
    assert severities[0] == "error" and "info" in severities and "warning" in severities


def test_non_mapping_root() -> None:
    (f,) = validate([1, 2]).findings
    assert f.rule == "invalid-value" and f.paths == ("<root>",)


def test_json_shape(cfg: dict[str, Any]) -> None:
    cfg["data"]["max_seq_length"] = 3063
    d = validate(cfg).to_dict()
    assert d["ok"] is False
    assert set(d["findings"][0]) >= {"rule", "severity", "paths", "message", "hint"}
