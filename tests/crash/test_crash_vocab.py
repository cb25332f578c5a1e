"""vocab-mismatch and special-token-out-of-range, reproduced: token ids at or above the
model's embedding rows ("IndexError: index out of range in self" on CPU, a device-side
assert on CUDA; the TinyLlama pretraining crash a few steps in)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils.data import DataLoader  # noqa: E402

import cfgcheck  # noqa: E402
from cfgcheck.runtime import configure_tokenizer, make_collate_fn, tokenizer_kwargs  # noqa: E402
from tests.crash.support import (  # noqa: E402
    TEXTS,
    llama,
    run_config,
    tokenizer_folder,
    train_step,
)

pytestmark = pytest.mark.crash

CHAT = ("<|im_start|>", "<|im_end|>")
BASE = 260  # the base tokenizer: 256 bytes + <unk> <s> </s> <pad>
CHAT_TEXTS = tuple(f"{CHAT[0]}{t}{CHAT[1]}" for t in TEXTS[2:6])


def batches(run: cfgcheck.RunConfig, tok: Any, texts: tuple[str, ...]) -> DataLoader[Any]:
    configure_tokenizer(tok, run)
    data = [dict(tok(t, **tokenizer_kwargs(run))) for t in texts]
    return DataLoader(
        data, batch_size=run.trainer.micro_batch_size, collate_fn=make_collate_fn(run)
    )


# --- a tokenizer with more tokens than the embedding has rows ------------------------------


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """The base tokenizer plus two chat tokens (ids 260, 261): len(tokenizer) == 262."""
    return tokenizer_folder(tmp_path_factory.mktemp("chat"), added=CHAT)


def test_cfgcheck_flags_a_tokenizer_larger_than_the_embedding(chat: tuple[Path, Any]) -> None:
    folder, tok = chat
    assert len(tok) == BASE + 2
    result = cfgcheck.validate(run_config(folder, tok, model={"vocab_size": BASE}))
    (finding,) = result.by_rule("vocab-mismatch")
    assert finding.severity == "error"
    assert f"{BASE + 2} tokens" in finding.message and f"{BASE} embedding rows" in finding.message


def test_the_real_embedding_fails_on_an_added_token(chat: tuple[Path, Any]) -> None:
    folder, tok = chat
    cfg = run_config(folder, tok, model={"vocab_size": BASE})
    unchecked = cfgcheck.RunConfig.model_validate(cfg)
    batch = next(iter(batches(unchecked, tok, CHAT_TEXTS)))
    assert int(batch["input_ids"].max()) == BASE + 1  # <|im_end|>
    model = llama(unchecked.model)
    assert model.get_input_embeddings().num_embeddings == BASE
    with pytest.raises(IndexError, match=r"^index out of range in self$"):
        model(**batch)


def test_the_accepted_vocab_trains(chat: tuple[Path, Any]) -> None:
    folder, tok = chat
    result = cfgcheck.validate(run_config(folder, tok, model={"vocab_size": BASE + 2}))
    assert result.ok, [f.message for f in result.errors]
    assert result.config is not None
    batch = next(iter(batches(result.config, tok, CHAT_TEXTS)))
    assert int(batch["input_ids"].max()) == BASE + 1
    train_step(llama(result.config.model), batch)


# --- a pad token added at id == embedding rows (Llama-2: [PAD] = 32000 of 32000 rows) -------


@pytest.fixture(scope="module")
def added_pad(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """No pad in the base vocabulary (259 tokens); "[PAD]" added after it, id 259."""
    return tokenizer_folder(tmp_path_factory.mktemp("pad"), pad="[PAD]", added=("[PAD]",))


def test_cfgcheck_flags_a_pad_id_equal_to_the_rows(added_pad: tuple[Path, Any]) -> None:
    folder, tok = added_pad
    rows = BASE - 1
    assert tok.pad_token_id == rows
    result = cfgcheck.validate(run_config(folder, tok, model={"vocab_size": rows}))
    (finding,) = result.by_rule("special-token-out-of-range")
    assert finding.severity == "error" and not result.ok
    assert re.search(rf"pad[ _]token[ _]id[ =]{rows}\b", finding.message)
    assert f"model.padded_vocab_size={rows}" in finding.message


def test_the_real_embedding_fails_on_the_pad_id(added_pad: tuple[Path, Any]) -> None:
    folder, tok = added_pad
    rows = BASE - 1
    unchecked = cfgcheck.RunConfig.model_validate(
        run_config(folder, tok, model={"vocab_size": rows})
    )
    batch = next(iter(batches(unchecked, tok, TEXTS[2:6])))  # plain text: only pads are >= rows
    assert int(batch["input_ids"].max()) == rows
    model = llama(unchecked.model)
    with pytest.raises(IndexError, match=r"^index out of range in self$"):
        model(**batch)


def test_pad_equal_eos_in_the_vocab_trains(tmp_path: Path) -> None:
    """The hint's fix: no added pad, pad = eos (an id inside the embedding)."""
    folder, tok = tokenizer_folder(tmp_path, pad=False)
    rows = BASE - 1
    cfg = run_config(
        folder,
        tok,
        model={"vocab_size": rows},
        tokenizer={"pad_token": "</s>", "pad_token_id": 2},
    )
    result = cfgcheck.validate(cfg)
    assert result.ok, [f.message for f in result.errors]
    assert result.config is not None
    batch = next(iter(batches(result.config, tok, TEXTS[2:6])))
    assert (batch["input_ids"] == 2).any() and int(batch["input_ids"].max()) < rows
    train_step(llama(result.config.model), batch)
