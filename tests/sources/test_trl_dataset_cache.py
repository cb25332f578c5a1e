"""A TRL script's ``dataset_name`` for ``--scan-data``: a local folder becomes ``data.paths``
(the files of ``dataset_train_split``, confined), a Hub id ``data.hub_dataset``, which the scan
reads from a local Hugging Face cache laid out as huggingface_hub and ``datasets`` lay it out
(never downloaded), and a Hub id no cache holds is one info line. The split and config each
file belongs to is compared with what the real ``datasets.load_dataset`` loads from the same
folder."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.data.hub import cached_files, split_of
from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources import check_native, load_native
from tests.sources.support import write

REV = "0123456789abcdef0123456789abcdef01234567"


def rows(tag: str, n: int) -> list[dict[str, str]]:
    return [{"text": f"{tag} sample {i} " + "word " * (3 + 7 * i)} for i in range(n)]


def jsonl(records: list[dict[str, str]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def hub_repo(cache: Path, repo: str, files: dict[str, str]) -> Path:
    """``repo`` in a Hub cache as huggingface_hub writes it (file_download.py): the content in
    ``blobs/<sha256>``, ``snapshots/<revision>/<path>`` a relative link to it, and
    ``refs/main`` naming the revision. Returns the snapshot folder."""
    folder = cache / ("datasets--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / REV
    (folder / "blobs").mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(REV)
    for rel, text in files.items():
        blob = folder / "blobs" / hashlib.sha256(text.encode()).hexdigest()
        blob.write_text(text)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


def loaded_texts(folder: Path, split: str, name: str | None = None) -> list[str]:
    """What ``datasets.load_dataset`` loads for ``split`` from a local folder (offline)."""
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset(
        str(folder), name=name, split=split, cache_dir=str(folder.parent / ".c")
    )
    return list(ds["text"])


def texts_of(files: list[Path]) -> list[str]:
    return [json.loads(line)["text"] for f in files for line in f.read_text().splitlines()]


@pytest.fixture
def caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    hub, ds = tmp_path / "hf" / "hub", tmp_path / "hf" / "datasets"
    hub.mkdir(parents=True)
    ds.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(ds))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return hub, ds


def test_split_keywords_pick_the_files_datasets_picks(tmp_path: Path) -> None:
    layouts = {
        "data": {"data/train-00000-of-00002.jsonl": 3, "data/train-00001-of-00002.jsonl": 2,
                 "data/test-00000-of-00001.jsonl": 4},
        "dirs": {"train/a.jsonl": 2, "validation/b.jsonl": 3, "test/c.jsonl": 1},
        "names": {"my_train.jsonl": 2, "my_eval.jsonl": 5},
        "none": {"part1.jsonl": 2, "part2.jsonl": 3},
    }  # fmt: skip
    for name, files in layouts.items():
        folder = tmp_path / name
        for rel, n in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(jsonl(rows(f"{name}:{rel}", n)))
        for split in ("train", "validation", "test"):
            chosen = split_of(sorted(files), split)
            ours = sorted(texts_of([folder / r for r in chosen]))
            try:
                theirs = sorted(loaded_texts(folder, split))
            except ValueError:  # datasets: 'Unknown split "test". Should be one of [...]'
                theirs = []
            assert ours == theirs, (name, split, chosen)


def test_a_cached_hub_dataset_is_scanned_from_its_snapshot(
    caches: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, _ = caches
    train, test = rows("train", 5), rows("test", 3)
    snapshot = hub_repo(
        hub,
        "org/tiny-chat",
        {
            "data/train-00000-of-00001.jsonl": jsonl(train),
            "data/test-00000-of-00001.jsonl": jsonl(test),
            ".gitattributes": "*.jsonl filter=lfs\n",
        },
    )
    assert sorted(texts_of(cached_files("org/tiny-chat"))) == sorted(
        loaded_texts(snapshot, "train")
    )
    assert texts_of(cached_files("org/tiny-chat", split="test")) == [r["text"] for r in test]

    from tests.model_folders import LLAMA32_1B, tokenizer_files, write_config

    model = tmp_path / "model"
    write_config(model, LLAMA32_1B)
    tokenizer_files(model, 1000)
    monkeypatch.chdir(tmp_path)
    config = write(
        tmp_path, "sft.yaml", f"model_name_or_path: {model}\ndataset_name: org/tiny-chat\n"
    )
    data = load_native(config, "trl").config["data"]
    assert (data["hub_dataset"], data["hub_split"], "paths" in data) == (
        "org/tiny-chat",
        "train",
        False,
    )
    from cfgcheck.data import scan_dataset

    run = check_native(config, "trl").config
    assert run is not None
    report = scan_dataset(run, jobs=1)
    assert report.samples == len(train)
    tested = write(tmp_path, "t.yaml", config.read_text() + "dataset_train_split: test\n")
    run = check_native(tested, "trl").config
    assert run is not None and scan_dataset(run, jobs=1).samples == len(test)


def test_readme_configs_choose_the_files_of_dataset_config(caches: tuple[Path, Path]) -> None:
    hub, _ = caches
    card = (
        "---\nconfigs:\n- config_name: chat\n  data_files:\n  - split: train\n"
        "    path: chat/train-*\n  - split: test\n    path: chat/test-*\n"
        "- config_name: raw\n  default: true\n  data_files: raw/*.jsonl\n---\n# tiny\n"
    )
    snapshot = hub_repo(
        hub,
        "org/multi",
        {
            "README.md": card,
            "chat/train-0.jsonl": jsonl(rows("chat-train", 4)),
            "chat/test-0.jsonl": jsonl(rows("chat-test", 2)),
            "raw/x.jsonl": jsonl(rows("raw", 3)),
        },
    )
    for config in ("chat", "raw", None):
        for split in ("train", "test"):
            try:
                theirs = sorted(loaded_texts(snapshot, split, config))
            except ValueError:
                theirs = []
            if theirs:
                assert sorted(texts_of(cached_files("org/multi", config, split))) == theirs
            else:
                with pytest.raises(LookupError):
                    cached_files("org/multi", config, split)


def test_the_datasets_arrow_cache_is_read(caches: tuple[Path, Path], tmp_path: Path) -> None:
    """``load_dataset``'s prepared copy: ORG___NAME/CONFIG/VERSION/HASH/NAME-SPLIT.arrow
    (datasets/builder.py ``_relative_data_dir``), written here by the real ArrowWriter."""
    datasets = pytest.importorskip("datasets")
    _, ds = caches
    folder = ds / "org___arrowed" / "default" / "0.0.0" / "abc"
    folder.mkdir(parents=True)
    data = datasets.Dataset.from_list(rows("arrow", 6))
    with datasets.arrow_writer.ArrowWriter(path=str(folder / "arrowed-train.arrow")) as w:
        w.write_table(data.data.table)
        w.finalize()
    files = cached_files("org/arrowed")
    assert [f.name for f in files] == ["arrowed-train.arrow"]
    with pytest.raises(LookupError, match="not in the local Hugging Face cache"):
        cached_files("org/arrowed", split="test")


def test_an_uncached_hub_dataset_is_one_info_line(
    caches: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cfgcheck.data.check import with_scan_findings
    from tests.model_folders import LLAMA32_1B, tokenizer_files, write_config

    model = tmp_path / "model"
    write_config(model, LLAMA32_1B)
    tokenizer_files(model, 1000)
    monkeypatch.chdir(tmp_path)
    config = write(
        tmp_path, "sft.yaml", f"model_name_or_path: {model}\ndataset_name: trl-lib/Capybara\n"
    )
    result = with_scan_findings(check_native(config, "trl"), jobs=1)
    (f,) = [f for f in result.findings if f.rule == "data-not-local"]
    assert f.severity == "info" and "\n" not in f.message
    assert "trl-lib/Capybara" in f.message and "never downloads" in f.message
    assert not result.by_rule("data-unreadable")


def test_a_local_folder_becomes_data_paths_and_stays_confined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    (project / "mydata").mkdir(parents=True)
    (project / "mydata" / "train.jsonl").write_text(jsonl(rows("train", 2)))
    (project / "mydata" / "test.jsonl").write_text(jsonl(rows("test", 2)))
    monkeypatch.chdir(project)
    text = "model_name_or_path: TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T\n"
    config = write(project, "sft.yaml", text + "dataset_name: mydata\n")
    loaded = load_native(config, "trl")
    assert loaded.config["data"]["paths"] == ["mydata/train.jsonl"]
    location = loaded.source_map.lookup("data.paths")
    assert location is not None and location.line == 2
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "train.jsonl").write_text(jsonl(rows("secret", 1)))
    (project / "linked").symlink_to(outside)
    linked = write(project, "linked.yaml", text + "dataset_name: linked\n")
    with pytest.raises(ConfigLoadError, match=r"dataset_name='linked' leads through a symlink"):
        load_native(linked, "trl")


def test_a_config_from_the_network_looks_at_no_folder(tmp_path: Path) -> None:
    from cfgcheck.sources import load_document, parse_document

    doc = parse_document("model_name_or_path: x/y\ndataset_name: mydata\n", "x")
    data: dict[str, Any] = load_document(doc, "trl").config.get("data", {})
    assert "paths" not in data and "hub_dataset" not in data


def test_a_fifo_named_refs_main_is_never_opened(caches: tuple[Path, Path]) -> None:
    """``refs/main`` is read like every file (bounded, regular files only): a FIFO there would
    block an open() for good; the snapshot is then the newest one in the folder."""
    import os

    hub, _ = caches
    snapshot = hub_repo(hub, "org/fifo", {"data/train.jsonl": jsonl(rows("fifo", 2))})
    ref = hub / "datasets--org--fifo" / "refs" / "main"
    ref.unlink()
    os.mkfifo(ref)
    assert cached_files("org/fifo") == [snapshot / "data" / "train.jsonl"]
