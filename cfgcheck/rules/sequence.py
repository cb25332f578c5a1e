"""Sequence length against the model's context window, from what the pipeline feeds the model
(:mod:`cfgcheck.pipeline`): tokenizer truncation and padding, pad_to_multiple_of rounding,
packed rows."""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.findings import Fix
from cfgcheck.pipeline import Pipeline, round_down
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig


def fitting_length(cfg: RunConfig) -> int:
    """The largest length <= model.block_size that pad_to_multiple_of leaves alone."""
    block, m = cfg.model.block_size, cfg.data.pad_to_multiple_of
    return round_down(block, m) or block


def length_fix(cfg: RunConfig) -> tuple[Fix, ...]:
    """Truncate to a length that fits the block and that pad_to_multiple_of accepts: the
    configured max_length or max_seq_length when one does, else the largest that fits."""
    d = cfg.data
    target = fitting_length(cfg)
    drop_multiple = round_down(cfg.model.block_size, d.pad_to_multiple_of) == 0
    m = None if drop_multiple else d.pad_to_multiple_of

    def fits(n: int | None) -> bool:
        return n is not None and n <= target and (m is None or n % m == 0)

    length = next((n for n in (d.max_length, d.max_seq_length) if fits(n)), target)
    over = [f"data.max_seq_length={min(d.max_seq_length, target)}", f"data.max_length={length}"]
    if not d.truncation and d.collator != "packed":
        over.append("data.truncation=true")
    if drop_multiple:
        over.append("data.pad_to_multiple_of=null")
    return (Fix(tuple(over), f"truncate samples to {length} tokens"),)


def _lengths(pipe: Pipeline, cfg: RunConfig) -> tuple[str, str]:
    """(what the model is fed, the error it raises) for the rule messages."""
    d, block = cfg.data, cfg.model.block_size
    source = "data.max_length" if d.max_length is not None else "data.max_seq_length"
    m = (
        f" rounded up to data.pad_to_multiple_of={d.pad_to_multiple_of}"
        if d.pad_to_multiple_of
        else ""
    )
    if d.collator == "packed":
        what = f"data.collator=packed cuts rows of exactly data.max_seq_length={d.max_seq_length}"
    elif d.padding == "max_length":
        what = (
            f"data.padding=max_length pads every sample to {source}="
            f"{d.effective_max_length}{m}, however short"
        )
    else:
        what = (
            f"samples are truncated to {source}={d.effective_max_length} "
            f"tokens{m}, so batches of long samples reach that length"
        )
    longest = pipe.longest or pipe.shortest
    return what, f'"ValueError: Cannot attend to {longest}, block size is only {block}" (LitGPT)'


@rule("seq-len-over-block-size", requires=("model", "data"))
def seq_len_over_block_size(cfg: RunConfig) -> Iterator[Problem]:
    """The longest sequence the pipeline feeds must not exceed model.block_size."""
    pipe, d, block = Pipeline.from_data(cfg.data), cfg.data, cfg.model.block_size
    longest, unrounded = pipe.longest, pipe.unrounded_longest
    over_unrounded = unrounded is not None and unrounded > block
    if over_unrounded or (pipe.shortest > block and d.effective_max_length > block):
        what, crash = _lengths(pipe, cfg)
        certain = pipe.exact or pipe.shortest > block
        packed = d.collator == "packed"
        source = (
            "data.max_length" if d.max_length is not None and not packed else "data.max_seq_length"
        )
        length = d.max_seq_length if packed else d.effective_max_length
        yield Problem(
            "error",
            (source, "model.block_size"),
            f"{source}={length} is above model.block_size={block} of {cfg.model.name}: "
            f"{what} ({longest or pipe.shortest} tokens); "
            + ("every batch fails" if certain else "the first batch this long fails")
            + f" with {crash}",
            f"set data.max_seq_length<={block}"
            + (f" and data.max_length<={block}" if d.max_length is not None else "")
            + f" with data.truncation=true (e.g. {fitting_length(cfg)}), or pick a model with a "
            f"longer context window",
            length_fix(cfg),
        )
    elif longest is None and d.max_seq_length > block:
        yield Problem(
            "error",
            ("data.max_seq_length", "data.truncation", "model.block_size"),
            f"data.max_seq_length={d.max_seq_length} is above model.block_size={block} of "
            f"{cfg.model.name} and data.truncation=false keeps every token: the first sample "
            f'longer than {block} tokens fails with "ValueError: Cannot attend to ..., block '
            f'size is only {block}" (LitGPT)',
            f"set data.max_seq_length<={block} and data.truncation=true",
            length_fix(cfg),
        )
    elif d.max_seq_length > block and longest is not None and longest <= block:
        yield Problem(
            "warning",
            ("data.max_seq_length", "model.block_size"),
            f"data.max_seq_length={d.max_seq_length} is above model.block_size={block}, but "
            f"the tokenizer truncates to data.max_length={d.effective_max_length}, so nothing "
            f"longer than {longest} tokens reaches the model; the declared length is wrong",
            f"set data.max_seq_length={longest}",
            (Fix((f"data.max_seq_length={longest}",), "declare the length really fed"),),
        )


