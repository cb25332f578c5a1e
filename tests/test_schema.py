"""The section schemas: derived fields, strictness, unknown keys."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from cfgcheck.schema import DataConfig, ModelConfig, RunConfig, TrainerConfig
from cfgcheck.schema.model import find_multiple

SHAPE: dict[str, Any] = {
    "name": "m",
    "block_size": 128,
    "vocab_size": 1000,
    "n_layer": 2,
    "n_embd": 64,
    "n_head": 4,
}


def test_derived_fields_follow_the_written_formulas() -> None:
    m = ModelConfig(**SHAPE)
    assert m.padded_vocab_size == 1000
    assert m.n_query_groups == 4
    assert m.head_size == 16
    assert m.intermediate_size == 256


def test_padding_multiple_rounds_embedding_rows_up() -> None:
    m = ModelConfig(**SHAPE, padding_multiple=64)
    assert m.padded_vocab_size == 1024
    assert find_multiple(1024, 64) == 1024
    assert find_multiple(50257, 512) == 50688  # GPT-2 vocab padded as in LitGPT


def test_explicit_values_win_over_derivation() -> None:
    m = ModelConfig(**SHAPE, padded_vocab_size=1100, head_size=32, n_query_groups=2)
    assert (m.padded_vocab_size, m.head_size, m.n_query_groups) == (1100, 32, 2)
    assert "head_size" in m.model_fields_set


def test_unknown_key_is_rejected() -> None:
    with pytest.raises(ValidationError) as e:
        ModelConfig(**SHAPE, n_layers=3)
    assert e.value.errors()[0]["type"] == "extra_forbidden"


@pytest.mark.parametrize(
    ("field", "value"),
    [("block_size", "2048"), ("block_size", 0), ("n_head", 2.5), ("bias", 1)],
)
def test_strict_types_and_bounds(field: str, value: Any) -> None:
    with pytest.raises(ValidationError):
        ModelConfig(**{**SHAPE, field: value})


def test_literals_refuse_unknown_choices() -> None:
    with pytest.raises(ValidationError):
        DataConfig(max_seq_length=8, padding="True")
    with pytest.raises(ValidationError):
        TrainerConfig(micro_batch_size=1, precision="bf16")


def test_data_effective_max_length_defaults_to_max_seq_length() -> None:
    assert DataConfig(max_seq_length=512).effective_max_length == 512
    assert DataConfig(max_seq_length=512, max_length=256).effective_max_length == 256


def test_trainer_batch_arithmetic() -> None:
    t = TrainerConfig(micro_batch_size=2, gradient_accumulation_steps=4, devices=8, num_nodes=2)
    assert t.world_size == 16
    assert t.effective_batch_size == 128


def test_run_config_round_trips(default_config: dict[str, Any]) -> None:
    run = RunConfig.model_validate(default_config)
    again = RunConfig.model_validate(run.to_plain())
    assert again == run
