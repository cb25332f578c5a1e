"""cfgcheck.pipeline against the real stack: the lengths it predicts are the lengths a real
PreTrainedTokenizerFast call and transformers' DataCollatorWithPadding produce, and
cfgcheck.runtime's collate functions (which use it) produce them too."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

import cfgcheck
from cfgcheck.pipeline import Pipeline, round_up
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.trainer import TrainerConfig
from cfgcheck.tokenizer import resolve_tokenizer
from tests.factories import CORPUS, bpe, save_file, save_folder

TEXTS = (CORPUS[0], " ".join(CORPUS[:3]), "LoRA", CORPUS[4], "A tokenizer maps text.")


def pipe(**data: Any) -> Pipeline:
    trainer = TrainerConfig(micro_batch_size=data.pop("micro_batch_size", 2))
    return Pipeline.from_sections(DataConfig(**{"max_seq_length": 32, **data}), trainer)


def test_round_up() -> None:
    assert [round_up(n, 8) for n in (1, 8, 9, 16)] == [8, 8, 16, 16]
    assert round_up(7, None) == 7


def test_packed_rows_are_max_seq_length_never_rounded() -> None:
    p = pipe(collator="packed", padding="do_not_pad", pad_to_multiple_of=12, max_seq_length=30)
    assert p.longest == p.shortest == 30 and p.exact
    assert p.pad_uses() == ("packing",) and not p.passes_mask


def test_max_length_padding_with_truncation_is_uniform() -> None:
    p = pipe(padding="max_length", max_length=48, collator="default")
    assert p.uniform and not p.may_be_ragged and p.longest == p.shortest == 48
    assert p.memory_length() == 48  # above max_seq_length=32: that is what the model sees


def test_pad_uses() -> None:
    assert pipe(padding="do_not_pad", collator="default").pad_uses() == ()
    # transformers' padding collators call tokenizer.pad, which needs a pad token regardless
    assert pipe(padding="do_not_pad", micro_batch_size=1).pad_uses() == ("collator",)
    assert pipe().pad_uses() == ("tokenizer", "collator")


@pytest.fixture(scope="module")
def hf_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("transformers")
    from transformers import PreTrainedTokenizerFast

    folder = save_folder(
        bpe(special=("<unk>", "<s>", "</s>", "<pad>")),
        tmp_path_factory.mktemp("pipe"),
        pad_token="<pad>",
    )
    return PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)


GRID = list(
    itertools.product(
        ["longest", "max_length", "do_not_pad"], [True, False], [None, 8, 12], [12, 16, 40]
    )
)


@pytest.mark.parametrize(("padding", "truncation", "multiple", "max_length"), GRID)
def test_sample_length_is_the_real_tokenizer_call(
    hf_tokenizer: Any, padding: str, truncation: bool, multiple: int | None, max_length: int
) -> None:
    p = pipe(
        padding=padding, truncation=truncation, pad_to_multiple_of=multiple, max_length=max_length
    )
    for text in TEXTS:
        n = len(hf_tokenizer(text)["input_ids"])
        if p.multiple_mismatch:
            with pytest.raises(ValueError, match="not a multiple of pad_to_multiple_of"):
                hf_tokenizer(text, **p.tokenizer_kwargs())
            continue
        real = len(hf_tokenizer(text, **p.tokenizer_kwargs())["input_ids"])
        assert real == p.sample_length(n), (text, n)


@pytest.mark.parametrize("multiple", [None, 8, 12])
def test_padded_batch_length_is_data_collator_with_padding(
    hf_tokenizer: Any, multiple: int | None
) -> None:
    from transformers import DataCollatorWithPadding

    p = pipe(padding="do_not_pad", pad_to_multiple_of=multiple, max_length=40)
    collator = DataCollatorWithPadding(hf_tokenizer, pad_to_multiple_of=multiple)
    for pair in itertools.combinations(TEXTS, 2):
        features = [dict(hf_tokenizer(t, **p.tokenizer_kwargs())) for t in pair]
        raw = [len(hf_tokenizer(t)["input_ids"]) for t in pair]
        assert collator(features)["input_ids"].shape[1] == p.batch_length(raw)


def test_runtime_collate_agrees_with_the_description(hf_tokenizer: Any, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from cfgcheck.runtime import make_collate_fn, tokenizer_kwargs

    folder = Path(hf_tokenizer.name_or_path)
    for collator, multiple in [("padded", None), ("padded", 8), ("packed", None)]:
        cfg = {
            "name": "t",
            "model": {"name": "m", "block_size": 64, "vocab_size": len(hf_tokenizer)}
            | {"n_layer": 1, "n_embd": 32, "n_head": 2},
            "tokenizer": {"path": str(folder)},
            "data": {"max_seq_length": 32, "max_length": 40, "pad_to_multiple_of": multiple}
            | {"padding": "do_not_pad", "collator": collator},
            "trainer": {"micro_batch_size": 2},
        }
        run = cfgcheck.RunConfig.model_validate(cfg)
        p = Pipeline.of(run)
        collate = make_collate_fn(run)
        for pair in itertools.combinations(TEXTS, 2):
            features = [dict(hf_tokenizer(t, **tokenizer_kwargs(run))) for t in pair]
            raw = [len(hf_tokenizer(t)["input_ids"]) for t in pair]
            assert collate(features)["input_ids"].shape[1] == p.batch_length(raw)


def test_padding_section_pad_token_is_resolved(tmp_path: Path) -> None:
    """PreTrainedTokenizerFast takes the pad token of tokenizer.json's "padding" section; a
    string missing from the vocabulary is added as a special token."""
    tok = bpe(special=("<unk>", "<s>", "</s>", "<pad>"))
    tok.enable_padding(pad_id=3, pad_token="<pad>")
    real = resolve_tokenizer(save_file(tok, tmp_path / "in"))
    assert real.specials["pad"].token == "<pad>" and real.specials["pad"].id == 3
    missing = bpe()
    missing.enable_padding(pad_id=0, pad_token="[PAD]")
    folder = save_folder(missing, tmp_path / "out")
    resolved = resolve_tokenizer(folder)
    assert resolved.specials["pad"].id == resolved.base_size == resolved.size - 1
    transformers = pytest.importorskip("transformers")
    hf = transformers.PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)
    assert (hf.pad_token, hf.pad_token_id, len(hf)) == (
        "[PAD]",
        resolved.specials["pad"].id,
        resolved.size,
    )
