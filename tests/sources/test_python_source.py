"""``--from python``: runs written as code (Unsloth notebooks, Trainer scripts, Lightning
modules) checked like any other source: the seed failures at their lines with fixes as
verified code edits, the other rules through the same sections, published notebooks and
scripts without false errors, and every unreadable input as one line with exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import cfgcheck
from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult, CodeEdit, Finding, Location
from cfgcheck.sources import check_native
from cfgcheck.sources.python.edits import apply
from tests.conftest import run_cfgcheck
from tests.model_folders import tokenizer_files, write_config

HERE = Path(__file__).resolve().parent / "native" / "python"
NOTEBOOKS = sorted((HERE / "notebooks").glob("*.ipynb"))
SCRIPTS = sorted((HERE / "scripts").glob("*.py"))
# Published files whose model cfgcheck has no preset for (exit 2 naming the cell and line).
UNRESOLVED = {
    "CodeGemma__7B_-Conversational.ipynb",
    "Mistral_Nemo__12B_-Alpaca.ipynb",
    "Phi_3.5_Mini-Conversational.ipynb",
    "Qwen2.5__3B_-GRPO.ipynb",
    "Qwen2__7B_-Alpaca.ipynb",
    "Qwen3__14B_-Alpaca.ipynb",
    "unsloth_test_merged_model_perplexity_qwen_2_5.py",
}
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "max_position_embeddings": 128,
    "vocab_size": 128,
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 100,
    "tie_word_embeddings": False,
}


def tiny_model(root: Path) -> Path:
    """``root/tiny-llama``: a Llama config.json and a real 101-token tokenizer with a pad."""
    folder = root / "tiny-llama"
    tokenizer_files(folder, 100, added=("<pad>",), pad_token="<pad>")
    write_config(folder, TINY_LLAMA)
    return folder


def seed_script(tmp_path: Path) -> Path:
    """The seed script next to its model folder; the test runs from that folder, as the script
    does (transformers resolves ``tiny-llama`` against the working directory)."""
    tiny_model(tmp_path)
    os.chdir(tmp_path)
    script = tmp_path / "trainer_seed.py"
    script.write_text((HERE / "trainer_seed.py").read_text())
    return script


def line_with(text: str, needle: str) -> int:
    """The first code line (not a comment) starting with ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.strip().startswith(needle))


@pytest.fixture(autouse=True)
def _restore_cwd() -> Any:
    cwd = Path.cwd()
    yield
    os.chdir(cwd)


def one(result: CheckResult, rule: str) -> Finding:
    found = result.by_rule(rule)
    assert len(found) == 1, [(f.rule, f.message) for f in result.findings]
    return found[0]


def edits_of(fix: dict[str, Any]) -> list[CodeEdit]:
    return [
        CodeEdit(
            Location(e["file"], e["line"], e.get("cell")),
            tuple(e["start"]),  # type: ignore[arg-type]
            tuple(e["end"]),  # type: ignore[arg-type]
            e["old"],
            e["new"],
        )
        for e in fix["edits"]
    ]


# -- the Unsloth seed, as transformers' Trainer runs it ----------------------------------------


