"""tokenizer-model-mismatch: the tokenizer's special-token ids against those the model folder's
config.json / generation_config.json state. Real tokenizers (built with ``tokenizers``, loaded
by transformers), config.json files with published values (tests/model_folders.py), and the
failure reproduced with a tiny real model: the wrong eos becomes the label, or an IndexError."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

import cfgcheck
from cfgcheck.findings import Finding
from cfgcheck.fixcheck import apply_overrides
from tests.conftest import COMMAND, REPO, run_cfgcheck
from tests.model_folders import (
    LLAMA2_7B,
    QWEN25_05B,
    qwen25_tokenizer_files,
    tokenizer_files,
    write_config,
)

RULE = "tokenizer-model-mismatch"
# The shipped conf/tokenizer/llama-2.yaml, as a plain section (eos </s> = 2, bos <s> = 1).
LLAMA2_TOKENIZER = {
    "vocab_size": 32000,
    "bos_token": "<s>",
    "bos_token_id": 1,
    "eos_token": "</s>",
    "eos_token_id": 2,
    "unk_token": "<unk>",
    "unk_token_id": 0,
    "pad_token": "<unk>",
    "pad_token_id": 0,
}


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen2.5-0.5B: its published config.json (bos = eos = 151643) and its tokenizer layout."""
    folder = write_config(tmp_path_factory.mktemp("qwen") / "Qwen2.5-0.5B", QWEN25_05B)
    return qwen25_tokenizer_files(folder)


def run(model: dict[str, Any], tokenizer: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": "tokenizer-model-test",
        "model": model,
        **({"tokenizer": tokenizer} if tokenizer is not None else {}),
        "data": {"max_seq_length": 512},
        "trainer": {"micro_batch_size": 1, "gpu": {"name": "H100"}},
    }


def mismatch(result: cfgcheck.CheckResult) -> list[Finding]:
    return result.by_rule(RULE)


def test_a_qwen_folder_with_the_llama_2_tokenizer_is_an_error(tmp_path: Path) -> None:
    """The folder holds only config.json: the declared Llama-2 tokenizer is the one used."""
    folder = write_config(tmp_path / "Qwen2.5-0.5B", QWEN25_05B)
    result = cfgcheck.validate(run({"pretrained": str(folder)}, LLAMA2_TOKENIZER))
    assert not result.ok
    eos = next(f for f in mismatch(result) if "model.eos_token_id" in f.paths)
    assert eos.severity == "error"
    assert "eos id is 2 ('</s>')" in eos.message and "151643" in eos.message
    bos = next(f for f in mismatch(result) if "model.bos_token_id" in f.paths)
    assert bos.severity == "warning"
    assert not eos.fixes  # no tokenizer in the folder to name


def test_the_folder_tokenizer_replaces_a_declared_one_as_the_fix(qwen: Path) -> None:
    """The folder holds its tokenizer and the config declares Llama-2's tokens over it: the
    fix names the folder's tokenizer, without the declared claims, and it works."""
    raw = run({"pretrained": str(qwen)}, LLAMA2_TOKENIZER)
    result = cfgcheck.validate(raw)
    eos = next(f for f in mismatch(result) if "model.eos_token_id" in f.paths)
    assert eos.severity == "error"
    assert eos.fixes[0].overrides == ("~tokenizer", f"tokenizer.path={qwen}")
    fixed = cfgcheck.validate(apply_overrides(raw, eos.fixes[0].overrides))
    assert not mismatch(fixed) and fixed.ok, [f.message for f in fixed.errors]


def test_the_folder_tokenizer_is_used_by_default(qwen: Path) -> None:
    result = cfgcheck.validate(run({"pretrained": str(qwen)}))
    assert result.config is not None and result.config.tokenizer.path == str(qwen)
    assert result.config.model.eos_token_id == 151643
    assert not mismatch(result) and result.ok, [f.message for f in result.errors]


def test_generation_config_eos_ids_join_the_config_json_ones(tmp_path: Path) -> None:
    """Llama 3.1 Instruct style: generate stops on several ids; the tokenizer's eos is one."""
    folder = write_config(tmp_path / "m", {**LLAMA2_7B, "eos_token_id": 2})
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 32000]}))
    tokenizer_files(folder, 32000, added=("<|eot|>",), eos_token="<|eot|>")  # id 32000
    result = cfgcheck.validate(run({"pretrained": str(folder), "padded_vocab_size": 32001}))
    assert result.config is not None and result.config.model.eos_token_id == [2, 32000]
    assert not mismatch(result), [f.message for f in mismatch(result)]


