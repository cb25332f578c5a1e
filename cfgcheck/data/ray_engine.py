"""The Ray engine (``cfgcheck data --engine ray``, ``pip install cfgcheck[ray]``): the scan's
tasks (groups of shards, as the local engine makes them) run on a pool of Ray actors, one CPU
each, that each hold one :class:`~cfgcheck.data.scanner.Scanner` (the tokenizer loaded once per
actor, its own threads off: one actor is one core), and the driver merges their summaries in
dataset order with the local engine's :class:`~cfgcheck.data.local.Merge`: the report is the
local engine's, to the file:line. At most ``2 * actors`` tasks are in flight (two queued per
actor, so none waits for the driver between tasks), each sent to the actor with the fewest.

Ray core actors rather than Ray Data's ``map_batches`` over an ``ActorPoolStrategy``: on the
2-core development box the Ray Data pool took 5 to 6 s from the scan's start to its first task
(its actors import ``ray.data`` and Ray Data starts its own stats actor), against 1 to 2 s
for these actors, so a 50 MB corpus ran at about one core's rate (issue 26's benchmark). Each
actor reads its shards with cfgcheck's own bounded readers (:mod:`cfgcheck.data.records`), not
Ray Data's ``read_json`` / ``read_text``: those drop blank lines and line numbers, and parse
records into Arrow types, so the locations of long or bad records and the rendered texts would
differ from the local scan. The data paths must therefore be readable on every Ray node (a
shared filesystem).

Without ``--ray-address`` a local Ray is started with ``--jobs`` CPUs, its workers at normal
priority (:data:`LOCAL_SYSTEM_CONFIG`), and shut down after the scan; with one (``auto``,
``ray://host:10001``) the scan runs on that cluster, as it is configured, with one actor per
CPU (or ``--jobs`` actors). An actor that dies is not restarted and its task not retried
(Ray's defaults for actors, ``max_restarts=0``, set explicitly): one ScanError, never a hang.
Ray is imported only here.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections import deque
from typing import Any

from cfgcheck.data.local import Merge, Work, _Done, _scan_task, tasks
from cfgcheck.data.progress import Meter
from cfgcheck.data.records import Shard
from cfgcheck.data.report import EngineError, ScanError
from cfgcheck.data.sample import Sampling
from cfgcheck.data.scanner import Scanner, shown
from cfgcheck.data.summary import Summary
from cfgcheck.schema.run import RunConfig

MISSING = "--engine ray needs Ray: pip install 'cfgcheck[ray]'"


class _RayScanner:
    """The actor: one Scanner, tasks scanned one after the other."""

    def __init__(
        self, run: RunConfig, chunk_size: int, sampling: Sampling | None, work: Work | None
    ) -> None:
        import os

        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one tokenizer thread per actor
        self.work = work or Scanner(run, chunk_size, sampling=sampling).scan

    def scan(self, task: list[Shard]) -> _Done | str:
        """The task's shard summaries, or a bug's or library error's one line (reported by
        the driver: an exception Ray cannot pickle would lose its message)."""
        try:
            return _scan_task(self.work, task)
        except Exception as e:
            return f"{type(e).__name__}: {_one_line(e)}"


def _one_line(e: BaseException) -> str:
    """The first line of ``e``'s message, terminal colours removed, at most 300 characters."""
    lines = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip().splitlines()
    text = " ".join(lines[0].split()) if lines else type(e).__name__
    return text[:300] + (" ..." if len(text) > 300 else "")


def _root(e: BaseException) -> BaseException:
    """The exception a Ray error wraps (``RayTaskError.cause``, ``__cause__``), innermost."""
    seen = {id(e)}
    while True:
        inner = getattr(e, "cause", None) or e.__cause__
        if not isinstance(inner, BaseException) or id(inner) in seen:
            return e
        seen.add(id(inner))
        e = inner


