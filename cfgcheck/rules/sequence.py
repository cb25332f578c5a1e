"""Sequence length against the model's context window."""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.model import find_multiple
from cfgcheck.schema.run import RunConfig


@rule("seq-len-over-block-size", requires=("model", "data"))
def seq_len_over_block_size(cfg: RunConfig) -> Iterator[Problem]:
    """data.max_seq_length must not exceed model.block_size (LitGPT: "Cannot attend to ...")."""
    seq, block = cfg.data.max_seq_length, cfg.model.block_size
    if seq > block:
        yield Problem(
            "error",
            ("data.max_seq_length", "model.block_size"),
            f"data.max_seq_length={seq} is above model.block_size={block} of {cfg.model.name}: "
            f"the first batch this long fails with "
            f'"ValueError: Cannot attend to {seq}, block size is only {block}"',
            f"set data.max_seq_length<={block} (e.g. data.max_seq_length={block}) and keep "
            f"data.truncation=true, or pick a model with a longer context window",
        )


@rule("pad-multiple-over-block-size", requires=("model", "data"))
def pad_multiple_over_block_size(cfg: RunConfig) -> Iterator[Problem]:
    """Rounding up to pad_to_multiple_of must not push sequences past model.block_size."""
    multiple = cfg.data.pad_to_multiple_of
    if multiple is None:
        return
    longest = min(cfg.data.effective_max_length, cfg.data.max_seq_length)
    padded = find_multiple(longest, multiple)
    block = cfg.model.block_size
    if padded > block >= longest:
        yield Problem(
            "error",
            ("data.pad_to_multiple_of", "data.max_seq_length", "model.block_size"),
            f"data.pad_to_multiple_of={multiple} rounds a {longest}-token sample up to {padded} "
            f"tokens, above model.block_size={block}",
            f"use a data.max_seq_length that is a multiple of {multiple} and <= {block} "
            f"(e.g. {block - block % multiple}) with data.truncation=true, or a smaller "
            f"data.pad_to_multiple_of",
        )


@rule("pad-multiple-mismatch", requires=("data",))
def pad_multiple_mismatch(cfg: RunConfig) -> Iterator[Problem]:
    """With padding and truncation, max_length must be a multiple of pad_to_multiple_of."""
    d = cfg.data
    multiple, length = d.pad_to_multiple_of, d.effective_max_length
    if multiple is None or d.padding == "do_not_pad" or not d.truncation:
        return
    if length % multiple == 0:
        return
    source = "data.max_length" if d.max_length is not None else "data.max_seq_length"
    lower = length - length % multiple
    yield Problem(
        "error",
        (source, "data.pad_to_multiple_of", "data.truncation"),
        f"{source}={length} is not a multiple of data.pad_to_multiple_of={multiple}, with "
        f"data.padding={d.padding} and data.truncation=true: the first tokenizer call fails "
        f'with "ValueError: Truncation and padding are both activated but truncation length '
        f'({length}) is not a multiple of pad_to_multiple_of ({multiple})."',
        (f"set {source}={lower} (a multiple of {multiple}), " if lower > 0 else "")
        + "or remove data.pad_to_multiple_of",
    )
