"""A launch script that starts several training commands gets one verdict per command: each
checked on its own, the findings grouped under the command's line, the exit status the worst
(1 when one has errors, 2 when one cannot be read)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


# --- the device count: the launcher's flags and CUDA_VISIBLE_DEVICES --------------------------
@pytest.mark.parametrize(
    ("launch", "devices", "nodes"),
    [
        ("CUDA_VISIBLE_DEVICES=0,1,2 deepspeed train.py", 3, 1),
        ("export CUDA_VISIBLE_DEVICES=0,1\ndeepspeed train.py", 2, 1),
        ("CUDA_VISIBLE_DEVICES=0,1,2 deepspeed --num_gpus 1 train.py", 1, 1),  # ignored
        ("deepspeed --include localhost:0,1,2,3 train.py", 4, 1),
        ("deepspeed --include h1:0,1@h2:0,1 train.py", 2, 2),
        ("CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc_per_node gpu train.py", 2, 1),
        ("CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc_per_node 4 train.py", 4, 1),
    ],
)
def test_the_device_count_follows_the_launcher(
    tmp_path: Path, launch: str, devices: int, nodes: int
) -> None:
    (tmp_path / "tiny-llama").symlink_to(SEED / "tiny-llama")
    (tmp_path / "train.py").write_text((SEED / "train.py").read_text())
    flags = " --model_name_or_path tiny-llama --output_dir o --model_max_length 128"
    (tmp_path / "run.sh").write_text(launch + flags + " --per_device_train_batch_size 1\n")
    result = check_native(tmp_path / "run.sh", "launch")
    assert result.config is not None
    assert (result.config.trainer.devices, result.config.trainer.num_nodes) == (devices, nodes)
    assert not any(f.paths == ("launcher.num_gpus",) for f in result.findings)


def test_a_command_given_as_text_is_read_like_a_script() -> None:
    command = (
        "torchrun --nproc_per_node 2 train.py --model_name_or_path tiny-llama --output_dir o "
        "--model_max_length 128 --per_device_train_batch_size 2"
    )
    proc = run_cfgcheck("check", "--from", "launch", "--command", command, cwd=SEED)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "error[ragged-batch]" in proc.stdout
    assert "<--command>:1: trainer.micro_batch_size set here" in proc.stdout
    assert "train.py:38: data.padding set here" in proc.stdout
    empty = run_cfgcheck("check", "--from", "launch", "--command", "echo hi", cwd=SEED)
    assert empty.returncode == 2
    assert "no training command found" in empty.stderr and "Traceback" not in empty.stderr


def test_the_hook_reports_each_command_and_exits_with_the_worst() -> None:
    both = run_cfgcheck("hook", "--from", "launch", str(SEED / "sft_then_dpo.sh"))
    assert both.returncode == 1, both.stdout + both.stderr
    assert "2 training commands: OK: 1, errors: 1" in both.stdout
    missing = run_cfgcheck("hook", "--from", "launch", str(SEED / "stage_missing.sh"))
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert "cannot check: " in missing.stdout and "Traceback" not in missing.stderr


def test_script_arguments_after_a_double_dash(tmp_path: Path) -> None:
    (tmp_path / "tiny-llama").symlink_to(SEED / "tiny-llama")
    (tmp_path / "train.py").write_text((SEED / "train.py").read_text())
    (tmp_path / "run.sh").write_text(
        "python train.py --model_name_or_path $1 --output_dir o --model_max_length 128 "
        "--per_device_train_batch_size $2\n"
    )
    run = str(tmp_path / "run.sh")
    given = run_cfgcheck(
        "check", "--from", "launch", run, "--cwd", str(tmp_path), "--", "tiny-llama", "2"
    )
    assert given.returncode == 1, given.stdout + given.stderr
    assert "error[ragged-batch]" in given.stdout  # $2 = 2: batches of unequal samples
    missing = run_cfgcheck("check", "--from", "launch", run, "--cwd", str(tmp_path))
    assert missing.returncode == 2
    assert "--model_name_or_path is $1" in missing.stderr
