"""One shard of the dataset into a :class:`~cfgcheck.data.summary.Summary`: read, render,
tokenize with the fast batched path, and measure each sample through the pipeline. Every
engine (this process, the local worker pool, Ray) runs this same code on its pieces."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfgcheck.data.records import Shard, shard_chunks
from cfgcheck.data.report import NoTokenizerPathError, ScanError
from cfgcheck.data.summary import Limits, Sample, Summary
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.run import RunConfig


def load_scan_tokenizer(run: RunConfig) -> tuple[Any, str]:
    """The run's tokenizer as a ``tokenizers.Tokenizer`` with padding and truncation off (the
    scan measures full lengths), and a description of where it came from."""
    from cfgcheck.tokenizer import TokenizerFileError, resolve_tokenizer
    from cfgcheck.tokenizer.hf import backend_tokenizer
    from cfgcheck.tokenizer.resolve import resolve_path

    if run.tokenizer.path is None:
        raise NoTokenizerPathError(
            "the scan needs the real tokenizer: set tokenizer.path to a tokenizer.json, a "
            "folder holding one, or a SentencePiece tokenizer.model (the shipped demo: "
            "tokenizer=demo-bpe)"
        )
    try:
        real = resolve_tokenizer(run.tokenizer.path)
        tk = backend_tokenizer(resolve_path(run.tokenizer.path))
    except TokenizerFileError as e:
        raise ScanError(f"tokenizer.path={run.tokenizer.path}: {e}") from e
    tk.no_padding()
    tk.no_truncation()
    return tk, real.size_source


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


@dataclass
class Scanner:
    """Scans one shard into a Summary: the state one worker holds."""

    run: RunConfig
    chunk_size: int
    tk: Any = None
    where: str = ""

    def __post_init__(self) -> None:
        if self.tk is None:
            self.tk, self.where = load_scan_tokenizer(self.run)
        tk = self.tk
        self.encode = tk.encode_batch_fast if hasattr(tk, "encode_batch_fast") else tk.encode_batch
        self.pipe = Pipeline.of(self.run)
        d, m = self.run.data, self.run.model
        self.limits = Limits.of(self.run)
        self.block_size = m.block_size
        self.check_block = d.collator != "packed"

    def scan(self, shard: Shard) -> tuple[Summary, int]:
        """The shard's summary (lines numbered from the shard's start) and its line count."""
        total = Summary(self.limits)
        lines_read = 0
        name = shown(shard.path)
        for c in shard_chunks(shard, self.run.data, self.chunk_size):
            lines_read = c.lines_read
            if not c.texts:
                continue
            where = c.lines if c.lines else range(c.first, c.first + len(c.texts))
            total = total.merged(self.measure(name, list(where), c.texts))
        return total, lines_read

    def measure(self, name: str, where: list[int], texts: list[str]) -> Summary:
        """The summary of consecutive samples ``texts`` found at lines ``where`` of ``name``."""
        pipe, d = self.pipe, self.run.data
        n = [len(e) for e in self.encode(texts)]
        top = sorted(range(len(n)), key=n.__getitem__, reverse=True)[:5]
        best = [Sample(name, where[i], n[i]) for i in sorted(top)]
        part = Summary.of_chunk(self.limits, n, best)
        part.fed_lengths = frozenset(sorted({pipe.sample_length(k) for k in n})[:2])
        part.rows_full = all(pipe.truncated(k) % d.max_seq_length == 0 for k in n)
        part.longest_fed = pipe.model_length(max(n))
        if part.longest_fed > self.block_size and self.check_block:
            over = [i for i, k in enumerate(n) if pipe.model_length(k) > self.block_size]
            part.over_block_count = len(over)
            part.over_block = [Sample(name, where[i], pipe.model_length(n[i])) for i in over[:5]]
        return part
