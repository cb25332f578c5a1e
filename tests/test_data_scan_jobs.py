"""The scan over worker processes: shards by file and by byte range, summaries that merge
exactly, gzip shards, globs and folders, a worker that dies, and flat memory."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cfgcheck.data import ScanError, scan_dataset
from cfgcheck.data.records import Shard
from cfgcheck.data.stats import padding_waste, percentile
from cfgcheck.data.summary import Limits, Sample, Summary
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.run import RunConfig
from tests.factories import bpe, save_folder
from tests.test_data_scan import TEMPLATE, expected_lengths, make_run, records, write_jsonl

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tok_dir(tmp_path: Path) -> Path:
    return save_folder(bpe(), tmp_path / "tok", pad_token="<unk>")


def with_(run: RunConfig, **data: Any) -> RunConfig:
    return run.model_copy(update={"data": run.data.model_copy(update=data)})


def _comparable(report: Any) -> dict[str, Any]:
    out = report.to_dict()
    del out["seconds"], out["jobs"]
    return dict(out)


# --- summaries merge exactly ------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=6),
    mbs=st.integers(1, 7),
    truncation=st.booleans(),
    multiple=st.sampled_from([None, 4]),
)
def test_any_split_merges_to_the_one_pass_statistics(
    lengths: list[int], cuts: list[int], mbs: int, truncation: bool, multiple: int | None
) -> None:
    limits = Limits(16, truncation, mbs, multiple, 16)
    points = sorted({0, len(lengths), *(c for c in cuts if c <= len(lengths))})
    total = Summary(limits)
    for a, b in itertools.pairwise(points):
        samples = [Sample("f", i + 1, lengths[i]) for i in range(a, b)]
        total = total.merged(Summary.of_chunk(limits, lengths[a:b], samples))
    want = padding_waste(
        lengths,
        max_length=16,
        truncation=truncation,
        micro_batch_size=mbs,
        pad_to_multiple_of=multiple,
        block=16,
    )
    assert total.waste() == want
    assert total.count == len(lengths) and total.tokens == sum(lengths)
    ordered = sorted(lengths)
    for q in (50, 90, 99):
        assert total.percentile(q) == percentile(ordered, q)
    top = max(lengths)
    assert total.longest[0] == Sample("f", lengths.index(top) + 1, top)  # first of the longest
    assert [s.length for s in total.longest] == sorted(lengths, reverse=True)[:5]


# --- the same report for any number of processes and any shard size --------------------


def test_jobs_and_shard_sizes_give_identical_reports(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    rows_a, rows_b = records(90), records(45)[::-1]
    a = write_jsonl(tmp_path / "a.jsonl", rows_a)
    (tmp_path / "b.jsonl").write_text(
        "\n".join(json.dumps(r) + ("\n" if i % 7 == 0 else "") for i, r in enumerate(rows_b)) + "\n"
    )  # blank lines between some records: line numbers skip them
    cfg["trainer"]["micro_batch_size"] = 3
    run = make_run(cfg, tok_dir, a, truncation=False)
    run = with_(run, paths=[str(a), str(tmp_path / "b.jsonl")])
    lengths = expected_lengths(tok_dir, rows_a + rows_b)
    block = max(lengths) - 1  # the longest samples (one in eight) exceed the block
    run = run.model_copy(update={"model": run.model.model_copy(update={"block_size": block})})

    one = scan_dataset(run, jobs=1)
    two = scan_dataset(run, jobs=2)
    tiny = scan_dataset(run, jobs=2, shard_bytes=300, chunk_size=4)  # ~40 byte-range shards
    tiny_one = scan_dataset(run, jobs=1, shard_bytes=300, chunk_size=5)
    assert two.jobs == 2 and one.jobs == 1
    assert _comparable(one) == _comparable(two) == _comparable(tiny) == _comparable(tiny_one)

    # ... and that report is the exact one, sample by sample.
    assert one.hist == Counter(lengths)
    assert one.waste == padding_waste(
        lengths,
        max_length=run.data.effective_max_length,
        truncation=False,
        micro_batch_size=3,
        pad_to_multiple_of=run.data.pad_to_multiple_of,
        block=run.data.max_seq_length,
    )
    b_lines = [
        i + 1 + sum(1 for j in range(i) if j % 7 == 0)
        for i in range(len(rows_b))  # record i of b.jsonl sits on this line
    ]
    where = [("a.jsonl", i + 1) for i in range(len(rows_a))]
    where += [("b.jsonl", n) for n in b_lines]
    pipe = Pipeline.of(run)
    over = [(w, pipe.model_length(n)) for w, n in zip(where, lengths, strict=True)]
    over = [(w, n) for w, n in over if n > block]
    assert tiny.over_block_count == len(over) >= 10
    got = [(Path(s.file).name, s.line) for s in tiny.over_block]
    assert got == [w for w, _ in over[:5]]
    longest = max(lengths)
    assert (Path(tiny.longest.file).name, tiny.longest.line) == where[lengths.index(longest)]
    ordered = sorted(lengths)
    assert tiny.percentiles()["p90"] == percentile(ordered, 90)


def test_jobs_1_turns_the_tokenizer_threads_off(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    run = make_run(cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", records(10)))
    seen: list[str | None] = []

    def work(shard: Shard) -> tuple[Summary, int]:
        seen.append(os.environ.get("TOKENIZERS_PARALLELISM"))
        return Summary.of_chunk(Limits.of(run), [3], [Sample(str(shard.path), 1, 3)]), 1

    scan_dataset(run, jobs=1, _work=work)
    assert seen == ["false"]
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"  # restored after the scan


def _die(shard: Shard) -> tuple[Summary, int]:
    os._exit(3)  # a worker killed mid-shard (out of memory, a segfault in a library)


def _fail(shard: Shard) -> tuple[Summary, int]:
    raise RuntimeError("boom")  # a bug or a library error inside a worker


def test_a_failing_worker_is_one_error_naming_its_file(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    run = make_run(cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", records(40)))
    with pytest.raises(ScanError, match=r"a scan worker failed on .*d\.jsonl: RuntimeError: boom"):
        scan_dataset(run, jobs=2, shard_bytes=500, _work=_fail)


def test_a_dead_worker_is_one_error_not_a_hang(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    run = make_run(cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", records(40)))
    with pytest.raises(ScanError, match="a scan worker process died"):
        scan_dataset(run, jobs=2, shard_bytes=500, _work=_die)


def test_bad_record_in_a_later_shard_names_its_file_line(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", records(40))
    with path.open("a") as f:
        f.write("{not json\n")
    run = make_run(cfg, tok_dir, path)
    for jobs in (1, 2):
        with pytest.raises(ScanError, match=r"d\.jsonl:41: not valid JSON"):
            scan_dataset(run, jobs=jobs, shard_bytes=400)


# --- gzip, globs and folders -----------------------------------------------------------


def test_gzip_glob_and_folder_read_the_same_samples(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    rows = records(30)
    (tmp_path / "plain").mkdir()
    plain = write_jsonl(tmp_path / "plain" / "d.jsonl", rows)
    shards = tmp_path / "shards"
    (shards / "sub").mkdir(parents=True)
    for i, part in enumerate((rows[:10], rows[10:20], rows[20:])):
        folder = shards / "sub" if i == 2 else shards
        with gzip.open(folder / f"part-{i}.jsonl.gz", "wt") as f:
            f.write("".join(json.dumps(r) + "\n" for r in part))
    (shards / "README.md").write_text("not data\n")
    want = scan_dataset(make_run(cfg, tok_dir, plain), jobs=1)
    folder_run = make_run(cfg, tok_dir, shards)
    glob_run = with_(make_run(cfg, tok_dir, shards), paths=[str(shards / "**" / "part-*.gz")])
    for run in (folder_run, glob_run):
        got = scan_dataset(run, jobs=2)
        assert got.hist == want.hist == Counter(expected_lengths(tok_dir, rows))
        assert got.waste == want.waste
    assert make_run(cfg, tok_dir, plain).data.template == TEMPLATE


def _zstd(data: bytes) -> bytes:
    zstandard = pytest.importorskip("zstandard")
    return bytes(zstandard.ZstdCompressor().compress(data))


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_a_damaged_stream_names_its_location(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path, damage: str, kind: str
) -> None:
    text = "".join(json.dumps(r) + "\n" for r in records(400)).encode()
    raw = gzip.compress(text) if kind == "gz" else _zstd(text)
    path = tmp_path / f"d.jsonl.{kind}"
    if damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    else:
        path.write_bytes(raw[:40] + bytes(b ^ 0x5A for b in raw[40:80]) + raw[80:])
    run = make_run(cfg, tok_dir, path)
    name = "gzip" if kind == "gz" else "zstd"
    with pytest.raises(
        ScanError, match=rf"d\.jsonl\.{kind}:\d+: the {name} stream is (corrupt|truncated)"
    ):
        scan_dataset(run, jobs=1)


def test_zstd_shards_read_like_plain_ones(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    rows = records(50)
    text = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (tmp_path / "a.jsonl.zst").write_bytes(
        _zstd(text[: len(text) // 2]) + _zstd(text[len(text) // 2 :])
    )
    plain = write_jsonl(tmp_path / "p.jsonl", rows)
    got = scan_dataset(make_run(cfg, tok_dir, tmp_path / "a.jsonl.zst"), jobs=1)  # two frames
    want = scan_dataset(make_run(cfg, tok_dir, plain), jobs=1)
    assert got.hist == want.hist == Counter(expected_lengths(tok_dir, rows))
    assert got.longest.line == want.longest.line


def test_a_glob_that_matches_nothing_is_a_clear_error(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    run = make_run(cfg, tok_dir, tmp_path / "none-*.jsonl")
    with pytest.raises(ScanError, match=r"none-\*\.jsonl matches no file"):
        scan_dataset(run)


# --- memory stays flat as the corpus grows ---------------------------------------------

_RSS = """
import json, resource, sys
from cfgcheck import validate
from cfgcheck.data import scan_dataset
cfg = json.loads(sys.argv[1])
run = validate(cfg).config
report = scan_dataset(run, jobs=2, shard_bytes=256 << 10, chunk_size=256)
# This process's own peak (VmHWM, KiB): ru_maxrss of RUSAGE_SELF keeps the forking pytest's
# peak across exec on Linux. The workers' peak: the largest child's ru_maxrss.
status = open("/proc/self/status").read().split("VmHWM:")
self_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
me = int(status[1].split()[0]) if len(status) > 1 else self_peak
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps([report.samples, me, kids]))
"""


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_corpus(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    row = json.dumps({"question": "q " * 20, "answer": "a b c " * 30}) + "\n"
    peaks = []
    for n in (3_000, 15_000):  # about 0.6 and 3 MB
        data = tmp_path / f"d{n}.jsonl"
        with data.open("w") as f:
            for _ in range(n):
                f.write(row)
        run = make_run(cfg, tok_dir, data)
        proc = subprocess.run(
            [sys.executable, "-c", _RSS, json.dumps(run.model_dump(mode="json"))],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        samples, me, kids = json.loads(proc.stdout)
        assert samples == n
        peaks.append((me, kids))
    (me_small, kids_small), (me_big, kids_big) = peaks
    # Five times the samples: peak RSS (KiB) within 6 MiB, parent and workers alike.
    assert me_big - me_small < 6 * 1024, peaks
    assert kids_big - kids_small < 6 * 1024, peaks


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("quiet", "ci", "shown"), [(False, "", True), (True, "", False), (False, "true", False)]
)
def test_progress_on_a_terminal_only_never_quiet_or_in_ci(
    cfg: dict[str, Any],
    tok_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    quiet: bool,
    ci: str,
    shown: bool,
) -> None:
    from cfgcheck.data import progress as scan_module

    run = make_run(cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", records(60)))
    err = _Tty()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr(scan_module, "PROGRESS_MIN_BYTES", 0)
    monkeypatch.setenv("CI", ci)
    scan_dataset(run, jobs=1, shard_bytes=2000, quiet=quiet)
    out = err.getvalue()
    assert ("scanning [" in out) is shown
    if shown:  # bytes, samples, tokens/s and the time left, shard by shard
        assert "60 samples" in out and "tokens/s" in out and "ETA" in out and "MB" in out


def test_text_lines_split_by_byte_range_keep_their_numbers(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    rows = records(50)
    texts = [TEMPLATE.format(**r).replace("\n", " ") for r in rows]
    path = tmp_path / "d.txt"
    path.write_text("".join(t + ("\n\n" if i % 5 == 0 else "\n") for i, t in enumerate(texts)))
    run = make_run(cfg, tok_dir, path, template=None, truncation=False)
    whole = scan_dataset(run, jobs=1)
    for shard_bytes in (97, 256, 1000):
        assert _comparable(scan_dataset(run, jobs=2, shard_bytes=shard_bytes)) == _comparable(whole)
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    lengths = [len(tk.encode(t).ids) for t in texts]
    first = lengths.index(max(lengths))
    assert whole.longest.line == first + 1 + sum(1 for i in range(first) if i % 5 == 0)
    assert whole.hist == Counter(lengths)


def test_a_folder_of_many_tiny_files_is_scanned_in_batches(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    rows = records(300)
    for i, r in enumerate(rows):
        write_jsonl(folder / f"{i:04d}.jsonl", [r])
    run = make_run(cfg, tok_dir, folder)
    one = scan_dataset(run, jobs=1)
    two = scan_dataset(run, jobs=2, shard_bytes=4096)  # about 40 files a task
    assert _comparable(one) == _comparable(two)
    assert one.hist == Counter(expected_lengths(tok_dir, rows))
    (folder / "0123.jsonl").write_text('{"question": "a", "answer": "b"}\n[]\n')
    with pytest.raises(ScanError, match=r"0123\.jsonl:2: a JSONL record must be an object"):
        scan_dataset(run, jobs=2, shard_bytes=4096)
