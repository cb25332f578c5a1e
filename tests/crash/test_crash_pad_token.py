"""pad-token-missing, reproduced: padding with a tokenizer that has no pad token (Llama-2,
TinyLlama and Mistral tokenizers ship none). transformers refuses with "ValueError: Asking
to pad but the tokenizer does not have a padding token"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils.data import DataLoader  # noqa: E402

import cfgcheck  # noqa: E402
from cfgcheck.runtime import (  # noqa: E402
    PadTokenMissingError,
    configure_tokenizer,
    make_collate_fn,
    tokenizer_kwargs,
)
from tests.crash.support import (  # noqa: E402
    TEXTS,
    llama,
    run_config,
    tokenizer_folder,
    train_step,
)

pytestmark = pytest.mark.crash


@pytest.fixture
def no_pad(tmp_path: Path) -> tuple[Path, Any]:
    return tokenizer_folder(tmp_path, pad=False)


def test_cfgcheck_flags_padding_without_a_pad_token(no_pad: tuple[Path, Any]) -> None:
    folder, tok = no_pad
    assert tok.pad_token is None
    result = cfgcheck.validate(run_config(folder, tok))
    (finding,) = result.by_rule("pad-token-missing")
    assert finding.severity == "error" and not result.ok
    assert "data.padding=longest" in finding.message
    assert "data.collator=padded" in finding.message
    assert "Asking to pad but the tokenizer does not have a padding token" in finding.message


def test_the_real_tokenizer_refuses_to_pad(no_pad: tuple[Path, Any]) -> None:
    folder, tok = no_pad
    unchecked = cfgcheck.RunConfig.model_validate(run_config(folder, tok))
    configure_tokenizer(tok, unchecked)
    with pytest.raises(
        ValueError, match=r"^Asking to pad but the tokenizer does not have a padding token"
    ):
        tok(list(TEXTS[2:6]), **tokenizer_kwargs(unchecked))
    # cfgcheck's own collate function refuses the same config before the first batch
    with pytest.raises(PadTokenMissingError):
        make_collate_fn(unchecked)


def test_pad_equal_eos_trains(no_pad: tuple[Path, Any]) -> None:
    """The hint's first fix: tokenizer.pad_token=</s> (pad = eos)."""
    folder, tok = no_pad
    cfg = run_config(folder, tok, tokenizer={"pad_token": "</s>", "pad_token_id": 2})
    result = cfgcheck.validate(cfg)
    assert result.ok, [f.message for f in result.errors]
    assert result.config is not None
    configure_tokenizer(tok, result.config)  # sets tokenizer.pad_token = "</s>"
    assert tok.pad_token_id == 2
    data = [dict(tok(t, **tokenizer_kwargs(result.config))) for t in TEXTS[2:6]]
    loader = DataLoader(data, batch_size=4, collate_fn=make_collate_fn(result.config))
    batch = next(iter(loader))
    assert batch["attention_mask"].eq(0).any()
    train_step(llama(result.config.model), batch)
