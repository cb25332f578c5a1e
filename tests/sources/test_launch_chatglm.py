"""ChatGLM, Baichuan2 and Yi launch scripts (tests/sources/native/launch/published/, sources
and commits in its SOURCES.md): their flags parse against their entry points' own parsers, as
the real ``HfArgumentParser`` parses them, and a model only its repository's code builds is
the one line that names it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources.launcher.commands import check_text
from cfgcheck.sources.launcher.flags import read_launch
from tests.conftest import requires, run_cfgcheck
from tests.sources.launch_corpus import PUBLISHED, make_cache

CHATGLM = PUBLISHED / "chatglm" / "ptuning"
BAICHUAN = PUBLISHED / "baichuan2" / "fine-tune"


def test_chatglm_model_arguments_come_from_its_arguments_module() -> None:
    native = read_launch(
        (CHATGLM / "train.sh").read_text(),
        "train.sh",
        CHATGLM / "train.sh",
        [],
        {"transformers_version": "4.27.1"},
    )
    assert native.entry is not None and native.entry.parser == "HfArgumentParser"
    # ModelArguments in ptuning/arguments.py (imported by main.py), Seq2SeqTrainingArguments'
    # own field, TrainingArguments' fields of the pinned release.
    assert native.entry.fields["quantization_bit"].where.startswith("arguments.py:")
    assert native.data["quantization_bit"] == 4 and native.data["pre_seq_len"] == 128
    assert native.data["predict_with_generate"] is True
    assert native.data["output_dir"] == "output/adgen-chatglm-6b-pt-128-2e-2"  # $PRE_SEQ_LEN-$LR
    assert not [p for p in native.problems if p.severity == "error"]


@requires("transformers")
def test_chatglm_flags_against_the_real_parser_in_the_installed_transformers() -> None:
    """ChatGLM's own arguments.py (the copied upstream file; it imports only dataclasses and
    typing) with the installed Seq2SeqTrainingArguments: the real parser refuses exactly the
    flags cfgcheck refuses (--overwrite_output_dir, gone in transformers 5)."""
    import transformers

    spec = importlib.util.spec_from_file_location("chatglm_arguments", CHATGLM / "arguments.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parser = transformers.HfArgumentParser(
        (module.ModelArguments, module.DataTrainingArguments, transformers.Seq2SeqTrainingArguments)
    )
    native = read_launch(
        (CHATGLM / "ds_train_finetune.sh").read_text(),
        "ds_train_finetune.sh",
        CHATGLM / "ds_train_finetune.sh",
        [],
        {},
    )
    assert native.launch is not None
    argv = [w for f in native.launch.flags for w in [f"--{f.name}", f.value or ""] if w]
    argv = [a for a in argv if a != "--deepspeed" and a != "deepspeed.json"]  # opened at init
    (finding,) = [p for p in native.problems if p.rule == "launch-unknown-flag"]
    assert finding.paths == ("overwrite_output_dir",)
    assert "--overwrite_output_dir: refused since transformers" in finding.hint  # removed in 5
    with pytest.raises(ValueError, match="not used by the HfArgumentParser") as e:
        parser.parse_args_into_dataclasses(argv)
    assert "--overwrite_output_dir" in str(e.value)
    kept = [a for a in argv if a != "--overwrite_output_dir"]
    model, _data, args = parser.parse_args_into_dataclasses([*kept, "--use_cpu", "--fp16", "False"])
    assert args.predict_with_generate is native.data["predict_with_generate"]
    assert args.per_device_train_batch_size == native.data["per_device_train_batch_size"]
    assert model.model_name_or_path == native.data["model_name_or_path"]


def test_a_remote_code_model_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(make_cache(tmp_path / "hub")))
    proc = run_cfgcheck(
        "check",
        "--from",
        "launch",
        str(CHATGLM / "train.sh"),
        "--transformers-version",
        "4.27.1",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "train.sh:11: model_name_or_path=THUDM/chatglm-6b" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_baichuan2_readme_command_as_text() -> None:
    """Baichuan2's README command given with --command, run from fine-tune/: its flags parse
    against fine-tune.py's dataclasses; --warmup_ratio is refused by transformers 5."""
    text = (BAICHUAN / "readme_train.sh").read_text()
    opts = {"cwd": str(BAICHUAN), "transformers_version": "4.37.2"}
    with pytest.raises(ConfigLoadError, match="model_name_or_path=baichuan-inc/Baichuan2-7B-Base"):
        check_text(text, "<--command>", None, [], None, opts)
    native = read_launch(text, "<--command>", None, [], opts)
    assert native.entry is not None and native.entry.file == "fine-tune.py"
    assert native.data["model_max_length"] == 512 and native.data["bf16"] is True
    assert not [p for p in native.problems if p.severity == "error"]
    newer = read_launch(text, "<--command>", None, [], {"cwd": str(BAICHUAN)})
    (refused,) = [p for p in newer.problems if p.rule == "launch-unknown-flag"]
    assert refused.paths == ("warmup_ratio",)
