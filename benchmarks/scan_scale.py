"""The dataset scan at scale: one process, all cores, and the raw tokenizer on all cores.

Generates a synthetic JSONL corpus of about ``--mb`` megabytes (Alpaca-style records built from
the shipped dataset's sentences; nothing is downloaded), then, each in a fresh subprocess:

- ``cfgcheck scan --jobs 1``: one process, the tokenizer's own threads off;
- ``cfgcheck scan --jobs N``: N worker processes (default: every core);
- ``cfgcheck scan --engine ray --jobs N``: the Ray engine on a local Ray started with N
  CPUs (skipped without the ``ray`` extra); Ray's start-up is timed apart (a cluster pays it
  once), the scan after it;
- raw ``tokenizers`` ``encode_batch_fast`` over the same rendered texts, held in memory, with
  the library's own thread pool on every core: the practical limit.

Prints seconds, MB/s, tokens/s, the share of the raw rate, peak RSS of the process and of its
largest worker (Ray's actors are the raylet's children, not ours: not shown), and the
projected hours to scan 1 TB at that rate.

    python benchmarks/scan_scale.py [--mb 50] [--jobs N] [--tokenizer FOLDER]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n{output}"


def write_corpus(path: Path, megabytes: float, seed: int = 0) -> int:
    """About ``megabytes`` MB of JSONL records of varied length; returns the record count."""
    rows = [json.loads(x) for x in (REPO / "datasets/alpaca-tiny.jsonl").open() if x.strip()]
    sentences = [s.strip() + "." for r in rows for s in r["output"].split(".") if s.strip()]
    rng = random.Random(seed)
    target = int(megabytes * 1e6)
    written = n = 0
    with path.open("w") as f:
        while written < target:
            r = rows[n % len(rows)]
            body = " ".join(rng.choices(sentences, k=rng.randint(1, 40)))
            line = json.dumps(
                {"instruction": r["instruction"], "input": r["input"], "output": body}
            )
            f.write(line + "\n")
            written += len(line) + 1
            n += 1
    return n


def _peaks() -> tuple[int, int]:
    """Peak RSS (MiB) of this process (VmHWM: ru_maxrss keeps the parent's across exec) and
    of its largest child."""
    try:
        status = Path("/proc/self/status").read_text().split("VmHWM:")[1]
        me = int(status.split()[0])
    except (OSError, IndexError):
        me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return me // 1024, kids // 1024


def measure(mode: str, data: Path, tokenizer: str, jobs: int) -> dict[str, float]:
    """One measurement, in this (fresh) process."""
    if mode == "raw":
        from tokenizers import Tokenizer

        tk = Tokenizer.from_file(str(Path(tokenizer) / "tokenizer.json"))
        with data.open() as f:
            texts = [TEMPLATE.format(**json.loads(line)) for line in f]
        start = time.perf_counter()
        tokens = 0
        for i in range(0, len(texts), 2048):
            tokens += sum(len(e) for e in tk.encode_batch_fast(texts[i : i + 2048]))
        seconds = time.perf_counter() - start
        samples = len(texts)
    else:
        from cfgcheck import check
        from cfgcheck.data import scan_dataset

        startup = 0.0
        if mode == "ray":
            import ray

            from cfgcheck.data.ray_engine import LOCAL_SYSTEM_CONFIG

            begun = time.perf_counter()
            # as `cfgcheck data --engine ray` starts a local Ray (workers at normal priority)
            ray.init(
                num_cpus=jobs,
                include_dashboard=False,
                log_to_driver=False,
                _system_config=LOCAL_SYSTEM_CONFIG,
            )
            startup = time.perf_counter() - begun

        result = check(
            REPO / "conf",
            "config",
            ["tokenizer=demo-bpe", f"tokenizer.path={tokenizer}", f"data.paths=[{data}]"],
        )
        if result.config is None:
            raise SystemExit(f"the benchmark config does not load: {result.findings}")
        start = time.perf_counter()
        engine = "ray" if mode == "ray" else "local"
        report = scan_dataset(result.config, jobs=jobs, quiet=True, engine=engine)
        seconds = time.perf_counter() - start
        tokens, samples = report.tokens, report.samples
    me, kids = _peaks()
    out = {"seconds": seconds, "tokens": tokens, "samples": samples, "rss": me, "kids": kids}
    if mode == "ray":
        out["startup"] = startup
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=50.0, help="corpus size in MB (default 50)")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--tokenizer", default=str(REPO / "assets/demo-tokenizer"))
    parser.add_argument("--measure", choices=["scan", "raw", "ray"], help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        out = measure(args.measure, Path(args.data), args.tokenizer, args.jobs)
        print(json.dumps(out))
        return

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "corpus.jsonl"
        records = write_corpus(data, args.mb)
        size = data.stat().st_size
        runs = {
            "cfgcheck scan, 1 process": ("scan", 1),
            f"cfgcheck scan, {args.jobs} processes": ("scan", args.jobs),
            f"raw encode_batch_fast, {args.jobs} threads": ("raw", args.jobs),
        }
        if importlib.util.find_spec("ray") is not None:
            runs[f"cfgcheck scan, Ray local, {args.jobs} CPUs"] = ("ray", args.jobs)
        results = {}
        for name, (mode, jobs) in runs.items():
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            if mode == "raw":
                env["TOKENIZERS_PARALLELISM"] = "true"
                env["RAYON_NUM_THREADS"] = str(jobs)
            cmd = [sys.executable, __file__, "--measure", mode, "--data", str(data)]
            cmd += ["--jobs", str(jobs), "--tokenizer", args.tokenizer]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if proc.returncode:
                raise SystemExit(f"{name} failed:\n{proc.stderr}")
            results[name] = json.loads(proc.stdout.strip().splitlines()[-1])

    raw = results[f"raw encode_batch_fast, {args.jobs} threads"]
    raw_rate = raw["tokens"] / raw["seconds"]
    print(
        f"corpus: {size / 1e6:,.0f} MB, {records:,} records, "
        f"{raw['tokens']:,} tokens; tokenizer {args.tokenizer}; {os.cpu_count()} CPUs"
    )
    head = (
        f"| {'run':<34} | {'s':>6} | {'MB/s':>6} | {'tokens/s':>10} | {'vs raw':>6} "
        f"| {'RSS MiB':>7} | {'worker MiB':>10} | {'h per TB':>8} |"
    )
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    for name, r in results.items():
        rate = r["tokens"] / r["seconds"]
        mbs = size / 1e6 / r["seconds"]
        hours = 1e12 / (size / r["seconds"]) / 3600
        kids = f"{r['kids']:>10}" if r["kids"] and "Ray" not in name else f"{'-':>10}"
        print(
            f"| {name:<34} | {r['seconds']:6.2f} | {mbs:6.2f} | {rate:10,.0f} "
            f"| {rate / raw_rate:6.0%} | {r['rss']:>7} | {kids} | {hours:8,.0f} |"
        )
    for name, r in results.items():
        if "startup" in r:
            print(f"{name}: Ray start-up {r['startup']:.1f} s, not counted above")


if __name__ == "__main__":
    main()
