"""On a CUDA machine: the caching allocator's own record of an H100 calibration run, replayed
through cfgcheck's simulator (issue 24). One short GPU run settles whether a disagreement
between the simulated and the measured reserved peak is in the simulator or in the event
sequence it is fed.

For each run id it runs gpu_measure.py's ``train`` unchanged (benchmarks/calibration/
gpu_measure.py: the build, the peaks reset, two optimizer steps) under
``torch.cuda.memory._record_memory_history`` started before the build, and prints:

* the cached free blocks of at least 100 MiB right after the build (before the peaks are
  reset): a tied model built with ``from_config`` should show its first lm_head weight there
  (vocabulary x hidden, freed when ``post_init`` ties it; cfgcheck/memory/events.py
  ``_untied_head_at_build``);
* ``max_memory_reserved()`` / ``max_memory_allocated()`` of the run, and the same figures
  from replaying the recorded ``alloc`` / ``free_completed`` trace through
  ``cfgcheck.memory.allocsim.simulate`` with the reset where ``train`` resets: equal
  reserved means the simulator is right and the CPU / meta trace
  (benchmarks/allocator_meta_trace.py) misses an allocation the CUDA run makes;
* each new segment of at least 100 MiB after the reset: its size, the request that opened
  it and the Python frame that made the request.

It writes ``$OUT/<id>.events.json`` (or ``./<id>.events.json``): the trace as ``[size]``
(an allocation), ``[-1, index]`` (the free of the allocation at that index), ``["R"]``
(the reset), with the innermost Python frame of each allocation, to diff offline with
the meta trace of the same run (``tests/alloc_tracer.py`` ``traced_step(record=True)``).

    python benchmarks/gpu_allocator_trace.py [run-id ...]   # default: the runs below

Needs torch with CUDA, transformers, peft (as gpu_measure.py); about a minute per run on an
H100. The settings of each run come from benchmarks/calibration/runs.json.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # PYTHONPATH first
DATA = ROOT / "benchmarks" / "calibration"
MIB = 2**20
# the tied full fine-tuning runs: Gemma-2B (exact with the build's freed lm_head weight in
# the real-op replay) and Llama-3.2-3B (2.7 % over with it, 0.1 % without)
DEFAULT = ["gemma-full-ckpt-b2", "l32-full-ckpt-b2-s2048"]


def gpu_measure() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_measure", DATA / "gpu_measure.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def frame(entry: dict[str, Any]) -> str:
    """The innermost frame of a trace entry outside torch's own Python files."""
    for f in entry.get("frames", []):
        name = f.get("filename", "")
        if "/torch/" not in name or "/nn/modules/" in name:
            return f"{Path(name).name}:{f.get('line')} {f.get('name')}"
    return ""


