"""A launch script that starts several training commands gets one verdict per command: each
checked on its own, the findings grouped under the command's line, the exit status the worst
(1 when one has errors, 2 when one cannot be read)."""

from __future__ import annotations

import json
from pathlib import Path

from cfgcheck.sources import check_native
from cfgcheck.sources.launcher.commands import ScriptResult
from tests.conftest import run_cfgcheck

SEED = Path(__file__).resolve().parent / "native" / "launch" / "seed"


def test_each_stage_gets_its_own_verdict() -> None:
    result = check_native(SEED / "sft_then_dpo.sh", "launch")
    assert isinstance(result, ScriptResult)
    assert [(c.line, c.verdict) for c in result.commands] == [(6, "OK"), (9, "errors")]
    second = result.commands[1].result
    assert second is not None
    (unknown,) = second.by_rule("launch-unknown-flag")
    assert unknown.paths == ("beta",)
    assert not result.ok
    # The flat list (for github / sarif style reporters) names the command of each finding.
    (flat,) = result.by_rule("launch-unknown-flag")
    assert flat.message.startswith("[command at ")
    assert "sft_then_dpo.sh:9" in flat.message


def test_the_report_groups_findings_per_command_and_exits_with_the_worst() -> None:
    proc = run_cfgcheck("check", "--from", "launch", str(SEED / "sft_then_dpo.sh"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    headers = [line for line in proc.stdout.splitlines() if line.startswith("== ")]
    assert [h.rsplit(": ", 1)[1] for h in headers] == ["OK", "errors"]
    assert ":6: python train.py" in headers[0] and ":9: python train.py" in headers[1]
    second_block = proc.stdout.split(headers[1])[1]
    assert "error[launch-unknown-flag] beta" in second_block
    assert "error[" not in proc.stdout.split(headers[1])[0]
    assert proc.stdout.rstrip().endswith("2 training commands: OK: 1, errors: 1")

    as_json = run_cfgcheck(
        "check", "--from", "launch", str(SEED / "sft_then_dpo.sh"), "--format", "json"
    )
    data = json.loads(as_json.stdout)
    assert [c["ok"] for c in data["commands"]] == [True, False]
    assert [c["line"] for c in data["commands"]] == [6, 9]


def test_a_command_that_cannot_be_read_makes_the_script_unreadable() -> None:
    result = check_native(SEED / "stage_missing.sh", "launch")
    assert isinstance(result, ScriptResult)
    first, second = result.commands
    assert first.result is not None and first.result.ok
    assert second.result is None and second.error is not None
    assert "step2/main.py is not found" in second.error
    proc = run_cfgcheck("check", "--from", "launch", str(SEED / "stage_missing.sh"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "cannot check: " in proc.stdout


def test_one_command_is_a_plain_result() -> None:
    result = check_native(SEED / "train.sh", "launch")
    assert not isinstance(result, ScriptResult)
    assert result.by_rule("ragged-batch")