def scan_ray(
    run: RunConfig,
    shards: list[Shard],
    shard_bytes: int,
    chunk_size: int,
    jobs: int | None,
    meter: Meter,
    sampling: Sampling | None,
    address: str | None,
    work: Work | None = None,
) -> Summary:
    try:
        import ray
    except ImportError as e:
        raise EngineError(MISSING) from e
    started = not ray.is_initialized()
    if started:
        try:
            with warnings.catch_warnings():  # Ray Client warns before it raises: one line
                warnings.simplefilter("ignore")
                _init(ray, address, jobs)
        except Exception as e:  # ConnectionError, RuntimeError, ValueError from ray.init
            where = f"the Ray cluster at {address}" if address else "a local Ray"
            raise EngineError(f"cannot start or reach {where}: {_one_line(e)}") from e
    try:
        return _run(ray, run, shards, shard_bytes, chunk_size, jobs, meter, sampling, work)
    finally:
        if started:
            ray.shutdown()


# A local Ray's workers at the scan's own priority. The raylet starts every worker at nice 15
# by default (RayConfig worker_niceness, src/ray/common/ray_config_def.h), so on a machine
# where anything else runs the actors get a fraction of the CPUs that local worker processes
# (nice 0) get: measured with os.getpriority in an actor, 15 by default, 0 with this.
LOCAL_SYSTEM_CONFIG = {"worker_niceness": 0}


def _init(ray: Any, address: str | None, jobs: int | None) -> None:
    ray.init(
        address=address,
        num_cpus=None if address else (jobs or 1),
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        ignore_reinit_error=True,
        _system_config=None if address else LOCAL_SYSTEM_CONFIG,
    )


def _run(
    ray: Any,
    run: RunConfig,
    shards: list[Shard],
    shard_bytes: int,
    chunk_size: int,
    jobs: int | None,
    meter: Meter,
    sampling: Sampling | None,
    work: Work | None,
) -> Summary:
    groups = list(tasks(shards, shard_bytes))
    size = jobs or max(1, int(ray.cluster_resources().get("CPU", 1)))
    size = max(1, min(size, len(groups)))
    actor = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(_RayScanner)
    pool = [actor.remote(run, chunk_size, sampling, work) for _ in range(size)]
    busy = [0] * size  # tasks sent to each actor and not finished
    pending: deque[tuple[list[Shard], Any, int]] = deque()  # in dataset order
    running: dict[Any, int] = {}  # unfinished task -> its actor
    merge = Merge(run)
    try:
        for task in groups:
            # Two unfinished tasks per actor; at most four per actor not yet merged.
            while len(running) >= 2 * size or len(pending) >= 4 * size:
                _take(ray, pending, running, busy, merge, meter)
            who = busy.index(min(busy))
            ref = pool[who].scan.remote(task)
            pending.append((task, ref, who))
            running[ref] = who
            busy[who] += 1
        while pending:
            _take(ray, pending, running, busy, merge, meter)
    except ScanError:
        raise
    except Exception as e:  # a dead actor or a Ray failure: Ray's exception, in one line
        files = sorted({shown(s.path) for s in shards})
        cause = _root(e)
        raise ScanError(
            f"a Ray scan worker failed ({type(cause).__name__}: {_one_line(cause)}) on "
            f"{', '.join(files[:3])}{' ...' if len(files) > 3 else ''}"
        ) from e
    finally:
        for a in pool:
            ray.kill(a)
    return merge.total


def _take(
    ray: Any,
    pending: deque[tuple[list[Shard], Any, int]],
    running: dict[Any, int],
    busy: list[int],
    merge: Merge,
    meter: Meter,
) -> None:
    """Merge the first task in dataset order if it has finished, else wait for any task to
    finish (its actor can take another) and merge the first if that was it."""
    task, head, _ = pending[0]
    if head in running:
        finished, _ = ray.wait(list(running), num_returns=1)
        for ref in finished:
            busy[running.pop(ref)] -= 1
        if head in running:
            return
    pending.popleft()
    done: _Done | str = ray.get(head)
    if isinstance(done, str):
        files = sorted({shown(s.path) for s in task})
        raise ScanError(
            f"a scan worker failed on {', '.join(files[:3])}"
            f"{' ...' if len(files) > 3 else ''}: {done}"
        )
    results, error = done
    for shard, (part, lines) in zip(task, results, strict=False):
        merge.add(shard, part, lines)
        meter.done(shard.size, merge.total)
    if error is not None:
        raise ScanError(str(merge.located(task[len(results)], error))) from error
