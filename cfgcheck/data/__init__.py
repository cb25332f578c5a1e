"""The dataset length scan: read the configured data, tokenize it with the real tokenizer,
report the length distribution, truncation and padding waste, and findings."""

from cfgcheck.data.records import DataReadError, iter_text_chunks
from cfgcheck.data.sample import Sampling
from cfgcheck.data.scan import (
    NoTokenizerPathError,
    ScanError,
    ScanReport,
    scan_dataset,
    scan_findings,
)

__all__ = [
    "DataReadError",
    "NoTokenizerPathError",
    "Sampling",
    "ScanError",
    "ScanReport",
    "iter_text_chunks",
    "scan_dataset",
    "scan_findings",
]