def test_an_eos_outside_the_model_is_named_as_a_crash(tmp_path: Path) -> None:
    folder = write_config(tmp_path / "llama", LLAMA2_7B)  # 32000 rows, eos 2, no tokenizer
    result = cfgcheck.validate(
        run({"pretrained": str(folder)}, {**LLAMA2_TOKENIZER, "eos_token_id": 40000})
    )
    (f,) = [f for f in mismatch(result) if "model.eos_token_id" in f.paths]
    assert f.severity == "error" and "IndexError" in f.message
    assert not f.fixes and "tokenizer the checkpoint was trained with" in f.hint


def test_a_litgpt_checkpoint_folder_states_ids_through_the_hub_files_beside_it(
    tmp_path: Path,
) -> None:
    """`litgpt download` keeps config.json and generation_config.json next to
    model_config.yaml: their ids are the model's."""
    from tests.test_models_pretrained import LITGPT_LLAMA2

    folder = write_config(tmp_path / "checkpoints" / "meta-llama" / "Llama-2-7b-hf", LLAMA2_7B)
    (folder / "model_config.yaml").write_text(LITGPT_LLAMA2)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))
    result = cfgcheck.validate(
        run({"pretrained": str(folder)}, {**LLAMA2_TOKENIZER, "eos_token_id": 1})
    )
    assert result.config is not None and result.config.model.eos_token_id == 2
    assert [f.severity for f in mismatch(result) if "model.eos_token_id" in f.paths] == ["error"]


def test_a_model_without_stated_ids_is_not_judged(tmp_path: Path) -> None:
    data = {k: v for k, v in QWEN25_05B.items() if not k.endswith("_token_id")}
    folder = write_config(tmp_path / "q", data)
    result = cfgcheck.validate(run({"pretrained": str(folder)}, LLAMA2_TOKENIZER))
    assert not mismatch(result)


def _bash(*args: str) -> subprocess.CompletedProcess[str]:
    command = f"{shlex.join(COMMAND)} {' '.join(args)}"
    return subprocess.run(
        ["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_cli_no_longer_says_ok_and_the_printed_fix_pastes(qwen: Path) -> None:
    """The issue's report: model.pretrained=<Qwen2.5 folder> with the default Llama-2
    tokenizer said OK. Now it fails, and the printed fix, pasted, clears it."""
    base = shlex.join(["check", "model=pretrained", f"model.pretrained={qwen}"])
    before = _bash(base)
    assert before.returncode == 1, before.stdout + before.stderr
    assert f"error[{RULE}]" in before.stdout
    fixes = [
        line.removeprefix("  fix: ")
        for line in before.stdout.split(f"error[{RULE}]", 1)[1].split("\n\n", 1)[0].splitlines()
        if line.startswith("  fix: ")
    ]
    assert fixes == [shlex.join(["~tokenizer", f"tokenizer.path={qwen}"])]
    after = _bash(base, fixes[0], "--format", "json")
    assert after.returncode == 0, after.stdout + after.stderr
    assert RULE not in after.stdout


def test_the_rule_is_in_the_catalogue() -> None:
    listed = run_cfgcheck("rules")
    assert RULE in listed.stdout
    explained = run_cfgcheck("explain", RULE)
    assert explained.returncode == 0 and "generation_config.json" in explained.stdout


# --- ground truth: what a mismatched tokenizer does to training, with real code -----------


def _tiny_model(rows: int, eos: int) -> Any:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=rows,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        bos_token_id=1,
        eos_token_id=eos,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def test_ground_truth_the_labels_teach_the_tokenizer_eos_not_the_model_eos(qwen: Path) -> None:
    """An SFT sample ends with ``tokenizer.eos_token`` (TRL's SFTTrainer appends it in
    _tokenize): with the Llama-2 tokenizer that is id 2, while the checkpoint's
    generation_config stops on 151643, so the learned stop token is one generate ignores."""
    transformers = pytest.importorskip("transformers")
    llama_dir = tokenizer_files(qwen.parent / "llama-tok", 32000)  # </s> = 2
    tok = transformers.AutoTokenizer.from_pretrained(str(llama_dir))
    ids = tok("w10 w11")["input_ids"] + [tok.eos_token_id]
    labels = ids[1:]
    model_eos = QWEN25_05B["eos_token_id"]
    assert labels[-1] == 2 and labels[-1] != model_eos
    # what the rule says about the same pair
    result = cfgcheck.validate(run({"pretrained": str(qwen)}, {"path": str(llama_dir)}))
    assert [f.severity for f in mismatch(result) if "model.eos_token_id" in f.paths] == ["error"]


def test_ground_truth_an_eos_past_the_rows_is_an_index_error(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    qwen_tok = qwen25_tokenizer_files(tmp_path / "qwen-tok")
    tok = transformers.AutoTokenizer.from_pretrained(str(qwen_tok))
    model = _tiny_model(rows=32000, eos=2)  # a Llama-2-sized embedding
    ids = torch.tensor([[5, 6, tok.eos_token_id]])  # 151643
    with pytest.raises(IndexError):
        model(input_ids=ids, labels=ids)
