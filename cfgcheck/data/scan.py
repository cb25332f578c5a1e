"""Tokenize the configured dataset with the real tokenizer and measure what the run will see.

Reading and rendering run in a background thread while the main thread encodes whole chunks
with ``tokenizers``' ``encode_batch_fast`` (multi-threaded in Rust, the GIL released), so the
Python work per sample is one ``len()``.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from cfgcheck.data.records import Chunk, DataReadError, iter_text_chunks
from cfgcheck.data.stats import Waste, padding_waste, percentile
from cfgcheck.findings import Finding
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.run import RunConfig

# Progress shows only on a terminal and only for scans at least this big (bytes of data).
PROGRESS_MIN_BYTES = 4 << 20


class ScanError(ValueError):
    """The scan cannot run: no tokenizer path, unreadable tokenizer or data."""


class NoTokenizerPathError(ScanError):
    """The config has no tokenizer.path, so there is no real tokenizer to scan with."""


@dataclass(frozen=True)
class Sample:
    """Where one sample lives, and its token count."""

    file: str
    line: int
    length: int


@dataclass
class ScanReport:
    lengths: array[int]  # token count per sample, dataset order (special tokens included)
    longest: Sample
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
    over_block: list[Sample] = field(default_factory=list)  # fed lengths > block_size (<= 5)
    over_block_count: int = 0
    waste: dict[str, Waste] = field(default_factory=dict)
    # Through cfgcheck.pipeline: the distinct lengths samples reach the collator with (at
    # most two kept: one means batches stack) and the longest batch length a sample forces.
    fed_lengths: frozenset[int] = frozenset()
    longest_fed: int = 0
    rows_full: bool = False  # packing: every sample fills whole rows, no row is ever padded

    @property
    def samples(self) -> int:
        return len(self.lengths)

    @property
    def tokens(self) -> int:
        return sum(self.lengths)

    @property
    def truncated(self) -> int:
        """Samples longer than max_length (cut when truncation is on)."""
        limit = self.max_length
        return sum(1 for n in self.lengths if n > limit)

    @property
    def configured(self) -> str:
        """The padding scheme the config uses: "packed", "max_length" or "longest"."""
        if self.collator == "packed":
            return "packed"
        return "max_length" if self.padding == "max_length" else "longest"

    def percentiles(self) -> dict[str, int]:
        ordered = sorted(self.lengths)
        return {
            "min": ordered[0],
            "p50": percentile(ordered, 50),
            "p90": percentile(ordered, 90),
            "p99": percentile(ordered, 99),
            "max": ordered[-1],
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "tokens": self.tokens,
            "lengths": self.percentiles(),
            "longest": self.longest.__dict__,
            "max_length": self.max_length,
            "truncation": self.truncation,
            "truncated": self.truncated,
            "block_size": self.block_size,
            "over_block_size": self.over_block_count,
            "micro_batch_size": self.micro_batch_size,
            "padding_waste": {k: w.to_dict() for k, w in self.waste.items()},
            "configured_padding": self.configured,
            "tokenizer": self.tokenizer,
            "seconds": round(self.seconds, 3),
        }


def _reader(chunks: Iterator[Chunk], out: queue.Queue[Chunk | BaseException | None]) -> None:
    try:
        for c in chunks:
            out.put(c)
        out.put(None)
    except BaseException as e:  # handed to the consumer, re-raised there
        out.put(e)


def _chunks_in_background(chunks: Iterator[Chunk]) -> Iterator[Chunk]:
    q: queue.Queue[Chunk | BaseException | None] = queue.Queue(maxsize=4)
    thread = threading.Thread(target=_reader, args=(chunks, q), daemon=True)
    thread.start()
    while True:
        item = q.get()
        if item is None:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


def load_scan_tokenizer(run: RunConfig) -> tuple[Any, str]:
    """The run's tokenizer as a ``tokenizers.Tokenizer`` with padding and truncation off (the
    scan measures full lengths), and a description of where it came from."""
    from cfgcheck.tokenizer import TokenizerFileError, resolve_tokenizer
    from cfgcheck.tokenizer.hf import backend_tokenizer
    from cfgcheck.tokenizer.resolve import resolve_path

    if run.tokenizer.path is None:
        raise NoTokenizerPathError(
            "the scan needs the real tokenizer: set tokenizer.path to a tokenizer.json, a "
            "folder holding one, or a SentencePiece tokenizer.model (the shipped demo: "
            "tokenizer=demo-bpe)"
        )
    try:
        real = resolve_tokenizer(run.tokenizer.path)
        tk = backend_tokenizer(resolve_path(run.tokenizer.path))
    except TokenizerFileError as e:
        raise ScanError(f"tokenizer.path={run.tokenizer.path}: {e}") from e
    tk.no_padding()
    tk.no_truncation()
    return tk, real.size_source


def scan_dataset(
    run: RunConfig,
    *,
    base: Path | None = None,
    progress: TextIO | None = None,
    chunk_size: int = 2048,
) -> ScanReport:
    """Tokenize every sample of ``run.data.paths`` with the run's tokenizer (special tokens
    added as the tokenizer's post-processor adds them). ``progress``: a stream for a progress
    line (default: stderr when it is a terminal and the data is large). Raises ScanError."""
    tk, where = load_scan_tokenizer(run)
    d, m = run.data, run.model
    pipe = Pipeline.of(run)
    fed_lengths: set[int] = set()  # what each sample reaches the collator with
    longest_fed = 0  # the longest batch length a sample forces (pad_to_multiple_of included)
    rows_full = True  # every sample's real tokens fill whole packed rows
    lengths: array[int] = array("l")
    longest = Sample("", 0, -1)
    over: list[Sample] = []
    over_count = 0
    paths = [(base or Path.cwd()) / p for p in d.paths]
    total_bytes = sum(p.stat().st_size for p in paths if p.is_file())
    bar = _progress_stream(progress, total_bytes)
    started = time.perf_counter()
    done_before = 0
    current: Path | None = None
    encode = tk.encode_batch_fast if hasattr(tk, "encode_batch_fast") else tk.encode_batch
    try:
        for c in _chunks_in_background(iter_text_chunks(d, base, chunk_size)):
            n = [len(e) for e in encode(c.texts)]
            lengths.extend(n)
            top = max(n)
            if top > longest.length:
                i = n.index(top)
                longest = Sample(shown(c.file), c.lines[i] if c.lines else c.first + i, top)
            if len(fed_lengths) < 2:
                fed_lengths.update(pipe.sample_length(k) for k in n)
            if rows_full:
                rows_full = all(pipe.truncated(k) % d.max_seq_length == 0 for k in n)
            fed_top = pipe.model_length(top)
            longest_fed = max(longest_fed, fed_top)
            if fed_top > m.block_size and d.collator != "packed":
                for i, k in enumerate(n):
                    fed = pipe.model_length(k)
                    if fed > m.block_size:
                        over_count += 1
                        if len(over) < 5:
                            line = c.lines[i] if c.lines else c.first + i
                            over.append(Sample(shown(c.file), line, fed))
            if bar is not None:
                if current is not None and c.file != current:
                    done_before += current.stat().st_size
                current = c.file
                _show(bar, done_before + c.bytes_done, total_bytes, len(lengths), started)
    except DataReadError as e:
        raise ScanError(str(e)) from e
    finally:
        if bar is not None:
            bar.write("\r\033[K")
            bar.flush()
    if not lengths:
        raise ScanError("the dataset has no samples: " + ", ".join(d.paths))
    report = ScanReport(
        lengths=lengths,
        longest=longest,
        max_length=d.effective_max_length,
        truncation=d.truncation,
        max_seq_length=d.max_seq_length,
        block_size=m.block_size,
        micro_batch_size=run.trainer.micro_batch_size,
        pad_to_multiple_of=d.pad_to_multiple_of,
        collator=d.collator,
        padding=d.padding,
        tokenizer=where,
        seconds=time.perf_counter() - started,
        over_block=over,
        over_block_count=over_count,
        fed_lengths=frozenset(fed_lengths),
        longest_fed=longest_fed,
        rows_full=rows_full,
    )
    report.waste = padding_waste(
        lengths,
        max_length=d.effective_max_length,
        truncation=d.truncation,
        micro_batch_size=run.trainer.micro_batch_size,
        pad_to_multiple_of=d.pad_to_multiple_of,
        block=d.max_seq_length,
    )
    return report


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _progress_stream(progress: TextIO | None, total_bytes: int) -> TextIO | None:
    if progress is not None:
        return progress
    if total_bytes >= PROGRESS_MIN_BYTES and sys.stderr.isatty():
        return sys.stderr
    return None


def _show(bar: TextIO, done: int, total: int, samples: int, started: float) -> None:
    share = min(done / total, 1.0) if total else 1.0
    rate = samples / max(time.perf_counter() - started, 1e-9)
    filled = int(share * 30)
    bar.write(
        f"\rscanning [{'#' * filled}{'.' * (30 - filled)}] {share:4.0%} "
        f"{samples:,} samples, {rate:,.0f}/s"
    )
    bar.flush()


def scan_findings(report: ScanReport, run: RunConfig) -> list[Finding]:
    """Findings from a scan: see :mod:`cfgcheck.data.findings`."""
    from cfgcheck.data.findings import findings_from_scan

    return findings_from_scan(report, run)
