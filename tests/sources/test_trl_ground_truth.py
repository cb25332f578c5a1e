"""The TRL adapter against the real TRL: its defaults are SFTConfig's and ModelConfig's, its
key list is what `trl sft --config` accepts, and what it calls an unknown key TRL's own parser
refuses (needs ``pip install 'cfgcheck[frameworks]'``)."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.sources import load_native
from cfgcheck.sources.unknown import key_list
from tests.conftest import requires
from tests.sources.support import example, write

pytestmark = requires("trl")

TINY = "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"


def parser() -> Any:
    from trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser
    from trl.scripts.utils import DatasetMixtureConfig

    # the dataclasses of trl/scripts/sft.py
    return TrlParser((ScriptArguments, SFTConfig, ModelConfig, DatasetMixtureConfig))


def parse(file: Path) -> tuple[Any, ...]:
    """``trl sft --config FILE`` as TRL parses it (CPU, so bf16 validation passes)."""
    args = ["--config", str(file), "--output_dir", "out", "--use_cpu", "true"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation notices of transformers' arguments
        return tuple(parser().parse_args_and_config(args))


def test_the_key_list_is_what_trl_sft_accepts() -> None:
    from transformers import TrainingArguments
    from trl import ModelConfig, ScriptArguments, SFTConfig
    from trl.scripts.utils import DatasetMixtureConfig

    fields = {
        f.name
        for c in (SFTConfig, ModelConfig, ScriptArguments, DatasetMixtureConfig, TrainingArguments)
        for f in dataclasses.fields(c)
    }
    assert key_list("trl") == fields | {"env"}


def test_defaults_are_sft_configs(tmp_path: Path) -> None:
    file = write(tmp_path, "min.yaml", f"model_name_or_path: {TINY}\n")
    _, sft, model, _ = parse(file)
    mapped = load_native(file, "trl").config
    d, t = mapped["data"], mapped["trainer"]
    assert d["max_seq_length"] == sft.max_length == 1024
    assert t["gradient_checkpointing"] is sft.gradient_checkpointing is True
    assert t["learning_rate"] == sft.learning_rate
    assert t["micro_batch_size"] == sft.per_device_train_batch_size
    assert t["gradient_accumulation_steps"] == sft.gradient_accumulation_steps
    assert mapped["seed"] == sft.seed
    assert sft.bf16 is True and sft.fp16 is False and model.dtype == "float32"
    assert t["precision"] == "bf16-mixed"  # bf16 autocast over float32 weights
    assert sft.loss_type == "nll" and t["loss_chunking"] == "chunked"
    assert (d["collator"], sft.packing) == ("padded", False)


def test_peft_defaults_are_model_configs(tmp_path: Path) -> None:
    file = write(
        tmp_path, "peft.yaml", f"model_name_or_path: {TINY}\nuse_peft: true\nload_in_4bit: true\n"
    )
    _, _, model, _ = parse(file)
    lora = load_native(file, "trl").config["trainer"]["lora"]
    assert (lora["rank"], lora["alpha"], lora["dropout"]) == (
        model.lora_r,
        model.lora_alpha,
        model.lora_dropout,
    )
    assert model.bnb_4bit_quant_type == "nf4" and model.use_bnb_nested_quant is False


def test_published_examples_parse_in_trl() -> None:
    for name in ("example_config.yaml", "clis-sft_config.yaml"):
        model = parse(example("trl", name))[2]
        assert model.model_name_or_path == "Qwen/Qwen2.5-0.5B"


def test_an_unknown_key_is_refused_by_trl(tmp_path: Path) -> None:
    # What cfgcheck reports as error[unknown-native-key] (max_seq_length, renamed) TRL refuses.
    file = write(tmp_path, "old.yaml", f"model_name_or_path: {TINY}\nmax_seq_length: 2048\n")
    with pytest.raises(ValueError, match=r"Unknown arguments from config file.*max_seq_length"):
        parse(file)
    fixed = write(tmp_path, "new.yaml", f"model_name_or_path: {TINY}\nmax_length: 2048\n")
    assert parse(fixed)[1].max_length == 2048
