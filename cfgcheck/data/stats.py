"""Length statistics: percentiles and the padding waste of three batching schemes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Waste:
    """Real tokens against the positions a scheme computes on (the rest is padding)."""

    scheme: str
    tokens: int
    slots: int

    @property
    def share(self) -> float:
        return 1.0 - self.tokens / self.slots if self.slots else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "slots": self.slots, "waste": round(self.share, 4)}


def percentile(ordered: Sequence[int], q: float) -> int:
    """Nearest-rank percentile of an ascending sequence."""
    if not ordered:
        raise ValueError("percentile of no values")
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100), at least 1
    return ordered[int(min(rank, len(ordered))) - 1]


def _round_up(n: int, multiple: int | None) -> int:
    return n if not multiple else -(-n // multiple) * multiple


def padding_waste(
    lengths: Sequence[int],
    *,
    max_length: int,
    truncation: bool,
    micro_batch_size: int,
    pad_to_multiple_of: int | None,
    block: int,
) -> dict[str, Waste]:
    """Padding waste of: every sample padded to ``max_length`` ("max_length"); each batch of
    ``micro_batch_size`` consecutive samples padded to its longest ("longest"); samples
    concatenated into blocks of ``block`` tokens ("packed", only the last block is padded).
    Truncation cuts samples to ``max_length`` first (packing keeps every token)."""
    fed = [min(n, max_length) for n in lengths] if truncation else list(lengths)
    tokens = sum(fed)
    fixed = _round_up(max_length, pad_to_multiple_of)
    fixed_slots = sum(max(fixed, _round_up(n, pad_to_multiple_of)) for n in fed)
    longest_slots = 0
    for start in range(0, len(fed), micro_batch_size):
        batch = fed[start : start + micro_batch_size]
        longest_slots += len(batch) * _round_up(max(batch), pad_to_multiple_of)
    all_tokens = sum(lengths)
    blocks = -(-all_tokens // block)
    return {
        "max_length": Waste("max_length", tokens, fixed_slots),
        "longest": Waste("longest", tokens, longest_slots),
        "packed": Waste("packed", all_tokens, blocks * block),
    }