def test_trainer_seed_is_an_error_at_the_padding_and_batch_lines(tmp_path: Path) -> None:
    script = seed_script(tmp_path)
    text = script.read_text()
    proc = run_cfgcheck("check", "--from", "python", script.name, "--format", "json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (finding,) = [f for f in json.loads(proc.stdout)["findings"] if f["rule"] == "ragged-batch"]
    assert finding["severity"] == "error"
    where = dict(zip(finding["paths"], finding["locations"], strict=True))
    assert where["data.padding"] == {"file": script.name, "line": line_with(text, "padding=True")}
    assert where["trainer.micro_batch_size"]["line"] == line_with(
        text, "per_device_train_batch_size"
    )
    assert where["data.collator"]["line"] == line_with(text, "trainer = Trainer(")
    # Two fixes, each as code edits: a padding collator, or padding="max_length".
    news = [[e["new"] for e in fix["edits"]] for fix in finding["fixes"]]
    assert [
        ", data_collator=DataCollatorForSeq2Seq(tokenizer)",
        "from transformers import DataCollatorForSeq2Seq\n",
    ] in news
    assert ["'max_length'"] in news
    for fix in finding["fixes"]:
        fixed = tmp_path / "fixed.py"
        fixed.write_text(apply(text, edits_of(fix)))
        again = check_native(fixed, "python")
        assert not again.by_rule("ragged-batch") and again.ok, [f.message for f in again.errors]


def test_padding_absent_and_batch_one(tmp_path: Path) -> None:
    script = seed_script(tmp_path)
    text = script.read_text()
    absent = tmp_path / "absent.py"
    absent.write_text(text.replace("        padding=True,\n", ""))
    found = one(check_native(absent, "python"), "ragged-batch")
    assert found.locations["data.padding"].line == line_with(text, "tokens = tokenizer(")  # type: ignore[union-attr]
    single = tmp_path / "single.py"
    single.write_text(
        text.replace("per_device_train_batch_size=4", "per_device_train_batch_size=1")
    )
    assert not check_native(single, "python").by_rule("ragged-batch")
    processing = tmp_path / "with_tokenizer.py"  # Trainer pads with DataCollatorWithPadding
    processing.write_text(
        text.replace(
            "train_dataset=dataset,", "train_dataset=dataset,\n    processing_class=tokenizer,"
        )
    )
    assert not check_native(processing, "python").by_rule("ragged-batch")


UNSLOTH_SEED_CELLS = [
    ("markdown", "# Fine-tune with Unsloth"),
    ("code", "%%capture\n!pip install unsloth"),
    (
        "code",
        "from unsloth import FastLanguageModel\n"
        "MAX_TOKEN_COUNT = 4096\n"
        "model, tokenizer = FastLanguageModel.from_pretrained(\n"
        '    model_name = "unsloth/llama-3-8b-bnb-4bit",\n'
        "    max_seq_length = MAX_TOKEN_COUNT,\n"
        "    load_in_4bit = True,\n"
        ")\n"
        "model = FastLanguageModel.get_peft_model(model, r = 16)",
    ),
    (
        "code",
        "from datasets import load_dataset\n"
        "dataset = load_dataset('json', data_files='train.jsonl', split='train')\n"
        "def tokenize_function(example):\n"
        "    tokens = tokenizer(\n"
        '        example["text"],\n'
        "        add_special_tokens=False,\n"
        "        truncation=True,\n"
        "        padding=True,\n"
        "        max_length=MAX_TOKEN_COUNT,\n"
        "        return_attention_mask=True,\n"
        "    )\n"
        '    return {"input_ids": tokens["input_ids"],\n'
        '            "attention_mask": tokens["attention_mask"]}\n'
        "dataset = dataset.map(tokenize_function, batched=True)",
    ),
    (
        "code",
        "from transformers import Trainer, TrainingArguments\n"
        "trainer = Trainer(\n"
        "    model = model,\n"
        "    train_dataset = dataset,\n"
        "    args = TrainingArguments(\n"
        "        per_device_train_batch_size = 4,\n"
        "        gradient_accumulation_steps = 4,\n"
        '        output_dir = "outputs",\n'
        "    ),\n"
        ")\n"
        "trainer.train()",
    ),
]


def notebook(path: Path, cells: list[tuple[str, str]], gpu: str | None = "T4") -> Path:
    meta: dict[str, Any] = {"colab": {"gpuType": gpu}} if gpu else {}
    body = {
        "cells": [
            {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True)}
            | ({"outputs": [], "execution_count": None} if kind == "code" else {})
            for kind, source in cells
        ],
        "metadata": meta,
        "nbformat": 4,
        "nbformat_minor": 0,
    }
    path.write_text(json.dumps(body, indent=1))
    return path


