"""Composing without Hydra (cfgcheck/compose_plain.py): the same config as Hydra's composition,
resolved, on every shipped tree and the fixture trees; the same override values as Hydra's own
parser; the same findings, byte for byte, as checking through Hydra; and Hydra's path wherever
the shortcut could differ."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cfgcheck
from cfgcheck import ConfigLoadError
from cfgcheck.compose import compose, primary_config
from cfgcheck.compose_plain import _loader, compose_plain
from cfgcheck.overrides import NO_VALUE, override_value
from cfgcheck.report import get_reporter
from cfgcheck.safeio import screen_config_dir
from tests.conftest import CONF, REPO

TEAM = REPO / "examples" / "team" / "conf"
TEMPLATE = REPO / "tests" / "data" / "lightning_hydra_template" / "configs"
# hydra-colorlog, which the template's hydra/default.yaml selects, is not installed (SOURCES.md).
LOGGING = ["hydra/job_logging=default", "hydra/hydra_logging=default"]


def plain(config_dir: Path, name: str, overrides: Sequence[str] = ()) -> Any:
    directory, name = primary_config(config_dir, name)
    return compose_plain(directory, name, overrides, screen_config_dir(directory))


def hydra(config_dir: Path, name: str, overrides: Sequence[str] = ()) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose(config_dir, name, overrides), resolve=True)


def same_as_hydra(config_dir: Path, name: str, overrides: Sequence[str] = ()) -> Any:
    """The plain composition, asserted identical to Hydra's: values, types and key order."""
    got = plain(config_dir, name, overrides)
    assert got is not None, "expected the plain path"
    assert repr(got) == repr(hydra(config_dir, name, overrides))
    return got


# -- the composition ----------------------------------------------------------------------------

SHIPPED_OVERRIDES = [
    [],
    ["model=llama-3-8b", "data.max_seq_length=4096"],
    ["name=run-7"],  # output_dir: outputs/${name} follows it
    ["output_dir=elsewhere"],  # a value set over an interpolation
    ["+tokenizer.path=/tmp/tok", "tokenizer.vocab_size=32000", "model.vocab_size=32000"],
    ["trainer.lora.rank=16", "++trainer.lora.alpha=32"],
    ["seed=1_000", "trainer.learning_rate=1e-5", "trainer.lora.dropout=.5"],
    ["trainer.gradient_checkpointing=TRUE", "data.format=1abc", "name=llama-3.1-8b"],
    ["+extra.deep.key=x", "++other.key=-3"],
    ["trainer=full", "tokenizer=qwen3", "model=qwen3-8b", "data=alpaca-tiny"],
    ["data.max_seq_length=3063"],  # an error finding
]


@pytest.mark.parametrize("overrides", SHIPPED_OVERRIDES, ids=" ".join)
def test_the_shipped_tree_composes_as_hydra_composes(overrides: list[str]) -> None:
    same_as_hydra(CONF, "config", overrides)


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


# Every model preset: several seconds (one Hydra composition each); a few run in the quick suite
# through SHIPPED_OVERRIDES (tinyllama-1.1b, llama-3-8b, qwen3-8b).
@pytest.mark.parametrize(
    "group", [pytest.param("model", marks=pytest.mark.slow), "tokenizer", "trainer", "data"]
)
def test_every_shipped_option_composes_as_hydra_composes(group: str) -> None:
    for option in options(group):
        same_as_hydra(CONF, "config", [f"{group}={option}"])


def test_the_team_example_and_the_template_fall_back_to_hydra() -> None:
    # A mapping node whose interpolations locate its values; a template with @package
    # headers, nested defaults and optional entries.
    assert plain(TEAM, "train") is None
    assert plain(TEMPLATE, "train", LOGGING) is None
    compose(TEAM, "train")  # both compose with Hydra
    compose(TEMPLATE, "train", LOGGING)


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


