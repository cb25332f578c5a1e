"""User text never writes a line of cfgcheck's output: a data path, a changed file's name or a
value holding a newline and ``::error::`` (a GitHub Actions workflow command) or an ANSI escape
is shown escaped, in every format and on stderr (cfgcheck.report.escape)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cfgcheck.report.escape import printable
from tests.conftest import run_cfgcheck

INJECTED = "::error::pwned"


def injected_lines(text: str) -> list[str]:
    """Lines whose start was written by the input (a workflow command, or anything past a
    newline the input carried)."""
    return [line for line in text.splitlines() if line.lstrip().startswith(INJECTED)]


def test_printable_escapes_every_line_break_and_control() -> None:
    assert printable("a\nb\rc\x1b[31md\u2028e\x00f\tg") == "a\\nb\\rc\\x1b[31md\\u2028e\\x00f\tg"
    assert printable("plain: ü, 中文") == "plain: ü, 中文"


@pytest.fixture
def evil_data(tmp_path: Path) -> Path:
    path = tmp_path / f"a\n{INJECTED}.jsonl"
    path.write_text('{"text": "hi"}\n', "utf-8")
    return path


@pytest.mark.parametrize("fmt", ["text", "github", "json"])
def test_a_data_path_with_a_newline_stays_on_its_line(evil_data: Path, fmt: str) -> None:
    proc = run_cfgcheck(
        "check",
        "--scan-data",
        "--format",
        fmt,
        "tokenizer=demo-bpe",
        f"data.paths=[{json.dumps(str(evil_data))}]",
    )
    assert "pwned" in proc.stdout + proc.stderr  # the path is reported...
    assert not injected_lines(proc.stdout) and not injected_lines(proc.stderr)  # ...escaped


def test_cfgcheck_data_errors_are_one_line(evil_data: Path) -> None:
    proc = run_cfgcheck(
        "data",
        "tokenizer=demo-bpe",
        f"data.paths=[{json.dumps(str(evil_data))}]",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "pwned" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not injected_lines(proc.stderr)


@pytest.mark.parametrize("fmt", ["text", "github"])
def test_a_changed_file_name_with_a_newline_stays_on_its_line(fmt: str) -> None:
    proc = run_cfgcheck("hook", "--format", fmt, f"conf/model/x\n{INJECTED}.yaml")
    assert "pwned" in proc.stdout + proc.stderr
    assert not injected_lines(proc.stdout) and not injected_lines(proc.stderr)
