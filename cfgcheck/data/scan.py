"""Tokenize the configured dataset with the real tokenizer and measure what the run will see.

The dataset is cut into shards (:func:`cfgcheck.data.records.plan_shards`: by file, and by
byte range within large JSONL and text files) scanned by ``jobs`` worker processes, each with
one tokenizer thread and the batched ``encode_batch_fast`` path. Each shard becomes a
fixed-size :class:`~cfgcheck.data.summary.Summary`; the parent merges them in dataset order,
so the report is the same for any number of jobs and any shard size. At most ``2 * jobs``
shards are in flight: memory does not grow with the corpus.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from cfgcheck.data.records import (
    DataReadError,
    Shard,
    expand_paths,
    plan_shards,
    shard_chunks,
)
from cfgcheck.data.stats import Waste
from cfgcheck.data.summary import Limits, Sample, Summary
from cfgcheck.findings import Finding
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.run import RunConfig

# Progress shows only on a terminal and only for scans at least this big (bytes of data).
PROGRESS_MIN_BYTES = 4 << 20
# JSONL / text files are split by byte range into shards of about a quarter of each worker's
# share of the data, within these bounds (small enough to balance, big enough to amortise).
SHARD_MIN, SHARD_MAX = 1 << 20, 64 << 20

__all__ = ["Sample", "ScanError", "ScanReport", "scan_dataset"]


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


@dataclass
class _Scanner:
    """Scans one shard into a Summary: the state one worker process holds."""

    run: RunConfig
    chunk_size: int
    tk: Any = None
    where: str = ""

    def __post_init__(self) -> None:
        if self.tk is None:
            self.tk, self.where = load_scan_tokenizer(self.run)
        tk = self.tk
        self.encode = tk.encode_batch_fast if hasattr(tk, "encode_batch_fast") else tk.encode_batch
        self.pipe = Pipeline.of(self.run)
        d, m = self.run.data, self.run.model
        self.limits = Limits.of(self.run)
        self.block_size = m.block_size
        self.check_block = d.collator != "packed"

    def scan(self, shard: Shard) -> tuple[Summary, int]:
        """The shard's summary (lines numbered from the shard's start) and its line count."""
        pipe, d = self.pipe, self.run.data
        total = Summary(self.limits)
        lines_read = 0
        name = shown(shard.path)
        for c in shard_chunks(shard, d, self.chunk_size):
            lines_read = c.lines_read
            if not c.texts:
                continue
            n = [len(e) for e in self.encode(c.texts)]
            where = c.lines if c.lines else range(c.first, c.first + len(n))
            top = sorted(range(len(n)), key=n.__getitem__, reverse=True)[:5]
            best = [Sample(name, where[i], n[i]) for i in sorted(top)]
            part = Summary.of_chunk(self.limits, n, best)
            if len(total.fed_lengths) < 2:
                part.fed_lengths = frozenset(sorted({pipe.sample_length(k) for k in n})[:2])
            part.rows_full = all(pipe.truncated(k) % d.max_seq_length == 0 for k in n)
            part.longest_fed = pipe.model_length(max(n))
            if part.longest_fed > self.block_size and self.check_block:
                over = [i for i, k in enumerate(n) if pipe.model_length(k) > self.block_size]
                part.over_block_count = len(over)
                part.over_block = [
                    Sample(name, where[i], pipe.model_length(n[i])) for i in over[:5]
                ]
            total = total.merged(part)
        return total, lines_read


_WORKER: _Scanner | None = None


def _init_worker(run: RunConfig, chunk_size: int) -> None:
    global _WORKER
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one tokenizer thread per process
    _WORKER = _Scanner(run, chunk_size)


def _scan_in_worker(shard: Shard) -> tuple[Summary, int]:
    if _WORKER is None:
        raise RuntimeError("the scan worker was not initialised")
    return _WORKER.scan(shard)


_Done = tuple[list[tuple[Summary, int]], DataReadError | None]


def _scan_task(work: Callable[[Shard], tuple[Summary, int]], task: list[Shard]) -> _Done:
    """Consecutive shards (many small files make one task): each one's summary and line
    count, up to the first that cannot be read, and that one's error."""
    out: list[tuple[Summary, int]] = []
    for shard in task:
        try:
            out.append(work(shard))
        except DataReadError as e:
            return out, e
    return out, None


def _tasks(shards: list[Shard], size: int) -> Iterator[list[Shard]]:
    """Consecutive shards grouped up to ``size`` bytes (a large shard alone)."""
    task: list[Shard] = []
    held = 0
    for shard in shards:
        if task and held + shard.size > size:
            yield task
            task, held = [], 0
        task.append(shard)
        held += shard.size
    if task:
        yield task


