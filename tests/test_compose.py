"""Composing with Hydra: defaults, overrides, and unreadable configs as ConfigLoadError."""

from __future__ import annotations

from pathlib import Path

import pytest

from cfgcheck import ConfigLoadError, compose, load_yaml
from tests.conftest import CONF


def test_default_composition_selects_the_tinyllama_lora_run() -> None:
    cfg = compose(CONF, "config")
    assert cfg.model.name == "tinyllama-1.1b"
    assert cfg.trainer.finetuning == "lora"
    assert cfg.output_dir == "outputs/tinyllama-alpaca-lora"


def test_group_and_value_overrides() -> None:
    cfg = compose(CONF, "config", ["model=llama-3-8b", "data.max_seq_length=4096"])
    assert cfg.model.block_size == 8192
    assert cfg.data.max_seq_length == 4096


def test_missing_config_dir(tmp_path: Path) -> None:
    with pytest.raises(ConfigLoadError, match="config directory not found"):
        compose(tmp_path / "nope")


def test_missing_primary_config() -> None:
    with pytest.raises(ConfigLoadError, match="primary config not found"):
        compose(CONF, "nope")


def test_unknown_group_option_lists_the_available_ones() -> None:
    with pytest.raises(ConfigLoadError) as e:
        compose(CONF, "config", ["model=llama-9b"])
    assert "model/llama-9b" in str(e.value) and "tinyllama-1.1b" in str(e.value)
    assert "\n" not in str(e.value)


# A misspelled key inside a section (data.nope=1) composes and is an unknown-key finding (see
# cfgcheck.overrides); a key outside every section keeps Hydra's refusal.
@pytest.mark.parametrize("override", ["data.max_seq_length", "nope.deeper=1", "model=[a,"])
def test_bad_overrides(override: str) -> None:
    with pytest.raises(ConfigLoadError):
        compose(CONF, "config", [override])


def test_malformed_yaml(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("model: {name: x\n  block_size: [\n")
    with pytest.raises(ConfigLoadError):
        compose(tmp_path, "config")


def test_load_yaml(tmp_path: Path) -> None:
    good = tmp_path / "run.yaml"
    good.write_text("model:\n  name: x\n")
    assert load_yaml(good) == {"model": {"name": "x"}}
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1,\n")
    with pytest.raises(ConfigLoadError, match="malformed YAML"):
        load_yaml(bad)
    with pytest.raises(ConfigLoadError, match="cannot read"):
        load_yaml(tmp_path / "missing.yaml")


@pytest.mark.parametrize("name", ["../config", "model/../../x", "/etc/passwd"])
def test_a_config_name_outside_the_config_dir_is_refused(name: str) -> None:
    """Only the config directory is screened and searched: a primary config that climbs out of
    it is a one-line error, not a file read unscreened."""
    with pytest.raises(ConfigLoadError, match="climbs out of the config directory") as e:
        compose(CONF, name, [])
    assert "\n" not in str(e.value)