MERGES = {
    "a dict onto null, null onto a dict, lists replaced, types changed": (
        "defaults: [{a: x}, _self_]\na: {n: {k: 1}, m: null, l: [1, 2, 3], s: 1, f: 1.5}\n",
        "n: null\nm: {k: 2}\nl: [4]\ns: text\nf: 2\nnew: {deep: {er: true}}\n",
    ),
    "self first, then the group; key order of first appearance": (
        "defaults: [_self_, {a: x}]\nz: 1\na: {q: 1, p: 2}\n",
        "p: 3\nr: 4\n",
    ),
    "an empty group file and an empty defaults list entry order": (
        "defaults: [{a: x}, {b: y}, _self_]\nc: 1\n",
        "",
    ),
    "anchors and aliases are copies": (
        "defaults: [{a: x}, _self_]\nbase: &b {k: 1}\nuse: *b\n",
        "k: 2\n",
    ),
    "references: chains, text, ints, floats, booleans, nulls, dollars": (
        "defaults: [{a: x}, _self_]\n"
        "r1: ${a.chain}\nr2: pre-${a.n}-${a.f}-${a.t}-${a.z}-$5\nr3: '${r1}'\nr4: ['${a.n}', x]\n",
        "n: 3\nf: 2.0e-4\nt: true\nz: null\nchain: ${a.n}\n",
    ),
    "YAML 1.2 floats and no timestamps, as OmegaConf loads them": (
        "defaults: [{a: x}, _self_]\nlr: 1e-4\nday: 2024-01-01\nbig: 1_000\nhex: 0x10\n",
        "oct: 0o10\nexp: 6.02e+23\nflag: yes\n",
    ),
    "no defaults list at all": ("k: 1\nr: ${k}\n", "unused: 1\n"),
}


@pytest.mark.parametrize("primary,group", MERGES.values(), ids=MERGES.keys())
def test_merges_and_references_as_omegaconf_does_them(
    tmp_path: Path, primary: str, group: str
) -> None:
    conf = tree(tmp_path, {"config.yaml": primary, "a/x.yaml": group, "b/y.yaml": ""})
    same_as_hydra(conf, "config")
    for overrides in (["a.k=9"], ["+a.added=1"], ["++a.forced.deep=x"]):
        try:
            expected = hydra(conf, "config", overrides)
        except ConfigLoadError:
            assert plain(conf, "config", overrides) is None
            continue
        got = plain(conf, "config", overrides)
        assert got is None or repr(got) == repr(expected)


