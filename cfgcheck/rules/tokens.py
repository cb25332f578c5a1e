"""Special tokens: a pad token when padding, ids inside the embedding, the ignore index."""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.findings import Fix
from cfgcheck.pipeline import PadUse, Pipeline, round_up
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig
from cfgcheck.tokenizer import tokenizer_facts
from cfgcheck.tokenizer.facts import TokenizerFacts

_WHERE: dict[PadUse, str] = {
    "tokenizer": "the tokenizer call pads",
    "collator": "the padding collator pads (transformers' collators call tokenizer.pad, "
    "which asks for a pad token even when a batch needs no padding)",
    "packing": "packing fills the last row of each batch with the pad id",
}


def pads(cfg: RunConfig) -> bool:
    """Whether the pipeline needs a pad id anywhere (see :meth:`Pipeline.pad_uses`)."""
    return bool(Pipeline.of(cfg).pad_uses())


def usable_pad(facts: TokenizerFacts) -> bool:
    """A pad token the real tokenizer gives an id: a declared string missing from the
    vocabulary maps to the unk id, or to None without an unk token (transformers'
    ``convert_tokens_to_ids``)."""
    if not facts.has_pad:
        return False
    return not (facts.resolved and "pad" in facts.unknown_tokens and facts.unk_token_id is None)


def quoted(value: str) -> str:
    """A Hydra override value: quoted unless it is a plain word."""
    plain = value.replace("_", "").replace("-", "").replace(".", "").isalnum()
    yaml_word = value.lower() in {"null", "none", "true", "false", "yes", "no", "on", "off"}
    if plain and not yaml_word and not value[0].isdigit():
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def pad_fix(cfg: RunConfig, rows: int | None = None) -> tuple[str, ...] | None:
    """Overrides that give the run a usable pad token already in the vocabulary (the eos
    token, else the unk token; below ``rows`` when given), or None when there is none."""
    facts = tokenizer_facts(cfg.tokenizer)
    for name in ("eos", "unk"):
        token: str | None = getattr(facts, f"{name}_token")
        token_id: int | None = getattr(facts, f"{name}_token_id")
        if name in facts.unknown_tokens or token_id is None:
            continue
        if rows is not None and token_id >= rows:
            continue
        out = [f"tokenizer.pad_token_id={token_id}"]
        if token is not None:
            out.insert(0, f"tokenizer.pad_token={quoted(token)}")
        return tuple(out)
    return None


@rule("pad-token-missing", requires=("tokenizer", "data", "trainer"))
def pad_token_missing(cfg: RunConfig) -> Iterator[Problem]:
    """Padding needs a pad token (transformers: "Asking to pad but the tokenizer ...")."""
    facts = tokenizer_facts(cfg.tokenizer)
    pipe = Pipeline.of(cfg)
    uses = pipe.pad_uses()
    if not uses or usable_pad(facts):
        return
    d = cfg.data
    why = "; ".join(_WHERE[u] for u in uses)
    where = f"the tokenizer at tokenizer.path={facts.path}" if facts.resolved else "the tokenizer"
    if facts.has_pad:
        missing = (
            f"tokenizer.pad_token={facts.pad_token!r} is not in the vocabulary of {where} and "
            f"it has no unk token, so transformers gives it no id"
        )
        crash = (
            "the tokenizer call fails with \"TypeError: '<' not supported between instances "
            "of 'NoneType' and 'int'\""
            if "tokenizer" in uses or "collator" in uses
            else "the collator has no pad id to fill with"
        )
    else:
        missing = f"{where} has no pad token"
        crash = (
            'transformers fails with "ValueError: Asking to pad but the tokenizer does not '
            'have a padding token"'
            if "tokenizer" in uses or "collator" in uses
            else "the collator has no pad id to fill the last row with"
        )
    fix = pad_fix(cfg)
    fixes = (Fix(fix, "use an existing token as the pad token"),) if fix else ()
    eos = repr(facts.eos_token) if facts.eos_token else "the eos token"
    eos_id = f", id {facts.eos_token_id}" if facts.eos_token_id is not None else ""
    yield Problem(
        "error",
        ("tokenizer.pad_token", "data.padding", "data.collator"),
        f"data.padding={d.padding}, data.collator={d.collator}"
        + (f", data.pad_to_multiple_of={d.pad_to_multiple_of}" if d.pad_to_multiple_of else "")
        + f": {why}, but {missing}: {crash}",
        f"set tokenizer.pad_token and tokenizer.pad_token_id to an existing token (pad = eos: "
        f"{eos}{eos_id}; or the unk token), or add a pad token "
        "(tokenizer.add_special_tokens({'pad_token': '<pad>'})) and "
        "resize the model's embeddings (model.resize_token_embeddings(len(tokenizer)))"
        + ("" if fix else "; the tokenizer has neither an eos nor an unk token to reuse"),
        fixes,
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
    fixes: tuple[Fix, ...] = ()
    unk, unk_id = facts.unk_token, facts.unk_token_id
    if unk_id is not None and unk_id != facts.eos_token_id and "unk" not in facts.unknown_tokens:
        over = [f"tokenizer.pad_token_id={unk_id}"]
        if unk is not None:
            over.insert(0, f"tokenizer.pad_token={quoted(unk)}")
        fixes = (Fix(tuple(over), "pad with the unk token instead of eos"),)
    yield Problem(
        "warning",
        ("tokenizer.pad_token", "tokenizer.eos_token", "data.collator"),
        f"tokenizer.pad_token is the eos token ({shown!r}) and data.collator=padded: a collator "
        f"that sets labels to data.ignore_index={cfg.data.ignore_index} where input_ids == "
        f"pad_token_id (transformers' DataCollatorForLanguageModeling does) also masks every "
        f"real EOS, so the model never learns to stop generating",
        "give padding its own token: tokenizer.pad_token set to the unk token or a reserved "
        "token, or add '<pad>' and resize the embeddings; or mask labels by the attention "
        "mask, not by the pad id (cfgcheck's collate does)"
        + ("" if fixes else "; this tokenizer has no other token to reuse"),
        fixes,
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
            declared = cfg.model.vocab_size
            size = max(token_id + 1, facts.size or 0, declared or 0)
            grown = round_up(size, cfg.model.padding_multiple)
            over = [f"model.padded_vocab_size={grown}"]
            if declared is not None:
                over.insert(0, f"model.vocab_size={size}")
            fixes = [Fix(tuple(over), f"grow the embedding to {grown} rows")]
            if name == "pad":
                alt = pad_fix(cfg, rows)
                if alt is not None:
                    fixes.insert(0, Fix(alt, "pad with a token inside the embedding"))
            yield Problem(
                "error",
                (facts.token_path(name), "model.padded_vocab_size"),
                f"{what} is not below model.padded_vocab_size="
                f'{rows}: the embedding lookup of that token fails with "IndexError: index '
                f'out of range in self" (a device-side assert on CUDA)',
                f"use a {name} token already in the vocabulary (id < {rows}), or add it and "
                f"resize the embeddings to at least {token_id + 1} rows",
                tuple(fixes),
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
            (Fix(("data.ignore_index=-100",), "torch's default ignore index"),),
        )
