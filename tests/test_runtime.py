"""cfgcheck.runtime: tokenizer call kwargs and tokenizer settings from the validated config,
checked against a real transformers tokenizer; importable without torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import cfgcheck
from cfgcheck.runtime import (
    TokenizerMismatchError,
    configure_tokenizer,
    padding_side,
    tokenizer_kwargs,
)
from tests.crash.support import TEXTS, run_config, tokenizer_folder, validated


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    return tokenizer_folder(tmp_path_factory.mktemp("tok"))


@pytest.mark.parametrize(
    ("padding", "expected"),
    [("max_length", "max_length"), ("longest", "longest"), ("do_not_pad", False)],
)
def test_tokenizer_kwargs_follow_data_section(
    real: tuple[Path, Any], padding: str, expected: object
) -> None:
    folder, tok = real
    data = {"padding": padding, "max_seq_length": 24, "pad_to_multiple_of": 8}
    run = validated(run_config(folder, tok, data=data))
    assert tokenizer_kwargs(run) == {
        "padding": expected,
        "truncation": True,
        "max_length": 24,
        "pad_to_multiple_of": 8,
    }


def test_max_length_defaults_to_max_seq_length_and_can_be_lower(real: tuple[Path, Any]) -> None:
    folder, tok = real
    assert tokenizer_kwargs(validated(run_config(folder, tok)))["max_length"] == 32
    lower = run_config(folder, tok, data={"max_length": 16})
    assert tokenizer_kwargs(validated(lower))["max_length"] == 16


def test_max_length_kwargs_give_equal_lengths_on_the_real_tokenizer(
    real: tuple[Path, Any],
) -> None:
    folder, tok = real
    run = validated(run_config(folder, tok, data={"padding": "max_length"}))
    configure_tokenizer(tok, run)
    # one call per sample, as datasets.map(batched=False) does: still one length
    lengths = {len(tok(t, **tokenizer_kwargs(run))["input_ids"]) for t in TEXTS}
    assert lengths == {32}


def test_longest_kwargs_pad_each_call_to_its_own_longest(real: tuple[Path, Any]) -> None:
    folder, tok = real
    run = validated(run_config(folder, tok, data={"max_seq_length": 64}))
    configure_tokenizer(tok, run)
    kwargs = tokenizer_kwargs(run)
    first = tok(list(TEXTS[:2]), **kwargs)["input_ids"]
    second = tok(list(TEXTS[2:4]), **kwargs)["input_ids"]
    assert len({len(x) for x in first}) == 1 and len({len(x) for x in second}) == 1
    assert len(first[0]) != len(second[0])


def test_pad_to_multiple_of_rounds_up_on_the_real_tokenizer(real: tuple[Path, Any]) -> None:
    folder, tok = real
    run = validated(run_config(folder, tok, data={"pad_to_multiple_of": 8}))
    configure_tokenizer(tok, run)
    ids = tok(list(TEXTS[2:4]), **tokenizer_kwargs(run))["input_ids"]
    assert len(ids[0]) % 8 == 0 and len(ids[0]) >= len(tok(TEXTS[2])["input_ids"])


def test_configure_tokenizer_sets_padding_side(real: tuple[Path, Any]) -> None:
    folder, tok = real
    run = validated(run_config(folder, tok, tokenizer={"padding_side": "left"}))
    assert padding_side(run) == "left"
    configure_tokenizer(tok, run)
    assert tok.padding_side == "left"
    ids = tok(list(TEXTS[2:4]), **tokenizer_kwargs(run))
    assert ids["input_ids"][1][0] == tok.pad_token_id
    assert ids["attention_mask"][1][0] == 0 and ids["attention_mask"][1][-1] == 1
    configure_tokenizer(tok, validated(run_config(folder, tok)))
    assert tok.padding_side == "right"


def test_configure_tokenizer_sets_the_declared_pad_token(tmp_path: Path) -> None:
    folder, tok = tokenizer_folder(tmp_path, pad=False)
    assert tok.pad_token is None
    cfg = run_config(folder, tok, tokenizer={"pad_token": "</s>", "pad_token_id": 2})
    configure_tokenizer(tok, validated(cfg))
    assert tok.pad_token == "</s>" and tok.pad_token_id == 2


def test_configure_tokenizer_refuses_another_tokenizer(
    real: tuple[Path, Any], tmp_path: Path
) -> None:
    folder, tok = real
    _, bigger = tokenizer_folder(tmp_path, added=("<|im_start|>",))
    run = validated(run_config(folder, tok))
    with pytest.raises(TokenizerMismatchError, match=r"has 261 tokens .* has 260"):
        configure_tokenizer(bigger, run)
    other_pad = run_config(folder, tok, tokenizer={"pad_token": "<unk>", "pad_token_id": 0})
    with pytest.raises(TokenizerMismatchError, match=r"tokenizer\.pad_token=<pad>"):
        configure_tokenizer(tok, validated(other_pad))


def test_a_failed_check_result_is_refused(real: tuple[Path, Any]) -> None:
    folder, tok = real
    result = cfgcheck.validate(run_config(folder, tok, data={"max_seq_length": 100}))
    with pytest.raises(cfgcheck.ConfigError, match="seq-len-over-block-size"):
        tokenizer_kwargs(result)
    good = cfgcheck.validate(run_config(folder, tok))
    assert tokenizer_kwargs(good)["max_length"] == 32


def test_runtime_imports_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import cfgcheck.runtime as r\n"
        "assert 'transformers' not in sys.modules\n"
        "try:\n"
        "    r.collate.require_torch()\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "install cfgcheck[torch]" in out.stdout


def test_import_does_not_load_torch() -> None:
    code = "import sys, cfgcheck.runtime; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_malformed_samples_are_one_line_value_errors() -> None:
    pytest.importorskip("torch")
    from cfgcheck.runtime import PaddedCollator

    collate = PaddedCollator(pad_token_id=0, ignore_index=-100, max_seq_length=8)
    with pytest.raises(ValueError, match=r"no 'input_ids' \(keys: text\)"):
        collate([{"text": "hello"}])
    with pytest.raises(ValueError, match="flat list or 1-D tensor of ints"):
        collate([{"input_ids": [[1, 2], [3, 4]]}])
    with pytest.raises(ValueError, match="length differs from its 2 input_ids"):
        collate([{"input_ids": [1, 2], "labels": [1]}])
    assert collate([[1, 2, 3], [4]])["input_ids"].tolist() == [[1, 2, 3], [4, 0, 0]]
