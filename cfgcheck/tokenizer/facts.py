"""Tokenizer facts the rules need: size and special-token ids, with where each came from.

Declared values in the ``tokenizer`` section are used as given.
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.schema.tokenizer import TokenizerConfig


@dataclass(frozen=True)
class TokenizerFacts:
    size: int | None
    size_source: str
    pad_token: str | None = None
    pad_token_id: int | None = None
    eos_token: str | None = None
    eos_token_id: int | None = None
    bos_token: str | None = None
    bos_token_id: int | None = None
    unk_token: str | None = None
    unk_token_id: int | None = None

    @property
    def has_pad(self) -> bool:
        return self.pad_token is not None or self.pad_token_id is not None

    def special_ids(self) -> dict[str, int]:
        """``{"pad": id, ...}`` for every special token whose id is known."""
        ids = {
            "pad": self.pad_token_id,
            "eos": self.eos_token_id,
            "bos": self.bos_token_id,
            "unk": self.unk_token_id,
        }
        return {name: i for name, i in ids.items() if i is not None}


def declared_facts(tok: TokenizerConfig) -> TokenizerFacts:
    return TokenizerFacts(
        size=tok.vocab_size,
        size_source="declared in tokenizer.vocab_size",
        pad_token=tok.pad_token,
        pad_token_id=tok.pad_token_id,
        eos_token=tok.eos_token,
        eos_token_id=tok.eos_token_id,
        bos_token=tok.bos_token,
        bos_token_id=tok.bos_token_id,
        unk_token=tok.unk_token,
        unk_token_id=tok.unk_token_id,
    )


def tokenizer_facts(tok: TokenizerConfig) -> TokenizerFacts:
    """The tokenizer's size and special tokens as far as they are known."""
    return declared_facts(tok)
