"""What a dataset scan found: the merged summary and the config's limits it was read against."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cfgcheck.data.stats import Waste
from cfgcheck.data.summary import Sample, Summary


class ScanError(ValueError):
    """The scan cannot run: no tokenizer path, unreadable tokenizer or data."""


class NoTokenizerPathError(ScanError):
    """The config has no tokenizer.path, so there is no real tokenizer to scan with."""


@dataclass
class ScanReport:
    summary: Summary  # counts, exact length histogram, longest samples, padding waste
    max_length: int  # the tokenizer call's max_length (data.max_length or max_seq_length)
    truncation: bool
    max_seq_length: int
    block_size: int
    micro_batch_size: int
    pad_to_multiple_of: int | None
    collator: str
    padding: str
    tokenizer: str
    seconds: float
    jobs: int = 1
    waste: dict[str, Waste] = field(default_factory=dict)

    @property
    def hist(self) -> dict[int, int]:
        """Samples per token length (special tokens included): exact, one bucket a length."""
        return dict(sorted(self.summary.hist.items()))

    @property
    def longest(self) -> Sample:
        return self.summary.longest[0]

    @property
    def over_block(self) -> list[Sample]:
        """The first samples (at most five) fed longer than model.block_size."""
        return self.summary.over_block

    @property
    def over_block_count(self) -> int:
        return self.summary.over_block_count

    @property
    def fed_lengths(self) -> frozenset[int]:
        """Distinct lengths samples reach the collator with (at most two kept: one means
        batches stack), through cfgcheck.pipeline."""
        return self.summary.fed_lengths

    @property
    def longest_fed(self) -> int:
        """The longest batch length a sample forces (pad_to_multiple_of included)."""
        return self.summary.longest_fed

    @property
    def rows_full(self) -> bool:
        """Packing: every sample fills whole rows, no row is ever padded."""
        return self.summary.rows_full

    @property
    def samples(self) -> int:
        return self.summary.count

    @property
    def tokens(self) -> int:
        return self.summary.tokens

    @property
    def truncated(self) -> int:
        """Samples longer than max_length (cut when truncation is on)."""
        return self.summary.over(self.max_length)

    @property
    def configured(self) -> str:
        """The padding scheme the config uses: "packed", "max_length" or "longest"."""
        if self.collator == "packed":
            return "packed"
        return "max_length" if self.padding == "max_length" else "longest"

    def percentiles(self) -> dict[str, int]:
        s = self.summary
        return {
            "min": min(s.hist),
            "p50": s.percentile(50),
            "p90": s.percentile(90),
            "p99": s.percentile(99),
            "max": max(s.hist),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "tokens": self.tokens,
            "lengths": self.percentiles(),
            "longest": self.longest.__dict__,
            "longest_samples": [s.__dict__ for s in self.summary.longest],
            "max_length": self.max_length,
            "truncation": self.truncation,
            "truncated": self.truncated,
            "block_size": self.block_size,
            "over_block_size": self.over_block_count,
            "over_block_samples": [s.__dict__ for s in self.over_block],
            "micro_batch_size": self.micro_batch_size,
            "padding_waste": {k: w.to_dict() for k, w in self.waste.items()},
            "configured_padding": self.configured,
            "histogram": {str(k): v for k, v in self.hist.items()},
            "tokenizer": self.tokenizer,
            "jobs": self.jobs,
            "seconds": round(self.seconds, 3),
        }
