"""The tokenizer against the model it trains: the special-token ids the checkpoint states.

A checkpoint's ``config.json`` / ``generation_config.json`` state the ids it was trained with
(``bos_token_id``, ``eos_token_id``, ``pad_token_id``; :mod:`cfgcheck.models.hf` reads them into
``model.*_token_id``). A tokenizer whose ids disagree trains on the wrong tokens without any
error: the eos id a training script appends to every sample (transformers' tokenizers with
``add_eos_token``, TRL's SFT ``eos_token`` appended in ``_tokenize``, LitGPT's
``tokenizer.encode(..., eos=True)`` in litgpt/data/base.py) becomes the label the model learns
to stop on, and ``generate`` stops on the config's ids (transformers
``GenerationConfig.eos_token_id``), so the fine-tuned model never stops. A different bos or pad
id is a quality warning (inputs start with, or pad with, a token the checkpoint gives another
meaning). The fix names the tokenizer saved in the model folder when there is one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from cfgcheck.findings import Fix
from cfgcheck.overrides import format_value
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig
from cfgcheck.tokenizer import tokenizer_facts

RULE = "tokenizer-model-mismatch"


def _ids(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def folder_tokenizer(cfg: RunConfig) -> Path | None:
    """The tokenizer saved in the ``model.pretrained`` folder, if it holds one."""
    ref = cfg.model.pretrained
    if not ref:
        return None
    from cfgcheck.models.files import ModelFolderError
    from cfgcheck.models.resolve import resolve_pretrained

    try:
        return resolve_pretrained(ref).tokenizer
    except ModelFolderError:
        return None


def _fixes(cfg: RunConfig) -> tuple[Fix, ...]:
    folder = folder_tokenizer(cfg)
    own = cfg.tokenizer.path is not None and Path(cfg.tokenizer.path) == folder
    if folder is None or (own and not cfg.tokenizer.model_fields_set - {"path"}):
        return ()  # no tokenizer to name, or already the folder's own files as they are
    path = format_value(str(folder))
    if path is None:
        return ()
    # The section is replaced, not patched: the ids a tokenizer group declares are claims
    # about its own files, not about the folder's.
    return (Fix(("~tokenizer", f"tokenizer.path={path}"), "the tokenizer saved with the model"),)


def _advice(cfg: RunConfig) -> str:
    folder = folder_tokenizer(cfg)
    if folder is not None:
        return (
            f"use the tokenizer saved with the model: tokenizer.path={folder} (drop the "
            f"tokenizer group's declared ids, '~tokenizer'), or leave tokenizer unset so the "
            f"model folder's tokenizer is used"
        )
    return (
        "use the tokenizer the checkpoint was trained with (the tokenizer files published "
        "with it, or the tokenizer group of its family) so that its ids are the model's"
    )


@rule(RULE, requires=("model", "tokenizer"))
def tokenizer_model_mismatch(cfg: RunConfig) -> Iterator[Problem]:
    """The tokenizer's bos/eos/pad ids must be those the model (its config.json or
    generation_config.json) states: a different eos id is an error, bos or pad a warning."""
    m = cfg.model
    if m.bos_token_id is None and m.eos_token_id is None and m.pad_token_id is None:
        return
    facts = tokenizer_facts(cfg.tokenizer)
    if facts.path is not None and not facts.resolved:
        return  # tokenizer-unreadable reports it; the ids are unknown
    ref = m.pretrained or m.name
    fixes = _fixes(cfg)
    advice = _advice(cfg)
    eos = _ids(m.eos_token_id)
    if eos and facts.eos_token_id is not None and facts.eos_token_id not in eos:
        token = f" ({facts.eos_token!r})" if facts.eos_token else ""
        stated = eos[0] if len(eos) == 1 else eos
        yield Problem(
            "error",
            (facts.token_path("eos"), "model.eos_token_id"),
            f"the tokenizer's eos id is {facts.eos_token_id}{token} but {ref} ends sequences "
            f"with {stated} (model.eos_token_id): the eos appended to every sample teaches "
            f"the model to stop on a token it was not trained to stop on, while generation "
            f"stops only on {stated}, so the fine-tuned model does not stop"
            + (
                f"; id {facts.eos_token_id} is not even a row of its embedding "
                f"({m.padded_vocab_size} rows): IndexError in the embedding lookup"
                if m.padded_vocab_size is not None and facts.eos_token_id >= m.padded_vocab_size
                else ""
            ),
            advice,
            fixes=fixes,
        )
    for name in ("bos", "pad"):
        stated_id = getattr(m, f"{name}_token_id")
        have = getattr(facts, f"{name}_token_id")
        if stated_id is None or have is None or have == stated_id:
            continue
        yield Problem(
            "warning",
            (facts.token_path(name), f"model.{name}_token_id"),
            f"the tokenizer's {name} id is {have} but {ref} states {name}_token_id={stated_id} "
            f"(model.{name}_token_id): "
            + (
                "every sample starts with a token the checkpoint gives another meaning"
                if name == "bos"
                else "padding uses a token the checkpoint gives another meaning (masked "
                "labels hide it, but an attention mask built from the pad id does not)"
            ),
            advice,
            fixes=fixes,
        )