FALLBACKS = {
    "a package header": ({"a/x.yaml": "# @package _global_\nk: 1\n"}, []),
    "no _self_ (Hydra warns)": ({"config.yaml": "defaults: [{a: x}]\nk: 1\n"}, []),
    "a group's own defaults list": ({"a/x.yaml": "defaults: [{b: y}]\nk: 1\n"}, []),
    "an optional entry": ({"config.yaml": "defaults: [{optional a: x}, _self_]\n"}, []),
    "a nested group": ({"config.yaml": "defaults: [{a/b: y}, _self_]\n", "a/b/y.yaml": ""}, []),
    "a resolver": ({"config.yaml": "defaults: [{a: x}, _self_]\nh: ${oc.env:HOME}\n"}, []),
    "a relative reference": ({"a/x.yaml": "k: 1\nr: ${.k}\n"}, []),
    "an escaped interpolation": ({"a/x.yaml": "r: \\${k}\n"}, []),
    "MISSING": ({"a/x.yaml": "k: ???\n"}, []),
    "a reference to a mapping": ({"config.yaml": "defaults: [{a: x}, _self_]\nr: ${a}\n"}, []),
    "a broken reference": ({"config.yaml": "defaults: [{a: x}, _self_]\nr: ${nope}\n"}, []),
    "a cycle": ({"config.yaml": "defaults: [{a: x}, _self_]\nr: ${q}\nq: ${r}\n"}, []),
    "a mapping onto a scalar": (
        {"config.yaml": "defaults: [{a: x}, _self_]\na: {k: {n: 1}}\n"},
        [],
    ),
    "a value onto an interpolation": (
        {"a/x.yaml": "k: 1\nr: ${a.k}\n", "config.yaml": "defaults: [{a: x}, _self_]\na: {r: 2}\n"},
        [],
    ),
    "an integer key": ({"a/x.yaml": "1: one\n"}, []),
    "a duplicate key": ({"a/x.yaml": "k: 1\nk: 2\n"}, []),
    "a binary value": ({"a/x.yaml": "k: !!binary aGk=\n"}, []),
    "a boolean key (YAML 1.1 reads yes: as True)": ({"a/x.yaml": "yes: 1\n"}, []),
    "a hydra node": ({"config.yaml": "defaults: [{a: x}, _self_]\nhydra: {job: {name: x}}\n"}, []),
    "searchpath": ({"config.yaml": "defaults: [{a: x}, _self_]\nx: searchpath\n"}, []),
    "a carriage return": ({"a/x.yaml": "k: 1\r\n"}, []),
    "an appended group": ({}, ["+b=y"]),
    "a deleted group": ({}, ["~a"]),
    "a group not in the defaults list": ({}, ["b=y"]),
    "a missing option": ({}, ["a=nope"]),
    "a null value": ({}, ["a.k=null"]),
    "a quoted value": ({}, ["a.k='q'"]),
    "a sweep": ({}, ["a.k=1,2"]),
    "a list value": ({}, ["a.k=[1,2]"]),
    "an interpolation value": ({}, ["a.k=${a.k}"]),
    "inf": ({}, ["a.k=inf"]),
    "+ on an existing key": ({}, ["+a.k=2"]),
    "a change of a missing key": ({}, ["nope=1"]),
    "a value onto a mapping": ({"a/x.yaml": "k: {n: 1}\n"}, ["a.k=1"]),
    "a hydra override": ({}, ["hydra.job.name=x"]),
    "a package override": ({}, ["a@pkg=x"]),
}


@pytest.mark.parametrize("files,overrides", FALLBACKS.values(), ids=FALLBACKS.keys())
def test_hydra_s_path_wherever_the_shortcut_could_differ(
    tmp_path: Path, files: dict[str, str], overrides: list[str]
) -> None:
    base = {"config.yaml": "defaults: [{a: x}, _self_]\n", "a/x.yaml": "k: 1\n", "b/y.yaml": ""}
    assert plain(tree(tmp_path / "base", base), "config") is not None
    conf = tree(tmp_path / "conf", {**base, **files})
    assert plain(conf, "config", overrides) is None


# -- the override values ------------------------------------------------------------------------


def hydra_value(text: str) -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_override(f"++a={text}").value()


VALUES = [
    "0",
    "7",
    "-3",
    "+5",
    "1_000",
    "007",
    "0x10",
    "1-2",
    "1__2",
    "1_",
    "1.5",
    ".5",
    "1.",
    "1.e5",
    "1e5",
    "1E+5",
    "-2.5e-3",
    "1_0.5",
    "00.5",
    "1.5.3",
    "5e",
    "inf",
    "-INF",
    "nan",
    "true",
    "FALSE",
    "TrUe",
    "truex",
    "null",
    "NULL",
    "nullx",
    "infinity",
    "nan-3",
    "inf.5",
    "abc",
    "a-b",
    "a_b",
    "a.b",
    "/tmp/x/tok",
    "./rel",
    "../up",
    "llama-3.1-8b",
    "qwen2.5-7b",
    "+",
    "-",
    ".",
    "_",
    "1abc",
]


@pytest.mark.parametrize("text", VALUES)
def test_override_values_are_hydra_s(text: str) -> None:
    mine = override_value(text)
    if mine is NO_VALUE:
        assert text.lower().lstrip("+-") in ("inf", "nan", "null")
        return
    assert repr(mine) == repr(hydra_value(text))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789_.+-eEaAfFlnNrRsStTuU/x", min_size=1, max_size=8))
def test_random_override_values_are_hydra_s(text: str) -> None:
    mine = override_value(text)
    if mine is not NO_VALUE:
        assert repr(mine) == repr(hydra_value(text))


