"""The scan's progress line: bytes, samples, tokens/s and the time left, on a terminal only."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from cfgcheck.data.summary import Summary

# Progress shows only on a terminal and only for scans at least this big (bytes of data).
PROGRESS_MIN_BYTES = 4 << 20
EVERY = 0.2  # seconds between redraws


def progress_stream(progress: TextIO | None, total_bytes: int) -> TextIO | None:
    """``progress`` if given; else stderr when it is a terminal, outside CI, for a large scan."""
    if progress is not None:
        return progress
    if os.environ.get("CI"):
        return None
    if total_bytes >= PROGRESS_MIN_BYTES and sys.stderr.isatty():
        return sys.stderr
    return None


class Meter:
    """The progress line: bytes, samples, tokens/s and the time left."""

    def __init__(self, bar: TextIO | None, total: int, started: float) -> None:
        self.bar, self.total, self.started, self.bytes = bar, total, started, 0
        self.shown = float("-inf")

    def done(self, size: int, summary: Summary) -> None:
        """``size`` more bytes scanned; ``summary``: everything scanned so far. The line is
        redrawn at most every ``EVERY`` seconds (a folder of 100,000 tiny files)."""
        self.bytes += size
        if self.bar is None:
            return
        now = time.perf_counter()
        if now - self.shown < EVERY and self.bytes < self.total:
            return
        self.shown = now
        elapsed = max(now - self.started, 1e-9)
        share = min(self.bytes / self.total, 1.0) if self.total else 1.0
        rate = summary.tokens / elapsed
        left = elapsed * (1 - share) / share if share else 0.0
        filled = int(share * 30)
        self.bar.write(
            f"\rscanning [{'#' * filled}{'.' * (30 - filled)}] {share:4.0%} "
            f"{self.bytes / 1e6:,.0f}/{self.total / 1e6:,.0f} MB, {summary.count:,} samples, "
            f"{rate:,.0f} tokens/s, ETA {left:,.0f} s"
        )
        self.bar.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.write("\r\033[K")
            self.bar.flush()
