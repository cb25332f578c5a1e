"""Source locations: the file:line (or override) that set each offending value."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import cfgcheck
from cfgcheck.findings import Finding, Location
from cfgcheck.locations import SourceMap, source_map
from tests.conftest import COMMAND, CONF, REPO


def finding(result: cfgcheck.CheckResult, rule: str) -> Finding:
    (found,) = result.by_rule(rule)
    return found


def line_of(file: Path, text: str) -> int:
    """1-based line of the first line of ``file`` starting with ``text``."""
    lines = file.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.lstrip().startswith(text))


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the shipped conf/ in a temporary directory that is also the cwd."""
    shutil.copytree(CONF, tmp_path / "conf")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "conf"


def test_group_file_value(conf: Path) -> None:
    result = cfgcheck.check("conf", "config", ["model.block_size=1000"])
    found = finding(result, "seq-len-over-block-size")
    data_file = conf / "data" / "alpaca-tiny.yaml"
    assert found.locations["data.max_seq_length"] == Location(
        "conf/data/alpaca-tiny.yaml", line_of(data_file, "max_seq_length:")
    )
    assert found.locations["model.block_size"] == Location("<override model.block_size=1000>", None)


def test_override_value_and_other_group_file(conf: Path) -> None:
    result = cfgcheck.check("conf", "config", ["data.max_seq_length=3063"])
    found = finding(result, "seq-len-over-block-size")
    assert found.locations["data.max_seq_length"] == Location(
        "<override data.max_seq_length=3063>", None
    )
    model_file = conf / "model" / "tinyllama-1.1b.yaml"
    assert found.locations["model.block_size"] == Location(
        "conf/model/tinyllama-1.1b.yaml", line_of(model_file, "block_size:")
    )


def test_group_choice_override_locates_the_chosen_file(conf: Path) -> None:
    result = cfgcheck.check("conf", "config", ["model=phi-2", "data.max_seq_length=4096"])
    found = finding(result, "seq-len-over-block-size")
    loc = found.locations["model.block_size"]
    assert loc is not None and loc.file == "conf/model/phi-2.yaml"


def test_schema_default_or_derived_value_has_no_location(conf: Path) -> None:
    result = cfgcheck.check("conf", "config", ["tokenizer.vocab_size=32001"])
    found = finding(result, "vocab-mismatch")
    # model.padded_vocab_size is derived in the schema: no file set it.
    assert "model.padded_vocab_size" in found.paths
    assert found.locations["model.padded_vocab_size"] is None
    assert found.locations["tokenizer.vocab_size"] == Location(
        "<override tokenizer.vocab_size=32001>", None
    )


PRIMARY_WITH_DATA = """\
defaults:
  - model: tinyllama-1.1b
  - tokenizer: llama-2
  - data: alpaca-tiny
  - trainer: lora
  - {self_position}

name: primary-sets-data
data:
  max_seq_length: 3063
"""


def test_primary_config_after_groups_wins(conf: Path) -> None:
    """``_self_`` last: the primary config overrides the group file's value, as in Hydra."""
    (conf / "config.yaml").write_text(PRIMARY_WITH_DATA.format(self_position="_self_"))
    result = cfgcheck.check("conf", "config")
    found = finding(result, "seq-len-over-block-size")
    assert "3063" in found.message
    assert found.locations["data.max_seq_length"] == Location(
        "conf/config.yaml", line_of(conf / "config.yaml", "max_seq_length:")
    )


def test_group_after_primary_config_wins(conf: Path) -> None:
    """``_self_`` first: the group file's value wins, and the location follows it."""
    text = PRIMARY_WITH_DATA.format(self_position="_self_").replace(
        "  - model: tinyllama-1.1b", "  - _self_\n  - model: tinyllama-1.1b"
    )
    text = text.replace("  - trainer: lora\n  - _self_\n", "  - trainer: lora\n")
    (conf / "config.yaml").write_text(text)
    result = cfgcheck.check("conf", "config", ["model.block_size=1000"])
    found = finding(result, "seq-len-over-block-size")
    assert "data.max_seq_length=1024" in found.message  # the group value, not 3063
    assert found.locations["data.max_seq_length"] == Location(
        "conf/data/alpaca-tiny.yaml",
        line_of(conf / "data" / "alpaca-tiny.yaml", "max_seq_length:"),
    )


def test_package_global_experiment_file(conf: Path) -> None:
    (conf / "experiment").mkdir()
    (conf / "experiment" / "long.yaml").write_text(
        "# @package _global_\n# A long-context experiment.\ndata:\n  max_seq_length: 8192\n"
    )
    result = cfgcheck.check("conf", "config", ["+experiment=long"])
    found = finding(result, "seq-len-over-block-size")
    assert found.locations["data.max_seq_length"] == Location("conf/experiment/long.yaml", 4)


def test_list_element_is_located_at_its_list() -> None:
    smap = SourceMap()
    smap.set("data", Location("a.yaml", 1), covering=False)
    smap.set("data.paths", Location("a.yaml", 3), covering=True)
    assert smap.lookup("data.paths.0") == Location("a.yaml", 3)
    # A mapping parent does not locate a key nobody set.
    assert smap.lookup("data.ignore_index") is None
    smap.delete("data")
    assert smap.lookup("data.paths") is None


def test_delete_override_forgets_the_location(conf: Path) -> None:
    smap = source_map("conf", "config", ["~data.template"])
    assert smap.lookup("data.template") is None
    assert smap.lookup("data.max_seq_length") is not None


def test_paths_outside_the_cwd_stay_absolute(conf: Path, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    smap = source_map(conf, "config", [], cwd=other)
    loc = smap.lookup("model.block_size")
    assert loc is not None
    assert loc.file == str(conf / "model" / "tinyllama-1.1b.yaml")


def test_cli_text_and_json_show_locations() -> None:
    text = subprocess.run(
        [*COMMAND, "check", "data.max_seq_length=3063"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert text.returncode == 1
    block = text.stdout.split("\n\n")[0].splitlines()
    assert block[0].startswith("error[seq-len-over-block-size]")
    line = line_of(CONF / "model" / "tinyllama-1.1b.yaml", "block_size:")
    assert f"conf/model/tinyllama-1.1b.yaml:{line}: model.block_size set here" in block
    assert "<override data.max_seq_length=3063>: data.max_seq_length set here" in block

    proc = subprocess.run(
        [*COMMAND, "check", "--format", "json", "model.block_size=1000"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    report = json.loads(proc.stdout)
    (found,) = [f for f in report["findings"] if f["rule"] == "seq-len-over-block-size"]
    assert found["paths"] == ["data.max_seq_length", "model.block_size"]
    data_line = line_of(CONF / "data" / "alpaca-tiny.yaml", "max_seq_length:")
    assert found["locations"] == [
        {"file": "conf/data/alpaca-tiny.yaml", "line": data_line},
        {"file": "<override model.block_size=1000>", "line": None},
    ]
