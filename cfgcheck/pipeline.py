"""What the pipeline feeds the model: one description shared by the rules, the data scan, the
memory estimate's sequence length and :mod:`cfgcheck.runtime`.

The pipeline modelled (the transformers convention, one tokenizer call per sample):

1. ``tokenizer(text, padding=..., truncation=..., max_length=..., pad_to_multiple_of=...)``
   with the kwargs of :meth:`Pipeline.tokenizer_kwargs`. transformers
   (``src/transformers/tokenization_utils_base.py``, ``_get_padding_truncation_strategies``)
   maps ``padding="longest"`` / ``True`` to LONGEST, ``"max_length"`` to MAX_LENGTH and
   ``False`` to DO_NOT_PAD; any strategy but DO_NOT_PAD raises "Asking to pad but the tokenizer
   does not have a padding token" when ``tokenizer.pad_token`` is None, and a pad token whose
   id is None (a string not in the vocabulary, no unk token) fails the same test with
   "TypeError: '<' not supported between instances of 'NoneType' and 'int'"; truncation plus
   padding with ``max_length % pad_to_multiple_of != 0`` raises "Truncation and padding are
   both activated but truncation length (...) is not a multiple of pad_to_multiple_of". The
   fast tokenizer (``tokenization_utils_tokenizers.py``, ``set_truncation_and_padding``) hands
   the ``tokenizers`` backend ``length=max_length`` for MAX_LENGTH and ``None`` (the batch's
   longest) for LONGEST, plus ``pad_to_multiple_of``; the backend pads to that length rounded
   up to the multiple and never shortens a longer sequence (checked in
   ``tests/test_pipeline.py``). So one sample of ``n`` tokens (special tokens included) comes
   out as :meth:`Pipeline.sample_length` says.
2. The collator: ``default`` is torch's ``default_collate`` (stacks, so every sample of a batch
   needs the same length); ``padded`` pads each batch to its longest sample rounded up to
   ``pad_to_multiple_of`` (transformers' ``DataCollatorWithPadding``, i.e. ``tokenizer.pad``
   with ``padding=True``, which asks for a pad token even when nothing needs padding;
   cfgcheck's :class:`~cfgcheck.runtime.PaddedCollator` does the same); ``packed``
   concatenates the samples' real tokens into rows of exactly ``max_seq_length`` and fills the
   last row with the pad id.
3. The model sees ``T`` = the batch's length; LitGPT refuses ``T > block_size`` ("Cannot
   attend to T, block size is only B", ``litgpt/model.py`` ``GPT.forward``).

``data.max_seq_length`` bounds nothing but packed rows in this pipeline: the tokenizer cuts at
``max_length`` (``data.max_length``, default ``max_seq_length``). A ``max_length`` above
``max_seq_length`` therefore lets longer sequences through (:attr:`Pipeline.longest`).

Pure Python: no torch, no transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cfgcheck.schema.data import Collator, DataConfig, Padding
from cfgcheck.schema.run import RunConfig
from cfgcheck.schema.trainer import Framework, TrainerConfig

PaddingArg = Literal["max_length", "longest"] | bool
PadUse = Literal["tokenizer", "collator", "packing"]

_PADDING_ARG: dict[str, PaddingArg] = {
    "max_length": "max_length",
    "longest": "longest",  # what padding=True means
    "do_not_pad": False,
}


def round_up(n: int, multiple: int | None) -> int:
    """``n`` rounded up to ``multiple`` (transformers' ``_pad`` / tokenizers' padding)."""
    if not multiple or n % multiple == 0:
        return n
    return n + multiple - n % multiple


def round_down(n: int, multiple: int | None) -> int:
    return n - n % multiple if multiple else n


@dataclass(frozen=True)
class Pipeline:
    """The tokenizer call, the collator and the model limit of one run config."""

    padding: Padding
    truncation: bool
    max_length: int  # the tokenizer call's max_length
    pad_to_multiple_of: int | None
    collator: Collator
    micro_batch_size: int
    max_seq_length: int
    framework: Framework = "hf"

    @classmethod
    def of(cls, cfg: RunConfig) -> Pipeline:
        return cls.from_sections(cfg.data, cfg.trainer)

    @classmethod
    def from_sections(cls, d: DataConfig, t: TrainerConfig) -> Pipeline:
        return cls(
            padding=d.padding,
            truncation=d.truncation,
            max_length=d.effective_max_length,
            pad_to_multiple_of=d.pad_to_multiple_of,
            collator=d.collator,
            micro_batch_size=t.micro_batch_size,
            max_seq_length=d.max_seq_length,
            framework=t.framework,
        )

    # -- 1. the tokenizer call ------------------------------------------------------------
    def tokenizer_kwargs(self) -> dict[str, PaddingArg | int | None]:
        return {
            "padding": _PADDING_ARG[self.padding],
            "truncation": self.truncation,
            "max_length": self.max_length,
            "pad_to_multiple_of": self.pad_to_multiple_of,
        }

    @property
    def tokenizer_pads(self) -> bool:
        """The tokenizer call resolves a padding strategy, so it needs a pad token."""
        return self.padding != "do_not_pad"

    @property
    def multiple_mismatch(self) -> bool:
        """The tokenizer call raises "Truncation and padding are both activated ..."."""
        m = self.pad_to_multiple_of
        return bool(self.truncation and self.tokenizer_pads and m and self.max_length % m)

    def truncated(self, n: int) -> int:
        return min(n, self.max_length) if self.truncation else n

    def sample_length(self, n: int) -> int:
        """Length of one sample of ``n`` tokens after its own tokenizer call."""
        fed = self.truncated(n)
        if not self.tokenizer_pads:
            return fed
        target = fed if self.padding == "longest" else self.max_length
        return max(fed, round_up(target, self.pad_to_multiple_of))

    # -- 2. the collator -------------------------------------------------------------------
    def model_length(self, n: int) -> int:
        """The batch length a sample of ``n`` tokens forces: a batch is as long as the
        largest of these over its samples (packed rows: always ``max_seq_length``)."""
        if self.collator == "packed":
            return self.max_seq_length
        length = self.sample_length(n)
        return round_up(length, self.pad_to_multiple_of) if self.collator == "padded" else length

    def batch_length(self, lengths: Sequence[int]) -> int | None:
        """``T`` of a batch of samples of raw lengths ``lengths``; None when
        ``default_collate`` cannot stack them."""
        if self.collator == "packed":
            return self.max_seq_length
        fed = [self.model_length(n) for n in lengths]
        if self.collator == "default" and len(set(fed)) > 1:
            return None
        return max(fed, default=0)

    @property
    def uniform(self) -> bool:
        """Every sample leaves the tokenizer at the same length, whatever the data."""
        return self.padding == "max_length" and self.truncation

    @property
    def may_be_ragged(self) -> bool:
        """``default_collate`` may get samples of different lengths (data decides)."""
        return self.collator == "default" and self.micro_batch_size > 1 and not self.uniform

    @property
    def collator_pads(self) -> bool:
        """The collator needs a pad id (before it knows the data)."""
        if self.collator == "packed":
            return True  # the last row of a batch is filled with it
        if self.collator == "default":
            return False
        if self.framework == "hf":
            return True  # tokenizer.pad(padding=True) asks for a pad token in every case
        return (
            self.micro_batch_size > 1 and not self.uniform
        ) or self.pad_to_multiple_of is not None

    def pad_uses(self) -> tuple[PadUse, ...]:
        """Where a pad id is needed: the tokenizer call, the padding collator, packing."""
        uses: list[PadUse] = []
        if self.tokenizer_pads:
            uses.append("tokenizer")
        if self.collator_pads:
            uses.append("packing" if self.collator == "packed" else "collator")
        return tuple(uses)

    @property
    def passes_mask(self) -> bool:
        """An ``attention_mask`` reaches the model (packed rows pass ``position_ids``)."""
        return self.collator != "packed"

    @property
    def carries_padding(self) -> bool:
        """Batches may hold pad positions, so the attention mask is not all ones."""
        if self.collator == "packed":
            return False
        return (
            self.padding == "max_length"
            or self.pad_to_multiple_of is not None
            or self.micro_batch_size > 1
        )

    # -- 3. the model ----------------------------------------------------------------------
    @property
    def shortest(self) -> int:
        """A length every batch reaches whatever the data (0: none)."""
        if self.collator == "packed":
            return self.max_seq_length
        if self.padding == "max_length":
            return round_up(self.max_length, self.pad_to_multiple_of)
        return 0

    @property
    def longest(self) -> int | None:
        """The longest ``T`` the model can be fed; None: unbounded (no truncation)."""
        if self.collator == "packed":
            return self.max_seq_length
        if not self.truncation:
            return None
        return self.model_length(self.max_length)

    @property
    def exact(self) -> bool:
        """Every batch has exactly :attr:`longest` tokens."""
        return self.longest is not None and self.shortest == self.longest

    @property
    def unrounded_longest(self) -> int | None:
        """:attr:`longest` before ``pad_to_multiple_of`` rounding."""
        if self.collator == "packed":
            return self.max_seq_length
        return self.max_length if self.truncation else None

    def memory_length(self) -> int:
        """The sequence length a memory estimate must assume: the longest ``T`` when bounded,
        else the declared ``max_seq_length`` / ``max_length`` rounded up."""
        longest = self.longest
        if longest is not None:
            return longest
        return round_up(max(self.max_seq_length, self.max_length), self.pad_to_multiple_of)
