"""Tokenize the configured dataset with the real tokenizer and measure what the run will see.

The dataset is cut into shards (:func:`cfgcheck.data.records.plan_shards`: by file, and by
byte range within large JSONL and text files). An engine scans each shard into a fixed-size
:class:`~cfgcheck.data.summary.Summary` with the same :class:`~cfgcheck.data.scanner.Scanner`
and merges them in dataset order, so the report is the same for any engine, number of jobs
and shard size: ``local`` (this process or a pool of worker processes,
:mod:`cfgcheck.data.local`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TextIO

from cfgcheck.data.local import Work, default_jobs, scan_here, scan_pool
from cfgcheck.data.progress import Meter, progress_stream
from cfgcheck.data.records import DataReadError, expand_paths, plan_shards
from cfgcheck.data.report import (
    DataNotLocalError,
    EngineError,
    NoChatTemplateError,
    NoTokenizerPathError,
    ScanError,
    ScanReport,
)
from cfgcheck.data.sample import Sampling
from cfgcheck.data.scanner import Scanner, load_scan_tokenizer, shown
from cfgcheck.data.summary import Sample
from cfgcheck.findings import Finding
from cfgcheck.schema.run import RunConfig

# JSONL / text files are split by byte range into shards of about a quarter of each worker's
# share of the data, within these bounds (small enough to balance, big enough to amortise).
SHARD_MIN, SHARD_MAX = 1 << 20, 64 << 20

__all__ = [
    "DataNotLocalError",
    "EngineError",
    "NoChatTemplateError",
    "NoTokenizerPathError",
    "Sample",
    "ScanError",
    "ScanReport",
    "default_jobs",
    "load_scan_tokenizer",
    "scan_dataset",
    "scan_findings",
    "shown",
]


def scan_dataset(
    run: RunConfig,
    *,
    base: Path | None = None,
    progress: TextIO | None = None,
    chunk_size: int = 2048,
    jobs: int | None = None,
    shard_bytes: int | None = None,
    quiet: bool = False,
    sample: Sampling | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    _work: Work | None = None,
) -> ScanReport:
    """Tokenize every sample of ``run.data.paths`` with the run's tokenizer (special tokens
    added as the tokenizer's post-processor adds them), over ``jobs`` processes (default: all
    cores; 1: this process, the tokenizer's own threads off). ``progress``: a stream for a
    progress line (default: stderr when it is a terminal, the data is large and not
    ``quiet``). ``sample``: scan only the records it keeps. ``engine``: "local" (processes
    on this machine) or "ray" (Ray actors, on the cluster at ``ray_address``, or a local Ray
    started with ``jobs`` CPUs). Raises ScanError."""
    requested = jobs
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ScanError(f"--jobs must be at least 1, got {jobs}")
    d, m = run.data, run.model
    loaded = load_scan_tokenizer(run)  # a bad tokenizer is one error, before any worker starts
    if d.messages_field is not None or d.prompt_field is not None:
        Scanner(run, chunk_size, *loaded, sampling=sample)  # so is a chat template's refusal
    try:
        files = (
            expand_paths(d.paths, base)
            if d.paths or not d.hub_dataset
            else hub_files(d.hub_dataset, d.hub_config, d.hub_split)
        )
        if shard_bytes is None:
            total = sum(p.stat().st_size for p in files)
            shard_bytes = max(SHARD_MIN, min(SHARD_MAX, total // (4 * jobs)))
        shards = plan_shards(d, base, shard_bytes, files)
    except OSError as e:
        raise ScanError(f"cannot read the dataset: {e.strerror or e}") from e
    except DataReadError as e:
        raise ScanError(str(e)) from e
    total_bytes = sum(s.size for s in shards)
    bar = None if quiet else progress_stream(progress, total_bytes)
    started = time.perf_counter()
    jobs = min(jobs, max(1, len(shards)))
    meter = Meter(bar, total_bytes, started)
    try:
        if engine == "ray":
            from cfgcheck.data.ray_engine import scan_ray

            asked = None if ray_address and requested is None else jobs
            summary = scan_ray(
                run, shards, shard_bytes, chunk_size, asked, meter, sample, ray_address, _work
            )
        elif engine != "local":
            raise ScanError(f"unknown scan engine {engine!r}: local or ray")
        elif jobs == 1:
            summary = scan_here(run, loaded, shards, chunk_size, meter, _work, sample)
        else:
            summary = scan_pool(run, shards, shard_bytes, chunk_size, jobs, meter, _work, sample)
    finally:
        meter.close()
    if not summary.count:
        kept = f" in a {sample.describe()} sample (seed {sample.seed})" if sample else ""
        raise ScanError(f"the dataset has no samples{kept}: " + ", ".join(d.paths))
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
        embedding_rows=m.rows,
        engine=engine,
        sampling=sample,
    )
    report.waste = summary.waste()
    return report


def hub_files(repo: str, config: str | None, split: str) -> list[Path]:
    """The local files of the Hub dataset ``repo`` (:mod:`cfgcheck.data.hub`);
    DataNotLocalError when no cache holds them."""
    from cfgcheck.data.hub import NotCached, cached_files

    try:
        return cached_files(repo, config, split)
    except NotCached as e:
        raise DataNotLocalError(str(e)) from e


def scan_findings(report: ScanReport, run: RunConfig) -> list[Finding]:
    """Findings from a scan: see :mod:`cfgcheck.data.findings`."""
    from cfgcheck.data.findings import findings_from_scan

    return findings_from_scan(report, run)
