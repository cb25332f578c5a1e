"""cfgcheck's allocated peak against a CPU trace of the real training step (tests/alloc_tracer.py).

Random tiny runs over the settings of ``benchmarks/calibration/gpu_measure.py`` (Llama, Qwen2,
Mistral, Gemma, Phi; bf16-true, 32-true, bf16-mixed, 16-mixed; AdamW, SGD, Adafactor; full /
LoRA; checkpointing, accumulation, packing, pad_to_multiple_of, sdpa / eager) run the script's
loop on CPU under a dispatch-mode tracer of live tensor bytes; the table compares the traced
peak with ``estimate(...).allocated_bytes``.

    python benchmarks/memory_tracer.py [N] [FIRST_SEED]
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # PYTHONPATH first


def main() -> int:
    import torch

    from tests.alloc_tracer import compare, describe, random_run

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    first = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    print("| seed | run | traced MiB | phase | estimate MiB | phase | error |")
    print("|---:|---|---:|---|---:|---|---:|")
    errors = []
    t0 = time.time()
    for seed in range(first, first + n):
        c = compare(random_run(seed))
        errors.append(c.error)
        print(
            f"| {seed} | {describe(c.run)} | {c.traced.peak.bytes / 2**20:.2f} | "
            f"{c.traced.peak.phase} ({c.traced.peak.op}) | {c.estimated / 2**20:.2f} | "
            f"{c.phase} | {100 * c.error:+.1f}% |",
            flush=True,
        )
    abs_err = [abs(e) for e in errors]
    print(
        f"\n{n} runs in {time.time() - t0:.0f} s: median |error| "
        f"{100 * statistics.median(abs_err):.1f}%, worst {100 * max(abs_err):.1f}%, "
        f"under {100 * min(errors):+.1f}%, over {100 * max(errors):+.1f}%"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
