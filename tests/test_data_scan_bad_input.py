"""Bad input at scale, in each local mode (the Ray engine: tests/test_data_scan_ray.py): a
2 GB line is refused after reading a bounded prefix, and a folder of very many tiny files
merges in linear time (the running total is updated in place)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.data import ScanError, scan_dataset
from cfgcheck.data.local import Merge
from cfgcheck.data.records import MAX_LINE_BYTES, Shard
from cfgcheck.data.summary import Limits, Summary
from tests.test_data_scan import make_run, records, write_jsonl


@pytest.fixture
def tok_dir(tmp_path: Path) -> Path:
    from tests.factories import bpe, save_folder

    return save_folder(bpe(), tmp_path / "tok", pad_token="<unk>")


def sparse_line(path: Path, size: int = 2 * 1024**3) -> Path:
    """A JSONL file whose second line is ``size`` bytes with no newline: a sparse file (no
    disk blocks for the hole), skipped where the filesystem has no holes."""
    with path.open("wb") as f:
        f.write(b'{"question": "q", "answer": "a"}\n{"question": "')
        f.truncate(size)
    if path.stat().st_blocks * 512 > 64 << 20:
        path.unlink()
        pytest.skip("this filesystem stores no sparse files")
    return path


def test_a_2_gb_line_is_refused_after_a_bounded_read(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    path = sparse_line(tmp_path / "huge.jsonl")
    run = make_run(cfg, tok_dir, path)
    for jobs in (1, 2):
        with pytest.raises(ScanError) as e:
            scan_dataset(run, jobs=jobs)
        message = str(e.value)
        assert f"huge.jsonl:2: the line is longer than {MAX_LINE_BYTES:,} bytes" in message
        assert "\n" not in message


def test_a_folder_of_many_files_merges_in_place(cfg: dict[str, Any], tok_dir: Path) -> None:
    """Folding a shard into the running total costs the shard's size, not the total's: the
    total's histogram is one object updated in place, whatever the number of files."""
    run = make_run(cfg, tok_dir, tok_dir)
    merge = Merge(run)
    hist = merge.total.hist
    limits = Limits.of(run)
    for i in range(2000):
        part = Summary.of_chunk(limits, [1 + i % 977])
        merge.add(Shard(Path(f"f{i}.jsonl"), "jsonl"), part, 1)
    assert merge.total.hist is hist
    assert merge.total.hist == Counter(1 + i % 977 for i in range(2000))
    assert merge.total.count == 2000


@pytest.mark.slow  # 2,000 files written and scanned three times
def test_a_folder_of_many_tiny_files_with_one_bad_file(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    rows = records(2000)
    for i, r in enumerate(rows):
        write_jsonl(folder / f"{i:05d}.jsonl", [r])
    run = make_run(cfg, tok_dir, folder)
    assert scan_dataset(run, jobs=2).samples == 2000
    (folder / "01234.jsonl").write_bytes(b"\x00\xff not json\n")
    for jobs in (1, 2):
        with pytest.raises(ScanError, match=r"01234\.jsonl:1: not valid JSON"):
            scan_dataset(run, jobs=jobs)
