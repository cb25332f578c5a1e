"""Sampling mode: a seeded, deterministic share of the records, the same for any number of
jobs and shard size, with a 95 % Wilson interval on the over-length share."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cfgcheck.data import scan_dataset
from cfgcheck.data.sample import Sampling, parse_rate, wilson
from tests.conftest import run_cfgcheck
from tests.test_data_scan import expected_lengths, make_run, records, write_jsonl
from tests.test_data_scan_jobs import _comparable


@pytest.fixture
def tok_dir(tmp_path: Path) -> Path:
    from tests.factories import bpe, save_folder

    return save_folder(bpe(), tmp_path / "tok", pad_token="<unk>")


def test_parse_rate() -> None:
    assert parse_rate("0.1%") == pytest.approx(0.001)
    assert parse_rate("0.25") == 0.25
    assert parse_rate("100%") == 1.0
    for bad in ("0", "0%", "150%", "-1", "x", "nan"):
        with pytest.raises(ValueError):
            parse_rate(bad)


def test_wilson_matches_the_textbook_values() -> None:
    # Wilson (1927); e.g. Agresti & Coull (1998): 0 of 10 -> [0, 0.2775], 5 of 10 ->
    # [0.2366, 0.7634] at 95 %.
    lo, hi = wilson(0, 10)
    assert lo == 0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))


@settings(max_examples=30, deadline=None)
@given(p=st.sampled_from([0.01, 0.1, 0.3]), n=st.sampled_from([200, 1000]))
def test_wilson_covers_the_true_share_about_95_percent(p: float, n: int) -> None:
    rng = random.Random(int(p * 1000) + n)
    covered = 0
    trials = 400
    for _ in range(trials):
        k = sum(rng.random() < p for _ in range(n))
        lo, hi = wilson(k, n)
        covered += lo <= p <= hi
    assert covered / trials > 0.9  # nominal 95 %; a binomial's coverage oscillates around it


def test_the_sample_is_seeded_and_the_same_for_any_jobs_and_shards(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    rows = records(400)
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    lengths = expected_lengths(tok_dir, rows)
    limit = sorted(lengths)[300]  # some are over max_length
    true = sum(n > limit for n in lengths) / len(lengths)
    assert 0.05 < true < 0.5
    run = make_run(cfg, tok_dir, path, max_seq_length=limit)
    sample = Sampling(0.2, seed=7)
    one = scan_dataset(run, jobs=1, sample=sample)
    two = scan_dataset(run, jobs=2, sample=sample, shard_bytes=3000, chunk_size=5)
    assert _comparable(one) == _comparable(two)
    assert 40 < one.samples < 130  # about 80 of 400
    other = scan_dataset(run, jobs=1, sample=Sampling(0.2, seed=8))
    assert other.hist != one.hist  # another seed, another sample

    # The kept records are exactly those the hash keeps, by line offset.
    keep = sample.keep_for(str(path))
    offsets, at = [], 0
    for line in path.read_bytes().splitlines(keepends=True):
        offsets.append(at)
        at += len(line)
    kept = [n for n, off in zip(lengths, offsets, strict=True) if keep(off)]
    assert one.hist == Counter(kept)

    lo, hi = one.over_length_interval() or (0, 0)
    over = sum(n > limit for n in kept) / len(kept)
    assert lo < over < hi and lo < true < hi
    full = scan_dataset(run, jobs=1)
    assert full.over_length_interval() is None  # a full scan's share is exact


def test_sample_on_the_command_line(tmp_path: Path) -> None:
    proc = run_cfgcheck(
        "data", "tokenizer=demo-bpe", "model.vocab_size=1000", "--sample", "50%", "--seed",
        "3", "--jobs", "1", "--format", "json",
    )  # fmt: skip
    import json

    scan = json.loads(proc.stdout)["scan"]
    assert 5 < scan["samples"] < 36 and scan["sample"]["rate"] == 0.5
    lo, hi = scan["sample"]["over_max_length_share_95ci_wilson"]
    assert 0 <= lo <= scan["sample"]["over_max_length_share"] <= hi <= 1
    bad = run_cfgcheck("data", "tokenizer=demo-bpe", "--sample", "0%")
    assert bad.returncode == 2 and "above 0" in bad.stderr
    assert not math.isnan(hi)
