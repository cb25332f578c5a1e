"""The composition cache: same verdicts as Hydra, invalidated by any change it depends on,
and never used where the key cannot cover what the composition reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cfgcheck import ConfigLoadError, check, validate
from cfgcheck.compose import compose
from cfgcheck.compose_cache import FORMAT, cache_key, compose_cached
from tests.conftest import CONF, REPO


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("CFGCHECK_CACHE_DIR", str(where))
    monkeypatch.delenv("CFGCHECK_NO_CACHE", raising=False)
    return where / "compose"


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    target = tmp_path / "conf"
    shutil.copytree(CONF, target)
    return target


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.json")) if cache.is_dir() else []


def test_hit_gives_the_same_config_and_verdict_as_hydra(cache: Path, conf: Path) -> None:
    overrides = ["data.max_seq_length=3063", "model=llama-2-7b"]
    first = compose_cached(conf, "config", overrides)
    assert len(entries(cache)) == 1
    second = compose_cached(conf, "config", overrides)
    plain = validate(compose(conf, "config", overrides)).to_dict()
    assert validate(first).to_dict() == validate(second).to_dict() == plain


def test_a_hit_imports_neither_hydra_nor_omegaconf(cache: Path, conf: Path) -> None:
    # The shipped config's output_dir: outputs/${name} references another key only, so it is
    # stored resolved. A package header (the group's own package, so the same composition)
    # takes the first check through Hydra (cfgcheck.compose_plain composes the tree as
    # shipped without it).
    data = conf / "data" / "alpaca-tiny.yaml"
    data.write_text("# @package data\n" + data.read_text())
    code = (
        "import sys; from cfgcheck import check; r = check(sys.argv[1]); "
        "print(r.ok, 'hydra' in sys.modules, 'omegaconf' in sys.modules)"
    )
    env_run = [sys.executable, "-c", code, str(conf)]
    miss = subprocess.run(env_run, capture_output=True, text=True, check=True, cwd=REPO)
    hit = subprocess.run(env_run, capture_output=True, text=True, check=True, cwd=REPO)
    assert miss.stdout.split() == ["True", "True", "True"]
    assert hit.stdout.split() == ["True", "False", "False"]


def test_editing_any_config_file_invalidates(cache: Path, conf: Path) -> None:
    assert check(conf).ok
    data = conf / "data" / "alpaca-tiny.yaml"
    data.write_text(data.read_text().replace("max_seq_length: 1024", "max_seq_length: 3063"))
    result = check(conf)
    assert [f.rule for f in result.errors] == ["seq-len-over-block-size"]
    assert len(entries(cache)) == 2


def test_overrides_and_config_names_are_part_of_the_key(cache: Path, conf: Path) -> None:
    assert check(conf, "config", ["data.max_seq_length=2048"]).ok
    assert not check(conf, "config", ["data.max_seq_length=3063"]).ok
    (conf / "other.yaml").write_text((conf / "config.yaml").read_text())
    assert check(conf, "other").ok
    assert len(entries(cache)) == 3


def test_env_interpolations_are_resolved_on_every_hit(
    cache: Path, conf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = conf / "data" / "alpaca-tiny.yaml"
    data.write_text(
        data.read_text().replace(
            "max_seq_length: 1024", "max_seq_length: ${oc.decode:${oc.env:CFGCHECK_TEST_LEN}}"
        )
    )
    monkeypatch.setenv("CFGCHECK_TEST_LEN", "1024")
    assert check(conf).ok
    monkeypatch.setenv("CFGCHECK_TEST_LEN", "3063")
    assert [f.rule for f in check(conf).errors] == ["seq-len-over-block-size"]
    assert len(entries(cache)) == 1  # one composition, resolved twice


@pytest.mark.parametrize(
    "override",
    [
        "+name_suffix=${now:%Y}",
        "output_dir=${hydra:runtime.cwd}/out",
        "hydra.searchpath=[file:///tmp]",
        "+extra={1: a}",  # an integer key would come back from JSON as "1"
    ],
)
def test_compositions_the_key_cannot_cover_are_not_stored(
    cache: Path, conf: Path, override: str
) -> None:
    compose_cached(conf, "config", [override])
    assert entries(cache) == []


def test_references_between_keys_are_stored_resolved(cache: Path, conf: Path) -> None:
    cfg = compose_cached(conf, "config", ["name=run-7"])
    assert validate(cfg).config.output_dir == "outputs/run-7"  # type: ignore[union-attr]
    hit = compose_cached(conf, "config", ["name=run-7"])
    assert isinstance(hit, dict) and hit["output_dir"] == "outputs/run-7"


def test_a_broken_reference_fails_the_same_on_a_hit(cache: Path, conf: Path) -> None:
    for _ in range(2):
        with pytest.raises(ConfigLoadError, match="cannot resolve"):
            check(conf, "config", ["output_dir=${no_such_key}"])


def test_missing_values_fail_the_same_on_a_hit(cache: Path, conf: Path) -> None:
    for _ in range(2):
        with pytest.raises(ConfigLoadError, match="Missing mandatory value"):
            check(conf, "config", ["name=???"])


def test_compose_errors_are_never_cached(cache: Path, conf: Path) -> None:
    for _ in range(2):
        with pytest.raises(ConfigLoadError, match="model/nope"):
            compose_cached(conf, "config", ["model=nope"])
    assert entries(cache) == []


def test_corrupt_entries_are_ignored_and_rewritten(cache: Path, conf: Path) -> None:
    compose_cached(conf, "config")
    (entry,) = entries(cache)
    entry.write_text("{not json")
    assert validate(compose_cached(conf, "config")).ok
    assert json.loads(entry.read_text())["format"] == FORMAT


def test_the_cache_can_be_turned_off(
    cache: Path, conf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CFGCHECK_NO_CACHE", "1")
    assert check(conf).ok
    assert entries(cache) == []


def test_the_least_recently_used_entries_are_pruned(
    cache: Path, conf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("cfgcheck.compose_cache.MAX_ENTRIES", 3)

    def entry(n: int) -> Path:
        key = cache_key(conf.resolve(), "config", [f"data.max_seq_length={n}"])
        return cache / f"{key}.json"

    for age, n in enumerate((1000, 1001, 1002)):
        compose_cached(conf, "config", [f"data.max_seq_length={n}"])
        os.utime(entry(n), ns=(age + 1, age + 1))  # a certain order, even on coarse clocks
    compose_cached(conf, "config", ["data.max_seq_length=1000"])  # a hit refreshes the oldest
    compose_cached(conf, "config", ["data.max_seq_length=1003"])  # a fourth entry: prune one
    assert sorted(entries(cache)) == sorted(entry(n) for n in (1000, 1002, 1003))


def test_structured_configs_in_the_config_store_bypass_the_cache(cache: Path, conf: Path) -> None:
    """Configs registered from Python are code the key does not cover: a process that has
    them neither stores nor reads compositions."""
    from hydra.core.config_store import ConfigStore

    compose_cached(conf, "config")  # stored while the store holds only Hydra's own nodes
    (stored,) = entries(cache)
    store = ConfigStore.instance()
    store.store(name="cfgcheck_test_node", node={"seed": 7})
    try:
        stored.write_text("{not json")  # a read would recompose and rewrite it
        compose_cached(conf, "config", ["data.max_seq_length=1000"])
        compose_cached(conf, "config")
        assert entries(cache) == [stored] and stored.read_text() == "{not json"
    finally:
        del store.repo["cfgcheck_test_node.yaml"]