def test_the_yaml_loader_is_omegaconf_s() -> None:
    from omegaconf._utils import get_yaml_loader

    ours, theirs = _loader(), get_yaml_loader()

    def resolvers(loader: Any) -> dict[str, list[tuple[str, str]]]:
        return {
            k: [(tag, rx.pattern) for tag, rx in v]
            for k, v in loader.yaml_implicit_resolvers.items()
        }

    assert resolvers(ours) == resolvers(theirs)
    import yaml

    for text in ("a: 1\na: 2\n", "x: 1e3\nd: 2024-01-01\n"):
        try:
            expected: Any = yaml.load(text, Loader=theirs)
        except yaml.YAMLError as e:
            with pytest.raises(yaml.YAMLError, match="duplicate key"):
                yaml.load(text, Loader=ours)
            assert "duplicate key" in str(e)
            continue
        assert repr(yaml.load(text, Loader=ours)) == repr(expected)


# -- the findings -------------------------------------------------------------------------------


@pytest.fixture
def no_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    monkeypatch.setenv("CFGCHECK_NO_CACHE", "1")
    yield monkeypatch


def reports(conf: Path, name: str, overrides: Sequence[str]) -> str:
    try:
        result = cfgcheck.check(conf, name, overrides)
    except ConfigLoadError as e:
        return f"ConfigLoadError: {e}"
    out = []
    for fmt in ("json", "text", "github"):
        stream = io.StringIO()
        get_reporter(fmt)(result, stream)
        out.append(stream.getvalue())
    return "\n".join(out)


FINDINGS = [
    *SHIPPED_OVERRIDES,
    ["trainer.micro_batch_size=64", "model=llama-3-8b", "data.max_seq_length=8192"],
    ["tokenizer.vocab_size=32001"],
    ["trainer.lora.rnak=8"],
]


@pytest.mark.parametrize("overrides", FINDINGS, ids=" ".join)
def test_findings_are_byte_identical_to_hydra_s(
    no_cache: pytest.MonkeyPatch, overrides: list[str]
) -> None:
    assert plain(CONF, "config", overrides) is not None
    fast = reports(CONF, "config", overrides)
    no_cache.setattr("cfgcheck.compose_plain.usable", lambda: False)
    assert fast == reports(CONF, "config", overrides)


@pytest.mark.parametrize("conf,overrides", [(TEAM, []), (TEMPLATE, LOGGING)])
def test_fixture_trees_check_the_same(
    no_cache: pytest.MonkeyPatch, conf: Path, overrides: list[str]
) -> None:
    fast = reports(conf, "train", overrides)
    assert "ConfigLoadError" not in fast
    no_cache.setattr("cfgcheck.compose_plain.usable", lambda: False)
    assert fast == reports(conf, "train", overrides)


def test_a_first_check_imports_neither_hydra_nor_omegaconf() -> None:
    code = (
        "import sys; from cfgcheck import check; r = check(sys.argv[1]); "
        "print(r.ok, 'hydra' in sys.modules, 'omegaconf' in sys.modules)"
    )
    env = {"CFGCHECK_NO_CACHE": "1"}
    import os

    proc = subprocess.run(
        [sys.executable, "-c", code, str(CONF)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, **env},
    )
    assert proc.stdout.split() == ["True", "False", "False"], proc.stderr


def test_a_store_in_hydra_s_config_store_means_hydra_s_path(tmp_path: Path) -> None:
    from hydra.core.config_store import ConfigStore

    from cfgcheck.compose_plain import usable

    assert usable()
    store = ConfigStore.instance()
    store.store(name="cfgcheck_plain_test_node", node={"seed": 7})
    try:
        assert not usable()
    finally:
        del store.repo["cfgcheck_plain_test_node.yaml"]
    assert json.loads(json.dumps(plain(CONF, "config"))) == plain(CONF, "config")


