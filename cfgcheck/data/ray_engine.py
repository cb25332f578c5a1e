"""The Ray engine (``cfgcheck data --engine ray``, ``pip install cfgcheck[ray]``): the scan's
tasks (groups of shards, as the local engine makes them) run as a Ray Data dataset,
``map_batches`` over a pool of actors that each hold one :class:`~cfgcheck.data.scanner.Scanner`
(the tokenizer loaded once per actor), and the driver merges their summaries in dataset order
with the local engine's :class:`~cfgcheck.data.local.Merge`: the report is the local engine's,
to the file:line.

Each actor reads its shards with cfgcheck's own bounded readers (:mod:`cfgcheck.data.records`),
not Ray Data's ``read_json`` / ``read_text``: those drop blank lines and line numbers, and
parse records into Arrow types, so the locations of long or bad records and the rendered
texts would differ from the local scan. The data paths must therefore be readable on every
Ray node (a shared filesystem), as local paths must be for Ray Data's readers.

Without ``--ray-address`` a local Ray is started with ``--jobs`` CPUs and shut down after the
scan; with one (``auto``, ``ray://host:10001``) the scan runs on that cluster with one actor
per CPU (or ``--jobs`` actors). Ray is imported only here.
"""

from __future__ import annotations

import logging
import pickle
import re
import warnings
from typing import Any

from cfgcheck.data.local import Merge, Work, _Done, _scan_task, tasks
from cfgcheck.data.progress import Meter
from cfgcheck.data.records import Shard
from cfgcheck.data.report import EngineError, ScanError
from cfgcheck.data.sample import Sampling
from cfgcheck.data.scanner import Scanner, shown
from cfgcheck.data.summary import Summary
from cfgcheck.schema.run import RunConfig

MISSING = "--engine ray needs Ray Data: pip install 'cfgcheck[ray]'"


class _RayScanner:
    """The ``map_batches`` UDF: one Scanner per actor; a batch holds pickled tasks."""

    def __init__(
        self, run: RunConfig, chunk_size: int, sampling: Sampling | None, work: Work | None
    ) -> None:
        import os

        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one tokenizer thread per actor
        self.work = work or Scanner(run, chunk_size, sampling=sampling).scan

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        out = []
        for t in batch["task"]:
            try:
                done: _Done | str = _scan_task(self.work, pickle.loads(t))
            except Exception as e:  # a bug or a library error: reported by the driver
                done = f"{type(e).__name__}: {_one_line(e)}"
            out.append(pickle.dumps(done))
        return {"i": batch["i"], "done": np.array(out, dtype=object)}


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
        import ray.data
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


def _init(ray: Any, address: str | None, jobs: int | None) -> None:
    ray.init(
        address=address,
        num_cpus=None if address else (jobs or 1),
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        ignore_reinit_error=True,
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
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # results come back in dataset order
    ctx.enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # no per-run INFO lines
    groups = list(tasks(shards, shard_bytes))
    actors = jobs or max(1, int(ray.cluster_resources().get("CPU", 1)))
    actors = max(1, min(actors, len(groups)))
    items = [{"i": i, "task": pickle.dumps(g)} for i, g in enumerate(groups)]
    with warnings.catch_warnings():
        # Ray Data restarts a dead actor and retries its task forever by default
        # (ray/data/_internal/execution/operators/actor_pool_map_operator.py, Ray 2.60): a
        # worker that crashes on a shard would hang the scan. max_restarts=0 reports it.
        # Ray 2.60 takes these only as the deprecated **ray_remote_args.
        warnings.simplefilter("ignore", DeprecationWarning)
        ds = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            _RayScanner,
            fn_constructor_args=(run, chunk_size, sampling, work),
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=actors),
            num_cpus=1,
            max_restarts=0,
            max_task_retries=0,
        )
    merge = Merge(run)
    try:
        for row in ds.iter_rows():
            task = groups[int(row["i"])]
            done: _Done | str = pickle.loads(row["done"])
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
    except ScanError:
        raise
    except Exception as e:  # a UDF error or a dead actor: Ray's exception, in one line
        files = sorted({shown(s.path) for s in shards})
        cause = _root(e)
        raise ScanError(
            f"a Ray scan worker failed ({type(cause).__name__}: {_one_line(cause)}) on "
            f"{', '.join(files[:3])}{' ...' if len(files) > 3 else ''}"
        ) from e
    return merge.total
