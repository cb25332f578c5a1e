"""transformers' ``examples/pytorch/language-modeling/run_clm.py`` as a launch script's entry
point (the copied upstream file, its source and commit in
tests/sources/native/launch/SOURCES.md; modelled in cfgcheck/sources/launcher/clm.py): rows
packed to ``block_size`` (no padding, no pad token needed), ``block_size`` capped at the
tokenizer's ``model_max_length``, and its dataclasses' ``__post_init__`` refusals, each
checked against the real file run on CPU."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.sources import check_native
from cfgcheck.sources.launcher.flags import read_launch
from tests.conftest import requires
from tests.model_folders import GPT2, tokenizer_files, write_config
from tests.sources.launch_corpus import PUBLISHED

CLM = PUBLISHED / "transformers_clm"
# A 2-layer GPT-2 with a 32-position learned table, and a real 100-token tokenizer whose
# tokenizer_config.json says model_max_length 2048 (GPT-2's own says 1024 = n_positions).
TINY_GPT2 = GPT2 | {"n_embd": 32, "n_head": 2, "n_layer": 2, "n_positions": 32, "vocab_size": 100}
TINY_GPT2 |= {"bos_token_id": 1, "eos_token_id": 2}
TINY_GPT2.pop("n_ctx", None)


def _tiny_gpt2(root: Path, weights: bool = False) -> Path:
    folder = root / "tiny-gpt2"
    tokenizer_files(folder, 100)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "model_max_length": 2048}))
    write_config(folder, TINY_GPT2)
    if weights:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder)).save_pretrained(folder)
    return folder


def _project(tmp: Path, block: int, weights: bool = False) -> Path:
    _tiny_gpt2(tmp, weights)
    shutil.copy(CLM / "run_clm.py", tmp / "run_clm.py")
    (tmp / "train.txt").write_text(
        "\n".join(" ".join(f"w{3 + (i * j) % 90}" for j in range(40)) for i in range(60))
    )
    (tmp / "run.sh").write_text(
        "python run_clm.py --model_name_or_path tiny-gpt2 --train_file train.txt \\\n"
        f"    --do_train --output_dir out --per_device_train_batch_size 2 --block_size {block}\n"
    )
    return tmp


def test_rows_are_packed_to_the_block_and_need_no_pad_token(tmp_path: Path) -> None:
    project = _project(tmp_path, 16)
    result = check_native(project / "run.sh", "launch")
    assert result.ok, [f.message for f in result.findings]
    assert result.config is not None
    data = result.config.data
    assert (data.padding, data.collator, data.max_seq_length) == ("do_not_pad", "packed", 16)
    native = read_launch((project / "run.sh").read_text(), "run.sh", project / "run.sh", [], {})
    assert native.entry is not None and native.entry.packs is not None
    line = native.entry.packs.line or 0
    text = (CLM / "run_clm.py").read_text().splitlines()
    assert text[line - 1].strip().startswith("def group_texts")
    assert not result.by_rule("pad-token-missing")  # GPT-2's tokenizer has no pad token


def test_block_size_is_capped_at_the_tokenizer_length(tmp_path: Path) -> None:
    project = _project(tmp_path, 4096)  # above the tokenizer's 2048: run_clm uses 2048
    result = check_native(project / "run.sh", "launch")
    assert result.config is not None and result.config.data.max_seq_length == 2048
    (over,) = result.by_rule("seq-len-over-block-size")
    assert over.severity == "error" and "index out of range in self" in over.message
    assert [fix.flags for fix in over.fixes] == [("--block_size", "32")]  # the flag run_clm reads


def test_without_the_tokenizer_files_the_length_is_unknown(tmp_path: Path) -> None:
    project = _project(tmp_path, 64)
    (project / "tiny-gpt2" / "tokenizer_config.json").unlink()
    result = check_native(project / "run.sh", "launch")
    assert not result.by_rule("seq-len-over-block-size")  # min(64, ?) may fit the positions
    (unknown,) = result.by_rule("launch-unknown-value")
    assert unknown.paths == ("block_size",)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("--model_name_or_path tiny-gpt2 --output_dir o", "Need either a dataset name"),
        ("--model_name_or_path tiny-gpt2 --train_file data.parquet --output_dir o", "csv, a json"),
        (
            "--model_name_or_path tiny-gpt2 --dataset_name w --config_overrides n_layer=2 "
            "--output_dir o",
            "--config_overrides can't be used",
        ),
    ],
)
@requires("transformers", "torch", "datasets")
def test_post_init_refusals_are_the_real_dataclasses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: str, message: str
) -> None:
    """run_clm.py's own dataclasses (the copied upstream file; ``evaluate``, which it imports
    for --do_eval only, stubbed) refuse exactly what cfgcheck refuses."""
    import transformers

    monkeypatch.setitem(sys.modules, "evaluate", types.ModuleType("evaluate"))
    spec = importlib.util.spec_from_file_location("run_clm_copy", CLM / "run_clm.py")
    assert spec is not None and spec.loader is not None
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the test's own fixture, never a user's file
    parser = transformers.HfArgumentParser(
        (module.ModelArguments, module.DataTrainingArguments, transformers.TrainingArguments)
    )
    _tiny_gpt2(tmp_path)
    (tmp_path / "run_clm.py").write_text((CLM / "run_clm.py").read_text())
    text = f"python run_clm.py {flags}\n"
    native = read_launch(text, "run.sh", tmp_path / "run.sh", [], {})
    (finding,) = [p for p in native.problems if p.rule == "launch-entry-refuses"]
    assert message in finding.message
    with pytest.raises((ValueError, AssertionError), match=message.replace("(", r"\(")):
        parser.parse_args_into_dataclasses([*flags.split(), "--use_cpu", "True"])


FLAGS = ["--model_name_or_path", "tiny-gpt2", "--train_file", "train.txt", "--do_train"]
FLAGS += ["--output_dir", "out", "--per_device_train_batch_size", "2"]
CPU = ["--use_cpu", "True", "--max_steps", "1", "--report_to", "none", "--save_strategy", "no"]


@pytest.mark.slow
@requires("transformers", "torch", "datasets", "accelerate")
def test_a_block_past_the_positions_fails_at_the_first_forward(tmp_path: Path) -> None:
    """The real run_clm.py on CPU: --block_size 64 on a 32-position GPT-2 fails in its
    position embedding; --block_size 32 trains a step. cfgcheck says so before launch."""
    project = _project(tmp_path, 64, weights=True)
    (project / "evaluate.py").write_text("")  # imported at the top, used by --do_eval only

    def run(block: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "run_clm.py", *FLAGS, "--block_size", str(block), *CPU],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(project)},
        )

    failed = run(64)
    assert failed.returncode != 0
    assert "index out of range in self" in failed.stderr, failed.stderr[-3000:]
    (finding,) = check_native(project / "run.sh", "launch").by_rule("seq-len-over-block-size")
    assert finding.severity == "error"
    (fix,) = finding.fixes
    assert fix.flags[0] == "--block_size"

    ran = run(int(fix.flags[1]))  # the fix as cfgcheck types it
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "train_runtime" in ran.stdout + ran.stderr
    fixed = check_native(project / "run.sh", "launch", ["block_size=32"])
    assert not fixed.by_rule("seq-len-over-block-size")


def test_training_from_scratch_takes_the_model_from_config_name(tmp_path: Path) -> None:
    """run_clm.py --config_name CONFIG without --model_name_or_path builds new weights from
    that config (run_clm.py 440-441): the model checked is the config's."""
    _tiny_gpt2(tmp_path)
    shutil.copy(CLM / "run_clm.py", tmp_path / "run_clm.py")
    (tmp_path / "run.sh").write_text(
        "python run_clm.py --config_name tiny-gpt2 --tokenizer_name tiny-gpt2 \\\n"
        "    --dataset_name wikitext --do_train --output_dir out --block_size 64\n"
    )
    result = check_native(tmp_path / "run.sh", "launch")
    assert result.config is not None and result.config.model.block_size == 32
    (over,) = result.by_rule("seq-len-over-block-size")
    assert [fix.flags for fix in over.fixes] == [("--block_size", "32")]
