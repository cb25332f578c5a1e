"""Hostile and careless input through the CLI: exit 2 and one line, or a finding; never a
traceback, never a hang (issue 11).

Most cases run in-process through :func:`cfgcheck.cli.main` with ``CFGCHECK_DEBUG=1``, which
turns the last-resort handler off: a case passes only when its cause is handled where it
arises. Cases that would block a process forever if they regressed (a FIFO, ``/dev/zero``)
run the real command in a subprocess with a timeout.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cfgcheck.cli import main
from cfgcheck.errors import ConfigLoadError
from cfgcheck.safeio import (
    UnsafeInput,
    confine,
    decode,
    load_json_text,
    load_yaml_text,
    path_problem,
    read_bytes,
    screen_yaml,
)
from cfgcheck.schema.run import SECTIONS
from cfgcheck.validate import validate
from tests.conftest import CONF, REPO, run_cfgcheck
from tests.hostile import (
    BAD_VALUES,
    CONF_FILES,
    FUZZ_EXAMPLES,
    GOOD_FILES,
    OVERRIDES,
    SWEEPS,
    alias_bomb,
)

FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(autouse=True)
def _no_last_resort(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CFGCHECK_DEBUG", "1")  # an unexpected exception fails the test


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    target = tmp_path / "conf"
    shutil.copytree(CONF, target)
    return target


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_exit(code: int, err: str) -> None:
    """Exit 2 with exactly one ``cfgcheck: error:`` line, or 0/1 (a verdict) with no error."""
    assert "Traceback" not in err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("cfgcheck: error: "), err
    else:
        assert code in (0, 1), (code, err)


# --- the reader ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CONF_FILES))
def test_every_hostile_file_is_refused_or_read_by_safeio(name: str) -> None:
    data = CONF_FILES[name]
    try:
        value = load_yaml_text(decode(data, name), name)
    except UnsafeInput as e:
        assert "\n" not in str(e)
        assert len(str(e)) < 600
    else:  # what is accepted is plain data
        assert value is None or isinstance(value, dict | list | str | int | float)


@pytest.mark.parametrize("name", sorted(GOOD_FILES))
def test_good_files_are_read(name: str) -> None:
    assert isinstance(load_yaml_text(decode(GOOD_FILES[name], name), name), dict)


def test_the_screen_bounds_block_and_flow_nesting_alike() -> None:
    for text in (
        "- " * 100 + "1",
        "[" * 100 + "]" * 100,
        "".join(f"{' ' * i}k:\n" for i in range(100)),
    ):
        with pytest.raises(UnsafeInput, match="nesting deeper than 64"):
            screen_yaml(text, "doc")
    screen_yaml("- " * 60 + "1", "doc")  # within the bound


def test_alias_expansion_is_counted_not_the_alias_count() -> None:
    with pytest.raises(UnsafeInput, match="once aliases are expanded"):
        screen_yaml(alias_bomb(levels=7, width=9), "bomb")  # 63 aliases, 4.8M values
    screen_yaml(alias_bomb(levels=3, width=9), "small")  # 729 values: fine


def test_encodings() -> None:
    assert decode("\ufeffa: 1".encode(), "f") == "a: 1"
    for data in ("a: 1".encode("utf-16"), "a: 1".encode("utf-16-be")):
        with pytest.raises(UnsafeInput, match="looks like UTF-16"):
            decode(data, "f")
    with pytest.raises(UnsafeInput, match=r"not UTF-8 .*latin-1 or cp1252"):
        decode("caf\xe9".encode("latin-1"), "f")


def test_json_nesting_is_bounded_before_the_parser() -> None:
    with pytest.raises(UnsafeInput, match="nesting deeper"):
        load_json_text("[" * 100_000 + "]" * 100_000, "doc")
    assert load_json_text(
        '{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', "doc"
    )
    with pytest.raises(UnsafeInput, match="NaN is not a JSON number"):
        load_json_text('{"a": NaN}', "doc")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_special_files_are_named_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dir").mkdir()
    expected = {
        "fifo": "is a FIFO",
        "zero": "is a device",
        "dangling": "is a dangling symlink",
        "loop": "is a symlink loop",
        "dir": "is a directory",
        "missing": "does not exist",
        "x" * 300: "name that is too long",
    }
    for name, reason in expected.items():
        assert reason in (path_problem(tmp_path / name) or ""), name
        with pytest.raises(UnsafeInput, match=reason):
            read_bytes(tmp_path / name)


def test_confinement(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "tok").mkdir(parents=True)
    (root / "tok" / "tokenizer.json").write_text("{}")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text("{}")
    assert confine("tok/tokenizer.json", [root], root) == root / "tok" / "tokenizer.json"
    (root / "tok" / "special_tokens_map.json").symlink_to(outside / "secret.json")
    refusals = {
        "": "is empty",
        "tok": "leads outside",
        "../outside/secret.json": "'..'",
        str(outside / "secret.json"): "outside the directories",
        "x" * 256: "longer than 255 bytes",
        "https://h/x": "remote",
        "~root/x": "'~'",
    }
    for value, reason in refusals.items():
        with pytest.raises(UnsafeInput, match=reason):
            confine(value, [root], root)


@given(st.text(max_size=300))
@FUZZ
def test_any_text_is_read_or_refused_in_one_line(text: str) -> None:
    try:
        load_yaml_text(text, "doc")
    except UnsafeInput as e:
        assert "\n" not in str(e)
    try:
        load_json_text(text, "doc")
    except UnsafeInput as e:
        assert "\n" not in str(e)


@given(st.binary(max_size=200))
@FUZZ
def test_any_bytes_decode_or_are_refused(data: bytes) -> None:
    try:
        decode(data, "doc")
    except UnsafeInput as e:
        assert "not UTF-8" in str(e)


# --- the commands --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CONF_FILES))
def test_check_on_a_conf_dir_holding_a_hostile_file(
    conf: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    (conf / "model" / "hostile.yaml").write_bytes(CONF_FILES[name])
    code, _, err = run(capsys, "check", "--config-dir", str(conf), "model=hostile")
    assert_clean_exit(code, err)
    code, _, err = run(capsys, "check", "--config-dir", str(conf))  # not even selected
    assert_clean_exit(code, err)


@pytest.mark.parametrize("name", ["block-nesting-30k", "alias-bomb", "utf16", "scalar-top"])
def test_hostile_primary_config(conf: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    (conf / "config.yaml").write_bytes(CONF_FILES[name])
    for argv in (["check"], ["memory"], ["check", "--sweep", "trainer.seed=1,2"]):
        code, _, err = run(capsys, *argv, "--config-dir", str(conf))
        assert code == 2 or name == "scalar-top"
        assert_clean_exit(code, err)


def test_self_including_defaults(conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (conf / "config.yaml").write_text("defaults:\n  - config\n  - _self_\n")
    code, _, err = run(capsys, "check", "--config-dir", str(conf))
    assert code == 2
    assert_clean_exit(code, err)


@pytest.mark.parametrize("overrides", OVERRIDES, ids=lambda o: o[0][:30])
def test_hostile_overrides(capsys: pytest.CaptureFixture[str], overrides: list[str]) -> None:
    code, _, err = run(capsys, "check", "--config-dir", str(CONF), *overrides)
    assert_clean_exit(code, err)


@pytest.mark.parametrize("overrides", SWEEPS, ids=lambda o: o[0])
def test_hostile_sweeps(capsys: pytest.CaptureFixture[str], overrides: list[str]) -> None:
    code, _, err = run(capsys, "check", "--sweep", "--config-dir", str(CONF), *overrides)
    assert code == 2
    assert_clean_exit(code, err)


@pytest.mark.parametrize(
    "config_dir", ["~nosuchuser/conf", "/dev/null", "x" * 300, "conf\udcff", "/etc/shadow"]
)
def test_hostile_config_dirs(capsys: pytest.CaptureFixture[str], config_dir: str) -> None:
    for command in ("check", "memory", "data", "hook"):
        code, _, err = run(capsys, command, "--config-dir", config_dir)
        assert code == 2
        assert_clean_exit(code, err)


def test_special_files_in_the_conf_dir(conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    group = conf / "model"
    cases = {
        "dangling.yaml": lambda p: p.symlink_to(group / "nowhere.yaml"),
        "loop.yaml": lambda p: p.symlink_to(p),
        "dir.yaml": lambda p: p.mkdir(),
    }
    for name, make in cases.items():
        make(group / name)
        code, _, err = run(capsys, "check", "--config-dir", str(conf))
        assert code == 2 and name in err
        assert_clean_exit(code, err)
        (group / name).rmdir() if (group / name).is_dir() and not (group / name).is_symlink() else (
            group / name
        ).unlink()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_and_dev_zero_never_block(conf: Path, tmp_path: Path) -> None:
    """In a subprocess with a timeout: a regression would block the process forever."""
    os.mkfifo(conf / "model" / "fifo.yaml")
    (conf / "tokenizer" / "zero.yaml").symlink_to("/dev/zero")
    for args in (
        ("check", "--config-dir", str(conf)),
        ("hook", "--config-dir", str(conf), str(conf / "tokenizer" / "zero.yaml")),
    ):
        r = run_cfgcheck(*args, cwd=tmp_path, timeout=60)
        assert r.returncode == 2, r.stderr + r.stdout
        assert "Traceback" not in r.stderr + r.stdout
        assert "is a FIFO" in r.stderr + r.stdout or "is a device" in r.stderr + r.stdout
    (conf / "model" / "fifo.yaml").unlink()
    (conf / "tokenizer" / "zero.yaml").unlink()
    os.mkfifo(tmp_path / "tokfifo")
    r = run_cfgcheck(
        "check",
        "--config-dir",
        str(conf),
        "tokenizer=demo-bpe",
        "tokenizer.path=tokfifo",
        cwd=tmp_path,
        timeout=60,
    )
    assert r.returncode == 1 and "is a FIFO" in r.stdout, r.stdout + r.stderr


def test_data_scan_hostile_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    monkeypatch.chdir(REPO)
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"text": ["hello world " * 40] * 2000}), good, row_group_size=250)
    raw = bytearray(good.read_bytes())
    for i in range(len(raw) // 4, len(raw) // 2, 7):
        raw[i] ^= 0x5A
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(raw))
    folder = tmp_path / "folder"
    folder.mkdir()
    cases = {
        str(deep): "nests too deeply",
        str(bad): "not a readable Parquet file",
        str(folder): "holds no data file",  # a folder is a folder of shards
        "/dev/null": "is a device",
    }
    for path, reason in cases.items():
        code, _, err = run(
            capsys,
            "data",
            "--config-dir",
            str(CONF),
            "tokenizer=demo-bpe",
            f"data.paths=[{path}]",
            "data.format=" + ("parquet" if path.endswith("quet") else "auto"),
            "++data.text_field=text",
            "++data.template=null",
        )
        assert code == 2 and reason in err, err
        assert_clean_exit(code, err)


# --- the schema ----------------------------------------------------------------------------


def validate_or_load_error(body: dict[str, Any]) -> Any:
    """The check result, or None when validation stops with a one-line ConfigLoadError (an
    unreadable ``model.pretrained`` folder: the CLI's exit 2). Nothing else may escape."""
    try:
        return validate(body)
    except ConfigLoadError as e:
        assert "\n" not in str(e)
        return None


def _numeric(schema: dict[str, Any]) -> bool:
    options = schema.get("anyOf", [schema])
    return any(o.get("type") in ("integer", "number") for o in options) and not any(
        o.get("type") in ("string", "array", "object") for o in options
    )


def _fields() -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for section, model in SECTIONS.items():
        props = model.model_json_schema().get("properties", {})
        out += [(section, name, props.get(name, {})) for name in model.model_fields]
    return out


@pytest.mark.parametrize(("section", "field", "schema"), _fields(), ids=lambda x: str(x)[:30])
def test_every_schema_field_with_every_bad_value(
    cfg: dict[str, Any], section: str, field: str, schema: dict[str, Any]
) -> None:
    for value in BAD_VALUES:
        body = {**cfg, section: {**cfg[section], field: value}}
        result = validate_or_load_error(body)
        if result is None:
            continue
        non_finite = isinstance(value, float) and not math.isfinite(value)
        huge = isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63
        if _numeric(schema) and (non_finite or huge):
            assert any(
                f.severity == "error" and f.paths[0].startswith(f"{section}.{field}")
                for f in result.findings
            ), (section, field, value)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@given(
    st.sampled_from([(s, f) for s, f, _ in _fields()]),
    JSON_VALUES,
)
@FUZZ
def test_random_values_in_random_fields(
    default_config: dict[str, Any], where: tuple[str, str], value: Any
) -> None:
    section, field = where
    body = {**default_config, section: {**default_config[section], field: value}}
    validate_or_load_error(body)


OVERRIDE_TEXT = st.builds(
    lambda key, value: f"{key}={value}",
    st.sampled_from(
        ["model", "+model", "trainer", "data.paths", "name", "model.block_size", "~data", "++x"]
    ),
    st.text(alphabet="[]{},=:'\"$./ab0-9\\ ", max_size=60),
)


@given(st.lists(OVERRIDE_TEXT, min_size=1, max_size=3))
@FUZZ
def test_random_overrides_give_a_verdict_or_one_line(overrides: list[str]) -> None:
    import io
    from contextlib import redirect_stderr, redirect_stdout

    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        try:
            code = main(["check", "--config-dir", str(CONF), *overrides])
        except SystemExit as e:  # argparse's usage error (an override that looks like an option)
            code = int(e.code or 0)
    assert_clean_exit(code, err.getvalue())


def test_config_load_error_is_the_only_way_out(conf: Path) -> None:
    from cfgcheck import check

    (conf / "model" / "deep.yaml").write_bytes(CONF_FILES["block-nesting-30k"])
    with pytest.raises(ConfigLoadError, match="nesting deeper"):
        check(conf, "config", ["model=deep"])
