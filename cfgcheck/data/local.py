"""The local engine: shards scanned in this process (``--jobs 1``) or over a pool of worker
processes, their summaries merged in dataset order. At most ``2 * jobs`` tasks are in flight:
memory does not grow with the corpus. A worker that dies or fails is one ScanError naming its
files, never a hang."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from cfgcheck.data.progress import Meter
from cfgcheck.data.records import DataReadError, Shard
from cfgcheck.data.report import ScanError
from cfgcheck.data.sample import Sampling
from cfgcheck.data.scanner import Scanner, shown
from cfgcheck.data.summary import Limits, Summary
from cfgcheck.schema.run import RunConfig

Work = Callable[[Shard], tuple[Summary, int]]
_Done = tuple[list[tuple[Summary, int]], DataReadError | None]

_WORKER: Scanner | None = None


def default_jobs() -> int:
    """All the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _init_worker(run: RunConfig, chunk_size: int, sampling: Sampling | None) -> None:
    global _WORKER
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one tokenizer thread per process
    _WORKER = Scanner(run, chunk_size, sampling=sampling)


def _scan_in_worker(shard: Shard) -> tuple[Summary, int]:
    if _WORKER is None:
        raise RuntimeError("the scan worker was not initialised")
    return _WORKER.scan(shard)


def _scan_task(work: Work, task: list[Shard]) -> _Done:
    """Consecutive shards (many small files make one task): each one's summary and line
    count, up to the first that cannot be read, and that one's error."""
    out: list[tuple[Summary, int]] = []
    for shard in task:
        try:
            out.append(work(shard))
        except DataReadError as e:
            return out, e
    return out, None


def tasks(shards: list[Shard], size: int) -> Iterator[list[Shard]]:
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


class Merge:
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
        self.total = self.total.merged(part.relocated(self.lines), in_place=True)
        self.lines += lines


def scan_here(
    run: RunConfig,
    loaded: tuple[Any, str],
    shards: list[Shard],
    chunk_size: int,
    meter: Meter,
    work: Work | None,
    sampling: Sampling | None = None,
) -> Summary:
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # --jobs 1: one core
    try:
        scanner = Scanner(run, chunk_size, *loaded, sampling=sampling)
        merge = Merge(run)
        for shard in shards:
            try:
                part, lines = (work or scanner.scan)(shard)
            except DataReadError as e:
                raise ScanError(str(merge.located(shard, e))) from e
            merge.add(shard, part, lines)
            meter.done(shard.size, merge.total)
        return merge.total
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


def scan_pool(
    run: RunConfig,
    shards: list[Shard],
    shard_bytes: int,
    chunk_size: int,
    jobs: int,
    meter: Meter,
    work: Work | None,
    sampling: Sampling | None = None,
) -> Summary:
    import multiprocessing

    merge = Merge(run)
    pending: list[tuple[list[Shard], Future[_Done]]] = []
    ctx = multiprocessing.get_context("spawn")  # no fork of a process with tokenizer threads
    pool = ProcessPoolExecutor(
        jobs, ctx, initializer=_init_worker, initargs=(run, chunk_size, sampling)
    )
    try:
        # At most 2 * jobs tasks in flight; results taken in dataset order.
        for task in tasks(shards, shard_bytes):
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


def _take(pending: list[tuple[list[Shard], Future[_Done]]], merge: Merge, meter: Meter) -> None:
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
        meter.done(shard.size, merge.total)
    if error is not None:
        raise ScanError(str(merge.located(task[len(done)], error))) from error