@pytest.mark.parametrize("cached", [False, True], ids=["no cache", "cache miss"])
def test_inline_suppressions_apply_as_on_hydra_s_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool
) -> None:
    """The suppression marks are noted from the bytes the plain path screened (or the cache
    key read): the same findings, suppressed or not, as through Hydra."""
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    data = conf / "data" / "alpaca-tiny.yaml"
    text = data.read_text().replace("max_seq_length: 1024", "max_seq_length: 3063")
    data.write_text(text)
    monkeypatch.setenv("CFGCHECK_CACHE_DIR", str(tmp_path / "cache"))
    if cached:
        monkeypatch.delenv("CFGCHECK_NO_CACHE", raising=False)
    else:
        monkeypatch.setenv("CFGCHECK_NO_CACHE", "1")
    assert [f.rule for f in cfgcheck.check(conf).errors] == ["seq-len-over-block-size"]
    mark = "  # cfgcheck: ignore[seq-len-over-block-size]"
    data.write_text(text.replace("max_seq_length: 3063", "max_seq_length: 3063" + mark))
    assert plain(conf, "config") is not None
    fast = reports(conf, "config", [])
    assert not cfgcheck.check(conf).errors and '"ok": true' in fast
    monkeypatch.setattr("cfgcheck.compose_plain.usable", lambda: False)
    monkeypatch.setenv("CFGCHECK_NO_CACHE", "1")
    assert fast == reports(conf, "config", [])


# -- what a composition is made of (source locations) and fixes' overrides ----------------------


def hydra_files(conf: Path, name: str, overrides: Sequence[str]) -> Any:
    from cfgcheck.locations import composed_files

    with pytest.MonkeyPatch.context() as m:
        m.setattr("cfgcheck.compose_plain.usable", lambda: False)
        return composed_files(conf, name, overrides)


def described(composed: Any) -> Any:
    overrides = [
        (o.key_or_group, o.is_delete(), o.is_sweep_override(), o.input_line, repr(o.value()))
        for o in composed.config_overrides
    ]
    return composed.files, list(composed.choices.items()), overrides


@pytest.mark.parametrize("overrides", FINDINGS, ids=" ".join)
def test_the_files_a_composition_is_made_of_are_hydra_s(overrides: list[str]) -> None:
    from cfgcheck.compose_plain import plain_files
    from cfgcheck.locations import composed_files

    assert plain_files(CONF, "config", overrides) is not None
    expected = described(hydra_files(CONF, "config", overrides))
    assert described(composed_files(CONF, "config", overrides)) == expected


FIX_OVERRIDES = [
    "data.max_seq_length=2048",
    "trainer.learning_rate=0.0002",
    "trainer.gradient_checkpointing=true",
    "tokenizer.pad_token=eos",
    "+tokenizer.path=/tmp/tok",
    "++trainer.lora.rank=16",
    "model.name=llama-3.1-8b",
    "seed=1_000",
]


@pytest.mark.parametrize("text", FIX_OVERRIDES)
def test_fix_overrides_are_parsed_as_hydra_parses_them(text: str) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from cfgcheck.overrides import parse_override, plain_overrides

    line = plain_overrides([text])[0]
    mine = parse_override(line)
    assert mine is not None
    theirs = OverridesParser.create().parse_override(line)
    assert (mine.key_or_group, repr(mine.value()), mine.is_delete()) == (
        theirs.key_or_group,
        repr(theirs.value()),
        theirs.is_delete(),
    )
    assert not theirs.is_sweep_override() and not theirs.is_hydra_override()


def test_a_first_check_with_findings_imports_neither_hydra_nor_omegaconf() -> None:
    """Its fixes are verified and its findings located without Hydra too."""
    import os

    code = (
        "import sys; from cfgcheck import check; "
        "r = check(sys.argv[1], 'config', ['data.max_seq_length=3063']); "
        "f = r.errors[0]; print(f.rule, bool(f.fixes), f.locations['model.block_size'].line, "
        "'hydra' in sys.modules, 'omegaconf' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(CONF)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "CFGCHECK_NO_CACHE": "1"},
    )
    assert proc.stdout.split() == ["seq-len-over-block-size", "True", "5", "False", "False"], (
        proc.stderr
    )