def run(spec: dict[str, Any], out_dir: Path) -> None:
    import torch

    from cfgcheck.memory.allocsim import FREE, RESET, simulate

    gm = gpu_measure()
    marks: list[int] = []
    reset = torch.cuda.reset_peak_memory_stats
    after_build: list[list[int]] = []

    def traces() -> list[dict[str, Any]]:
        return list(torch.cuda.memory._snapshot()["device_traces"][0])

    def marking_reset(*a: Any, **k: Any) -> None:
        marks.append(len(traces()))
        if len(marks) == 2:  # train() resets once at the start and once after the build
            cached = []
            for seg in torch.cuda.memory_snapshot():
                for b in seg["blocks"]:
                    if b["state"] == "inactive" and b["size"] >= 100 * MIB:
                        cached.append(b["size"] // MIB)
            after_build.append(sorted(cached, reverse=True))
        reset(*a, **k)

    torch.cuda.memory._record_memory_history(
        enabled="all", context="all", stacks="python", max_entries=2_000_000
    )
    torch.cuda.reset_peak_memory_stats = marking_reset  # type: ignore[assignment]
    try:
        res = gm.train(spec, "cuda")
    finally:
        torch.cuda.reset_peak_memory_stats = reset  # type: ignore[assignment]
    entries = traces()
    torch.cuda.memory._record_memory_history(enabled=None)
    # the trace as allocsim events; "R" where train() reset the peaks the second time
    events: list[tuple[int, int]] = []
    compact: list[list[Any]] = []
    live: dict[int, int] = {}  # address -> index of its allocation
    new_segments: list[tuple[int, int, str]] = []
    segment = 0  # a segment just opened: the next allocation is the request that opened it
    seg_log: list[list[int]] = []  # [index in compact of the next allocation, address, size]
    for k, e in enumerate(entries):
        if len(marks) >= 2 and k == marks[1]:
            events.append((0, RESET))
            compact.append(["R"])
        act = e["action"]
        if act == "alloc":
            live[e["addr"]] = len(compact)
            events.append((len(compact), e["size"]))
            compact.append([e["size"], frame(e)])
            if segment:
                new_segments.append((segment // MIB, e["size"] // MIB, frame(e)))
                segment = 0
        elif act == "free_completed" and e["addr"] in live:
            i = live.pop(e["addr"])
            events.append((i, FREE))
            compact.append([-1, i])
        elif act == "segment_alloc":
            # where cudaMalloc placed each segment: the allocator breaks ties between free
            # blocks of one size by address
            seg_log.append([len(compact), e["addr"], e["size"]])
            if len(marks) >= 2 and k > marks[1]:
                segment = e["size"] if e["size"] >= 100 * MIB else 0
    sim = simulate(events)
    rid = spec["id"]
    # what a single-stream replay cannot see: allocations on side streams, segments released
    # (empty_cache, an out-of-memory retry) and out-of-memory events after the reset
    after = entries[marks[1] :] if len(marks) >= 2 else entries
    actions: dict[str, int] = {}
    streams: dict[int, int] = {}
    side: dict[str, int] = {}
    for e in after:
        actions[e["action"]] = actions.get(e["action"], 0) + 1
        if e["action"] == "alloc":
            streams[e.get("stream", 0)] = streams.get(e.get("stream", 0), 0) + 1
            if e.get("stream", 0) != min(streams):
                key = f"{e['size'] // MIB} MiB {frame(e)}"
                side[key] = side.get(key, 0) + 1
    print(f"{rid}: actions after the reset {actions}; allocations per stream {streams}")
    for key, n in sorted(side.items(), key=lambda kv: -kv[1])[:12]:
        print(f"{rid}:   side-stream allocation x{n}: {key}")
    print(f"{rid}: cached free blocks >= 100 MiB after the build (MiB): {after_build}")
    print(
        f"{rid}: measured reserved {res['reserved']:,} allocated {res['allocated']:,}; "
        f"CUDA trace replayed: reserved {sim.peak_reserved:,} allocated {sim.peak_allocated:,} "
        f"({sim.peak_reserved - res['reserved']:+,} / {sim.peak_allocated - res['allocated']:+,})"
    )
    for size, req, where in new_segments:
        print(f"{rid}:   new segment {size} MiB for a {req} MiB request at {where}")
    (out_dir / f"{rid}.events.json").write_text(json.dumps(compact))
    (out_dir / f"{rid}.segments.json").write_text(json.dumps(seg_log))


def main(ids: list[str]) -> int:
    """Each run in a fresh process, as gpu_measure.py runs it (a fresh CUDA context and
    cache)."""
    import subprocess

    if ids[:1] == ["--one"]:
        import torch

        if not torch.cuda.is_available():
            print("needs a CUDA device", file=sys.stderr)
            return 2
        runs = {
            r["id"]: r for f in sorted(DATA.glob("runs*.json")) for r in json.loads(f.read_text())
        }
        run(runs[ids[1]], Path(os.environ.get("OUT", ".")))
        return 0
    rc = 0
    for rid in ids or DEFAULT:
        rc |= subprocess.run([sys.executable, __file__, "--one", rid], check=False).returncode
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
