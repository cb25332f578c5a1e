"""Sampling mode (``--sample 0.1%``): a quick look at a huge corpus.

Each record is kept or not by a hash of (seed, the file's name, the record's key: a line's
byte offset, a row's number), so the sample is deterministic: the same for any engine, number
of jobs and shard size, and for the same corpus in any folder or checkout. Records that are
not kept are not parsed or tokenized. Shares measured on the sample come with a 95 % Wilson
score interval (Wilson 1927; it stays inside [0, 1] and keeps its coverage for small counts
and shares near 0, where the normal interval fails).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

from cfgcheck.data.columnar import Keep

_M = (1 << 64) - 1
Z95 = 1.959964  # the standard normal's 97.5 % quantile


def _mix(x: int) -> int:
    """splitmix64's finaliser: consecutive inputs give independent-looking 64-bit outputs."""
    x = (x + 0x9E3779B97F4A7C15) & _M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M
    return x ^ (x >> 31)


@dataclass(frozen=True)
class Sampling:
    """Keep each record with probability ``rate`` (0 < rate <= 1), seeded."""

    rate: float
    seed: int = 0

    @property
    def threshold(self) -> int:
        return min(_M + 1, math.ceil(self.rate * (_M + 1)))

    def keep_for(self, file: str) -> Keep:
        """The predicate over one file's record keys."""
        base = _mix((self.seed << 32) ^ zlib.crc32(file.encode("utf-8", "surrogatepass")))
        threshold = self.threshold

        def keep(key: int) -> bool:
            return _mix((base + key) & _M) < threshold

        return keep

    def describe(self) -> str:
        """The rate as the option spells it: ``0.1%``."""
        return _pct(self.rate)


def _pct(rate: float) -> str:
    text = f"{rate * 100:.6f}".rstrip("0").rstrip(".")
    return f"{text}%"


def parse_rate(text: str) -> float:
    """``"0.1%"`` -> 0.001, ``"0.05"`` -> 0.05; ValueError unless 0 < rate <= 1."""
    value = text.strip()
    try:
        rate = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise ValueError(f"not a share: {text!r} (e.g. 0.1% or 0.001)") from None
    if not (0 < rate <= 1) or math.isnan(rate):
        raise ValueError(f"the sample must be above 0 and at most 100%, got {text!r}")
    return rate


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for a share of ``k`` in ``n``."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    center = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, center - half), min(1.0, center + half)
