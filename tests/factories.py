"""Build real tokenizers with the ``tokenizers`` library from text written here; nothing is
downloaded. Each builder saves a ``tokenizer.json`` (and, for folders, the transformers side
files) so the code under test reads real files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

CORPUS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "Gradient accumulation sums gradients over several micro batches.",
    "A tokenizer maps text to integer ids from a fixed vocabulary.",
    "Padding every sample to max_length lets default_collate stack a batch.",
    "Cannot attend to more tokens than the block size allows.",
    "LoRA trains low-rank adapters on top of frozen weights.",
    "Mixed precision keeps master weights in float32.",
    "The embedding has one row per token id in the vocabulary.",
) * 4


def bpe(
    vocab_size: int = 120,
    special: Sequence[str] = ("<unk>", "<s>", "</s>"),
    added: Sequence[str] = (),
    corpus: Sequence[str] = CORPUS,
) -> Tokenizer:
    """A byte-level BPE tokenizer trained on ``corpus``; ``added`` tokens come after training."""
    tok = Tokenizer(models.BPE(unk_token=special[0] if special else None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    if added:
        tok.add_special_tokens(list(added))
    return tok


def wordpiece(
    vocab_size: int = 150,
    special: Sequence[str] = ("[UNK]", "[PAD]", "[CLS]", "[SEP]"),
    added: Sequence[str] = (),
    corpus: Sequence[str] = CORPUS,
) -> Tokenizer:
    """A WordPiece tokenizer (BERT-style) trained on ``corpus``."""
    tok = Tokenizer(models.WordPiece(unk_token=special[0]))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=list(special), show_progress=False
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    if added:
        tok.add_special_tokens(list(added))
    return tok


def save_file(tok: Tokenizer, directory: Path) -> Path:
    """Save a lone ``tokenizer.json`` and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    tok.save(str(path))
    return path


def save_folder(
    tok: Tokenizer,
    directory: Path,
    *,
    pad_token: str | None = None,
    eos_token: str | None = "</s>",
    bos_token: str | None = "<s>",
    unk_token: str | None = "<unk>",
) -> Path:
    """Save a transformers-style folder: tokenizer.json, tokenizer_config.json,
    special_tokens_map.json. Returns the folder."""
    save_file(tok, directory)
    specials = {
        k: v
        for k, v in {
            "pad_token": pad_token,
            "eos_token": eos_token,
            "bos_token": bos_token,
            "unk_token": unk_token,
        }.items()
        if v is not None
    }
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 2048, **specials}
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (directory / "special_tokens_map.json").write_text(json.dumps(specials, indent=2))
    return directory


def sentencepiece_model(
    directory: Path, vocab_size: int = 100, corpus: Sequence[str] = CORPUS
) -> Path:
    """Train a SentencePiece BPE model (Llama layout: <unk>=0, <s>=1, </s>=2, no pad) on
    ``corpus`` with the ``sentencepiece`` library; save ``directory/tokenizer.model``.
    Skips the calling test when ``sentencepiece`` is not installed."""
    import io

    import pytest

    pytest.importorskip("sentencepiece")

    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(list(corpus) * 3),
        model_writer=out,
        vocab_size=vocab_size,
        model_type="bpe",
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.model"
    path.write_bytes(out.getvalue())
    return path
