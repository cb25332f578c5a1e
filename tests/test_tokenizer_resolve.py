"""Tokenizer resolution: the fast ``tokenizers`` path agrees with transformers' AutoTokenizer
on real tokenizers built here; bad files become one-line errors; resolution is cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.schema.tokenizer import TokenizerConfig
from cfgcheck.tokenizer import TokenizerFileError, resolve_tokenizer, tokenizer_facts
from cfgcheck.tokenizer.hf import load_auto_tokenizer
from cfgcheck.tokenizer.resolve import FAST_PATH_CLASSES
from tests.conftest import requires
from tests.factories import bpe, save_file, save_folder, sentencepiece_model, wordpiece

SPECIALS = ("pad", "eos", "bos", "unk")


def bpe_with_pad_added(d: Path) -> Path:
    """<pad> is only in tokenizer_config.json: transformers adds it, len grows by one."""
    return save_folder(bpe(added=["<extra>"]), d, pad_token="<pad>")


def bpe_no_pad(d: Path) -> Path:
    return save_folder(bpe(), d)


def wordpiece_bert(d: Path) -> Path:
    tok = wordpiece(added=["[MASK]", "<ent>"])
    return save_folder(
        tok, d, pad_token="[PAD]", eos_token="[SEP]", bos_token="[CLS]", unk_token="[UNK]"
    )


def wordpiece_legacy_added_tokens_json(d: Path) -> Path:
    """special_tokens_map.json with AddedToken dict forms, added_tokens.json with new tokens."""
    save_folder(wordpiece(), d, pad_token="[PAD]", eos_token="[SEP]", bos_token=None)
    specials = {
        "pad_token": {"content": "[PAD]", "lstrip": False, "rstrip": False, "special": True},
        "eos_token": {"content": "[SEP]", "lstrip": False, "rstrip": False},
        "unk_token": "[UNK]",
    }
    (d / "special_tokens_map.json").write_text(json.dumps(specials))
    (d / "added_tokens.json").write_text(json.dumps({"<new1>": 150, "<new2>": 151}))
    return d


def bpe_added_tokens_decoder(d: Path) -> Path:
    """transformers 5 layout: tokenizer_config.json with added_tokens_decoder and dict forms."""
    tok = bpe(special=("<unk>", "<s>", "</s>", "<pad>"))
    save_file(tok, d)
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": {
            str(tok.token_to_id(t)): {
                "content": t,
                "special": True,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "single_word": False,
            }
            for t in ("<unk>", "<s>", "</s>", "<pad>")
        },
        "pad_token": {"content": "<pad>", "__type": "AddedToken"},
        "eos_token": "</s>",
        "bos_token": "<s>",
        "unk_token": "<unk>",
    }
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


def wordpiece_json_only(d: Path) -> Path:
    """A folder with a lone tokenizer.json (added tokens inside it, no side files)."""
    save_file(wordpiece(added=["<x>", "<y>"]), d)
    return d


def demo_tokenizer(d: Path) -> Path:
    """The demo tokenizer shipped in assets/ (built from the shipped dataset)."""
    import shutil

    from tests.conftest import REPO

    shutil.copytree(REPO / "assets" / "demo-tokenizer", d)
    return d


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "wordpiece-json-only": wordpiece_json_only,
    "demo": demo_tokenizer,
    "bpe-pad-added": bpe_with_pad_added,
    "bpe-no-pad": bpe_no_pad,
    "wordpiece-bert": wordpiece_bert,
    "wordpiece-legacy": wordpiece_legacy_added_tokens_json,
    "bpe-added-tokens-decoder": bpe_added_tokens_decoder,
}


def hf_view(hf: Any) -> dict[str, Any]:
    view: dict[str, Any] = {"len": len(hf)}
    for name in SPECIALS:
        view[name] = (getattr(hf, f"{name}_token"), getattr(hf, f"{name}_token_id"))
    return view


def fast_view(path: Path) -> dict[str, Any]:
    real = resolve_tokenizer(path)
    view: dict[str, Any] = {"len": real.size}
    for name in SPECIALS:
        s = real.specials.get(name)
        view[name] = (s.token, s.id) if s else (None, None)
    return view


@requires("transformers")
@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_fast_path_agrees_with_transformers(kind: str, tmp_path: Path) -> None:
    folder = BUILDERS[kind](tmp_path / kind)
    fast = fast_view(folder)
    assert resolve_tokenizer(folder).backend == "tokenizers"
    assert fast == hf_view(load_auto_tokenizer(folder))


def test_added_tokens_are_counted_and_named(tmp_path: Path) -> None:
    real = resolve_tokenizer(bpe_with_pad_added(tmp_path / "tok"))
    assert real.added == ("<extra>", "<pad>")
    assert real.size == real.base_size + 2
    assert real.size_source == "tok/ tokenizer.json + 2 added tokens: <extra>, <pad>"
    assert real.specials["pad"].source == "tok/special_tokens_map.json"


@requires("transformers")
def test_sentencepiece_model_goes_through_transformers(tmp_path: Path) -> None:
    import sentencepiece as spm

    model = sentencepiece_model(tmp_path / "sp", vocab_size=100)
    sp = spm.SentencePieceProcessor(model_file=str(model))
    for path in (model.parent, model):
        real = resolve_tokenizer(path)
        assert real.backend == "transformers"
        assert real.size == sp.get_piece_size() == 100
        assert real.specials["unk"].id == sp.unk_id() == 0
        assert real.specials["bos"].id == sp.bos_id() == 1
        assert real.specials["eos"].id == sp.eos_id() == 2
        assert "pad" not in real.specials


@requires("transformers")
def test_oddly_named_sentencepiece_file(tmp_path: Path) -> None:
    model = sentencepiece_model(tmp_path / "sp")
    renamed = model.rename(tmp_path / "spm-v1.model")
    assert resolve_tokenizer(renamed).size == 100


def test_lone_tokenizer_json_file(tmp_path: Path) -> None:
    path = save_file(wordpiece(added=["<x>"]), tmp_path / "wp")
    real = resolve_tokenizer(path)
    assert real.size == 151 and real.added == ("<x>",)
    assert real.specials == {}


def test_relative_path_resolves_against_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bpe_no_pad(tmp_path / "tokenizers" / "mine")
    monkeypatch.chdir(tmp_path)
    facts = tokenizer_facts(TokenizerConfig(path="tokenizers/mine"))
    assert facts.resolved and facts.size == 259 and facts.eos_token_id == 2


def test_resolution_is_cached_until_the_file_changes(tmp_path: Path) -> None:
    folder = bpe_no_pad(tmp_path / "tok")
    first = resolve_tokenizer(folder)
    assert resolve_tokenizer(folder) is first
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["pad_token"] = "<pad>"
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    st = (folder / "tokenizer_config.json").stat()
    os.utime(folder / "tokenizer_config.json", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    second = resolve_tokenizer(folder)
    assert second is not first and second.size == first.size + 1


# --- declared values merged with the files ----------------------------------------------


def test_declared_token_string_is_applied_and_looked_up(tmp_path: Path) -> None:
    folder = bpe_no_pad(tmp_path / "tok")
    facts = tokenizer_facts(TokenizerConfig(path=str(folder), pad_token="</s>"))
    assert (facts.pad_token, facts.pad_token_id) == ("</s>", 2)
    assert facts.sources["pad"] == "tokenizer.pad_token in the config"
    assert facts.conflicts == ()


def test_declared_values_that_disagree_are_conflicts(tmp_path: Path) -> None:
    folder = bpe_no_pad(tmp_path / "tok")
    facts = tokenizer_facts(TokenizerConfig(path=str(folder), vocab_size=32000, eos_token_id=7))
    by_path = {c.path: c for c in facts.conflicts}
    assert by_path["tokenizer.vocab_size"].declared == "32000"
    assert by_path["tokenizer.vocab_size"].resolved == "259"
    assert by_path["tokenizer.eos_token_id"].resolved == "'</s>' has id 2"
    assert facts.eos_token_id == 2  # the files win


@requires("transformers")
def test_unknown_declared_token_maps_to_unk_like_transformers(tmp_path: Path) -> None:
    folder = bpe_no_pad(tmp_path / "tok")
    facts = tokenizer_facts(TokenizerConfig(path=str(folder), pad_token="[PAD]"))
    hf = load_auto_tokenizer(folder)
    hf.pad_token = "[PAD]"
    assert facts.unknown_tokens == {"pad": "[PAD]"}
    assert facts.pad_token_id == hf.pad_token_id == 0


# --- bad files --------------------------------------------------------------------------


def _garbage_json(d: Path) -> Path:
    d.mkdir()
    (d / "tokenizer.json").write_text("{not json")
    return d


def _wrong_json(d: Path) -> Path:
    d.mkdir()
    (d / "tokenizer.json").write_text('{"model": {"type": "Nope"}}')
    return d


def _bad_side_file(d: Path) -> Path:
    bpe_no_pad(d)
    (d / "tokenizer_config.json").write_text("[1, 2")
    return d


def _empty_folder(d: Path) -> Path:
    d.mkdir()
    return d


def _garbage_model(d: Path) -> Path:
    d.mkdir()
    (d / "tokenizer.model").write_bytes(b"\x00\x01 not a sentencepiece model")
    return d


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_garbage_json, "is not a valid tokenizer.json"),
        (_wrong_json, "is not a valid tokenizer.json"),
        (_bad_side_file, "tokenizer_config.json is not valid JSON"),
        (_empty_folder, "holds neither a tokenizer.json nor a tokenizer.model"),
        pytest.param(_garbage_model, "transformers cannot load", marks=requires("transformers")),
        (lambda d: d, "does not exist"),
    ],
)
def test_bad_tokenizer_files_are_one_line_errors(
    make: Callable[[Path], Path], reason: str, tmp_path: Path
) -> None:
    path = make(tmp_path / "tok")
    with pytest.raises(TokenizerFileError) as e:
        resolve_tokenizer(path)
    assert reason in str(e.value) and "\n" not in str(e.value)
    facts = tokenizer_facts(TokenizerConfig(path=str(path), vocab_size=32000))
    assert facts.error is not None and reason in facts.error
    assert facts.size == 32000 and not facts.resolved  # declared values remain usable


def test_fast_path_imports_neither_transformers_nor_torch(tmp_path: Path) -> None:
    folder = bpe_with_pad_added(tmp_path / "tok")
    code = (
        "import sys; from cfgcheck.tokenizer import resolve_tokenizer; "
        f"r = resolve_tokenizer({str(folder)!r}); print(r.size); "
        "assert 'transformers' not in sys.modules and 'torch' not in sys.modules"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "261"


def _with_class(d: Path, cls: str) -> Path:
    bpe_with_pad_added(d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["tokenizer_class"] = cls
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


@requires("transformers")
@pytest.mark.parametrize("cls", sorted(c for c in FAST_PATH_CLASSES if c is not None))
def test_fast_path_classes_agree_with_transformers(cls: str, tmp_path: Path) -> None:
    folder = _with_class(tmp_path / cls, cls)
    assert resolve_tokenizer(folder).backend == "tokenizers"
    assert fast_view(folder) == hf_view(load_auto_tokenizer(folder))


@requires("transformers")
@pytest.mark.parametrize("cls", ["BertTokenizer", "GemmaTokenizerFast"])
def test_classes_that_add_tokens_go_through_transformers(cls: str, tmp_path: Path) -> None:
    """These classes add default special tokens ([MASK], ...) on load: the plain
    tokenizer.json emulation would undercount, so transformers answers."""
    folder = _with_class(tmp_path / cls, cls)
    real = resolve_tokenizer(folder)
    hf = load_auto_tokenizer(folder)
    assert real.backend == "transformers" and real.size == len(hf) > 261
    assert fast_view(folder) == hf_view(hf)


def test_without_transformers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Core install: a SentencePiece model names the extra to install; a class that would
    need transformers falls back to the tokenizer.json emulation."""
    model = sentencepiece_model(tmp_path / "sp")
    bert = _with_class(tmp_path / "bert", "BertTokenizer")
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(TokenizerFileError, match=r"install cfgcheck\[transformers\]"):
        resolve_tokenizer(model)
    fallback = resolve_tokenizer(bert)
    assert fallback.backend == "tokenizers"
    assert "BertTokenizer may add tokens on load" in fallback.size_source
