"""One shard of the dataset into a :class:`~cfgcheck.data.summary.Summary`: read, render,
tokenize with the fast batched path, and measure each sample through the pipeline. Every
engine (this process, the local worker pool, Ray) runs this same code on its pieces."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfgcheck.data.records import Shard, at, shard_chunks
from cfgcheck.data.report import NoTokenizerPathError, ScanError
from cfgcheck.data.sample import Sampling
from cfgcheck.data.summary import FED_KEPT, TOP, Limits, Sample, Summary
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.run import RunConfig


def eos_token(run: RunConfig) -> str:
    """The end-of-sequence token TRL appends: the config's ``tokenizer.eos_token`` (TRL's
    ``SFTConfig.eos_token`` replaces the tokenizer's, sft_trainer.py:728-735), else the
    tokenizer files'; ScanError when neither has one."""
    from cfgcheck.tokenizer import TokenizerFileError, resolve_tokenizer

    if run.tokenizer.eos_token:
        return run.tokenizer.eos_token
    special = None
    if run.tokenizer.path is not None:
        try:
            special = resolve_tokenizer(run.tokenizer.path).specials.get("eos")
        except TokenizerFileError as e:
            raise ScanError(f"tokenizer.path={run.tokenizer.path}: {e}") from e
    if special is None or not special.token:
        raise ScanError(
            "the tokenizer has no eos_token, which TRL appends to every text "
            "(trl/trainer/sft_trainer.py add_eos): set tokenizer.eos_token"
        )
    return special.token


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
    """``path`` relative to the working directory when it lies below it (lexically: no
    system call per file, for folders of very many files)."""
    here = os.getcwd()  # the physical path: symlinks resolved
    full = os.path.abspath(path)
    if full.startswith(here.rstrip(os.sep) + os.sep):
        return os.path.relpath(full, here)
    return str(path)


@dataclass
class Scanner:
    """Scans one shard into a Summary: the state one worker holds."""

    run: RunConfig
    chunk_size: int
    tk: Any = None
    where: str = ""
    sampling: Sampling | None = None

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
        # TRL appends the EOS to plain text unless it ends with it (sft_trainer.py:1292-1295).
        self.eos = eos_token(self.run) if d.add_eos and d.prompt_field is None else None
        self.chat: Any = None  # an encoder of records rendered as JSON (not plain text)
        if d.prompt_field is not None:
            from cfgcheck.data.completion import CompletionEncoder

            self.chat = CompletionEncoder(self.run)
        elif d.messages_field is not None:
            from cfgcheck.data.chat import ChatEncoder

            self.chat = ChatEncoder(self.run)
        # An id can reach the embedding rows only when the tokenizer has one that high.
        self.rows = m.rows
        self.check_ids = max(tk.get_vocab(with_added_tokens=True).values()) >= self.rows

    def scan(self, shard: Shard) -> tuple[Summary, int]:
        """The shard's summary (lines numbered from the shard's start) and its line count;
        with ``sampling``, of the records it keeps (:mod:`cfgcheck.data.sample`)."""
        total = Summary(self.limits)
        lines_read = 0
        name = shown(shard.path)
        keep = None if self.sampling is None else self.sampling.keep_for(shard.path.name)
        for c in shard_chunks(shard, self.run.data, self.chunk_size, keep):
            lines_read = c.lines_read
            if not c.texts:
                continue
            where = c.lines if c.lines else range(c.first, c.first + len(c.texts))
            part = self.measure(name, list(where), c.texts)
            total = total.merged(part, in_place=True) if total.count else part
        return total, lines_read

    def _ids(
        self, name: str, where: list[int], texts: list[str]
    ) -> tuple[list[int], list[list[int]] | None, list[list[int]] | None]:
        """(lengths, ids when they are needed, assistant masks when labels are masked)."""
        if self.chat is None:
            eos = self.eos
            if eos is not None:
                texts = [t if t.endswith(eos) else t + eos for t in texts]
            enc = self.encode(texts)
            ids = [e.ids for e in enc] if self.check_ids else None
            return [len(e) for e in enc], ids, None
        try:
            ids, masks = self.chat.encode(texts)
        except ScanError:  # find the conversation the template refuses: one error, located
            for i, text in enumerate(texts):
                try:
                    self.chat.encode([text])
                except ScanError as e:
                    raise at(name, where[i], str(e)) from e
            raise
        return [len(x) for x in ids], ids, masks

    def measure(self, name: str, where: list[int], texts: list[str]) -> Summary:
        """The summary of consecutive samples ``texts`` found at lines ``where`` of ``name``."""
        pipe, d, lim = self.pipe, self.run.data, self.limits
        n, ids, masks = self._ids(name, where, texts)
        top = sorted(range(len(n)), key=n.__getitem__, reverse=True)[:TOP]
        best = [Sample(name, where[i], n[i]) for i in sorted(top)]
        part = Summary.of_chunk(lim, n, best)
        part.fed_lengths = frozenset(sorted({pipe.sample_length(k) for k in n})[:FED_KEPT])
        part.rows_full = all(pipe.truncated(k) % d.max_seq_length == 0 for k in n)
        part.longest_fed = pipe.model_length(max(n))
        if part.longest_fed > self.block_size and self.check_block:
            over = [i for i, k in enumerate(n) if pipe.model_length(k) > self.block_size]
            part.over_block_count = len(over)
            part.over_block = [Sample(name, where[i], pipe.model_length(n[i])) for i in over[:TOP]]
        # Labels the loss reads: position 0 is never a target (the shift in transformers'
        # ForCausalLMLoss), so a sample's targets are its label positions 1..fed-1.
        fed = [lim.fed(k) for k in n]
        if masks is None:
            targets = [max(k - 1, 0) for k in n]
            kept = [max(f - 1, 0) for f in fed]
        else:
            targets = [sum(m[1:]) for m in masks]
            kept = [sum(m[1:f]) for m, f in zip(masks, fed, strict=True)]
        part.targets, part.targets_fed = sum(targets), sum(kept)
        none = [i for i, k in enumerate(kept) if not k]
        part.no_targets = len(none)
        # Per such sample, the length that would keep its first label (0: it has none).
        need = [_first_label(n[i], None if masks is None else masks[i]) for i in none]
        part.no_targets_at = [
            Sample(name, where[i], k) for i, k in zip(none[:TOP], need, strict=False)
        ]
        part.no_targets_need = max(need, default=0)
        part.no_targets_ever = sum(1 for k in need if not k)
        blank = self._blank(texts)
        part.empty = len(blank)
        part.empty_at = [Sample(name, where[i], n[i]) for i in blank[:TOP]]
        if ids is not None and self.check_ids:
            tops = [max(x, default=-1) for x in ids]
            part.max_id = max(tops, default=-1)
            bad = [i for i, t in enumerate(tops) if t >= self.rows]
            part.over_vocab = len(bad)
            part.over_vocab_at = [Sample(name, where[i], tops[i]) for i in bad[:TOP]]
        return part

    def _blank(self, texts: list[str]) -> list[int]:
        if self.chat is None:
            return [i for i, t in enumerate(texts) if not t.strip()]
        if self.run.data.prompt_field is not None:
            from cfgcheck.data.completion import is_empty
        else:
            from cfgcheck.data.chat import is_empty

        return [i for i, t in enumerate(texts) if is_empty(t)]


def _first_label(length: int, mask: list[int] | None) -> int:
    """The shortest truncation length that keeps one label of this sample (position 0 is
    never a target); 0 when no length does."""
    if mask is None:
        return 2 if length >= 2 else 0
    return next((i + 1 for i in range(1, len(mask)) if mask[i]), 0)
