"""Scan throughput against raw ``tokenizers`` batch encoding on the same corpus.

Writes a JSONL corpus of N Alpaca-style records (default 20,000) to a temp dir, then times:
raw ``Tokenizer.encode_batch`` (and ``encode_batch_fast``) on the already-rendered texts in
memory, and ``cfgcheck.data.scan_dataset`` end to end (read JSONL, render the template,
tokenize, statistics). Best of R runs each. Prints a table; the goal is a scan at >= 90 % of
raw encode_batch.

    python benchmarks/scan_throughput.py [--records 20000] [--repeats 3] [--tokenizer PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tokenizers import Tokenizer

from cfgcheck import check
from cfgcheck.data import scan_dataset

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n{output}"


def corpus(n: int, seed: int = 0) -> list[dict[str, str]]:
    """Records made from the shipped dataset's sentences, shuffled into varied lengths."""
    rows = [json.loads(x) for x in (REPO / "datasets/alpaca-tiny.jsonl").open() if x.strip()]
    sentences = [s.strip() + "." for r in rows for s in r["output"].split(".") if s.strip()]
    rng = random.Random(seed)
    out = []
    for i in range(n):
        r = rows[i % len(rows)]
        body = " ".join(rng.choices(sentences, k=rng.randint(1, 12)))
        out.append({"instruction": r["instruction"], "input": r["input"], "output": body})
    return out


def best(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokenizer", default=str(REPO / "assets/demo-tokenizer"))
    args = parser.parse_args()

    rows = corpus(args.records)
    texts = [TEMPLATE.format(**r) for r in rows]
    tk = Tokenizer.from_file(str(Path(args.tokenizer) / "tokenizer.json"))
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "corpus.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        result = check(
            REPO / "conf",
            "config",
            ["tokenizer=demo-bpe", f"tokenizer.path={args.tokenizer}", f"data.paths=[{data}]"],
        )
        run = result.config
        assert run is not None, result.findings
        report = scan_dataset(run)  # warm-up, and the token count
        assert report.samples == len(texts)
        tokens = report.tokens
        timings = {
            "raw encode_batch (texts in memory)": best(
                lambda: tk.encode_batch(texts), args.repeats
            ),
            "raw encode_batch_fast (texts in memory)": best(
                lambda: tk.encode_batch_fast(texts), args.repeats
            ),
            "cfgcheck scan (read + render + tokenize + stats)": best(
                lambda: scan_dataset(run), args.repeats
            ),
        }
    base = timings["raw encode_batch (texts in memory)"]
    print(f"{len(texts):,} records, {tokens:,} tokens, tokenizer {args.tokenizer}")
    print(f"{'method':<50} {'seconds':>8} {'samples/s':>11} {'tokens/s':>11} {'vs raw':>7}")
    for name, secs in timings.items():
        print(
            f"{name:<50} {secs:8.3f} {len(texts) / secs:11,.0f} {tokens / secs:11,.0f} "
            f"{base / secs:7.0%}"
        )


if __name__ == "__main__":
    main()
