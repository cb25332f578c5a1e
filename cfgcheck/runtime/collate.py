"""Collate functions built from the validated ``data`` section.

``make_collate_fn(cfg)`` returns the collate function ``data.collator`` names:

* ``"padded"``: :class:`PaddedCollator` pads ``input_ids`` with the pad id, ``labels`` with
  ``data.ignore_index``, builds ``attention_mask``, on ``tokenizer.padding_side``; pads to the
  longest sample of the batch (to ``data.max_length`` when ``data.padding=max_length``),
  rounded up to ``data.pad_to_multiple_of``, as transformers' ``DataCollatorWithPadding``
  does. Samples are cut at the tokenizer's ``max_length`` when ``data.truncation`` is on (a
  no-op on the tokenizer's output); without truncation a sample longer than
  ``model.block_size`` raises :class:`SequenceTooLongError`.
* ``"packed"``: :class:`PackedCollator` concatenates the batch's samples into rows of exactly
  ``data.max_seq_length`` tokens, with ``position_ids`` restarting at every sample.

What each collator feeds the model, and where it needs a pad id, is
:class:`cfgcheck.pipeline.Pipeline`: the rules check the same description.
* ``"default"``: torch's ``default_collate`` (needs samples of equal length).

A sample is a mapping with ``input_ids`` (a list of ints or a 1-D tensor) and optionally
``labels`` and ``attention_mask`` (positions where it is 0 are padding from the tokenizer);
other keys are not carried over. A bare list or tensor of ids is a sample too. Labels
default to the input ids (the transformers convention: the model shifts them).

torch is imported when a collate function is built, never at import of this module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cfgcheck.pipeline import Pipeline, round_up
from cfgcheck.runtime._config import Validated, facts_of, run_config
from cfgcheck.runtime._torch import default_collate, require_torch
from cfgcheck.runtime.errors import (
    PadTokenMissingError,
    SequenceTooLongError,
    TokenizerMismatchError,
)

CollateFn = Callable[[Sequence[Any]], Any]


@dataclass
class _Sample:
    ids: list[int]
    labels: list[int]


def _as_ints(value: Any, what: str) -> list[int]:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, list | tuple) or not all(isinstance(v, int) for v in value):
        raise ValueError(f"{what} must be a flat list or 1-D tensor of ints, got {value!r:.80}")
    return list(value)


def _read(sample: Any) -> _Sample:
    """Input ids and labels of one sample, tokenizer padding (attention_mask == 0) removed."""
    if isinstance(sample, Mapping):
        if "input_ids" not in sample:
            raise ValueError(f"a sample has no 'input_ids' (keys: {', '.join(map(str, sample))})")
        ids = _as_ints(sample["input_ids"], "input_ids")
        labels = _as_ints(sample["labels"], "labels") if "labels" in sample else list(ids)
        mask = (
            _as_ints(sample["attention_mask"], "attention_mask")
            if "attention_mask" in sample
            else None
        )
    else:
        ids = _as_ints(sample, "a sample")
        labels, mask = list(ids), None
    if len(labels) != len(ids) or (mask is not None and len(mask) != len(ids)):
        raise ValueError(
            f"a sample's labels/attention_mask length differs from its {len(ids)} input_ids"
        )
    if mask is not None and 0 in mask:
        keep = [i for i, m in enumerate(mask) if m]
        ids = [ids[i] for i in keep]
        labels = [labels[i] for i in keep]
    return _Sample(ids, labels)


def _fit(sample: _Sample, max_seq_length: int, truncation: bool) -> _Sample:
    if len(sample.ids) <= max_seq_length:
        return sample
    if not truncation:
        raise SequenceTooLongError(
            f"a sample has {len(sample.ids)} tokens, above the {max_seq_length} the model "
            f"can attend to, and data.truncation=false: set data.truncation=true or filter "
            f"the dataset to samples of at most {max_seq_length} tokens"
        )
    return _Sample(sample.ids[:max_seq_length], sample.labels[:max_seq_length])


def _missing_pad(collator: str) -> PadTokenMissingError:
    return PadTokenMissingError(
        f"data.collator={collator} has to pad this batch but no pad token id is known: set "
        f"tokenizer.pad_token and tokenizer.pad_token_id in the config (pad = eos is common: "
        f"tokenizer.pad_token_id=<eos id>), or pass pad_token_id=tokenizer.pad_token_id "
        f"to make_collate_fn"
    )


@dataclass(frozen=True)
class PaddedCollator:
    """Pads a batch to one length; see the module docstring. Picklable (DataLoader workers)."""

    pad_token_id: int | None
    ignore_index: int
    max_seq_length: int  # samples are cut here (truncation) or refused beyond it
    truncation: bool = True
    padding_side: Literal["right", "left"] = "right"
    pad_to_multiple_of: int | None = None
    fixed_length: int | None = None  # data.padding=max_length: pad at least to this

    def target_length(self, longest: int) -> int:
        """Padded length of a batch whose longest (fitted) sample has ``longest`` tokens."""
        return round_up(max(longest, self.fixed_length or 0), self.pad_to_multiple_of)

    def __call__(self, batch: Sequence[Any]) -> dict[str, Any]:
        torch = require_torch()
        samples = [_fit(_read(s), self.max_seq_length, self.truncation) for s in batch]
        target = self.target_length(max((len(s.ids) for s in samples), default=0))
        ids, labels, masks = [], [], []
        for s in samples:
            n = target - len(s.ids)
            if n and self.pad_token_id is None:
                raise _missing_pad("padded")
            pad = [self.pad_token_id or 0] * n
            ignore, real, zeros = [self.ignore_index] * n, [1] * len(s.ids), [0] * n
            if self.padding_side == "right":
                ids.append(s.ids + pad)
                labels.append(s.labels + ignore)
                masks.append(real + zeros)
            else:
                ids.append(pad + s.ids)
                labels.append(ignore + s.labels)
                masks.append(zeros + real)
        return {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "attention_mask": torch.tensor(masks, dtype=torch.long),
            "labels": torch.tensor(labels, dtype=torch.long),
        }


@dataclass(frozen=True)
class PackedCollator:
    """Packs a batch's samples into rows of exactly ``max_seq_length`` tokens.

    * Samples (tokenizer padding removed) are concatenated in order and cut into rows; a
      sample may continue on the next row (the tokenizer already truncated it). Add
      EOS at the end of each sample when tokenizing if the model should learn boundaries.
    * ``labels``: the sample's labels, except its first token, which is ``ignore_index``:
      predicting it from the previous sample's last token would teach a cross-sample
      transition.
    * ``position_ids`` restart at 0 at every sample (a continued sample keeps counting), so
      they never reach ``max_seq_length``.
    * No ``attention_mask`` is returned: transformers models (Llama, Mistral, Qwen2, ...)
      given ``position_ids``, no ``attention_mask`` and no KV cache derive a block-diagonal
      causal mask from the restarting positions, so samples do not attend to each other.
      Train with ``use_cache=False`` (``model.config.use_cache = False``): with a cache,
      even in train mode, transformers skips that detection and samples of a row attend to
      each other (plain concatenation, as in LitGPT pretraining).
    * The last row is filled with the pad id (labels ``ignore_index``, positions restarting
      at 0, so the padding is a segment of its own). The number of rows varies per batch:
      ``ceil(total tokens / max_seq_length)``.
    """

    pad_token_id: int | None
    ignore_index: int
    max_seq_length: int
    truncation: bool = True  # kept for callers; packing never cuts a sample

    def __call__(self, batch: Sequence[Any]) -> dict[str, Any]:
        torch = require_torch()
        ids: list[int] = []
        labels: list[int] = []
        positions: list[int] = []
        for raw in batch:
            s = _read(raw)
            if not s.ids:
                continue
            ids += s.ids
            labels += [self.ignore_index, *s.labels[1:]]
            positions += range(len(s.ids))
        n = -len(ids) % self.max_seq_length
        if n and self.pad_token_id is None:
            raise _missing_pad("packed")
        ids += [self.pad_token_id or 0] * n
        labels += [self.ignore_index] * n
        positions += range(n)
        shape = (-1, self.max_seq_length)
        return {
            "input_ids": torch.tensor(ids, dtype=torch.long).view(shape),
            "labels": torch.tensor(labels, dtype=torch.long).view(shape),
            "position_ids": torch.tensor(positions, dtype=torch.long).view(shape),
        }


def resolve_pad_token_id(config: Validated, pad_token_id: int | None = None) -> int | None:
    """The pad id: ``pad_token_id`` if given, else the config's; both given must agree."""
    declared = facts_of(run_config(config)).pad_token_id
    if pad_token_id is not None and declared is not None and pad_token_id != declared:
        raise TokenizerMismatchError(
            f"pad_token_id={pad_token_id} was passed but the config has "
            f"tokenizer.pad_token_id={declared}: set tokenizer.pad_token_id={pad_token_id} "
            f"in the config and run cfgcheck again, or pass the tokenizer the config names"
        )
    return pad_token_id if pad_token_id is not None else declared


