"""A launch script's own arguments, given after ``--`` as typed (``-m MODEL``, ``--use_lora
True``): the argument loops published scripts use are followed over them (never run), and
``"$@"`` passes the rest to the entry point, whose parser checks them.

Each shape is compared with what bash itself does with the same script and arguments: the
test runs its own snippets (and Qwen's published finetune_lora_single_gpu.sh) under bash with
the launchers replaced by a function that prints its arguments; cfgcheck never runs them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources import check_native
from cfgcheck.sources.launcher.command import find_launches
from cfgcheck.sources.launcher.flags import read_launch
from cfgcheck.sources.launcher.shell import read_script
from tests.conftest import run_cfgcheck

LAUNCH = Path(__file__).resolve().parent / "native" / "launch"
SEED = LAUNCH / "seed"
QWEN = LAUNCH / "published" / "qwen" / "finetune" / "finetune_lora_single_gpu.sh"
STUBS = "".join(
    f'{name}() {{ printf "%s\\n" "$@" > "$OUT"; }}; '
    for name in ("python", "python3", "torchrun", "deepspeed")
)

# The shapes: while/case over $1 with `shift 2`, and a `*) break` that leaves the rest to "$@".
SHIFT_TWO = """MODEL=org/base
LR=2e-5
while [[ $# -gt 0 ]]; do
  case "$1" in
    -m|--model) MODEL="$2"; shift 2 ;;
    --lr) LR="$2"; shift 2 ;;
    *) break ;;
  esac
done
python train.py --model_name_or_path $MODEL --learning_rate $LR --output_dir out "$@"
"""
# --flag=value in a for loop over "$@" (the loop does not shift: "$@" is unchanged after it).
EQUALS = """MODEL=org/base
for arg in "$@"; do
  case $arg in
    --model=*) MODEL="${arg#*=}" ;;
    --batch=*) BATCH="${arg#*=}" ;;
  esac
done
torchrun --nproc_per_node 2 train.py --model_name_or_path $MODEL \\
    --per_device_train_batch_size ${BATCH:-4} --output_dir out
"""
# An arm this reader does not follow (an array append).
ARRAY = """MODEL=org/base
POSITIONAL=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) MODEL="$2"; shift; shift ;;
    *) POSITIONAL+=("$1"); shift ;;
  esac
