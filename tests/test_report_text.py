"""The text report: compiler-style location lines, and a closed pipe is no traceback."""

from __future__ import annotations

import subprocess

from cfgcheck.findings import Finding, Fix, Location
from cfgcheck.report.text import format_finding
from tests.conftest import COMMAND, REPO


def test_located_paths_become_file_line_lines_under_the_head() -> None:
    f = Finding(
        "seq-len-over-block-size",
        "error",
        ("data.max_seq_length", "model.block_size", "model.padded_vocab_size"),
        "the message",
        "the fix",
        {
            "data.max_seq_length": Location("conf/data/a.yaml", 3),
            "model.block_size": Location("<override model.block_size=1000>", None),
            "model.padded_vocab_size": None,
        },
    )
    assert format_finding(f).splitlines() == [
        "error[seq-len-over-block-size] data.max_seq_length, model.block_size, "
        "model.padded_vocab_size",
        "conf/data/a.yaml:3: data.max_seq_length set here",
        "<override model.block_size=1000>: model.block_size set here",
        "  the message",
        "  hint: the fix",
    ]


def test_unlocated_finding_keeps_the_plain_block() -> None:
    f = Finding("lora-needs-rank", "error", ("trainer.lora.rank",), "m", "h")
    assert format_finding(f) == "error[lora-needs-rank] trainer.lora.rank\n  m\n  hint: h"


def test_each_fix_is_one_shell_quoted_line_with_its_summary_below() -> None:
    import shlex

    f = Finding(
        "pad-token-missing",
        "error",
        ("tokenizer.pad_token",),
        "m",
        "h",
        fixes=(
            Fix(("tokenizer.pad_token='<|end_of_text|>'", "tokenizer.pad_token_id=128001"), "eos"),
            Fix(("max_length=2048",), "a flag too", ("--gpu", "H100")),
        ),
    )
    lines = format_finding(f).splitlines()
    assert lines[3:] == [
        "  fix: \"tokenizer.pad_token='<|end_of_text|>'\" tokenizer.pad_token_id=128001",
        "       eos",
        "  fix: --gpu H100 max_length=2048",
        "       a flag too",
    ]
    # the shell gives the program the overrides exactly as Hydra must read them
    assert shlex.split(lines[3].removeprefix("  fix: ")) == list(f.fixes[0].overrides)


def test_reader_closing_the_pipe_is_no_traceback() -> None:
    proc = subprocess.Popen(
        [*COMMAND, "check", "data.max_seq_length=3063"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # like `cfgcheck check | head -0`
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
