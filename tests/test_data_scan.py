"""The dataset length scan: real tokenizer, real files (JSONL, text, Parquet) in tmp dirs."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cfgcheck import validate
from cfgcheck.data import ScanError, scan_dataset, scan_findings
from cfgcheck.data.stats import padding_waste, percentile
from cfgcheck.schema.run import RunConfig
from tests.conftest import requires
from tests.factories import CORPUS, bpe, save_folder, sentencepiece_model

TEMPLATE = "Q: {question}\nA: {answer}"


def records(n: int) -> list[dict[str, str]]:
    """n records of growing length, built from the factory corpus."""
    return [{"question": CORPUS[i % 8], "answer": " ".join(CORPUS[: 1 + i % 8])} for i in range(n)]


@pytest.fixture
def tok_dir(tmp_path: Path) -> Path:
    return save_folder(bpe(), tmp_path / "tok", pad_token="<unk>")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_run(cfg: dict[str, Any], tok: Path, data: Path, **data_kw: Any) -> RunConfig:
    cfg["tokenizer"] = {"path": str(tok), "pad_token": "<unk>"}
    cfg["model"]["vocab_size"] = 259
    cfg["data"].update({"paths": [str(data)], "template": TEMPLATE, "format": "auto", **data_kw})
    result = validate(cfg)
    assert result.config is not None, result.findings
    return result.config


def expected_lengths(tok: Path, rows: list[dict[str, str]]) -> list[int]:
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(tok / "tokenizer.json"))
    return [len(tk.encode(TEMPLATE.format(**r)).ids) for r in rows]


# --- statistics -------------------------------------------------------------------------


def test_percentile_nearest_rank() -> None:
    values = list(range(1, 101))
    assert [percentile(values, q) for q in (1, 50, 90, 99, 100)] == [1, 50, 90, 99, 100]
    assert percentile([7], 50) == 7


def test_padding_waste_of_each_scheme() -> None:
    w = padding_waste(
        [1, 3, 2, 4, 6],
        max_length=4,
        truncation=True,
        micro_batch_size=2,
        pad_to_multiple_of=None,
        block=4,
    )
    # fed lengths 1 3 2 4 4 (the 6 is cut to 4) = 14 tokens
    assert (w["max_length"].tokens, w["max_length"].slots) == (14, 5 * 4)
    assert w["longest"].slots == 2 * 3 + 2 * 4 + 1 * 4
    assert (w["packed"].tokens, w["packed"].slots) == (16, 4 * 4)  # packing keeps all 16
    assert w["max_length"].share == pytest.approx(1 - 14 / 20)


def test_padding_waste_rounds_to_the_multiple() -> None:
    w = padding_waste(
        [5, 9],
        max_length=16,
        truncation=False,
        micro_batch_size=2,
        pad_to_multiple_of=8,
        block=16,
    )
    assert w["longest"].slots == 2 * 16 and w["max_length"].slots == 2 * 16


# --- reading and tokenizing -------------------------------------------------------------


def test_jsonl_lengths_are_the_tokenizers_lengths(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    rows = records(50)
    run = make_run(cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", rows))
    report = scan_dataset(run, chunk_size=7)  # several chunks, one file
    want = expected_lengths(tok_dir, rows)
    assert report.hist == Counter(want)
    assert report.longest.length == max(want)
    assert report.longest.line == want.index(max(want)) + 1
    assert report.tokens == sum(want)


def test_text_and_parquet_read_the_same_samples(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")

    rows = records(20)
    texts = [TEMPLATE.format(**r).replace("\n", " ") for r in rows]
    (tmp_path / "d.txt").write_text("\n".join(texts) + "\n\n")
    pq.write_table(pa.table({"text": texts}), tmp_path / "d.parquet")
    pq.write_table(
        pa.table(
            {"question": [r["question"] for r in rows], "answer": [r["answer"] for r in rows]}
        ),
        tmp_path / "t.parquet",
    )
    text_run = make_run(cfg, tok_dir, tmp_path / "d.txt", template=None)
    pq_run = make_run(cfg, tok_dir, tmp_path / "d.parquet", template=None)
    lengths = scan_dataset(text_run).hist
    assert sum(lengths.values()) == 20
    assert scan_dataset(pq_run).hist == lengths
    templated = make_run(cfg, tok_dir, tmp_path / "t.parquet")
    assert scan_dataset(templated).hist == Counter(expected_lengths(tok_dir, rows))


def test_several_files_in_order(cfg: dict[str, Any], tok_dir: Path, tmp_path: Path) -> None:
    a, b = records(5), records(9)[4:]
    run = make_run(cfg, tok_dir, write_jsonl(tmp_path / "a.jsonl", a))
    run.data.paths.append(str(write_jsonl(tmp_path / "b.jsonl", b)))
    assert scan_dataset(run).hist == Counter(expected_lengths(tok_dir, a + b))


@requires("transformers")
def test_sentencepiece_scan_matches_transformers(cfg: dict[str, Any], tmp_path: Path) -> None:
    model = sentencepiece_model(tmp_path / "sp")
    rows = records(10)
    run = make_run(cfg, tmp_path / "sp", write_jsonl(tmp_path / "d.jsonl", rows))
    from cfgcheck.tokenizer.hf import load_auto_tokenizer

    hf = load_auto_tokenizer(model.parent)
    want = [len(hf(TEMPLATE.format(**r))["input_ids"]) for r in rows]
    assert scan_dataset(run).hist == Counter(want)


def test_progress_line(cfg: dict[str, Any], tok_dir: Path, tmp_path: Path) -> None:
    run = make_run(cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", records(30)))
    out = io.StringIO()
    scan_dataset(run, progress=out, chunk_size=10)
    assert "scanning [" in out.getvalue() and "30 samples" in out.getvalue()


# --- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"question": "a", "answer": "b"}\n{"question": \n', "d.jsonl:2: not valid JSON"),
        (
            '{"question": "a"}\n',
            "d.jsonl:1: the record has no field 'answer' used by data.template",
        ),
        ("[1, 2]\n", "d.jsonl:1: a JSONL record must be an object"),
        ("\n\n", "the dataset has no samples"),
    ],
)
def test_bad_data_is_a_scan_error(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path, content: str, reason: str
) -> None:
    (tmp_path / "d.jsonl").write_text(content)
    run = make_run(cfg, tok_dir, tmp_path / "d.jsonl")
    with pytest.raises(ScanError, match=reason.replace("(", r"\(").replace("[", r"\[")):
        scan_dataset(run)


def test_missing_file_and_missing_tokenizer_path(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    run = make_run(cfg, tok_dir, tmp_path / "nope.jsonl")
    with pytest.raises(ScanError, match=r"nope\.jsonl does not exist"):
        scan_dataset(run)
    cfg["tokenizer"] = {"vocab_size": 259, "pad_token": "<unk>"}
    run = validate(cfg).config
    assert run is not None
    with pytest.raises(ScanError, match=r"needs the real tokenizer: set tokenizer\.path"):
        scan_dataset(run)


# --- findings ---------------------------------------------------------------------------


def test_longer_than_block_size_without_truncation(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    rows = records(16)
    want = expected_lengths(tok_dir, rows)
    block = sorted(want)[-3]  # two samples are longer
    cfg["model"]["block_size"] = block
    run = make_run(
        cfg,
        tok_dir,
        write_jsonl(tmp_path / "d.jsonl", rows),
        max_seq_length=block,
        truncation=False,
    )
    (f,) = [f for f in scan_findings(scan_dataset(run), run) if f.severity == "error"]
    assert f.rule == "data-longer-than-block-size"
    n_over = sum(1 for n in want if n > block)
    assert f"{n_over} of 16 samples" in f.message
    assert f"Cannot attend to {max(want)}, block size is only {block}" in f.message
    assert f"d.jsonl:{want.index(max(want)) + 1}" in f.message
    assert "data.truncation=true" in f.hint
    # the fix: truncation at max_length <= block_size
    run.data.truncation = True
    assert not [f for f in scan_findings(scan_dataset(run), run) if f.severity == "error"]


def test_max_length_above_block_size_with_truncation(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    rows = records(16)
    cfg["model"]["block_size"] = 16
    run = make_run(
        cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", rows), max_seq_length=16, max_length=64
    )
    rules = {f.rule: f for f in scan_findings(scan_dataset(run), run)}
    f = rules["data-longer-than-block-size"]
    assert f.paths == ("data.max_length", "model.block_size")
    assert "Cannot attend to 64, block size is only 16" in f.message


def test_heavy_truncation_is_a_warning(cfg: dict[str, Any], tok_dir: Path, tmp_path: Path) -> None:
    rows = records(40)
    want = sorted(expected_lengths(tok_dir, rows))
    run = make_run(
        cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", rows), max_seq_length=want[len(want) // 2]
    )
    report = scan_dataset(run)
    (f,) = [f for f in scan_findings(report, run) if f.rule == "data-truncated"]
    assert f.severity == "warning"
    cut = sum(1 for n in want if n > want[len(want) // 2])
    assert f"{cut} of 40 samples" in f.message and f"max={want[-1]}" in f.message
    assert f"data.max_seq_length to {percentile(want, 99)}" in f.hint
    run.data.max_seq_length = want[-1]
    assert not [f for f in scan_findings(scan_dataset(run), run) if f.rule == "data-truncated"]


def test_padding_waste_info(cfg: dict[str, Any], tok_dir: Path, tmp_path: Path) -> None:
    run = make_run(
        cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", records(12)), padding="max_length"
    )
    (f,) = [f for f in scan_findings(scan_dataset(run), run) if f.rule == "data-padding-waste"]
    assert f.severity == "info" and "padding every sample to max_length" in f.message
    assert "data.collator=packed" in f.hint
    run.data.padding, run.data.collator = "do_not_pad", "packed"
    assert not [f for f in scan_findings(scan_dataset(run), run) if f.rule == "data-padding-waste"]


def test_histogram_counts_every_sample() -> None:
    from cfgcheck.data.render import histogram

    lines = histogram([3, 3, 4, 10, 50], bins=4)
    assert sum(int(line.split()[-1]) for line in lines) == 5
    assert lines[0].lstrip().startswith("3-")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("tty", "min_bytes", "shown"), [(True, 0, True), (False, 0, False), (True, 1 << 40, False)]
)
def test_progress_only_on_a_terminal_for_large_scans(
    cfg: dict[str, Any],
    tok_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tty: bool,
    min_bytes: int,
    shown: bool,
) -> None:
    from cfgcheck.data import progress as scan_module

    run = make_run(cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", records(30)))
    err = _Tty() if tty else io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr(scan_module, "PROGRESS_MIN_BYTES", min_bytes)
    monkeypatch.delenv("CI", raising=False)  # progress stays quiet in CI (tested below)
    scan_dataset(run, chunk_size=10)
    assert ("scanning [" in err.getvalue()) is shown


def test_progress_is_quiet_in_ci_even_on_a_terminal(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cfgcheck.data import progress as scan_module

    run = make_run(cfg, tok_dir, write_jsonl(tmp_path / "d.jsonl", records(30)))
    err = _Tty()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr(scan_module, "PROGRESS_MIN_BYTES", 0)
    monkeypatch.setenv("CI", "true")
    scan_dataset(run, chunk_size=10)
    assert "scanning [" not in err.getvalue()


def test_text_lines_keep_their_numbers_and_bytes_are_counted(tmp_path: Path) -> None:
    from cfgcheck.data.records import iter_text_chunks
    from cfgcheck.schema.data import DataConfig

    raw = "première ligne\r\n\r\nsecond line\n".encode()
    (tmp_path / "d.txt").write_bytes(raw)
    data = DataConfig(max_seq_length=64, paths=["d.txt"], format="text")
    (chunk,) = iter_text_chunks(data, base=tmp_path)
    assert chunk.texts == ["première ligne", "second line"]  # CRLF and the blank line gone
    assert chunk.lines == [1, 3]
    assert chunk.bytes_done == len(raw)  # bytes, not characters: progress is by file size


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
def test_a_line_past_the_bound_is_refused_before_it_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """A file without newlines is not read into memory whole: a record longer than the bound
    is a one-line read error naming its line."""
    from cfgcheck.data import records
    from cfgcheck.data.records import DataReadError, iter_text_chunks
    from cfgcheck.schema.data import DataConfig

    monkeypatch.setattr(records, "MAX_LINE_BYTES", 1024)
    (tmp_path / "d.txt").write_bytes(b'{"text": "ok"}\n' + b"x" * 5000)
    data = DataConfig(max_seq_length=64, paths=["d.txt"], format=fmt)
    with pytest.raises(DataReadError, match=r"d\.txt:2: the line is longer than"):
        list(iter_text_chunks(data, base=tmp_path))


def test_text_that_is_not_utf8_names_its_line(
    cfg: dict[str, Any], tok_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "d.txt").write_bytes(b"fine\nlatin-1 caf\xe9\n")
    run = make_run(cfg, tok_dir, tmp_path / "d.txt", format="text")
    with pytest.raises(ScanError, match=r"d\.txt:2: not UTF-8 text"):
        scan_dataset(run)
