"""vocab-mismatch when only declared placeholder tokens lack an embedding row
(tokenizer.placeholder_tokens_from; Gemma 3 1B's 262144 rows end before its tokenizer's one
added token, the image placeholder <image_soft_token> = 262144): a warning, since encoding
text yields an added token only where the text spells it out. Chat markers past the rows stay
an error (tests/crash/test_crash_vocab.py: the template writes them into every sample). Real
tokenizers built with ``tokenizers``, a real torch embedding for the crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tokenizers import AddedToken

import cfgcheck
from cfgcheck.findings import Finding
from tests.factories import bpe, save_file

RULE = "vocab-mismatch"
IMAGE = "<image_soft_token>"


def tokenizer(tmp_path: Path, special: bool = True) -> tuple[Path, int]:
    """A trained BPE plus one added token after its base vocabulary; (file, base size)."""
    tok = bpe()
    base = tok.get_vocab_size(with_added_tokens=False)
    if special:
        tok.add_special_tokens([IMAGE])
    else:
        tok.add_tokens([AddedToken(IMAGE, special=False)])
    return save_file(tok, tmp_path / ("special" if special else "plain")), base


def run(rows: int, tok: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "special-beyond-rows",
        "model": {
            "name": "tiny",
            "block_size": 64,
            "vocab_size": rows,
            "padded_vocab_size": rows,
            "n_layer": 1,
            "n_embd": 16,
            "n_head": 2,
            "intermediate_size": 32,
        },
        "tokenizer": tok,
        "data": {"max_seq_length": 32},
        "trainer": {"micro_batch_size": 1, "finetuning": "full", "gpu": {"name": "H100"}},
    }


def findings(result: cfgcheck.CheckResult) -> list[Finding]:
    return result.by_rule(RULE)


def test_declared_placeholders_beyond_the_rows_are_a_warning(tmp_path: Path) -> None:
    path, base = tokenizer(tmp_path)
    tok = {"path": str(path), "eos_token": "</s>", "placeholder_tokens_from": base}
    result = cfgcheck.validate(run(base, tok))
    (f,) = findings(result)
    assert f.severity == "warning"
    assert f"(id {base}, tokenizer.placeholder_tokens_from={base})" in f.message
    assert f.fixes[0].overrides == (f"model.padded_vocab_size={base + 1}",)


def test_what_the_warning_says_happens_with_real_torch(tmp_path: Path) -> None:
    """Plain text never reaches the added id; text that spells the token out does, and the
    embedding of the model's rows raises."""
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer

    path, base = tokenizer(tmp_path)
    tok = Tokenizer.from_file(str(path))
    embedding = torch.nn.Embedding(base, 8)
    plain = tok.encode("The embedding has one row per token id in the vocabulary.").ids
    assert max(plain) < base
    embedding(torch.tensor([plain]))  # runs
    spelled = tok.encode(f"a caption {IMAGE} here").ids
    assert base in spelled
    with pytest.raises(IndexError, match="index out of range"):
        embedding(torch.tensor([spelled]))


@pytest.mark.parametrize("special", [True, False])
def test_undeclared_added_tokens_beyond_the_rows_stay_an_error(
    tmp_path: Path, special: bool
) -> None:
    """Nothing says the added token is a placeholder: chat markers or tokens added for the
    data are meant to appear."""
    path, base = tokenizer(tmp_path, special)
    (f,) = findings(cfgcheck.validate(run(base, {"path": str(path)})))
    assert f.severity == "error"


def test_a_special_token_the_run_uses_beyond_the_rows_stays_an_error(tmp_path: Path) -> None:
    """The pad id itself past the rows: the collator writes it into every padded batch."""
    path, base = tokenizer(tmp_path)
    tok = {"path": str(path), "pad_token": IMAGE, "placeholder_tokens_from": base}
    result = cfgcheck.validate(run(base, tok))
    assert [f.severity for f in findings(result)] == ["error"]


def test_the_shipped_gemma_3_presets() -> None:
    from tests.conftest import REPO

    one = cfgcheck.check(REPO / "conf", "config", ["model=gemma-3-1b", "tokenizer=gemma-3"])
    assert [f.severity for f in findings(one)] == ["warning"]
    assert "placeholder tokens (id 262144" in findings(one)[0].message
    four = cfgcheck.check(REPO / "conf", "config", ["model=gemma-3-4b", "tokenizer=gemma-3"])
    assert findings(four) == []