@rule("pad-multiple-over-block-size", requires=("model", "data"))
def pad_multiple_over_block_size(cfg: RunConfig) -> Iterator[Problem]:
    """Rounding up to pad_to_multiple_of must not push sequences past model.block_size."""
    pipe, d, block = Pipeline.from_data(cfg.data), cfg.data, cfg.model.block_size
    multiple = d.pad_to_multiple_of
    if multiple is None or d.collator == "packed":  # packed rows are never rounded
        return
    # without truncation the declared max_length stands for the longest sample (data decides)
    base = d.effective_max_length
    rounded = pipe.longest if pipe.longest is not None else pipe.model_length(base)
    if rounded > block >= base:
        yield Problem(
            "error",
            ("data.pad_to_multiple_of", "data.max_length", "model.block_size"),
            f"data.pad_to_multiple_of={multiple} rounds a {base}-token sample up to {rounded} "
            f"tokens, above model.block_size={block}: "
            f'"ValueError: Cannot attend to {rounded}, block size is only {block}" (LitGPT)',
            f"use data.max_length and data.max_seq_length that are multiples of {multiple} "
            f"and <= {block} (e.g. {fitting_length(cfg)}) with data.truncation=true, or a "
            f"smaller data.pad_to_multiple_of",
            length_fix(cfg),
        )


@rule("max-length-over-max-seq-length", requires=("model", "data"))
def max_length_over_max_seq_length(cfg: RunConfig) -> Iterator[Problem]:
    """data.max_length above data.max_seq_length lets longer sequences reach the model."""
    pipe, d, block = Pipeline.from_data(cfg.data), cfg.data, cfg.model.block_size
    longest = pipe.longest
    if d.collator == "packed" or longest is None or longest <= d.max_seq_length:
        return
    if longest > block:
        return  # seq-len-over-block-size / pad-multiple-over-block-size say it
    target = round_down(d.max_seq_length, d.pad_to_multiple_of)
    fixes = [Fix((f"data.max_seq_length={longest}",), "declare the length really fed")]
    if target > 0:  # a multiple of pad_to_multiple_of, so the tokenizer call accepts it
        fixes.append(
            Fix(
                (f"data.max_length={target}", f"data.max_seq_length={target}"),
                f"truncate to {target} tokens",
            )
        )
    yield Problem(
        "warning",
        ("data.max_length", "data.max_seq_length"),
        f"the tokenizer truncates to data.max_length={d.effective_max_length}, above "
        f"data.max_seq_length={d.max_seq_length}: sequences of up to {longest} tokens reach "
        f"the model, and everything sized by data.max_seq_length (the memory estimate uses "
        f"{longest}) is too small for them",
        f"set data.max_length<=data.max_seq_length (or remove it), or raise "
        f"data.max_seq_length to {longest}",
        tuple(fixes),
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
    fixes = [Fix(("data.pad_to_multiple_of=null",), "do not round lengths")]
    if lower > 0:
        over = [f"data.max_length={lower}"]
        if d.max_seq_length > lower or d.max_length is None:
            over.append(f"data.max_seq_length={min(d.max_seq_length, lower)}")
        fixes.insert(0, Fix(tuple(over), f"truncate to {lower}, a multiple of {multiple}"))
    yield Problem(
        "error",
        (source, "data.pad_to_multiple_of", "data.truncation"),
        f"{source}={length} is not a multiple of data.pad_to_multiple_of={multiple}, with "
        f"data.padding={d.padding} and data.truncation=true: the first tokenizer call fails "
        f'with "ValueError: Truncation and padding are both activated but truncation length '
        f'({length}) is not a multiple of pad_to_multiple_of ({multiple})."',
        (f"set {source}={lower} (a multiple of {multiple}), " if lower > 0 else "")
        + "or remove data.pad_to_multiple_of",
        tuple(fixes),
    )
