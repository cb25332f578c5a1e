"""Tokenizer call arguments and tokenizer settings taken from the validated config.

``tokenizer(texts, **tokenizer_kwargs(cfg))`` pads and truncates exactly as cfgcheck checked;
:func:`configure_tokenizer` sets the padding side (and the declared pad token) on a
transformers tokenizer and refuses one that disagrees with the config.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from cfgcheck.pipeline import Pipeline
from cfgcheck.runtime._config import Validated, facts_of, run_config
from cfgcheck.runtime.errors import TokenizerMismatchError

PaddingArg = Literal["max_length", "longest"] | bool


class TokenizerKwargs(TypedDict):
    """Keyword arguments of a transformers tokenizer call (``tokenizer(text, **kwargs)``)."""

    padding: PaddingArg
    truncation: bool
    max_length: int
    pad_to_multiple_of: int | None


def tokenizer_kwargs(config: Validated) -> TokenizerKwargs:
    """``padding``, ``truncation``, ``max_length`` and ``pad_to_multiple_of`` from ``data``.

    ``max_length`` is ``data.effective_max_length`` (``data.max_length`` or else
    ``data.max_seq_length``). The padding side is not a call argument here: set it once
    with :func:`configure_tokenizer` (or pass ``padding_side=padding_side(cfg)``).
    """
    kwargs = Pipeline.of(run_config(config)).tokenizer_kwargs()
    return TokenizerKwargs(
        padding=kwargs["padding"],  # type: ignore[typeddict-item]
        truncation=bool(kwargs["truncation"]),
        max_length=int(kwargs["max_length"] or 0),
        pad_to_multiple_of=kwargs["pad_to_multiple_of"],  # type: ignore[typeddict-item]
    )


def padding_side(config: Validated) -> Literal["right", "left"]:
    """``tokenizer.padding_side`` of the config."""
    return run_config(config).tokenizer.padding_side


def configure_tokenizer(tokenizer: Any, config: Validated) -> Any:
    """Make a transformers tokenizer match the config; returns the same tokenizer.

    Sets ``padding_side``; when the tokenizer has no pad token and the config declares
    one (``tokenizer.pad_token``), sets it. Raises :class:`TokenizerMismatchError` when
    the tokenizer's pad id or ``len(tokenizer)`` differs from what the config states, so
    a script cannot train with another tokenizer than the one that was checked.
    """
    cfg = run_config(config)
    facts = facts_of(cfg)
    tokenizer.padding_side = cfg.tokenizer.padding_side
    if tokenizer.pad_token is None and facts.pad_token is not None:
        tokenizer.pad_token = facts.pad_token
    if facts.size is not None and len(tokenizer) != facts.size:
        raise TokenizerMismatchError(
            f"the tokenizer has {len(tokenizer)} tokens but the config's tokenizer has "
            f"{facts.size} ({facts.size_source}): set tokenizer.vocab_size={len(tokenizer)} "
            f"(or tokenizer.path to this tokenizer) and run cfgcheck again"
        )
    if facts.pad_token is not None and tokenizer.pad_token != facts.pad_token:
        raise TokenizerMismatchError(
            f"the tokenizer's pad token is {tokenizer.pad_token!r} but the config has "
            f"tokenizer.pad_token={facts.pad_token}: set tokenizer.pad_token="
            f"{tokenizer.pad_token} in the config, or remove the tokenizer's own pad token"
        )
    if facts.pad_token_id is not None and tokenizer.pad_token_id != facts.pad_token_id:
        raise TokenizerMismatchError(
            f"the tokenizer's pad_token_id is {tokenizer.pad_token_id} but the config has "
            f"tokenizer.pad_token_id={facts.pad_token_id}: set tokenizer.pad_token_id="
            f"{tokenizer.pad_token_id} (and tokenizer.pad_token={tokenizer.pad_token!r}) "
            f"and run cfgcheck again"
        )
    return tokenizer
