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
    placeholder_tokens_from: TokenId | None = Field(
        None,
        description="The first id of added tokens that neither text nor the chat template "
        "produces (image placeholders, reserved ids), which a model may leave without an "
        "embedding row: Gemma 3 1B's <image_soft_token>. Ids beyond the rows from here up "
        "are a warning, not an error.",
    )
    pad_token: str | None = Field(
        None, description="The pad token string, set on the tokenizer as a training script does."
    )
    pad_token_id: TokenId | None = Field(
        None, description="Declared id of the pad token (checked against the files)."
    )
    eos_token: str | None = Field(
        None, description="The eos token string, set on the tokenizer as a training script does."
    )
    eos_token_id: TokenId | None = Field(
        None, description="Declared id of the eos token (checked against the files)."
    )
    bos_token: str | None = Field(
        None, description="The bos token string, set on the tokenizer as a training script does."
    )
    bos_token_id: TokenId | None = Field(
        None, description="Declared id of the bos token (checked against the files)."
    )
    unk_token: str | None = Field(
        None, description="The unk token string, set on the tokenizer as a training script does."
    )
    unk_token_id: TokenId | None = Field(
        None, description="Declared id of the unk token (checked against the files)."
    )
    padding_side: Literal["right", "left"] = Field(
        "right", description="Side the tokenizer and the padded collator pad on."
    )