def make_collate_fn(config: Validated, *, pad_token_id: int | None = None) -> CollateFn:
    """The collate function of ``data.collator``, configured from the validated config.

    ``pad_token_id`` defaults to the config's tokenizer facts. A missing pad id raises
    :class:`PadTokenMissingError` right here when :meth:`Pipeline.collator_pads` says the
    collator needs one (``packed``: always, for the last row; ``padded``: always with
    ``trainer.framework=hf``, whose collators call ``tokenizer.pad``; else when lengths can
    differ or are rounded), else at the first batch that needs padding.
    """
    cfg = run_config(config)
    d = cfg.data
    pipe = Pipeline.of(cfg)
    if d.collator == "default":
        return default_collate()  # type: ignore[no-any-return]
    require_torch()
    pad_id = resolve_pad_token_id(cfg, pad_token_id)
    if pad_id is None and pipe.collator_pads:
        raise _missing_pad(d.collator)
    if d.collator == "packed":
        return PackedCollator(pad_id, d.ignore_index, d.max_seq_length, d.truncation)
    fixed = d.effective_max_length if d.padding == "max_length" else None
    return PaddedCollator(
        pad_token_id=pad_id,
        ignore_index=d.ignore_index,
        max_seq_length=d.effective_max_length if d.truncation else cfg.model.block_size,
        truncation=d.truncation,
        padding_side=cfg.tokenizer.padding_side,
        pad_to_multiple_of=d.pad_to_multiple_of,
        fixed_length=fixed,
    )