def test_unsloth_seed_notebook_located_by_cell_and_line(tmp_path: Path) -> None:
    nb = notebook(tmp_path / "seed.ipynb", UNSLOTH_SEED_CELLS)
    proc = run_cfgcheck("check", "--from", "python", str(nb), "--format", "json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    finding = next(f for f in json.loads(proc.stdout)["findings"] if f["rule"] == "ragged-batch")
    where = dict(zip(finding["paths"], finding["locations"], strict=True))
    assert where["data.padding"] == {"file": str(nb), "line": 8, "cell": 3}
    assert where["trainer.micro_batch_size"] == {"file": str(nb), "line": 6, "cell": 4}
    text = run_cfgcheck("check", "--from", "python", str(nb))
    assert f"{nb}, cell 3, line 8: data.padding set here" in text.stdout
    github = run_cfgcheck("check", "--from", "python", str(nb), "--format", "github")
    # An annotation names the notebook; its line would be the cell's, not the file's.
    assert f"::error file={nb},title=cfgcheck ragged-batch::" in github.stdout
    # The fix re-read as a notebook: padding="max_length" in cell 3, line 8.
    fixes = finding["fixes"]
    assert any(
        e["cell"] == 3 and e["old"] == "True" and e["new"] == "'max_length'"
        for f in fixes
        for e in f["edits"]
    )


def test_unsloth_semantics(tmp_path: Path) -> None:
    # max_seq_length above the context: Unsloth extends RoPE (a warning, not a crash).
    cells = [
        (k, s.replace("MAX_TOKEN_COUNT = 4096", "MAX_TOKEN_COUNT = 16384"))
        for k, s in UNSLOTH_SEED_CELLS
    ]
    long = check_native(notebook(tmp_path / "long.ipynb", cells), "python")
    seq = one(long, "seq-len-over-block-size")
    assert seq.severity == "warning" and "Unsloth extends RoPE" in seq.message
    # dtype=None on a T4: float16 (no bf16 on sm75), so no capability error.
    assert not long.by_rule("gpu-capability")
    assert long.config is not None and long.config.trainer.precision == "16-mixed"
    assert long.config.trainer.quantization == "nf4-dq"
    assert long.config.trainer.finetuning == "qlora"


def test_gpu_from_notebook_metadata(tmp_path: Path) -> None:
    cells = [
        (k, s.replace("MAX_TOKEN_COUNT = 4096", "MAX_TOKEN_COUNT = 2048"))
        for k, s in UNSLOTH_SEED_CELLS
    ]
    a100 = check_native(notebook(tmp_path / "a100.ipynb", cells, gpu="A100"), "python")
    assert a100.config is not None and a100.config.trainer.gpu is not None
    assert a100.config.trainer.gpu.name == "A100-40GB"  # Colab's A100 runtime
    assert a100.config.trainer.precision == "bf16-true"  # Unsloth's dtype=None on sm80
    # --gpu wins over the metadata.
    h100 = check_native(tmp_path / "a100.ipynb", "python", gpu="H100")
    assert h100.config is not None and h100.config.trainer.gpu is not None
    assert h100.config.trainer.gpu.name == "H100"


def test_other_rules_through_the_code(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "from transformers import AutoModelForCausalLM, BitsAndBytesConfig\n"
        "from transformers import Trainer, TrainingArguments\n"
        "from peft import LoraConfig, get_peft_model\n"
        "bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4')\n"
        "model = AutoModelForCausalLM.from_pretrained(\n"
        "    'meta-llama/Llama-2-7b-hf', quantization_config=bnb)\n"
        "config = LoraConfig(r=8, target_modules=['q_proj', 'c_attn'])\n"
        "model = get_peft_model(model, config)\n"
        "args = TrainingArguments(output_dir='o', per_device_train_batch_size=1, bf16=True)\n"
        "Trainer(model=model, args=args, processing_class=tok).train()\n"
    )
    result = check_native(script, "python", gpu="T4")
    target = one(result, "lora-target-unknown")
    assert target.locations["trainer.lora.targets"].line == 7  # type: ignore[union-attr]
    capability = one(result, "gpu-capability")
    assert capability.locations["trainer.precision"].line == 9  # type: ignore[union-attr]
    assert result.config is not None and result.config.trainer.quantization == "nf4"
    # 4-bit weights trained without an adapter: quantized-full-finetuning.
    full = tmp_path / "full.py"
    full.write_text(
        script.read_text()
        .replace("model = get_peft_model(model, config)\n", "")
        .replace("config = LoraConfig(r=8, target_modules=['q_proj', 'c_attn'])\n", "")
    )
    assert check_native(full, "python", gpu="H100").by_rule("quantized-full-finetuning")


def test_unknown_values_are_findings_never_guesses(tmp_path: Path) -> None:
    script = seed_script(tmp_path)
    text = script.read_text().replace(
        "per_device_train_batch_size=4", 'per_device_train_batch_size=int(os.environ["BS"])'
    )
    unknown = tmp_path / "env.py"
    unknown.write_text("import os\n" + text)
    result = check_native(unknown, "python")
    found = one(result, "python-unknown-value")
    assert found.severity == "warning" and "os.environ" in found.message
    assert found.locations["args.per_device_train_batch_size"].line == line_with(
        unknown.read_text(), "per_device_train_batch_size"
    )  # type: ignore[union-attr]
    assert not result.by_rule("ragged-batch")  # it rests on the batch size, which is unknown
    # The value given on the command line: the check runs.
    given = check_native(unknown, "python", ["args.per_device_train_batch_size=4"])
    assert given.by_rule("ragged-batch") and not given.by_rule("python-unknown-value")


def test_what_the_code_does_itself_is_unknown_not_guessed(tmp_path: Path) -> None:
    script = seed_script(tmp_path)
    text = script.read_text()
    # The mapped function pads the lists itself: its tokenizer call's padding is not the end.
    manual = tmp_path / "manual.py"
    manual.write_text(
        text.replace(
            '        "labels": tokens["input_ids"],\n',
            '        "labels": [ids + [0] * (64 - len(ids)) for ids in tokens["input_ids"]],\n',
        )
    )
    result = check_native(manual, "python")
    assert not result.by_rule("ragged-batch")
    assert any("pads or cuts the token lists itself" in f.message for f in result.findings)
    # A collator the file defines: whether it pads is not read.
    own = tmp_path / "own.py"
    own.write_text(
        text.replace(
            "trainer = Trainer(", "def collate(batch):\n    return batch\n\n\ntrainer = Trainer("
        ).replace("train_dataset=dataset,", "train_dataset=dataset,\n    data_collator=collate,")
    )
    result = check_native(own, "python")
    assert not result.by_rule("ragged-batch")
    assert one(result, "python-unknown-value").paths == ("trainer.data_collator",)
    # Another adapter method than LoRA still trains adapters over the 4-bit weights.
    rand = tmp_path / "rand.py"
    rand.write_text(
        "import transformers\n"
        "from transformers import AutoModelForCausalLM, BitsAndBytesConfig\n"
        "from peft import RandLoraConfig, get_peft_model\n"
        "bnb = BitsAndBytesConfig(load_in_4bit=True)\n"
        "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-2-7b-hf', "
        "quantization_config=bnb)\n"
        "model = get_peft_model(model, RandLoraConfig(r=32))\n"
        "args = transformers.TrainingArguments(output_dir='o', per_device_train_batch_size=1)\n"
        "transformers.Trainer(model=model, args=args, processing_class=tok).train()\n"
    )
    result = check_native(rand, "python", gpu="H100")
    assert not result.by_rule("quantized-full-finetuning")
    assert result.config is not None and result.config.trainer.finetuning == "qlora"


def test_lightning_torchtune_seed() -> None:
    seed = HERE / "lightning_torchtune_seed.py"
    text = seed.read_text()
    result = check_native(seed, "python")
    found = one(result, "ragged-batch")
    assert found.locations["data.collator"].line == line_with(text, "return DataLoader(")  # type: ignore[union-attr]
    assert found.locations["trainer.micro_batch_size"].line == line_with(text, "return DataLoader(")  # type: ignore[union-attr]
    (fix,) = found.fixes
    assert [e.new for e in fix.edits] == [
        ", collate_fn=padded_collate_sft",
        "from torchtune.data import padded_collate_sft\n",
    ]
    assert result.config is not None and result.config.trainer.precision == "bf16-mixed"


@pytest.mark.parametrize("path", NOTEBOOKS + SCRIPTS, ids=lambda p: p.name)
def test_published_code_gets_a_verdict_without_false_errors(path: Path) -> None:
    if path.name in UNRESOLVED:
        with pytest.raises(ConfigLoadError) as e:
            check_native(path, "python")
        assert "not a cfgcheck preset" in str(e.value)
        assert (", cell " in str(e.value)) == path.name.endswith(".ipynb")
        return
    overrides = (
        ["load.pretrained_model_name_or_path=meta-llama/Llama-2-7b-hf"]
        if path.name.startswith("peft_")
        else []
    )
    result = check_native(path, "python", overrides)
    assert result.ok, [(f.rule, f.message) for f in result.errors]


@pytest.mark.parametrize(
    ("name", "body", "message"),
    [
        ("bad.py", "def f(:\n    pass\n", "bad.py:1: invalid Python"),
        ("bad.ipynb", '{"cells": [', "is not a notebook"),
        ("plain.py", "print('hello')\n", "no training run found"),
        ("deep.py", "x = " + "[" * 200 + "]" * 200 + "\n", "nested"),
        ("huge.py", "# " + "x" * 9_000_000 + "\n", "larger than"),
    ],
)
def test_unreadable_code_exits_2_with_one_line(
    tmp_path: Path, name: str, body: str, message: str
) -> None:
    (tmp_path / name).write_text(body)
    proc = run_cfgcheck("check", "--from", "python", name, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    assert len((proc.stderr + proc.stdout).strip().splitlines()) == 1


def test_library_hook_and_service(tmp_path: Path) -> None:
    script = seed_script(tmp_path)
    other = tmp_path / "utils.py"
    other.write_text("def helper():\n    return 1\n")
    (tmp_path / "notes.txt").write_text("Trainer(")
    (tmp_path / "mentions.py").write_text('"""Build a Trainer(...) elsewhere."""\n')
    (tmp_path / "mentions.py").write_text('"""Build a Trainer(...) elsewhere."""\n')
    # cfgcheck.check accepts a script path.
    result = cfgcheck.check(str(script))
    assert result.by_rule("ragged-batch")
    # The hook checks the files that build a trainer and skips the others.
    files = (script.name, other.name, "notes.txt", "mentions.py")
    hook = run_cfgcheck("hook", "--from", "python", *files, cwd=tmp_path)
    assert hook.returncode == 1, hook.stdout + hook.stderr
    assert f"== {script.name}" in hook.stdout and "utils.py" not in hook.stdout
    assert "1 python config(s) checked: failed" in hook.stdout
    # The service takes the body.
    from cfgcheck.service.native import check_native_request

    nb = notebook(tmp_path / "seed.ipynb", UNSLOTH_SEED_CELLS)
    answer = check_native_request(
        {"format": "python", "config": nb.read_text(), "filename": "seed.ipynb"}, [tmp_path]
    )
    found = answer.by_rule("ragged-batch")
    assert found and found[0].locations["data.padding"] == Location("seed.ipynb", 8, 3)