def default_jobs() -> int:
    """All the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def scan_dataset(
    run: RunConfig,
    *,
    base: Path | None = None,
    progress: TextIO | None = None,
    chunk_size: int = 2048,
    jobs: int | None = None,
    shard_bytes: int | None = None,
    quiet: bool = False,
    _work: Callable[[Shard], tuple[Summary, int]] | None = None,
) -> ScanReport:
    """Tokenize every sample of ``run.data.paths`` with the run's tokenizer (special tokens
    added as the tokenizer's post-processor adds them), over ``jobs`` processes (default: all
    cores; 1: this process, the tokenizer's own threads off). ``progress``: a stream for a
    progress line (default: stderr when it is a terminal, the data is large and not
    ``quiet``). Raises ScanError."""
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ScanError(f"--jobs must be at least 1, got {jobs}")
    d, m = run.data, run.model
    loaded = load_scan_tokenizer(run)  # a bad tokenizer is one error, before any worker starts
    try:
        if shard_bytes is None:
            total = sum(p.stat().st_size for p in expand_paths(d.paths, base))
            shard_bytes = max(SHARD_MIN, min(SHARD_MAX, total // (4 * jobs)))
        shards = plan_shards(d, base, shard_bytes)
    except OSError as e:
        raise ScanError(f"cannot read the dataset: {e.strerror or e}") from e
    except DataReadError as e:
        raise ScanError(str(e)) from e
    total_bytes = sum(s.size for s in shards)
    bar = None if quiet else _progress_stream(progress, total_bytes)
    started = time.perf_counter()
    jobs = min(jobs, max(1, len(shards)))
    meter = _Meter(bar, total_bytes, started)
    try:
        if jobs == 1:
            summary = _scan_here(run, loaded, shards, chunk_size, meter, _work)
        else:
            summary = _scan_pool(run, shards, shard_bytes, chunk_size, jobs, meter, _work)
    finally:
        meter.close()
    if not summary.count:
        raise ScanError("the dataset has no samples: " + ", ".join(d.paths))
    report = ScanReport(
        summary=summary,
        max_length=d.effective_max_length,
        truncation=d.truncation,
        max_seq_length=d.max_seq_length,
        block_size=m.block_size,
        micro_batch_size=run.trainer.micro_batch_size,
        pad_to_multiple_of=d.pad_to_multiple_of,
        collator=d.collator,
        padding=d.padding,
        tokenizer=loaded[1],
        seconds=time.perf_counter() - started,
        jobs=jobs,
    )
    report.waste = summary.waste()
    return report


class _Merge:
    """Folds shard summaries in dataset order, numbering lines across a file's shards."""

    def __init__(self, run: RunConfig) -> None:
        self.total = Summary(Limits.of(run))
        self.file: Path | None = None
        self.lines = 0

    def located(self, shard: Shard, error: DataReadError) -> DataReadError:
        """``error`` with its line counted from the start of the shard's file."""
        return error.shifted(self.lines if shard.path == self.file else 0)

    def add(self, shard: Shard, part: Summary, lines: int) -> None:
        if shard.path != self.file:
            self.file, self.lines = shard.path, 0
        self.total = self.total.merged(part.relocated(self.lines))
        self.lines += lines


def _scan_here(
    run: RunConfig,
    loaded: tuple[Any, str],
    shards: list[Shard],
    chunk_size: int,
    meter: _Meter,
    work: Callable[[Shard], tuple[Summary, int]] | None,
) -> Summary:
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # --jobs 1: one core
    try:
        scanner = _Scanner(run, chunk_size, *loaded)
        merge = _Merge(run)
        for shard in shards:
            try:
                part, lines = (work or scanner.scan)(shard)
            except DataReadError as e:
                raise ScanError(str(merge.located(shard, e))) from e
            merge.add(shard, part, lines)
            meter.done(shard, merge.total)
        return merge.total
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


def _scan_pool(
    run: RunConfig,
    shards: list[Shard],
    shard_bytes: int,
    chunk_size: int,
    jobs: int,
    meter: _Meter,
    work: Callable[[Shard], tuple[Summary, int]] | None,
) -> Summary:
    import multiprocessing

    merge = _Merge(run)
    pending: list[tuple[list[Shard], Future[_Done]]] = []
    ctx = multiprocessing.get_context("spawn")  # no fork of a process with tokenizer threads
    pool = ProcessPoolExecutor(jobs, ctx, initializer=_init_worker, initargs=(run, chunk_size))
    try:
        # At most 2 * jobs tasks in flight; results taken in dataset order.
        for task in _tasks(shards, shard_bytes):
            pending.append((task, pool.submit(_scan_task, work or _scan_in_worker, task)))
            while len(pending) >= 2 * jobs:
                _take(pending, merge, meter)
        while pending:
            _take(pending, merge, meter)
    except BrokenProcessPool as e:
        raise ScanError(
            f"a scan worker process died ({e}); rerun with --jobs 1 to scan in this process"
        ) from e
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return merge.total


def _take(pending: list[tuple[list[Shard], Future[_Done]]], merge: _Merge, meter: _Meter) -> None:
    task, future = pending.pop(0)
    try:
        done, error = future.result()
    except BrokenProcessPool:
        raise
    except Exception as e:  # an unexpected failure inside a worker: one line, its shards
        files = sorted({shown(s.path) for s in task})
        raise ScanError(
            f"a scan worker failed on {', '.join(files[:3])}"
            f"{' ...' if len(files) > 3 else ''}: {type(e).__name__}: {e}"
        ) from e
    for shard, (part, lines) in zip(task, done, strict=False):
        merge.add(shard, part, lines)
        meter.done(shard, merge.total)
    if error is not None:
        raise ScanError(str(merge.located(task[len(done)], error))) from error


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _progress_stream(progress: TextIO | None, total_bytes: int) -> TextIO | None:
    if progress is not None:
        return progress
    if os.environ.get("CI"):
        return None
    if total_bytes >= PROGRESS_MIN_BYTES and sys.stderr.isatty():
        return sys.stderr
    return None


class _Meter:
    """The progress line: bytes, samples, tokens/s and the time left."""

    def __init__(self, bar: TextIO | None, total: int, started: float) -> None:
        self.bar, self.total, self.started, self.bytes = bar, total, started, 0

    def done(self, shard: Shard, summary: Summary) -> None:
        self.bytes += shard.size
        if self.bar is None:
            return
        elapsed = max(time.perf_counter() - self.started, 1e-9)
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


def scan_findings(report: ScanReport, run: RunConfig) -> list[Finding]:
    """Findings from a scan: see :mod:`cfgcheck.data.findings`."""
    from cfgcheck.data.findings import findings_from_scan

    return findings_from_scan(report, run)
