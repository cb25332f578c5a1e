"""Model embedding rows against the tokenizer vocabulary."""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig
from cfgcheck.tokenizer import tokenizer_facts

_CRASH = (
    'ids at or above the embedding rows crash the first batch that holds one: "IndexError: '
    'index out of range in self" on CPU, a device-side assert on CUDA'
)


@rule("vocab-mismatch", requires=("model", "tokenizer"))
def vocab_mismatch(cfg: RunConfig) -> Iterator[Problem]:
    """The tokenizer must fit the model's embedding rows and match the vocab it was built for."""
    m = cfg.model
    if m.rows < m.vocab_size:
        yield Problem(
            "error",
            ("model.padded_vocab_size", "model.vocab_size"),
            f"model.padded_vocab_size={m.rows} is below model.vocab_size={m.vocab_size}: "
            f"the embedding has fewer rows than the vocabulary; {_CRASH}",
            f"remove model.padded_vocab_size to derive it, or set it >= {m.vocab_size}",
        )
    facts = tokenizer_facts(cfg.tokenizer)
    if facts.size is None:
        return
    size, where, src = facts.size, facts.size_source, facts.size_path
    if size > m.rows:
        yield Problem(
            "error",
            (src, "model.padded_vocab_size"),
            f"the tokenizer has {size} tokens ({where}) but model {m.name} has only "
            f"{m.rows} embedding rows (model.padded_vocab_size): {_CRASH}",
            f"use the tokenizer the model was trained with, or set model.vocab_size={size} "
            f"(and resize the embeddings when starting from a checkpoint)",
        )
    elif size != m.vocab_size:
        yield Problem(
            "error",
            (src, "model.vocab_size"),
            f"the tokenizer has {size} tokens ({where}) but model.vocab_size={m.vocab_size}: "
            f"the model was built for another tokenizer, so ids map to the wrong embeddings",
            f"set model.vocab_size={size} for a model trained from scratch, or use the "
            f"tokenizer {m.name} was trained with",
        )
