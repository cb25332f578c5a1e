"""Mergeable, fixed-size length statistics of a run of consecutive samples.

A shard of the dataset is scanned into a :class:`Summary`; summaries of consecutive shards
merge exactly (``a.merged(b)``, ``a`` before ``b``), so any split of the dataset over any number
of workers gives the same report as one process. Nothing is kept per sample:

- ``hist``: one bucket per distinct token length (exact; bounded by the longest length), from
  which counts, totals, the share over a limit and nearest-rank percentiles are exact;
- the padding waste of each batching scheme: sums per sample, plus, for "each micro batch
  padded to its longest", the sum of window maxima per window start residue (``mbs`` numbers)
  and the first and last ``mbs - 1`` padded lengths, so batches that straddle two shards are
  completed when the shards merge;
- the ``TOP`` longest samples and the first ``TOP`` samples over model.block_size, with their
  file:line (ties keep dataset order);
- what the loss sees: label targets before and after truncation, and the samples left with
  none (counted, the first ``TOP`` located); empty samples; token ids at or above the
  embedding rows (counted, the largest id, the first ``TOP`` located).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from cfgcheck.data.stats import Waste
from cfgcheck.schema.run import RunConfig

TOP = 5  # longest samples and over-block samples kept with their locations
FED_KEPT = 2  # distinct collator lengths kept (one means every batch stacks)


@dataclass(frozen=True)
class Sample:
    """Where one sample lives, and its token count."""

    file: str
    line: int
    length: int


@dataclass(frozen=True)
class Limits:
    """What the statistics depend on: the config's lengths and batching."""

    max_length: int
    truncation: bool
    micro_batch_size: int
    pad_to_multiple_of: int | None
    block: int  # data.max_seq_length: the packed row length

    @classmethod
    def of(cls, run: RunConfig) -> Limits:
        d = run.data
        return cls(
            d.effective_max_length,
            d.truncation,
            run.trainer.micro_batch_size,
            d.pad_to_multiple_of,
            d.max_seq_length,
        )

    def padded(self, n: int) -> int:
        """The length a sample of ``n`` tokens is padded from (truncated, rounded up)."""
        fed = min(n, self.max_length) if self.truncation else n
        m = self.pad_to_multiple_of
        return fed if not m else -(-fed // m) * m

    def fed(self, n: int) -> int:
        return min(n, self.max_length) if self.truncation else n


@dataclass
class Summary:
    limits: Limits
    count: int = 0
    hist: Counter[int] = field(default_factory=Counter)
    fed_tokens: int = 0  # tokens after truncation
    fixed_slots: int = 0  # positions when every sample is padded to max_length
    windows: list[int] = field(default_factory=list)  # per start residue: sum of window maxima
    head: list[int] = field(default_factory=list)  # first mbs - 1 padded lengths
    tail: list[int] = field(default_factory=list)  # last mbs - 1 padded lengths
    longest: list[Sample] = field(default_factory=list)  # TOP longest, longest first
    over_block: list[Sample] = field(default_factory=list)  # first TOP over model.block_size
    over_block_count: int = 0
    fed_lengths: frozenset[int] = frozenset()
    longest_fed: int = 0
    rows_full: bool = True
    targets: int = 0  # label positions the loss reads (after the shift), before truncation
    targets_fed: int = 0  # the same after truncation
    no_targets: int = 0  # samples with no label left after truncation
    no_targets_at: list[Sample] = field(default_factory=list)  # first TOP (length: see need)
    no_targets_need: int = 0  # the length that keeps a label in every one of them
    no_targets_ever: int = 0  # of them, those with no label at any length
    empty: int = 0  # samples whose text is empty or blank
    empty_at: list[Sample] = field(default_factory=list)
    over_vocab: int = 0  # samples holding an id >= the embedding rows
    over_vocab_at: list[Sample] = field(default_factory=list)  # first TOP (length: the id)
    max_id: int = -1

    def __post_init__(self) -> None:
        if not self.windows:
            self.windows = [0] * self.limits.micro_batch_size

    @property
    def tokens(self) -> int:
        return sum(n * c for n, c in self.hist.items())

    def over(self, limit: int) -> int:
        """Samples longer than ``limit`` tokens."""
        return sum(c for n, c in self.hist.items() if n > limit)

    def percentile(self, q: float) -> int:
        """Nearest-rank percentile, exact (one histogram bucket per length)."""
        if not self.count:
            raise ValueError("percentile of no values")
        rank = max(1, -(-self.count * q // 100))
        seen = 0
        for n in sorted(self.hist):
            seen += self.hist[n]
            if seen >= rank:
                return n
        raise AssertionError("unreachable: the histogram holds count samples")

    @classmethod
    def of_chunk(
        cls,
        limits: Limits,
        lengths: Sequence[int],
        samples: Sequence[Sample] = (),
    ) -> Summary:
        """The summary of consecutive samples with these token counts (``samples``: the
        candidates kept with locations, in order: the longest and those over the block)."""
        mbs = limits.micro_batch_size
        padded = [limits.padded(n) for n in lengths]
        windows = [0] * mbs
        if mbs == 1:
            windows[0] = sum(padded)
        else:
            for i in range(len(padded) - mbs + 1):
                windows[i % mbs] += max(padded[i : i + mbs])
        fixed = limits.padded(limits.max_length)
        keep = mbs - 1
        return cls(
            limits,
            count=len(lengths),
            hist=Counter(lengths),
            fed_tokens=sum(limits.fed(n) for n in lengths),
            fixed_slots=sum(max(fixed, p) for p in padded),
            windows=windows,
            head=padded[:keep],
            tail=padded[max(0, len(padded) - keep) :] if keep else [],
            longest=heapq.nlargest(TOP, samples, key=lambda s: s.length),
        )

    def merged(self, other: Summary, *, in_place: bool = False) -> Summary:
        """This summary followed by ``other`` (exact). ``in_place``: reuse this summary's
        histogram (the caller drops this summary), so folding many small parts into a
        running total costs each part's size, not the total's."""
        mbs = self.limits.micro_batch_size
        keep = mbs - 1
        windows = list(self.windows)
        for r, w in enumerate(other.windows):
            windows[(self.count + r) % mbs] += w
        # Windows that start in this summary's tail and end in the other's head.
        joined = self.tail + other.head
        start = self.count - len(self.tail)
        for i in range(len(self.tail)):
            if i + mbs <= len(joined) and start + i + mbs > self.count:
                windows[(start + i) % mbs] += max(joined[i : i + mbs])
        fed = self.fed_lengths | other.fed_lengths
        return replace(
            self,
            count=self.count + other.count,
            hist=_added(self.hist, other.hist, in_place),
            fed_tokens=self.fed_tokens + other.fed_tokens,
            fixed_slots=self.fixed_slots + other.fixed_slots,
            windows=windows,
            head=(self.head + other.head)[:keep],
            tail=(self.tail + other.tail)[max(0, len(self.tail) + len(other.tail) - keep) :]
            if keep
            else [],
            longest=heapq.nlargest(TOP, self.longest + other.longest, key=lambda s: s.length),
            over_block=(self.over_block + other.over_block)[:TOP],
            over_block_count=self.over_block_count + other.over_block_count,
            fed_lengths=frozenset(sorted(fed)[:FED_KEPT]),
            longest_fed=max(self.longest_fed, other.longest_fed),
            rows_full=self.rows_full and other.rows_full,
            targets=self.targets + other.targets,
            targets_fed=self.targets_fed + other.targets_fed,
            no_targets=self.no_targets + other.no_targets,
            no_targets_at=(self.no_targets_at + other.no_targets_at)[:TOP],
            no_targets_need=max(self.no_targets_need, other.no_targets_need),
            no_targets_ever=self.no_targets_ever + other.no_targets_ever,
            empty=self.empty + other.empty,
            empty_at=(self.empty_at + other.empty_at)[:TOP],
            over_vocab=self.over_vocab + other.over_vocab,
            over_vocab_at=(self.over_vocab_at + other.over_vocab_at)[:TOP],
            max_id=max(self.max_id, other.max_id),
        )

    def relocated(self, line_offset: int) -> Summary:
        """Line numbers shifted by ``line_offset`` (a shard that starts inside its file)."""
        if not line_offset:
            return self

        def move(s: Sample) -> Sample:
            return replace(s, line=s.line + line_offset)

        return replace(
            self,
            longest=[move(s) for s in self.longest],
            over_block=[move(s) for s in self.over_block],
            no_targets_at=[move(s) for s in self.no_targets_at],
            empty_at=[move(s) for s in self.empty_at],
            over_vocab_at=[move(s) for s in self.over_vocab_at],
        )

    @property
    def packed_rows(self) -> int:
        """Rows of data.max_seq_length tokens that packing makes of every token."""
        return -(-self.tokens // self.limits.block)

    def waste(self) -> dict[str, Waste]:
        """Padding waste of the three schemes, as :func:`cfgcheck.data.stats.padding_waste`
        computes it from every length."""
        lim = self.limits
        mbs = lim.micro_batch_size
        rem = self.count % mbs
        longest_slots = mbs * self.windows[0]
        if rem:
            longest_slots += rem * max(self.tail[len(self.tail) - rem :])
        tokens = self.tokens
        blocks = -(-tokens // lim.block)
        return {
            "max_length": Waste("max_length", self.fed_tokens, self.fixed_slots),
            "longest": Waste("longest", self.fed_tokens, longest_slots),
            "packed": Waste("packed", tokens, blocks * lim.block),
        }


def _added(a: Counter[int], b: Counter[int], in_place: bool) -> Counter[int]:
    if not in_place:
        return a + b
    a.update(b)
    return a