done
python train.py --model_name_or_path $MODEL --output_dir out "$@"
"""
# A top-level shift after reading $1, then the rest passed through.
SHIFTED = """MODEL=$1
shift
python train.py --model_name_or_path $MODEL --output_dir out "$@"
"""


def bash_argv(tmp: Path, script: str, args: list[str]) -> list[str] | None:
    """The arguments bash hands the launcher (None: it never launched)."""
    path, out = tmp / "script.sh", tmp / "argv.txt"
    path.write_text(script)
    out.unlink(missing_ok=True)
    subprocess.run(
        ["bash", "-c", STUBS + 'source "$0" "$@"', str(path), *args],
        cwd=tmp,
        env={"PATH": "/usr/bin:/bin", "OUT": str(out)},
        capture_output=True,
        timeout=30,
        check=False,
    )
    return out.read_text().splitlines() if out.exists() else None


def cfgcheck_argv(script: str, args: list[str]) -> list[str]:
    (launch,) = find_launches(read_script(script, "script.sh", args))
    return [w.text for w in launch.command.words[1:]]


@pytest.mark.parametrize(
    ("script", "args"),
    [
        (SHIFT_TWO, []),
        (SHIFT_TWO, ["--model", "org/x", "--lr", "1e-4"]),
        (SHIFT_TWO, ["-m", "org/x", "--learning_rate", "1e-4", "--bf16", "True"]),
        (EQUALS, ["--model=org/x", "--batch=2"]),
        (EQUALS, ["--batch=1"]),
        (SHIFTED, ["org/x", "--lora_r", "8"]),
        (QWEN.read_text(), ["-m", "org/x", "-d", "data.json"]),
        (QWEN.read_text(), ["--data", "d.json"]),
    ],
)
def test_argument_loops_give_what_bash_gives(tmp_path: Path, script: str, args: list[str]) -> None:
    expected = bash_argv(tmp_path, script, args)
    assert expected is not None
    assert cfgcheck_argv(script, args) == expected


def test_an_arm_that_exits_is_one_line(tmp_path: Path) -> None:
    assert bash_argv(tmp_path, QWEN.read_text(), ["--epochs", "3"]) is None  # exit 1
    with pytest.raises(ConfigLoadError, match=r"finetune_lora_single_gpu\.sh:31: .* exits here"):
        read_launch(QWEN.read_text(), QWEN.name, QWEN, ["--", "--epochs", "3"], {})


def test_an_unfollowed_loop_is_an_unknown_value_naming_the_variable() -> None:
    script = read_script(ARRAY, "run.sh", ["--model", "org/x", "--lr", "1"])
    (launch,) = find_launches(script)
    flags = {f.name: f for f in launch.flags}
    word = flags["model_name_or_path"].value_word
    assert word is not None and word.unknown is not None
    assert word.unknown.startswith("$MODEL, set by the argument loop at line 3")
    assert "POSITIONAL+=" in word.unknown
    assert "--lr" not in [w.text for w in launch.command.words]  # "$@" is unknown too
    # Without arguments the loop's body never runs: the value before it stands.
    (plain,) = find_launches(read_script(ARRAY, "run.sh"))
    assert {f.name: f.value for f in plain.flags}["model_name_or_path"] == "org/base"


def _project(tmp: Path, script: str) -> Path:
    shutil.copy(SEED / "train.py", tmp / "train.py")
    (tmp / "tiny-llama").symlink_to(SEED / "tiny-llama")
    (tmp / "run.sh").write_text(script)
    return tmp / "run.sh"


def test_passed_flags_are_parsed_and_located_at_their_argument(tmp_path: Path) -> None:
    run = _project(tmp_path, SHIFT_TWO)
    given = ["--", "-m", "tiny-llama", "--lr", "1e-4", "--per_device_train_batch_size"]
    given += ["1", "--evaluation_strategy", "steps"]
    native = read_launch(run.read_text(), "run.sh", run, given, {})
    assert native.data["model_name_or_path"] == "tiny-llama"
    assert native.data["learning_rate"] == 1e-4
    assert native.data["per_device_train_batch_size"] == 1
    result = check_native(run, "launch", given, options={"transformers_version": "4.51.3"})
    (refused,) = result.by_rule("launch-unknown-flag")
    assert refused.paths == ("evaluation_strategy",)
    where = refused.locations["evaluation_strategy"]
    assert where is not None and where.file == "<script argument 7: --evaluation_strategy>"


def test_an_unknown_pass_through_is_a_warning(tmp_path: Path) -> None:
    run = _project(tmp_path, ARRAY)
    native = read_launch(run.read_text(), "run.sh", run, ["--", "--lr", "1"], {})
    (passed,) = [p for p in native.problems if p.paths == ("$@",)]
    assert passed.rule == "launch-unknown-value" and "not checked" in passed.message


def test_the_command_line_keeps_the_arguments_after_the_double_dash(tmp_path: Path) -> None:
    run = _project(tmp_path, SHIFT_TWO)
    proc = run_cfgcheck(
        "check",
        "--from",
        "launch",
        str(run),
        "--",
        "-m",
        "tiny-llama",
        "--model_max_length",
        "99999",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "seq-len-over-block-size" in proc.stdout
    assert "<script argument 3: --model_max_length>" in proc.stdout
    assert "fix: --model_max_length 128" in proc.stdout  # appended after "$@": the last wins


SHELL = LAUNCH / "published" / "shell"


@pytest.mark.parametrize(
    ("name", "args"),
    [
        # cheneydon/efficient-bert dist_finetune.sh: NUM_PROC=$1; shift; ... "$@"
        ("dist_finetune.sh", ["8", "--task", "cola", "--lr", "5e-5"]),
        ("dist_finetune.sh", ["2"]),
        # lillian039/In-context-Reasoning-with-Errors run.sh: a for loop over "$@" that shifts
        # and breaks, the arguments kept in a variable before it
        ("run_model_arg.sh", ["--model", "llama3", "--shots", "4"]),
        ("run_model_arg.sh", ["--shots", "4"]),
    ],
)
def test_published_argument_shapes_give_what_bash_gives(
    tmp_path: Path, name: str, args: list[str]
) -> None:
    text = (SHELL / name).read_text()
    expected = bash_argv(tmp_path, text, args)
    assert expected is not None
    launches = find_launches(read_script(text, name, args))
    assert expected in [[w.text for w in launch.command.words[1:]] for launch in launches]


def test_a_slice_of_the_arguments(tmp_path: Path) -> None:
    script = "GPUS=$1\ntorchrun --nproc_per_node $GPUS finetune.py --config $2 ${@:3}\n"
    args = ["4", "c.yaml", "--lr", "1e-4"]
    assert cfgcheck_argv(script, args) == bash_argv(tmp_path, script, args)


# getopts, and the shift past the options it read.
GETOPTS = """MODEL=org/base
BATCH=4
while getopts "m:b:v" opt; do
  case $opt in
    m) MODEL=$OPTARG ;;
    b) BATCH="$OPTARG" ;;
    v) echo verbose ;;
  esac
done
shift $((OPTIND-1))
torchrun --nproc_per_node 2 train.py --model_name_or_path $MODEL \\
    --per_device_train_batch_size $BATCH "$@"
"""


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "org/x", "-b2", "--lr", "1"],
        ["-v", "-b", "8", "--", "-m", "y"],
        [],
        ["--bf16", "True"],
    ],
)
def test_getopts_gives_what_bash_gives(tmp_path: Path, args: list[str]) -> None:
    expected = bash_argv(tmp_path, GETOPTS, args)
    assert expected is not None
    assert cfgcheck_argv(GETOPTS, args) == expected


def test_a_for_loop_that_does_not_shift_keeps_the_arguments(tmp_path: Path) -> None:
    script = 'for a in "$@"; do\n  echo "$a" >> seen.txt\ndone\npython train.py "$@"\n'
    args = ["--lr", "1", "--bf16", "True"]
    assert cfgcheck_argv(script, args) == bash_argv(tmp_path, script, args)


def test_a_loop_that_launches_per_argument_is_read_as_written() -> None:
    script = (
        'for data in "$@"; do\n  torchrun --nproc_per_node 2 train.py --data_path $data\ndone\n'
    )
    (launch,) = find_launches(read_script(script, "run.sh", ["a.json", "b.json"]))
    (flag,) = launch.flags
    assert flag.name == "data_path" and flag.value_word is not None
    assert flag.value_word.unknown is not None and "loop variable" in flag.value_word.unknown
