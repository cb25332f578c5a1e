"""``--from launch``: a launch script and its entry point, read statically (never run).

The copied published scripts and entry points, with their source and commit, are listed in
tests/sources/native/launch/SOURCES.md.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources import check_native
from cfgcheck.sources.launcher.command import find_launches
from cfgcheck.sources.launcher.commands import ScriptResult
from cfgcheck.sources.launcher.flags import read_launch
from cfgcheck.sources.launcher.shell import read_script
from tests.conftest import requires, run_cfgcheck
from tests.model_folders import LLAMA2_7B, hub_cache
from tests.sources.support import located_at

LAUNCH = Path(__file__).resolve().parent / "native" / "launch"
SEED = LAUNCH / "seed"
PUBLISHED = LAUNCH / "published"


def line_with(path: Path, needle: str) -> int:
    """The first line that starts with ``needle`` (indentation aside)."""
    lines = enumerate(path.read_text().splitlines(), 1)
    return next(i for i, line in lines if line.strip().startswith(needle))


# --- the shell, read as far as it assigns ------------------------------------------------------
def test_continuations_variables_and_defaults_are_read_with_their_lines() -> None:
    text = (
        'GPUS=4\nMODEL="org/name"  # a comment\nexport DS=ds.json\n'
        "torchrun --nproc_per_node=$GPUS train.py \\\n"
        "    --model_name_or_path ${MODEL} \\\n"
        '    --data_path "a b.json" --seed ${SEED:-7} --deepspeed $DS\n'
    )
    (command,) = read_script(text, "t.sh").commands
    words = {w.text: w.line for w in command.words}
    assert words["--nproc_per_node=4"] == 4
    assert words["org/name"] == 5
    assert words["a b.json"] == 6
    assert words["7"] == 6
    assert words["ds.json"] == 6
    assert all(w.unknown is None for w in command.words)


def test_command_output_and_unset_variables_are_unknown_values() -> None:
    text = "N=$(nvidia-smi -L | wc -l)\ntorchrun --nproc_per_node $N t.py --out $OUT\n"
    (command,) = read_script(text, "t.sh").commands
    unknown = {w.text: w.unknown for w in command.words if w.unknown}
    assert "nvidia-smi" in str(unknown["$(...)"])
    assert unknown["$OUT"] == "$OUT, which the script never sets"


def test_an_argument_loop_keeps_the_default_and_positional_args_fill_in() -> None:
    text = (
        'MODEL="Qwen/Qwen-7B"\nwhile [[ "$1" != "" ]]; do\n  case $1 in\n'
        "    -m | --model )\n      shift\n      MODEL=$1\n      ;;\n  esac\n  shift\ndone\n"
        'ARGS="--nproc_per_node 2 --nnodes 1"\n'
        "torchrun $ARGS finetune.py --model_name_or_path $MODEL --output_dir ${1:-out}\n"
    )
    (launch,) = find_launches(read_script(text, "t.sh"))
    assert launch.launcher_flags["nproc_per_node"].value == "2"
    assert launch.entry == "finetune.py"
    flags = {f.name: f.value for f in launch.flags}
    assert flags == {"model_name_or_path": "Qwen/Qwen-7B", "output_dir": "out"}
    # The loop shifts every argument, as bash does: "run1" matches no arm and is shifted
    # away, so ${1:-out} after the loop is "out"; "-m X" sets MODEL.
    (given,) = find_launches(read_script(text, "t.sh", ["run1"]))
    assert {f.name: f.value for f in given.flags}["output_dir"] == "out"
    (model,) = find_launches(read_script(text, "t.sh", ["-m", "org/x"]))
    assert {f.name: f.value for f in model.flags}["model_name_or_path"] == "org/x"


@pytest.mark.parametrize(
    ("script", "entry", "message"),
    [
        ("echo hello\n", None, "no training command found"),
        ('torchrun train.py --x "open\n', None, "a quote opened here is never closed"),
        ("torchrun missing.py --x 1\n", None, "the entry point missing.py is not found"),
        ("python bad.py --x 1\n", "def (:\n", "invalid Python"),
        ("python ../../x.py\n", None, "lies outside the project"),
    ],
)
def test_malformed_input_is_one_line_and_exit_2(
    tmp_path: Path, script: str, entry: str | None, message: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "run.sh").write_text(script)
    (tmp_path / "x.py").write_text("import os\nos.system('touch executed')\n")
    if entry is not None:
        (project / "bad.py").write_text(entry)
    with pytest.raises(ConfigLoadError, match=message):
        check_native(project / "run.sh", "launch")
    proc = run_cfgcheck("check", "--from", "launch", str(project / "run.sh"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (project / "executed").exists() and not (tmp_path / "executed").exists()


# --- the seed failure, found in the entry point's code ---------------------------------------
def test_seed_is_found_at_the_tokenizer_call_and_the_batch_flag() -> None:
    result = check_native(SEED / "train.sh", "launch")
    (finding,) = result.by_rule("ragged-batch")
    located_at(
        finding, "data.padding", SEED / "train.py", line_with(SEED / "train.py", "padding=True")
    )
    located_at(
        finding,
        "data.collator",
        SEED / "train.py",
        line_with(SEED / "train.py", "trainer = Trainer("),
    )
    batch = line_with(SEED / "train.sh", "--per_device_train_batch_size")
    located_at(finding, "trainer.micro_batch_size", SEED / "train.sh", batch)
    assert "__getitem__" in finding.message
    assert [fix.shell for fix in finding.fixes] == [
        "--per_device_train_batch_size 1 --gradient_accumulation_steps 32"
    ]
    assert 'padding="max_length"' in finding.hint


def test_a_fixed_flag_clears_the_seed() -> None:
    result = check_native(SEED / "train.sh", "launch", ["per_device_train_batch_size=1"])
    assert not result.by_rule("ragged-batch")
    assert result.ok


def test_flags_against_the_parser_with_did_you_mean_and_renamed() -> None:
    result = check_native(
        SEED / "planted.sh", "launch", ["deepspeed=missing.json", "gradient_acumulation_steps=2"]
    )
    (unknown,) = result.by_rule("launch-unknown-flag")
    assert set(unknown.paths) == {"evaluation_strategy", "gradient_acumulation_steps"}
    assert "--eval_strategy: refused since transformers 4.51.3 (4.46.3 declares it)" in unknown.hint
    assert "did you mean --gradient_accumulation_steps" in unknown.hint
    located_at(
        unknown,
        "evaluation_strategy",
        SEED / "planted.sh",
        line_with(SEED / "planted.sh", "--eval"),
    )
    (value,) = result.by_rule("launch-unknown-value")
    assert "$DATA" in value.message
    assert result.by_rule("launch-deepspeed-missing")


def test_bool_flags_with_and_without_a_value() -> None:
    text = (SEED / "train.sh").read_text()
    native = read_launch(
        text.replace("--gradient_checkpointing True", "--gradient_checkpointing"),
        "train.sh",
        SEED / "train.sh",
        ["bf16=false"],
        {},
    )
    assert native.data["gradient_checkpointing"] is True
    assert native.data["bf16"] is False  # the override comes last and wins, as in argparse
    assert native.data["per_device_train_batch_size"] == 2
    assert native.data["learning_rate"] == 2e-5


@requires("transformers", "torch")
def test_the_real_hf_argument_parser_refuses_what_cfgcheck_refuses() -> None:
    """The fixture's own dataclasses, parsed by transformers' HfArgumentParser."""
    import transformers

    spec = importlib.util.spec_from_file_location("launch_seed_train", SEED / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the test's own fixture, never a user's file
    parser = transformers.HfArgumentParser(
        (module.ModelArguments, module.DataArguments, module.TrainingArguments)
    )
    native = read_launch(
        (SEED / "planted.sh").read_text(), "planted.sh", SEED / "planted.sh", [], {}
    )
    assert native.launch is not None
    argv = [w for f in native.launch.flags for w in [f"--{f.name}", f.value or ""]]
    with pytest.raises(ValueError, match="not used by the HfArgumentParser") as e:
        parser.parse_args_into_dataclasses(argv)
    (finding,) = [p for p in native.problems if p.rule == "launch-unknown-flag"]
    assert all(f"--{name}" in str(e.value) for name in finding.paths)
    fixed = [a for a in argv if a not in ("--evaluation_strategy", "steps")]
    _model, _data, args = parser.parse_args_into_dataclasses(fixed)
    assert args.per_device_train_batch_size == native.data["per_device_train_batch_size"]
    assert args.model_max_length == native.data["model_max_length"]


# --- published scripts ---------------------------------------------------------------------
@pytest.fixture
def vicuna_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf-cache"
    hub_cache(cache, "lmsys/vicuna-7b-v1.5", LLAMA2_7B, "a" * 40)  # a Llama-2-7B config
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def test_fastchat_lora_gets_a_verdict(vicuna_cache: Path) -> None:
    script = PUBLISHED / "fastchat" / "scripts" / "train_lora.sh"
    result = check_native(script, "launch", gpu="A100-80GB")
    assert {f.rule for f in result.errors} == {"launch-unknown-flag"}
    (unknown,) = result.by_rule("launch-unknown-flag")
    assert set(unknown.paths) == {"evaluation_strategy", "warmup_ratio"}  # gone in 5.x
    assert {f.paths[0] for f in result.by_rule("launch-unknown-value")} == {
        "data_path",
        "deepspeed",
        "launcher.num_gpus",  # deepspeed without --num_gpus: every GPU of the machine
    }
    assert result.config is not None
    assert result.config.trainer.finetuning == "lora"  # train_lora.py calls get_peft_model


def test_fastchat_full_finetune_gets_a_verdict(vicuna_cache: Path) -> None:
    script = PUBLISHED / "fastchat" / "scripts" / "train_vicuna_7b.sh"
    result = check_native(script, "launch", ["model_name_or_path=lmsys/vicuna-7b-v1.5"])
    assert {f.rule for f in result.errors} == {"launch-unknown-flag"}
    assert not result.by_rule("ragged-batch")  # FastChat pads to model_max_length
    assert result.config is not None
    assert result.config.data.padding == "max_length"
    assert result.config.trainer.devices == 4
    assert result.config.trainer.strategy == "fsdp"


@pytest.mark.parametrize(
    "name",
    [
        "finetune_ds.sh",
        "finetune_lora_ds.sh",
        "finetune_lora_single_gpu.sh",
        "finetune_qlora_ds.sh",
        "finetune_qlora_single_gpu.sh",
    ],
)
def test_qwen_scripts_parse_against_finetune_py(name: str) -> None:
    script = PUBLISHED / "qwen" / "finetune" / name
    native = read_launch(script.read_text(), name, script, [], {})
    assert native.entry is not None and native.entry.parser == "HfArgumentParser"
    (unknown,) = [p for p in native.problems if p.rule == "launch-unknown-flag"]
    assert set(unknown.paths) == {"evaluation_strategy", "warmup_ratio"}
    assert str(native.data["model_name_or_path"]).startswith("Qwen/Qwen-7B")
    assert ("lora" in name) == (native.data.get("use_lora") is True)
    assert ("qlora" in name) == (native.data.get("q_lora") is True)
    # The model is not in this machine's cache: one line naming it and the script's line.
    with pytest.raises(ConfigLoadError, match=f"{name}:[0-9]+: model_name_or_path=Qwen/"):
        check_native(script, "launch")


def test_stanford_alpaca_readme_command_parses_against_train_py() -> None:
    script = PUBLISHED / "alpaca" / "train_opt.sh"
    native = read_launch(script.read_text(), "train_opt.sh", script, [], {})
    assert native.launch is not None and native.launch.launcher_flags["nproc_per_node"].value == "4"
    (unknown,) = [p for p in native.problems if p.rule == "launch-unknown-flag"]
    assert set(unknown.paths) == {
        "evaluation_strategy",
        "warmup_ratio",
        "fsdp_transformer_layer_cls_to_wrap",
    }
    assert native.data["fsdp"] == "full_shard auto_wrap"
    assert native.entry is not None and native.entry.collator is not None
    assert native.entry.collator[0] == "padded"  # its own collator pads with pad_sequence
    with pytest.raises(ConfigLoadError, match=r"train_opt\.sh:3: model_name_or_path=facebook/opt"):
        check_native(script, "launch")


def test_argparse_entry_and_python_module(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "train.py").write_text(
        "import argparse\np = argparse.ArgumentParser()\n"
        "p.add_argument('--batch-size', type=int, default=8)\n"
        "p.add_argument('--bf16', action='store_true')\nargs = p.parse_args()\n"
    )
    (tmp_path / "run.sh").write_text("python -m pkg.train --batch-size 4 --bf16 --lr 1e-4\n")
    native = read_launch((tmp_path / "run.sh").read_text(), "run.sh", tmp_path / "run.sh", [], {})
    assert native.entry is not None and native.entry.parser == "argparse"
    assert native.data["batch_size"] == 4 and native.data["bf16"] is True
    (unknown,) = [p for p in native.problems if p.rule == "launch-unknown-flag"]
    assert unknown.paths == ("lr",)


@requires("transformers", "torch")
def test_fp16_with_bf16_is_refused_as_training_arguments_refuses_it(tmp_path: Path) -> None:
    import transformers

    result = check_native(SEED / "train.sh", "launch", ["fp16=True"])
    (finding,) = result.by_rule("launch-fp16-and-bf16")
    with pytest.raises(ValueError, match="At most one of fp16 and bf16") as e:
        # use_cpu: on a CPU machine bf16's own device check, which runs first, passes
        transformers.TrainingArguments(output_dir=str(tmp_path), fp16=True, bf16=True, use_cpu=True)
    assert str(e.value).split(":")[0] in finding.message
    assert not check_native(SEED / "train.sh", "launch", ["fp16=True", "bf16=False"]).by_rule(
        "launch-fp16-and-bf16"
    )


def test_the_hook_skips_scripts_that_launch_no_training(tmp_path: Path) -> None:
    (tmp_path / "build.sh").write_text("make all\n")
    (tmp_path / "notes.txt").write_text("torchrun train.py\n")
    proc = run_cfgcheck(
        "hook", "--from", "launch", str(tmp_path / "build.sh"), str(tmp_path / "notes.txt")
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 launch config(s) checked: OK" in proc.stdout
    proc = run_cfgcheck("hook", "--from", "launch", str(SEED / "train.sh"))
    assert proc.returncode == 1 and "ragged-batch" in proc.stdout


def test_an_unknown_process_count_is_a_warning_and_no_guess(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(SEED / "tiny-llama", tmp_path / "tiny-llama")
    shutil.copy(SEED / "train.py", tmp_path / "train.py")
    (tmp_path / "run.sh").write_text(
        "GPUS=$(nvidia-smi -L | wc -l)\n"
        "torchrun --nproc_per_node $GPUS train.py --model_name_or_path tiny-llama \\\n"
        "  --output_dir out --per_device_train_batch_size 1 --model_max_length 128\n"
    )
    result = check_native(tmp_path / "run.sh", "launch")
    (unknown,) = result.by_rule("launch-unknown-value")
    assert "nvidia-smi" in unknown.message
    located_at(unknown, unknown.paths[0], tmp_path / "run.sh", 2)
    assert not [f for f in result.findings if "trainer.devices" in f.paths]
    assert result.ok


def test_fastchat_scales_rope_past_the_context_and_the_seed_does_not(vicuna_cache: Path) -> None:
    script = PUBLISHED / "fastchat" / "scripts" / "train_vicuna_7b.sh"
    longer = ["model_name_or_path=lmsys/vicuna-7b-v1.5", "model_max_length=8192"]
    (scaled,) = check_native(script, "launch", longer).by_rule("seq-len-over-block-size")
    assert scaled.severity == "warning"
    assert "config.rope_scaling" in scaled.message
    (crash,) = check_native(SEED / "train.sh", "launch", ["model_max_length=8192"]).by_rule(
        "seq-len-over-block-size"
    )
    assert crash.severity == "error"  # the seed's train.py sets no RoPE scaling


def test_accelerate_launch_reads_its_config_file(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(SEED / "tiny-llama", tmp_path / "tiny-llama")
    shutil.copy(SEED / "train.py", tmp_path / "train.py")
    (tmp_path / "zero3.yaml").write_text(
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
        "num_machines: 1\nnum_processes: 2\n"
    )
    (tmp_path / "run.sh").write_text(
        "accelerate launch --config_file zero3.yaml train.py --model_name_or_path tiny-llama \\\n"
        "  --output_dir out --per_device_train_batch_size 1 --model_max_length 128\n"
    )
    result = check_native(tmp_path / "run.sh", "launch")
    assert result.config is not None
    assert (result.config.trainer.devices, result.config.trainer.strategy) == (2, "zero3")


def test_a_script_with_several_commands_gets_a_verdict_per_command() -> None:
    result = check_native(SEED / "two_stages.sh", "launch")
    assert isinstance(result, ScriptResult)
    assert [c.line for c in result.commands] == [4, 7]
    first, second = (c.result for c in result.commands)
    assert first is not None and second is not None
    assert {f.paths[0] for f in first.by_rule("launch-unknown-value")} == {
        "output_dir",
        "learning_rate",
    }
    assert not second.by_rule("launch-unknown-value")
    assert result.ok  # LR is unknown (a loop variable): a warning, never a guess


def test_lora_targets_are_checked_against_the_model_and_fixed_as_flags(
    vicuna_cache: Path,
) -> None:
    script = PUBLISHED / "fastchat" / "scripts" / "train_lora.sh"
    result = check_native(script, "launch", ["lora_target_modules=q_proj wq"], gpu="A100-80GB")
    (finding,) = result.by_rule("lora-target-unknown")
    assert "wq" in finding.message
    assert any(fix.flags[:2] == ("--lora_target_modules", "q_proj") for fix in finding.fixes)


def test_an_unknown_lora_rank_drops_the_memory_verdict_and_nothing_else(
    vicuna_cache: Path, tmp_path: Path
) -> None:
    """The memory estimate rests on the LoRA rank and targets (the adapter's weights, their
    gradients and optimizer state): when the script computes the rank, the memory verdict is
    left out, as for ``--from python``; every other finding stays."""
    text = (PUBLISHED / "fastchat" / "scripts" / "train_lora.sh").read_text()
    text = text.replace("deepspeed fastchat", "deepspeed --num_gpus 1 fastchat")  # one GPU
    (tmp_path / "known.sh").write_text(text)
    (tmp_path / "unknown.sh").write_text(text.replace("--lora_r 8", "--lora_r $RANK"))
    opts = {"cwd": str(PUBLISHED / "fastchat")}
    known = check_native(tmp_path / "known.sh", "launch", gpu="8", options=opts)
    unknown = check_native(tmp_path / "unknown.sh", "launch", gpu="8", options=opts)
    assert [f.severity for f in known.by_rule("gpu-memory")] == ["error"]
    assert {f.rule for f in known.findings} - {f.rule for f in unknown.findings} == {"gpu-memory"}
    assert {f.rule for f in unknown.findings} <= {f.rule for f in known.findings}
    assert "lora_r" in {f.paths[0] for f in unknown.by_rule("launch-unknown-value")}
