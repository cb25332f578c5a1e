"""``--format github``: GitHub Actions annotations with escaping and source locations."""

from __future__ import annotations

import io
import re
import subprocess

from cfgcheck.findings import CheckResult, Finding, Location
from cfgcheck.report import formats, get_reporter
from cfgcheck.report.github import annotation, escape_data, escape_property
from tests.conftest import COMMAND, REPO


def test_escaping_follows_the_actions_toolkit() -> None:
    assert escape_data("100% a\r\nb: c, d") == "100%25 a%0D%0Ab: c, d"
    assert escape_property("conf/a,b:c%\n") == "conf/a%2Cb%3Ac%25%0A"


def test_annotation_uses_the_first_file_location_and_severity() -> None:
    f = Finding(
        "seq-len-over-block-size",
        "error",
        ("data.max_seq_length", "model.block_size"),
        "data.max_seq_length=3063 is above model.block_size=2048",
        "set data.max_seq_length<=2048",
        {
            "data.max_seq_length": Location("<override data.max_seq_length=3063>", None),
            "model.block_size": Location("conf/model/tinyllama-1.1b.yaml", 4),
        },
    )
    line = annotation(f)
    head, message = line.split("::", 2)[1:]
    assert head == (
        "error file=conf/model/tinyllama-1.1b.yaml,line=4,title=cfgcheck seq-len-over-block-size"
    )
    assert message.split("%0A") == [
        "data.max_seq_length=3063 is above model.block_size=2048",
        "data.max_seq_length set at <override data.max_seq_length=3063>",
        "model.block_size set at conf/model/tinyllama-1.1b.yaml:4",
        "hint: set data.max_seq_length<=2048",
    ]


def test_each_fix_is_its_own_pasteable_line() -> None:
    from cfgcheck.findings import Fix

    f = Finding(
        "seq-len-over-block-size",
        "error",
        ("data.max_seq_length",),
        "m",
        "h",
        fixes=(Fix(("tokenizer.pad_token='<|end_of_text|>'",), "set the pad token"),),
    )
    assert annotation(f).split("::", 2)[2].split("%0A")[-2:] == [
        "hint: h",
        "fix: \"tokenizer.pad_token='<|end_of_text|>'\" (set the pad token)",
    ]


def test_unlocated_findings_and_other_severities() -> None:
    warning = Finding("ignore-index-is-token", "warning", ("data.ignore_index",), "m", "h")
    info = Finding("lora-settings-unused", "info", ("trainer.lora.rank",), "m", "h")
    assert annotation(warning) == "::warning title=cfgcheck ignore-index-is-token::m%0Ahint: h"
    assert annotation(info).startswith("::notice title=cfgcheck lora-settings-unused::")


def test_registered_and_ends_with_a_summary() -> None:
    assert "github" in formats()
    out = io.StringIO()
    get_reporter("github")(CheckResult([]), out)
    assert out.getvalue() == "config OK: 0 errors, 0 warnings, 0 infos\n"


def test_cli_prints_annotations_on_the_shipped_conf() -> None:
    proc = subprocess.run(
        [
            *COMMAND,
            "check",
            "--format",
            "github",
            "model.block_size=1000",
            "trainer.finetuning=full",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    pattern = re.compile(
        r"^::(error|warning|notice) (file=[^,]+,line=\d+,)?title=cfgcheck [a-z-]+::"
    )
    assert all(pattern.match(line) for line in lines[:-1]), lines
    data = (REPO / "conf" / "data" / "alpaca-tiny.yaml").read_text().splitlines()
    line = 1 + next(i for i, text in enumerate(data) if text.startswith("max_seq_length:"))
    assert lines[0].startswith(
        f"::error file=conf/data/alpaca-tiny.yaml,line={line},"
        "title=cfgcheck seq-len-over-block-size::"
    )
    assert any(line.startswith("::notice file=conf/trainer/lora.yaml,") for line in lines)
    assert lines[-1] == "config has errors: 1 error, 0 warnings, 1 info"
