"""What a dataset scan found: the merged summary and the config's limits it was read against."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cfgcheck.data.sample import Sampling, wilson
from cfgcheck.data.stats import Waste
from cfgcheck.data.summary import Sample, Summary


class ScanError(ValueError):
    """The scan cannot run: no tokenizer path, unreadable tokenizer or data."""


class EngineError(ScanError):
    """The scan engine cannot run (Ray missing, its cluster unreachable): no fault of the
    config or the data, so ``check --scan-data`` exits 2 rather than reporting a finding."""


class NoTokenizerPathError(ScanError):
    """The config has no tokenizer.path, so there is no real tokenizer to scan with."""


class NoChatTemplateError(ScanError):
    """Conversations that their framework renders with a template of its own (LLaMA-Factory's
    ``template``, Axolotl's named ``chat_template``) and a tokenizer without a chat template:
    the scan has nothing to render them with, and the run itself is not at fault."""


class DataNotLocalError(ScanError):
    """data.hub_dataset names a Hub dataset that no local Hugging Face cache holds (the scan
    never downloads), so there is nothing to scan."""


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
    embedding_rows: int = 0
    engine: str = "local"
    sampling: Sampling | None = None

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

    @property
    def tokens_cut(self) -> int:
        """Tokens truncation drops (0 when truncation is off)."""
        return self.summary.tokens - self.summary.fed_tokens if self.truncation else 0

    @property
    def cut_share(self) -> float:
        return self.tokens_cut / self.tokens if self.tokens else 0.0

    def over_length_interval(self) -> tuple[float, float] | None:
        """With sampling: the 95 % Wilson interval of the share of samples longer than
        max_length in the whole dataset; None for a full scan (the share is exact)."""
        if self.sampling is None:
            return None
        return wilson(self.truncated, self.samples)

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
            "tokens_truncated": self.tokens_cut,
            "tokens_truncated_share": round(self.cut_share, 6),
            "label_tokens": self.summary.targets,
            "label_tokens_after_truncation": self.summary.targets_fed,
            "samples_without_labels": self.summary.no_targets,
            "samples_without_labels_first": [
                {"file": s.file, "line": s.line, "length_keeping_a_label": s.length or None}
                for s in self.summary.no_targets_at
            ],
            "empty_samples": self.summary.empty,
            "empty_samples_first": [s.__dict__ for s in self.summary.empty_at],
            "embedding_rows": self.embedding_rows,
            "max_token_id": self.summary.max_id if self.summary.max_id >= 0 else None,
            "samples_with_ids_over_embedding": self.summary.over_vocab,
            "samples_with_ids_over_embedding_first": [
                {"file": s.file, "line": s.line, "id": s.length} for s in self.summary.over_vocab_at
            ],
            "packed_rows": self.summary.packed_rows,
            "micro_batch_size": self.micro_batch_size,
            "padding_waste": {k: w.to_dict() for k, w in self.waste.items()},
            "configured_padding": self.configured,
            "histogram": {str(k): v for k, v in self.hist.items()},
            "tokenizer": self.tokenizer,
            "jobs": self.jobs,
            "engine": self.engine,
            "sample": self._sample_dict(),
            "seconds": round(self.seconds, 3),
        }

    def _sample_dict(self) -> dict[str, Any] | None:
        interval = self.over_length_interval()
        if self.sampling is None or interval is None:
            return None
        return {
            "rate": self.sampling.rate,
            "seed": self.sampling.seed,
            "over_max_length_share": round(self.truncated / self.samples, 6),
            "over_max_length_share_95ci_wilson": [round(x, 6) for x in interval],
        }
