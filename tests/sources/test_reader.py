"""The bounded reader of native config files: lines of every key, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources import reader
from cfgcheck.sources.base import NativeConfig
from cfgcheck.sources.reader import parse_document, parse_override, read_document


def test_lines_of_nested_keys_and_list_items(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("a: 1\nb:\n  c: x\n  d:\n    - path: p\n      type: t\n")
    doc = read_document(file)
    assert doc.data == {"a": 1, "b": {"c": "x", "d": [{"path": "p", "type": "t"}]}}
    assert doc.lines == {"a": 1, "b": 2, "b.c": 3, "b.d": 4, "b.d.0.path": 5, "b.d.0.type": 6}


def test_json_dumps_read_as_yaml(tmp_path: Path) -> None:
    file = tmp_path / "args.json"
    file.write_text('{\n  "seed": 3,\n  "bf16": true\n}\n')
    doc = read_document(file)
    assert doc.data == {"seed": 3, "bf16": True} and doc.lines == {"seed": 2, "bf16": 3}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [1, 2\n", "malformed YAML"),
        ("- 1\n- 2\n", "expected a mapping"),
        ("a: " + "[" * 70 + "]" * 70 + "\n", "nesting deeper than 32"),
        (
            "a: &x [1,1,1,1,1,1,1,1,1,1]\n"
            + "".join(
                f"b{i}: &b{i} [{', '.join(['*' + ('x' if i == 0 else f'b{i - 1}')] * 10)}]\n"
                for i in range(6)
            ),
            "more than 20000 values",
        ),
        ("a: !!python/object:os.system ls\n", "is not accepted"),
        ("? [1, 2]\n: v\n", "a key must be a plain scalar"),
    ],
)
def test_hostile_documents_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(text)
    with pytest.raises(ConfigLoadError, match=message) as info:
        read_document(file)
    assert "\n" not in str(info.value)


def test_deep_block_nesting_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "deep.yaml"
    file.write_text("".join(f"{'  ' * i}k{i}:\n" for i in range(40)) + "  " * 40 + "v: 1\n")
    with pytest.raises(ConfigLoadError, match="nesting deeper than 32"):
        read_document(file)


def test_size_encoding_and_missing_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "MAX_BYTES", 100)
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * 200 + "\n")
    with pytest.raises(ConfigLoadError, match="larger than 100 bytes"):
        read_document(big)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"a: \xe9\n")
    with pytest.raises(ConfigLoadError, match="not UTF-8"):
        read_document(latin)
    with pytest.raises(ConfigLoadError, match="does not exist"):
        read_document(tmp_path / "missing.yaml")
    with pytest.raises(ConfigLoadError, match="is a directory"):
        read_document(tmp_path)


def test_overrides_parse_yaml_values_and_locate_themselves(tmp_path: Path) -> None:
    assert parse_override("train.max_seq_length=3063") == ("train.max_seq_length", 3063)
    assert parse_override("quantize=null") == ("quantize", None)
    assert parse_override("lora_target_modules=[q_proj, v_proj]") == (
        "lora_target_modules",
        ["q_proj", "v_proj"],
    )
    for bad in ("novalue", "=3", "a..b=1"):
        with pytest.raises(ConfigLoadError, match="bad override"):
            parse_override(bad)
    file = tmp_path / "c.yaml"
    file.write_text("train:\n  micro_batch_size: 2\n  global_batch_size: 8\n")
    native = NativeConfig.from_document(
        "litgpt", read_document(file), ["train={micro_batch_size: 4}", "~seed"]
    )
    assert native.data == {"train": {"micro_batch_size": 4}}
    assert str(native.loc("train.micro_batch_size")) == "<override train={micro_batch_size: 4}>"
    assert native.loc("train.global_batch_size") is not None  # located at its replaced parent


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.text(
        alphabet=st.sampled_from(list("ab:-[]{}!&*?|>'\"#%@`,\n \t\x05\\0123x<=.")), max_size=80
    )
)
def test_any_text_reads_or_fails_in_one_line(text: str) -> None:
    try:
        doc = parse_document(text, "fuzz.yaml")
    except ConfigLoadError as e:
        assert "\n" not in str(e)
    else:
        assert isinstance(doc.data, dict)
