"""The tokenizer files at ``tokenizer.path``: readable, and agreeing with declared values."""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.findings import Fix
from cfgcheck.overrides import format_value
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig
from cfgcheck.tokenizer import tokenizer_facts


@rule("tokenizer-unreadable", requires=("tokenizer",))
def tokenizer_unreadable(cfg: RunConfig) -> Iterator[Problem]:
    """tokenizer.path must point to a readable tokenizer.json, folder or tokenizer.model."""
    facts = tokenizer_facts(cfg.tokenizer)
    if facts.error is None:
        return
    yield Problem(
        "error",
        ("tokenizer.path",),
        f"tokenizer.path={facts.path} cannot be used: {facts.error}; the training script "
        f"fails loading it (rules below use the declared tokenizer values instead)",
        "point tokenizer.path at a tokenizer.json, a folder holding one (with its "
        "tokenizer_config.json), or a SentencePiece tokenizer.model; relative paths resolve "
        "against the current directory",
        fixes=(
            Fix(
                ("tokenizer.path=null",),
                "check against the declared tokenizer values only (no files)",
            ),
        ),
    )


@rule("tokenizer-declared-mismatch", requires=("tokenizer",))
def tokenizer_declared_mismatch(cfg: RunConfig) -> Iterator[Problem]:
    """Declared tokenizer.vocab_size and special-token ids must match the tokenizer files."""
    facts = tokenizer_facts(cfg.tokenizer)
    for c in facts.conflicts:
        yield Problem(
            "error",
            (c.path, "tokenizer.path"),
            f"{c.path}={c.declared} is declared, but the tokenizer at tokenizer.path="
            f"{facts.path} says {c.resolved} ({c.source}): rules and scripts that trust the "
            f"declared value use the wrong number",
            f"set {c.path}={c.value} (the files' value), or remove {c.path} and let cfgcheck "
            f"read it from the files",
            fixes=(
                Fix((f"{c.path}={c.value}",), "declare the files' value"),
                Fix((f"{c.path}=null",), "let cfgcheck read it from the files"),
            ),
        )


@rule("special-token-not-in-vocab", requires=("tokenizer",))
def special_token_not_in_vocab(cfg: RunConfig) -> Iterator[Problem]:
    """A declared special-token string must exist in the tokenizer's vocabulary."""
    facts = tokenizer_facts(cfg.tokenizer)
    unk = facts.unk_token_id
    for name, token in facts.unknown_tokens.items():
        known = [
            (what, t)
            for what, t in (("unk", facts.unk_token), ("eos", facts.eos_token))
            if t is not None and what != name and what not in facts.unknown_tokens
        ]
        example = f" (e.g. the {known[0][0]} token {known[0][1]!r})" if known else ""
        becomes = (
            f"transformers silently maps it to the unk id {unk}"
            if unk is not None
            else "transformers gives it no id"
        )
        yield Problem(
            "warning",
            (f"tokenizer.{name}_token", "tokenizer.path"),
            f"tokenizer.{name}_token={token!r} is not in the vocabulary of tokenizer.path="
            f"{facts.path} ({facts.size_source}): {becomes}",
            f"use a token the tokenizer has for tokenizer.{name}_token{example}, or add "
            f"{token!r} with tokenizer.add_special_tokens and resize the model's embeddings",
            fixes=(
                *(
                    Fix((f"tokenizer.{name}_token={text}",), f"use the {what} token {t!r}")
                    for what, t in known
                    if (text := format_value(t)) is not None
                ),
                Fix(
                    (f"tokenizer.{name}_token=null",),
                    "declare no such token (the files' own, if any, applies)",
                ),
            ),
        )
