"""Model embedding rows against the tokenizer vocabulary.

Two facts, kept apart: the embedding **rows** (``model.padded_vocab_size``; a Hugging Face
config.json's ``vocab_size``) and the **tokenizer length** ``len(tokenizer)``. A token id at or
above the rows is the real crash (``nn.Embedding`` raises ``IndexError: index out of range in
self`` on CPU, a device-side assert on CUDA); a larger embedding than the tokenizer is fine
(Qwen2.5: 151,936 rows, 151,665 tokens). Whether a *smaller or other* tokenizer is a mistake
depends on what is known about the weights (issue 10, false alarm 4):

* the checkpoint folder of ``model.pretrained`` holds its own tokenizer: a configured tokenizer
  whose ids differ from it provably is another tokenizer (error);
* ``model.vocab_size`` (LitGPT's convention: ``len(tokenizer)`` the model was trained for) is
  declared and weights are loaded (``model.pretrained``, or LoRA / QLoRA, which need a base
  checkpoint): a tokenizer with fewer tokens is another tokenizer (error);
* nothing says weights are loaded (full training, maybe from scratch): unused rows are harmless,
  so a tokenizer smaller than the declared vocabulary is only a warning;
* a tokenizer with more tokens than the trained vocabulary that still fits the rows is noted
  (info): the extra tokens' rows were never trained, and LoRA does not train them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cfgcheck.findings import Fix
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.model import ModelConfig, find_multiple
from cfgcheck.schema.run import RunConfig
from cfgcheck.tokenizer import (
    TokenizerFacts,
    TokenizerFileError,
    resolve_tokenizer,
    tokenizer_facts,
)

if TYPE_CHECKING:  # the model-folder readers load only when a config names a folder
    from cfgcheck.models.resolve import ModelSource

_CRASH = (
    'ids at or above the embedding rows crash the first batch that holds one: "IndexError: '
    'index out of range in self" on CPU, a device-side assert on CUDA'
)


@rule("vocab-mismatch", requires=("model", "tokenizer"))
def vocab_mismatch(cfg: RunConfig) -> Iterator[Problem]:
    """Token ids must stay below the embedding rows; a checkpoint needs the tokenizer it was
    trained with."""
    m = cfg.model
    if m.vocab_size is not None and m.rows < m.vocab_size:
        yield Problem(
            "error",
            ("model.padded_vocab_size", "model.vocab_size"),
            f"model.padded_vocab_size={m.rows} is below model.vocab_size={m.vocab_size}: "
            f"the embedding has fewer rows than the vocabulary; {_CRASH}",
            f"set model.padded_vocab_size={m.vocab_size} (or remove it to derive it)",
            fixes=(
                Fix(
                    (f"model.padded_vocab_size={m.vocab_size}",),
                    "give the embedding a row for every token",
                ),
            ),
        )
    facts = tokenizer_facts(cfg.tokenizer)
    if facts.size is None:
        return
    source = _source(m)
    top = max(facts.size - 1, facts.max_id if facts.max_id is not None else -1)
    if top >= m.rows:
        yield _placeholders_beyond_rows(m, facts, top + 1) or _too_few_rows(
            m, facts, top + 1, source
        )
        return
    if source is not None and source.tokenizer is not None:
        problem = _against_own_tokenizer(cfg, facts, source)
        if problem is not None:
            yield problem
            return
    if m.vocab_size is not None and facts.size != m.vocab_size:
        yield _against_trained_size(cfg, facts, m.vocab_size, source)


def _source(m: ModelConfig) -> ModelSource | None:
    if m.pretrained is None:
        return None
    from cfgcheck.models.files import ModelFolderError
    from cfgcheck.models.resolve import resolve_pretrained

    try:
        return resolve_pretrained(m.pretrained)
    except ModelFolderError:
        return None  # validate() reports it before any rule runs


def _loads_weights(cfg: RunConfig) -> str | None:
    """Why the run is known to start from trained weights, or ``None``."""
    if cfg.model.pretrained is not None:
        return f"model.pretrained={cfg.model.pretrained} is loaded"
    trainer = getattr(cfg, "trainer", None)
    if trainer is not None and trainer.finetuning in ("lora", "qlora"):
        return f"trainer.finetuning={trainer.finetuning} adapts a trained base model"
    return None


def _placeholders_beyond_rows(m: ModelConfig, facts: TokenizerFacts, needed: int) -> Problem | None:
    """Only tokens the tokenizer section declares placeholders (``placeholder_tokens_from``:
    neither text nor the chat template produces them) lack a row, and the run's own special
    tokens have one: a warning. Encoding text yields an added token only where the text spells
    it out, so the data never reaches those ids unless a sample does. Gemma 3 1B: its 262144
    rows end before ``<image_soft_token>`` (262144), its tokenizer's one added token, an image
    placeholder the processor expands, and the model is fine-tuned with that tokenizer as
    published. Chat markers added past the rows are no placeholders: the template writes them
    into every sample (tests/crash/test_crash_vocab.py), an error."""
    start = facts.placeholders_from
    if start is None or start > m.rows or facts.size is None or start >= facts.size:
        return None
    if any(i >= m.rows for i in facts.special_ids().values()):
        return None  # the pad / eos / bos / unk id itself is beyond: the collator uses it
    if facts.max_id is not None and facts.max_id >= facts.size:
        return None  # ids beyond len(tokenizer): not the declared placeholders
    ids = f"id {m.rows}" if needed - 1 == m.rows else f"ids {m.rows}-{needed - 1}"
    return Problem(
        "warning",
        (facts.size_path, "model.padded_vocab_size"),
        f"the tokenizer's placeholder tokens ({ids}, tokenizer.placeholder_tokens_from="
        f"{start}) have no embedding row in model {m.name} ({m.rows} rows, "
        "model.padded_vocab_size): plain text never encodes to them, but a sample that spells "
        'one out crashes the batch: "IndexError: index out of range in self" on CPU, a '
        "device-side assert on CUDA",
        "keep those tokens out of the data, or resize the embedding (transformers: "
        f"model.resize_token_embeddings({needed})) and set model.padded_vocab_size={needed}",
        fixes=(
            Fix(
                (f"model.padded_vocab_size={needed}",),
                "the embedding is resized to the tokenizer (resize_token_embeddings)",
            ),
        ),
    )


def _too_few_rows(
    m: ModelConfig, facts: TokenizerFacts, needed: int, source: ModelSource | None
) -> Problem:
    size, where = facts.size, facts.size_source
    ids = f"the tokenizer has {size} tokens ({where})"
    if needed > (size or 0):
        ids += f", ids up to {needed - 1}"
    message = (
        f"{ids} but model {m.name} has only {m.rows} embedding rows "
        f"(model.padded_vocab_size): {_CRASH}"
    )
    if source is not None:
        return Problem(
            "error",
            (facts.size_path, "model.padded_vocab_size"),
            message,
            f"resize the checkpoint's embedding to the tokenizer before training "
            f"(transformers: model.resize_token_embeddings({needed}); LitGPT: a larger "
            f"padded_vocab_size) and declare it with model.padded_vocab_size={needed}, or "
            f"use the tokenizer {source.ref} was trained with",
            fixes=(
                Fix(
                    (f"model.padded_vocab_size={needed}",),
                    "the embedding is resized to the tokenizer (resize_token_embeddings)",
                ),
            ),
        )
    overrides = [f"model.vocab_size={needed}"]
    if "padded_vocab_size" in m.model_fields_set:
        rows = find_multiple(needed, m.padding_multiple or 1)
        overrides.append(f"model.padded_vocab_size={rows}")
    return Problem(
        "error",
        (facts.size_path, "model.padded_vocab_size"),
        message,
        f"use the tokenizer the model was trained with, or set {' '.join(overrides)} "
        f"(and resize the embeddings when starting from a checkpoint)",
        fixes=(Fix(tuple(overrides), "build the embedding for this tokenizer"),),
    )


def _against_own_tokenizer(
    cfg: RunConfig, facts: TokenizerFacts, source: ModelSource
) -> Problem | None:
    """The configured tokenizer against the one stored with the checkpoint."""
    own_path = source.tokenizer
    if facts.path is None or not facts.resolved or own_path is None:
        return None
    try:
        own = resolve_tokenizer(own_path)
        used = resolve_tokenizer(facts.path)
    except TokenizerFileError:
        return None
    if Path(used.path).resolve() == Path(own.path).resolve():
        return None
    moved = [(t, i, used.vocab.get(t)) for t, i in own.vocab.items() if used.vocab.get(t) != i]
    if not moved:
        extra = sorted(i for t, i in used.vocab.items() if t not in own.vocab)
        if not extra:
            return None
        return Problem(
            "info",
            ("tokenizer.path", "model.pretrained"),
            f"tokenizer.path={facts.path} extends the tokenizer {source.ref} was trained with "
            f"by {len(extra)} tokens (ids {extra[0]}..{extra[-1]}): they fit the "
            f"{cfg.model.rows} embedding rows, but those rows were never trained, and LoRA "
            f"does not train them",
            "train the new rows (full fine-tuning, or the embeddings as trainable modules)",
        )
    token, was, now = min(moved, key=lambda x: x[1])
    now_text = f"id {now}" if now is not None else "no id"
    return Problem(
        "error",
        ("tokenizer.path", "model.pretrained"),
        f"tokenizer.path={facts.path} is not the tokenizer {source.ref} was trained with "
        f"(its own, in {own_path}): {len(moved)} of its {len(own.vocab)} tokens have other "
        f"ids (e.g. {token!r}: id {was} in training, {now_text} here), so ids map to the "
        f"wrong embeddings",
        f"set tokenizer.path={own_path} (the checkpoint's own tokenizer)",
        fixes=(Fix((f"tokenizer.path={own_path}",), "use the checkpoint's own tokenizer"),),
    )


def _against_trained_size(
    cfg: RunConfig, facts: TokenizerFacts, trained: int, source: ModelSource | None
) -> Problem:
    """The tokenizer length against ``model.vocab_size`` (fits the rows: no crash)."""
    size = facts.size or 0
    loads = _loads_weights(cfg)
    paths = (facts.size_path, "model.vocab_size")
    head = f"the tokenizer has {size} tokens ({facts.size_source}) but model.vocab_size={trained}"
    if size > trained:
        return Problem(
            "info",
            paths,
            f"{head}: the {size - trained} tokens past the trained vocabulary use embedding rows "
            f"{trained}..{size - 1}, which exist (model.padded_vocab_size={cfg.model.rows}) but "
            f"were never trained unless they are the checkpoint's own special tokens; LoRA "
            f"does not train them",
            f"train the new rows (full fine-tuning, or the embeddings as trainable modules) if "
            f"the tokens are new; set model.vocab_size={size} if the model is built for them",
        )
    from_folder = source is not None and source.trained_vocab_declared
    fixes: tuple[Fix, ...] = ()
    if source is not None and source.tokenizer is not None:
        fixes = (Fix((f"tokenizer.path={source.tokenizer}",), "use the checkpoint's tokenizer"),)
    elif not from_folder:
        fixes = (
            Fix((f"model.vocab_size={size}",), "build the model for this tokenizer (from scratch)"),
        )
    if loads is not None:
        where = f"model.pretrained={source.ref}" if from_folder and source else "model.vocab_size"
        return Problem(
            "error",
            paths,
            f"{head} ({where}): {loads}, trained with a {trained}-token vocabulary, so this "
            f"{size}-token tokenizer is another one and its ids map to the wrong embeddings",
            "use the tokenizer the checkpoint was trained with"
            + ("" if fixes else " (no config change makes this tokenizer fit the checkpoint)"),
            fixes=fixes,
        )
    return Problem(
        "warning",
        paths,
        f"{head}: harmless for a model trained from scratch ({trained - size} embedding rows "
        f"stay unused), but a checkpoint trained with {trained} tokens would map this "
        f"tokenizer's ids to the wrong embeddings",
        f"set model.vocab_size={size} when training from scratch; use the checkpoint's own "
        f"tokenizer when loading one",
        fixes=fixes,
    )
