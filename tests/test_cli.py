"""End-to-end: the real ``cfgcheck`` command on the shipped conf/, each seed failure and its fix."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CONF, REPO
from tests.conftest import run_cfgcheck as run


def check_json(*overrides: str) -> tuple[int, dict[str, Any]]:
    proc = run("check", "--format", "json", *overrides)
    assert proc.stderr == "", proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def errors(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["rule"]: f for f in report["findings"] if f["severity"] == "error"}


def test_shipped_conf_passes() -> None:
    proc = run("check")
    assert proc.returncode == 0, proc.stdout
    assert "config OK" in proc.stdout


# Each seed failure: (overrides that reproduce it, rule id, values the message must name,
# overrides that fix it).
SEEDS = {
    "litgpt-cannot-attend": (
        ["data.max_seq_length=3063"],
        "seq-len-over-block-size",
        ["3063", "2048", "Cannot attend to 3063, block size is only 2048"],
        ["data.max_seq_length=2048"],
    ),
    "tinyllama-vocab-size": (
        ["tokenizer.vocab_size=32001"],
        "vocab-mismatch",
        ["32001", "32000", "index out of range in self"],
        ["tokenizer.vocab_size=32001", "model.vocab_size=32001", "+model.padding_multiple=64"],
    ),
    "unsloth-padding-true": (
        ["data.padding=longest", "data.collator=default", "trainer.micro_batch_size=4"],
        "ragged-batch",
        ["data.padding=longest", "micro_batch_size=4", "expected sequence of length"],
        ["data.padding=max_length", "data.collator=default", "trainer.micro_batch_size=4"],
    ),
    "torchtune-default-collate": (
        ["data.padding=do_not_pad", "data.collator=default"],
        "ragged-batch",
        ["data.collator=default", "each element in list of batch should be of equal size"],
        ["data.padding=do_not_pad", "data.collator=padded"],
    ),
}


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_seed_failure_is_caught(seed: str) -> None:
    bad, rule_id, must_name, _ = SEEDS[seed]
    code, report = check_json(*bad)
    assert code == 1 and report["ok"] is False
    finding = errors(report)[rule_id]
    for text in must_name:
        assert text in finding["message"], (text, finding["message"])
    assert finding["hint"]


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_seed_fix_passes(seed: str) -> None:
    *_, fix = SEEDS[seed]
    code, report = check_json(*fix)
    assert code == 0, report
    assert report["ok"] is True and not errors(report)


def test_text_report_lists_errors_first_then_a_summary() -> None:
    # Full fine-tuning at 3063 tokens needs more than the default A100-80GB: declare an H200 so the
    # only error is the sequence length.
    proc = run(
        "check", "data.max_seq_length=3063", "trainer.finetuning=full", "trainer.gpu.name=H200"
    )
    assert proc.returncode == 1
    blocks = proc.stdout.strip().split("\n\n")
    assert blocks[0].startswith("error[seq-len-over-block-size]")
    assert any(b.startswith("info[lora-settings-unused]") for b in blocks)
    assert blocks[-1] == "config has errors: 1 error, 0 warnings, 1 info"


def test_options_may_follow_overrides() -> None:
    proc = run(
        "check",
        "data.max_seq_length=3063",
        "--format",
        "json",
        "model=llama-2-7b",
        "trainer.gpu.name=H200",
    )
    assert proc.returncode == 0, proc.stdout  # llama-2-7b has a 4096 block
    assert json.loads(proc.stdout)["ok"] is True


def test_unknown_key_and_wrong_type_are_findings_not_tracebacks() -> None:
    code, report = check_json("+model.n_layers=3", "trainer.micro_batch_size='4'")
    assert code == 1
    by_rule = {f["rule"]: f for f in report["findings"]}
    assert by_rule["unknown-key"]["paths"] == ["model.n_layers"]
    assert "did you mean model.n_layer?" in by_rule["unknown-key"]["hint"]
    assert by_rule["invalid-value"]["paths"] == ["trainer.micro_batch_size"]


def assert_load_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("cfgcheck: error:")
    assert needle in proc.stderr


def test_missing_config_dir(tmp_path: Path) -> None:
    assert_load_error(run("check", cwd=tmp_path), "config directory not found: conf")


def test_malformed_yaml(tmp_path: Path) -> None:
    shutil.copytree(CONF, tmp_path / "conf")
    (tmp_path / "conf" / "data" / "alpaca-tiny.yaml").write_text("max_seq_length: [1024\n")
    assert_load_error(run("check", cwd=tmp_path), "alpaca-tiny")


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("data.max_seq_length", "data.max_seq_length"),
        ("nope=1", "nope"),
        ("model=llama-9b", "model/llama-9b"),
    ],
)
def test_bad_overrides(override: str, needle: str) -> None:
    assert_load_error(run("check", override), needle)


def test_unknown_option_and_format() -> None:
    assert run("check", "--colour").returncode == 2
    assert run("check", "--format", "xml").returncode == 2


def test_config_dir_and_name_options(tmp_path: Path) -> None:
    shutil.copytree(CONF, tmp_path / "myconf")
    primary = (tmp_path / "myconf" / "config.yaml").read_text()
    (tmp_path / "myconf" / "long.yaml").write_text(
        primary.replace("model: tinyllama-1.1b", "model: llama-2-7b")
    )
    ok = run(
        "check",
        "--config-dir",
        "myconf",
        "--config-name",
        "long",
        "data.max_seq_length=4096",
        "trainer.gradient_checkpointing=true",  # llama-2-7b at 4096 fits the A100-80GB
        cwd=tmp_path,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_python_module_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cfgcheck", "check", "--format", "json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0 and json.loads(proc.stdout)["ok"] is True


def test_a_named_command_builds_only_its_parser_with_the_same_help() -> None:
    # `cfgcheck check ...` registers the check command alone (the other commands' modules stay
    # unimported on a check's path); its help and options are those of the full parser.
    import argparse

    from cfgcheck.cli import COMMANDS, _command, build_parser

    def sub_help(parser: argparse.ArgumentParser, name: str) -> str:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return str(action.choices[name].format_help())

    assert _command(["check", "--format", "json"]) == "check"
    assert _command(["--version"]) is None and _command(["chek"]) is None and _command([]) is None
    full = build_parser()
    for name in COMMANDS:
        assert sub_help(build_parser(name), name) == sub_help(full, name)
