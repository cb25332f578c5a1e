"""cfgcheck's cache folder (cfgcheck/diskcache.py): one reader, writer and pruner for the
composition, trace and plugin caches. A planted FIFO or oversized file in the cache costs
only the hit (the composition cache read its entries unbounded before), writes are atomic,
and a folder keeps its most recently used entries."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cfgcheck.compose_cache import _load
from cfgcheck.diskcache import cache_root, prune, read_entry, write_entry
from cfgcheck.safeio import Limits

LIMITS = Limits(max_bytes=1024)


def test_an_entry_round_trips_and_is_touched(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_entry(path, {"x": [1, 2]})
    os.utime(path, (0, 0))
    assert read_entry(path, LIMITS) == {"x": [1, 2]}
    assert path.stat().st_mtime > 0  # most recently used
    assert not list(tmp_path.glob(".tmp-*"))  # the temporary file was renamed


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs mkfifo")
def test_a_fifo_in_the_cache_is_a_miss_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "0123.json"
    os.mkfifo(fifo)
    start = time.monotonic()
    assert read_entry(fifo, LIMITS) is None
    assert _load(fifo) is None  # the composition cache's reader
    assert time.monotonic() - start < 5


def test_oversized_and_malformed_entries_are_misses(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text('{"x": "' + "a" * 2048 + '"}')
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100 + "]" * 100)
    assert read_entry(big, LIMITS) is None
    assert read_entry(bad, LIMITS) is None
    assert read_entry(deep, Limits(max_bytes=1024, max_depth=8)) is None


def test_prune_keeps_the_most_recently_used(tmp_path: Path) -> None:
    for i in range(5):
        p = tmp_path / f"{i}.json"
        p.write_text("{}")
        os.utime(p, (i, i))
    prune(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["3.json", "4.json"]
    write_entry(tmp_path / "new.json", {}, keep=2)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["4.json", "new.json"]


def test_the_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CFGCHECK_CACHE_DIR", "/somewhere")
    assert cache_root() == Path("/somewhere")
    monkeypatch.setenv("CFGCHECK_NO_CACHE", "1")
    assert cache_root() is None
    monkeypatch.delenv("CFGCHECK_NO_CACHE")
    monkeypatch.delenv("CFGCHECK_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert cache_root() == Path("/xdg/cfgcheck")


def test_a_read_only_folder_costs_only_the_hit(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        write_entry(ro / "x.json", {"a": 1})  # no exception
    finally:
        ro.chmod(0o700)
    assert not (ro / "x.json").exists() or os.geteuid() == 0
