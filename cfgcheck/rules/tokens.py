"""Special tokens: a pad token when padding, ids inside the embedding, the ignore index."""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig
from cfgcheck.tokenizer import tokenizer_facts


def pads(cfg: RunConfig) -> bool:
    """Whether the pipeline pads: tokenizer padding, or a padding collator on batches > 1."""
    d = cfg.data
    return d.padding != "do_not_pad" or (
        d.collator == "padded" and cfg.trainer.micro_batch_size > 1
    )


@rule("pad-token-missing", requires=("tokenizer", "data", "trainer"))
def pad_token_missing(cfg: RunConfig) -> Iterator[Problem]:
    """Padding needs a pad token (transformers: "Asking to pad but the tokenizer ...")."""
    facts = tokenizer_facts(cfg.tokenizer)
    if facts.has_pad or not pads(cfg):
        return
    eos = facts.eos_token or "the eos token"
    eos_id = (
        f" (tokenizer.pad_token_id={facts.eos_token_id})" if facts.eos_token_id is not None else ""
    )
    where = f"the tokenizer at tokenizer.path={facts.path}" if facts.resolved else "the tokenizer"
    yield Problem(
        "error",
        ("tokenizer.pad_token", "data.padding", "data.collator"),
        f"data.padding={cfg.data.padding} with data.collator={cfg.data.collator} pads, but "
        f'{where} has no pad token: transformers fails with "ValueError: Asking to '
        f'pad but the tokenizer does not have a padding token"',
        f"set tokenizer.pad_token to an existing token (pad = eos: tokenizer.pad_token={eos}"
        f"{eos_id}, or the unk token), or add a pad token "
        f"(tokenizer.add_special_tokens({{'pad_token': '<pad>'}})) and resize the model's "
        f"embeddings (model.resize_token_embeddings(len(tokenizer)))",
    )


@rule("pad-is-eos", requires=("tokenizer", "data", "trainer"))
def pad_is_eos(cfg: RunConfig) -> Iterator[Problem]:
    """pad = eos with a padding collator: masking pad labels also masks every real EOS."""
    facts = tokenizer_facts(cfg.tokenizer)
    if cfg.data.collator != "padded" or not pads(cfg):
        return
    same_id = facts.pad_token_id is not None and facts.pad_token_id == facts.eos_token_id
    same_token = facts.pad_token is not None and facts.pad_token == facts.eos_token
    if not (same_id or same_token):
        return
    shown = facts.pad_token if facts.pad_token is not None else f"id {facts.pad_token_id}"
    yield Problem(
        "warning",
        ("tokenizer.pad_token", "tokenizer.eos_token", "data.collator"),
        f"tokenizer.pad_token is the eos token ({shown!r}) and data.collator=padded: a collator "
        f"that sets labels to data.ignore_index={cfg.data.ignore_index} where input_ids == "
        f"pad_token_id (transformers' DataCollatorForLanguageModeling does) also masks every "
        f"real EOS, so the model never learns to stop generating",
        "give padding its own token: tokenizer.pad_token set to the unk token or a reserved "
        "token, or add '<pad>' and resize the embeddings; or mask labels by the attention "
        "mask, not by the pad id (cfgcheck's collate does), or use data.collator=packed",
    )


@rule("special-token-out-of-range", requires=("model", "tokenizer"))
def special_token_out_of_range(cfg: RunConfig) -> Iterator[Problem]:
    """Every special-token id must be below the embedding rows."""
    facts = tokenizer_facts(cfg.tokenizer)
    rows = cfg.model.rows
    for name, token_id in facts.special_ids().items():
        if token_id >= rows:
            what = f"tokenizer.{name}_token_id={token_id}"
            if facts.resolved:
                what = f"the {name} token id {token_id} ({facts.sources.get(name, facts.path)})"
            yield Problem(
                "error",
                (facts.token_path(name), "model.padded_vocab_size"),
                f"{what} is not below model.padded_vocab_size="
                f'{rows}: the embedding lookup of that token fails with "IndexError: index '
                f'out of range in self" (a device-side assert on CUDA)',
                f"use a {name} token already in the vocabulary (id < {rows}), or add it and "
                f"resize the embeddings to at least {token_id + 1} rows",
            )


@rule("ignore-index-is-token", requires=("model", "data"))
def ignore_index_is_token(cfg: RunConfig) -> Iterator[Problem]:
    """The loss's ignore_index must not be a real token id."""
    ignore, rows = cfg.data.ignore_index, cfg.model.rows
    if 0 <= ignore < rows:
        yield Problem(
            "warning",
            ("data.ignore_index", "model.padded_vocab_size"),
            f"data.ignore_index={ignore} is a real token id (the vocabulary has {rows} rows): "
            f"that token is never learned, and labels padded with it look like text",
            "use data.ignore_index=-100 (the default of torch's cross_entropy)",
        )
