"""CPU time of generating one run's allocation events (``cfgcheck.memory.events.step_events``,
what the simulated memory check replays) for the sweep benchmark's models at 4,096 tokens and
8 rows, full fine-tuning (bf16 weights) or LoRA, checkpointed or not: the best of ``--reps``
runs each, the number of events and the sha256 of their marshal bytes (the same before and
after a change that must keep the events exactly).

    python benchmarks/step_events.py [--reps 10]
"""

from __future__ import annotations

import argparse
import hashlib
import marshal
import os
import time
from pathlib import Path

os.environ.setdefault("CFGCHECK_NO_CACHE", "1")

from cfgcheck import check
from cfgcheck.memory.events import covered, step_events

ROOT = Path(__file__).resolve().parent.parent


def runs() -> list[tuple[str, list[str]]]:
    out = []
    for model in ("llama-2-7b", "tinyllama-1.1b"):
        for trainer in ("full", "lora"):
            for ckpt in ("false", "true"):
                precision = ["trainer.precision=bf16-true"] if trainer == "full" else []
                out.append((
                    f"{model} {trainer} ckpt={ckpt}",
                    [f"model={model}", f"trainer={trainer}", *precision,
                     "data.max_seq_length=4096", "trainer.micro_batch_size=8",
                     f"trainer.gradient_checkpointing={ckpt}"],
                ))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    total = 0.0
    for name, overrides in runs():
        config = check(ROOT / "conf", "config", overrides).config
        if config is None or not covered(config.model, config.trainer):
            print(f"{name:32s} not generated")
            continue
        m, d, t = config.model, config.data, config.trainer
        best = float("inf")
        for _ in range(args.reps):
            start = time.process_time()
            events = step_events(m, d, t)
            best = min(best, time.process_time() - start)
        total += best
        digest = hashlib.sha256(marshal.dumps(events)).hexdigest()[:12]
        print(f"{name:32s} {best * 1000:7.2f} ms  {len(events):7,d} events  {digest}")
    print(f"{'total':32s} {total * 1000:7.2f} ms")


if __name__ == "__main__":
    main()
