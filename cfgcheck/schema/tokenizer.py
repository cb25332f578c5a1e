"""The ``tokenizer`` section: where the tokenizer lives and its special tokens."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cfgcheck.schema._base import Section
from cfgcheck.schema.bounds import TokenId, Vocab


class TokenizerConfig(Section):
    path: str | None = Field(
        None,
        description="Local tokenizer: a tokenizer.json, a folder holding one, or a "
        "SentencePiece tokenizer.model. Relative paths resolve against the working directory.",
    )
    vocab_size: Vocab | None = Field(
        None, description="Declared len(tokenizer): base vocabulary plus added tokens."
    )
    pad_token: str | None = None
    pad_token_id: TokenId | None = None
    eos_token: str | None = None
    eos_token_id: TokenId | None = None
    bos_token: str | None = None
    bos_token_id: TokenId | None = None
    unk_token: str | None = None
    unk_token_id: TokenId | None = None
    padding_side: Literal["right", "left"] = "right"
