"""JSON Schemas for editors: schemas/ is up to date, and the shipped conf/ files validate
against the schema their yaml-language-server modeline names."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from cfgcheck.cli.schema import schema_files, stale_files
from cfgcheck.jsonschema import json_schemas
from tests.conftest import COMMAND, CONF, REPO

SCHEMAS = REPO / "schemas"
MODELINE = re.compile(r"^# yaml-language-server: \$schema=(\S+)$", re.MULTILINE)


def test_committed_schemas_are_up_to_date() -> None:
    stale = stale_files(SCHEMAS)
    assert not stale, f"schemas/ is stale ({stale}): run `cfgcheck schema` and commit schemas/"


def test_one_schema_per_section_plus_run_and_primary_config() -> None:
    assert set(schema_files()) == {f"{name}.schema.json" for name in [*json_schemas(), "config"]}
    assert {"model", "tokenizer", "data", "trainer", "run"} <= set(json_schemas())


def conf_files() -> list[Path]:
    return sorted(CONF.rglob("*.yaml"))


def validator_for(file: Path) -> jsonschema.protocols.Validator | None:
    match = MODELINE.search(file.read_text(encoding="utf-8"))
    if match is None:
        return None
    schema = json.loads((file.parent / match.group(1)).resolve().read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)  # type: ignore[no-any-return]


def test_shipped_conf_files_carry_a_modeline() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "conf"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.split()
    files = [REPO / name for name in tracked if name.endswith(".yaml")] or conf_files()
    missing = [str(f.relative_to(REPO)) for f in files if validator_for(f) is None]
    assert not missing, f"no yaml-language-server modeline in {missing}"


@pytest.mark.parametrize("file", conf_files(), ids=lambda p: str(p.relative_to(CONF)))
def test_conf_file_is_valid_against_its_modeline_schema(file: Path) -> None:
    validator = validator_for(file)
    if validator is None:
        pytest.skip("no modeline")
    data = yaml.safe_load(file.read_text(encoding="utf-8"))
    errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(data)]
    assert not errors, errors


def load(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    return schema


def test_primary_schema_allows_defaults_that_the_run_schema_rejects() -> None:
    primary = yaml.safe_load((CONF / "config.yaml").read_text(encoding="utf-8"))
    assert "defaults" in primary
    run = jsonschema.Draft202012Validator(load("run.schema.json"))
    assert any("defaults" in e.message for e in run.iter_errors(primary))
    jsonschema.Draft202012Validator(load("config.schema.json")).validate(primary)


def test_section_schema_rejects_a_misspelled_key_and_a_bad_value() -> None:
    data = yaml.safe_load((CONF / "data" / "alpaca-tiny.yaml").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(load("data.schema.json"))
    validator.validate(data)
    bad = {**data, "max_seq_lenght": 2048, "padding": "true"}
    messages = [e.message for e in validator.iter_errors(bad)]
    assert any("max_seq_lenght" in m for m in messages)
    assert any("'true' is not one of" in m for m in messages)


def test_cli_writes_and_checks_schemas(tmp_path: Path) -> None:
    out = tmp_path / "schemas"
    stale = subprocess.run(
        [*COMMAND, "schema", "--check", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert stale.returncode == 1 and "run.schema.json: stale" in stale.stdout
    wrote = subprocess.run(
        [*COMMAND, "schema", "--out", str(out)], capture_output=True, text=True, timeout=60
    )
    assert wrote.returncode == 0, wrote.stderr
    assert {p.name: p.read_text() for p in out.iterdir()} == schema_files()
    fresh = subprocess.run(
        [*COMMAND, "schema", "--check", "--out", str(out)], capture_output=True, timeout=60
    )
    assert fresh.returncode == 0
    (out / "model.schema.json").write_text("{}\n")
    assert stale_files(out) == ["model.schema.json"]


def test_primary_schema_checks_partial_sections_through_refs() -> None:
    """A primary or ``_global_`` experiment config may set a few keys of a section."""
    validator = jsonschema.Draft202012Validator(load("config.schema.json"))
    experiment = {"defaults": [{"override /model": "llama-2-7b"}], "data": {"max_seq_length": 8}}
    validator.validate(experiment)
    bad = {"data": {"max_seq_lenght": 8}, "trainer": {"lora": {"rank": 0}}}
    errors = {"/".join(map(str, e.absolute_path)): e.message for e in validator.iter_errors(bad)}
    assert "max_seq_lenght" in errors["data"]
    assert "trainer/lora/rank" in errors
