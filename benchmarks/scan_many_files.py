"""The dataset scan over a folder of many tiny files: the time per file stays flat as the
count grows (planning, grouping shards into tasks and merging are linear).

Writes ``N`` one-record JSONL files for each ``N`` of ``--counts`` into a temporary folder
and scans each folder with ``--jobs`` processes in a fresh subprocess; prints seconds and
microseconds per file.

    python benchmarks/scan_many_files.py [--counts 10000 100000] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def measure(folder: Path, jobs: int) -> dict[str, float]:
    from cfgcheck import check
    from cfgcheck.data import scan_dataset

    result = check(REPO / "conf", "config", ["tokenizer=demo-bpe", f"data.paths=[{folder}]"])
    if result.config is None:
        raise SystemExit(f"the benchmark config does not load: {result.findings}")
    start = time.perf_counter()
    report = scan_dataset(result.config, jobs=jobs, quiet=True)
    return {"seconds": time.perf_counter() - start, "samples": report.samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(Path(args.measure), args.jobs)))
        return
    record = {"instruction": "Name a colour.", "input": "", "output": "Blue."}
    line = json.dumps(record) + "\n"
    print(f"| files   | samples | s      | µs per file |  (--jobs {args.jobs})")
    print("|---------|---------|--------|-------------|")
    for count in args.counts:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "many"
            folder.mkdir()
            for i in range(count):
                (folder / f"{i:06d}.jsonl").write_text(line)
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            cmd = [sys.executable, __file__, "--measure", str(folder), "--jobs", str(args.jobs)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if proc.returncode:
                raise SystemExit(proc.stderr)
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            per = r["seconds"] / count * 1e6
            print(f"| {count:>7,} | {r['samples']:>7,} | {r['seconds']:6.1f} | {per:11,.0f} |")


if __name__ == "__main__":
    main()
