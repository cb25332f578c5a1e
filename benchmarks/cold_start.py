"""Benchmark: cold start of ``cfgcheck check`` vs ``python -c "import transformers, torch"``.

    python benchmarks/cold_start.py [--runs 7] [--heavy-runs 3]

Each row is a fresh process, timed by wall clock (median, min, max over the runs) and by CPU
time (user + sys, median), which varies less when other jobs share the machine. The tokenizer
row checks the shipped conf/ with ``tokenizer.path`` set to a real ``tokenizer.json`` folder
built here with the ``tokenizers`` library (tests/factories.py) and matching declared sizes,
so the tokenizer file is read. Goal: ``cfgcheck check`` at least
8x faster than importing transformers and torch, and at most 0.4 s.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.factories import bpe, save_folder  # noqa: E402

CFGCHECK = shutil.which("cfgcheck")
COMMAND = [CFGCHECK] if CFGCHECK else [sys.executable, "-m", "cfgcheck"]
GOAL_RATIO, GOAL_SECONDS = 8.0, 0.4


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_runs(command: Sequence[str], runs: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU (user + sys) seconds of ``runs`` fresh processes."""
    walls, cpus = [], []
    for _ in range(runs):
        cpu, start = _children_cpu(), time.perf_counter()
        proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - start)
        cpus.append(_children_cpu() - cpu)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return walls, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per cfgcheck row")
    parser.add_argument("--heavy-runs", type=int, default=3, help="runs of the torch import")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tok = bpe(special=("<unk>", "<s>", "</s>"))
        folder = save_folder(tok, Path(tmp) / "tok", pad_token="<unk>")
        size = tok.get_vocab_size()
        with_tokenizer = [
            f"+tokenizer.path={folder}",
            f"tokenizer.vocab_size={size}",
            f"model.vocab_size={size}",
        ]
        rows = [
            ("python -c pass (interpreter start)", [sys.executable, "-c", "pass"], args.runs),
            ("cfgcheck check (shipped conf/)", [*COMMAND, "check"], args.runs),
            (
                "cfgcheck check + tokenizer.json",
                [*COMMAND, "check", *with_tokenizer],
                args.runs,
            ),
            (
                'python -c "import transformers, torch"',
                [sys.executable, "-c", "import transformers, torch"],
                args.heavy_runs,
            ),
        ]
        results = [(label, *timed_runs(cmd, n)) for label, cmd, n in rows]

    print(
        f"{'command':42} {'runs':>4} {'wall median s':>14} {'min':>6} {'max':>6} "
        f"{'cpu median s':>13}"
    )
    for label, walls, cpus in results:
        print(
            f"{label:42} {len(walls):>4} {statistics.median(walls):>14.3f} "
            f"{min(walls):>6.3f} {max(walls):>6.3f} {statistics.median(cpus):>13.3f}"
        )
    check = statistics.median(results[2][1])
    heavy = statistics.median(results[3][1])
    ratio = heavy / check
    cpu_ratio = statistics.median(results[3][2]) / statistics.median(results[2][2])
    print()
    print(f"CPU-time ratio (less sensitive to other load on the machine): {cpu_ratio:.1f}x")
    print(
        f"cfgcheck check + tokenizer.json is {ratio:.1f}x faster than importing transformers "
        f"and torch (goal >= {GOAL_RATIO:.0f}x: {'met' if ratio >= GOAL_RATIO else 'NOT met'}); "
        f"{check:.3f} s (goal <= {GOAL_SECONDS} s: "
        f"{'met' if check <= GOAL_SECONDS else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
