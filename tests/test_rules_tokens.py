"""Tokenizer rules with real tokenizer files (built here, saved to tmp dirs): each fires on the
bad config naming both values, not on the fix, and the failure it predicts is real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cfgcheck import Finding, validate
from tests.conftest import requires
from tests.factories import bpe, save_folder, sentencepiece_model


def fired(cfg: dict[str, Any], rule_id: str) -> list[Finding]:
    return validate(cfg).by_rule(rule_id)


def only(cfg: dict[str, Any], rule_id: str) -> Finding:
    (f,) = fired(cfg, rule_id)
    return f


def use_tokenizer(cfg: dict[str, Any], path: Path, **declared: Any) -> None:
    """Point the config at real files, dropping the llama-2 preset's declared values."""
    cfg["tokenizer"] = {"path": str(path), **declared}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A BPE tokenizer of 259 tokens: <unk>=0, <s>=1, </s>=2, no pad token."""
    return save_folder(bpe(), tmp_path / "tok")


@pytest.fixture
def padded_folder(tmp_path: Path) -> Path:
    """The same plus <pad> (added by tokenizer_config.json at id 259) and <extra> (258)."""
    return save_folder(bpe(added=["<extra>"]), tmp_path / "tok-pad", pad_token="<pad>")


# --- vocab-mismatch with the resolved size ------------------------------------------------


def test_vocab_mismatch_uses_the_resolved_size(cfg: dict[str, Any], padded_folder: Path) -> None:
    use_tokenizer(cfg, padded_folder)
    f = only(cfg, "vocab-mismatch")  # 261 tokens vs tinyllama's 32000
    assert "the tokenizer has 261 tokens (tok-pad/ tokenizer.json + 2 added tokens" in f.message
    assert "model.vocab_size=32000" in f.message
    assert f.paths == ("tokenizer.path", "model.vocab_size")


def test_tokenizer_with_added_tokens_larger_than_rows(
    cfg: dict[str, Any], padded_folder: Path
) -> None:
    use_tokenizer(cfg, padded_folder)
    cfg["model"]["vocab_size"] = 259  # the base vocabulary only
    f = only(cfg, "vocab-mismatch")
    assert "261 tokens" in f.message and "259 embedding rows" in f.message
    assert f.paths == ("tokenizer.path", "model.padded_vocab_size")
    # the real failure: the added <pad> id 260 indexes past an embedding of 259 rows
    torch = pytest.importorskip("torch")
    emb = torch.nn.Embedding(259, 4)
    with pytest.raises(IndexError, match="index out of range in self"):
        emb(torch.tensor([260]))


def test_matching_resolved_size_passes(cfg: dict[str, Any], padded_folder: Path) -> None:
    use_tokenizer(cfg, padded_folder)
    cfg["model"]["vocab_size"] = 261
    assert validate(cfg).ok


# --- tokenizer-declared-mismatch ----------------------------------------------------------


def test_declared_size_and_ids_against_the_files(cfg: dict[str, Any], folder: Path) -> None:
    use_tokenizer(cfg, folder, vocab_size=32000, eos_token_id=7)
    cfg["model"]["vocab_size"] = 259
    findings = {f.paths[0]: f for f in fired(cfg, "tokenizer-declared-mismatch")}
    assert set(findings) == {"tokenizer.vocab_size", "tokenizer.eos_token_id"}
    size = findings["tokenizer.vocab_size"]
    assert "tokenizer.vocab_size=32000" in size.message and "says 259" in size.message
    assert "'</s>' has id 2" in findings["tokenizer.eos_token_id"].message
    assert "tokenizer.vocab_size=259" in size.hint
    assert "tokenizer.eos_token_id=2" in findings["tokenizer.eos_token_id"].hint
    use_tokenizer(cfg, folder, vocab_size=259, eos_token_id=2, pad_token="<unk>")
    assert validate(cfg).ok


# --- tokenizer-unreadable -----------------------------------------------------------------


def test_missing_tokenizer_path_is_a_finding(cfg: dict[str, Any], tmp_path: Path) -> None:
    cfg["tokenizer"]["path"] = str(tmp_path / "nope")
    f = only(cfg, "tokenizer-unreadable")
    assert f.severity == "error" and "does not exist" in f.message
    assert not fired(cfg, "vocab-mismatch")  # the declared llama-2 values are used instead


def test_malformed_tokenizer_json_is_a_finding(cfg: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0", "model": 3}')
    cfg["tokenizer"]["path"] = str(tmp_path)
    assert "is not a valid tokenizer.json" in only(cfg, "tokenizer-unreadable").message


# --- pad-token-missing --------------------------------------------------------------------


@requires("transformers")
def test_pad_token_missing_in_the_files_and_the_real_error(
    cfg: dict[str, Any], folder: Path
) -> None:
    use_tokenizer(cfg, folder)
    cfg["model"]["vocab_size"] = 259
    f = only(cfg, "pad-token-missing")
    assert "Asking to pad but the tokenizer does not have a padding token" in f.message
    assert f"tokenizer.path={folder}" in f.message
    assert "pad = eos: '</s>', id 2" in f.hint
    assert [fix.overrides for fix in f.fixes] == [
        ("tokenizer.pad_token='</s>'", "tokenizer.pad_token_id=2")
    ]
    assert "resize" in f.hint
    from cfgcheck.tokenizer.hf import load_auto_tokenizer

    hf = load_auto_tokenizer(folder)
    with pytest.raises(ValueError, match="Asking to pad but the tokenizer does not have a pad"):
        hf(["a b", "a b c d e"], padding=True)
    # the fix the hint offers: pad = eos
    cfg["tokenizer"]["pad_token"] = "</s>"
    assert not fired(cfg, "pad-token-missing")
    hf.pad_token = "</s>"
    assert hf(["a b", "a b c d e"], padding=True)["input_ids"][0][-1] == 2


def test_sentencepiece_without_pad(cfg: dict[str, Any], tmp_path: Path) -> None:
    model = sentencepiece_model(tmp_path / "sp", vocab_size=100)
    use_tokenizer(cfg, model)
    cfg["model"]["vocab_size"] = 100
    assert [f.rule for f in validate(cfg).errors] == ["pad-token-missing"]
    cfg["tokenizer"]["pad_token"] = "<unk>"
    assert validate(cfg).ok


def test_no_padding_no_pad_needed(cfg: dict[str, Any], folder: Path) -> None:
    use_tokenizer(cfg, folder)
    cfg["model"]["vocab_size"] = 259
    cfg["data"].update(padding="do_not_pad", collator="default")
    cfg["trainer"].update(micro_batch_size=1, global_batch_size=None)
    assert validate(cfg).ok


# --- special-token-out-of-range -----------------------------------------------------------


def test_added_pad_id_at_the_embedding_rows(cfg: dict[str, Any], padded_folder: Path) -> None:
    """A pad id of N against N embedding rows: the known real crash."""
    use_tokenizer(cfg, padded_folder, vocab_size=261)
    cfg["model"].update(vocab_size=261, padded_vocab_size=260)
    f = next(f for f in fired(cfg, "special-token-out-of-range"))
    assert "pad token id 260" in f.message and "model.padded_vocab_size=260" in f.message
    assert "tok-pad/special_tokens_map.json" in f.message
    assert f.paths == ("tokenizer.path", "model.padded_vocab_size")
    torch = pytest.importorskip("torch")
    with pytest.raises(IndexError, match="index out of range in self"):
        torch.nn.Embedding(260, 4)(torch.tensor([[5, 260]]))
    cfg["model"]["padded_vocab_size"] = 264
    assert not fired(cfg, "special-token-out-of-range")


def test_declared_pad_token_out_of_range(cfg: dict[str, Any], padded_folder: Path) -> None:
    use_tokenizer(cfg, padded_folder, pad_token="<pad>")
    cfg["model"]["vocab_size"] = 256
    f = only(cfg, "special-token-out-of-range")
    assert f.paths == ("tokenizer.pad_token", "model.padded_vocab_size")
    assert "tokenizer.pad_token in the config" in f.message


# --- special-token-not-in-vocab -----------------------------------------------------------


def test_declared_pad_token_not_in_vocab(cfg: dict[str, Any], folder: Path) -> None:
    use_tokenizer(cfg, folder, pad_token="[PAD]")
    cfg["model"]["vocab_size"] = 259
    f = only(cfg, "special-token-not-in-vocab")
    assert f.severity == "warning"
    assert "tokenizer.pad_token='[PAD]'" in f.message and "unk id 0" in f.message
    cfg["tokenizer"]["pad_token"] = "<unk>"
    assert not fired(cfg, "special-token-not-in-vocab")


# --- pad-is-eos ---------------------------------------------------------------------------


@requires("transformers")
def test_pad_is_eos_with_a_padding_collator(cfg: dict[str, Any], folder: Path) -> None:
    use_tokenizer(cfg, folder, pad_token="</s>")
    cfg["model"]["vocab_size"] = 259
    f = only(cfg, "pad-is-eos")
    assert f.severity == "warning" and "'</s>'" in f.message
    assert "data.ignore_index=-100" in f.message and "never learns to stop" in f.message
    # what a pad-id label mask does: the real EOS at the end of the long sample is masked too
    from cfgcheck.tokenizer.hf import load_auto_tokenizer

    hf = load_auto_tokenizer(folder)
    hf.pad_token = "</s>"
    batch = hf(["a b</s>", "a b c d e</s>"], padding=True)
    labels = [[-100 if t == hf.pad_token_id else t for t in row] for row in batch["input_ids"]]
    assert batch["input_ids"][1][-1] == 2 and labels[1][-1] == -100


@pytest.mark.parametrize(
    "fix",
    [
        {"tokenizer": {"pad_token": "<unk>"}},
        {"data": {"collator": "packed", "padding": "do_not_pad"}},
    ],
)
def test_pad_is_eos_fixes(cfg: dict[str, Any], folder: Path, fix: dict[str, Any]) -> None:
    use_tokenizer(cfg, folder, pad_token="</s>")
    cfg["model"]["vocab_size"] = 259
    for section, values in fix.items():
        cfg[section].update(values)
    assert not fired(cfg, "pad-is-eos")
    assert validate(cfg).ok


def test_declared_only_pad_is_eos(cfg: dict[str, Any]) -> None:
    cfg["tokenizer"].update(pad_token="</s>", pad_token_id=2)
    assert only(cfg, "pad-is-eos").severity == "warning"
