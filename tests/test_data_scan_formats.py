"""The formats people train on, read into the same samples: JSONL, a JSON array, Parquet, an
Arrow IPC file (Feather v2), an Arrow stream, a folder saved by Hugging Face datasets'
``save_to_disk`` (written here by the real ``datasets``, read without importing it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.data import ScanError, scan_dataset
from tests.test_data_scan import expected_lengths, make_run, records, write_jsonl
from tests.test_data_scan_jobs import _comparable

pa = pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tok_dir(tmp_path: Path) -> Path:
    from tests.factories import bpe, save_folder

    return save_folder(bpe(), tmp_path / "tok", pad_token="<unk>")


def _table(rows: list[dict[str, str]]) -> Any:
    return pa.Table.from_pylist(rows)


def test_every_format_reads_the_same_samples(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    rows = records(40)
    files = {
        "jsonl": write_jsonl(tmp_path / "d.jsonl", rows),
        "json": tmp_path / "d.json",
        "parquet": tmp_path / "d.parquet",
        "feather": tmp_path / "d.feather",
        "arrow-stream": tmp_path / "stream.arrow",
    }
    files["json"].write_text(json.dumps(rows))
    pq.write_table(_table(rows), files["parquet"], row_group_size=7)
    feather.write_feather(_table(rows), files["feather"], chunksize=9)
    with pa.OSFile(str(files["arrow-stream"]), "wb") as sink:
        table = _table(rows)
        with pa.ipc.new_stream(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=11):
                writer.write_batch(batch)
    reports = {}
    for name, path in files.items():
        run = make_run(cfg, tok_dir, path)
        reports[name] = scan_dataset(run, jobs=1, chunk_size=6)
    lengths = expected_lengths(tok_dir, rows)
    longest = lengths.index(max(lengths)) + 1
    for name, report in reports.items():
        assert report.hist == Counter(lengths), name
        assert report.longest.line == longest, name  # the row number, from 1
    assert len({json.dumps(_comparable(r)["histogram"]) for r in reports.values()}) == 1


def test_a_save_to_disk_folder_is_read_in_its_shard_order_without_datasets(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    datasets = pytest.importorskip("datasets")
    rows = records(50)
    folder = tmp_path / "saved"
    datasets.Dataset.from_list(rows).save_to_disk(str(folder), num_shards=3)
    shards = sorted(p.name for p in folder.glob("data-*.arrow"))
    assert len(shards) == 3
    (folder / "cache-0123.arrow").write_bytes(b"not the dataset")  # left by .map(): not read
    run = make_run(cfg, tok_dir, folder)
    one = scan_dataset(run, jobs=1)
    two = scan_dataset(run, jobs=2)
    assert _comparable(one) == _comparable(two)
    loaded = datasets.load_from_disk(str(folder))
    assert [dict(r) for r in loaded] == rows  # the order the scan follows
    assert one.hist == Counter(expected_lengths(tok_dir, rows))
    assert one.samples == 50

    # The scan itself never imports datasets.
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))  # make_run filled it in
    code = (
        "import json, sys; from cfgcheck import validate; from cfgcheck.data import "
        f"scan_dataset; cfg = json.load(open({str(tmp_path / 'cfg.json')!r})); "
        "r = scan_dataset(validate(cfg).config, jobs=1); "
        "print(r.samples, 'datasets' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["50", "False"]


def test_a_dataset_dict_folder_names_its_splits(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "dd"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(records(5)),
            "test": datasets.Dataset.from_list(records(2)),
        }
    ).save_to_disk(str(folder))
    run = make_run(cfg, tok_dir, folder)
    with pytest.raises(
        ScanError, match=r"a DatasetDict .* one split's folder \(.*dd/test, .*dd/train\)"
    ):
        scan_dataset(run, jobs=1)
    assert scan_dataset(make_run(cfg, tok_dir, folder / "train"), jobs=1).samples == 5


def test_a_corrupt_arrow_or_parquet_shard_is_one_line(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    import pyarrow.feather as feather

    good = tmp_path / "good.arrow"
    feather.write_feather(_table(records(20)), good)
    cut = tmp_path / "cut.arrow"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1" + b"\x00" * 100)
    for bad in (cut, junk):
        run = make_run(cfg, tok_dir, bad)
        for jobs in (1, 2):
            with pytest.raises(ScanError) as e:
                scan_dataset(run, jobs=jobs)
            assert "\n" not in str(e.value) and bad.name in str(e.value)
            assert "is not a readable" in str(e.value)


def test_a_missing_column_is_named(cfg: dict[str, Any], tok_dir: Path, tmp_path: Path) -> None:
    import pyarrow.feather as feather

    path = tmp_path / "d.arrow"
    feather.write_feather(_table(records(3)), path)
    run = make_run(cfg, tok_dir, path, template=None, text_field="body")
    with pytest.raises(ScanError, match=r"no column 'body' \(data.text_field\); columns: "):
        scan_dataset(run, jobs=1)


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_a_huge_cell_is_refused_before_it_becomes_a_string(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """A Parquet or Arrow cell longer than the record cap is refused at its row, as a JSONL
    line is, before pyarrow converts it to Python (issue 25: a 30 MB word aborted the scan)."""
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    monkeypatch.setenv("CFGCHECK_MAX_RECORD_BYTES", "100000")
    rows = records(6)
    key = next(iter(rows[3]))
    rows[3][key] = "x" * 200_000
    path = tmp_path / f"d.{fmt}"
    if fmt == "parquet":
        pq.write_table(_table(rows), path)
    else:
        feather.write_feather(_table(rows), path)
    run = make_run(cfg, tok_dir, path)
    for jobs in (1, 2):
        with pytest.raises(ScanError) as e:
            scan_dataset(run, jobs=jobs)
        msg = str(e.value)
        assert f"d.{fmt}:4: the record is longer than 100,000 bytes in column {key!r}" in msg
        assert "CFGCHECK_MAX_RECORD_BYTES" in msg and "\n" not in msg


def test_a_parquet_row_group_past_its_cap_is_refused_from_the_footer(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "d.parquet"
    pq.write_table(_table(records(200)), path, row_group_size=100)
    run = make_run(cfg, tok_dir, path)
    assert scan_dataset(run, jobs=1).samples == 200  # within the default cap
    monkeypatch.setenv("CFGCHECK_MAX_ROW_GROUP_BYTES", "1000")
    with pytest.raises(ScanError, match=r"d\.parquet: row group 1 holds [\d,]+ bytes in column"):
        scan_dataset(run, jobs=1)
