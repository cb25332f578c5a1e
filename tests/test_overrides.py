"""Plain ``key=value`` overrides of schema keys the YAML tree does not spell: every entry point
(check, --sweep, memory, data, the service, @cfgcheck.main) accepts them, with the same meaning
as Hydra's ``++``; group choices and ``+`` / ``++`` / ``~`` keep Hydra's meaning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cfgcheck
from cfgcheck.overrides import format_value, plain_key, plain_overrides, schema_paths
from tests.conftest import CONF, run_cfgcheck

# Keys no file of the default composition spells (each made Hydra exit 2 with "use +").
ABSENT = [
    "tokenizer.path=assets/demo-tokenizer",
    "model.n_query_groups=4",
    "trainer.loss_chunking=chunked",
    "trainer.lora.rank=16",
    "trainer.devices=2",
    "trainer.gpu.memory_gib=40",
]


def _value(cfg: cfgcheck.RunConfig, path: str) -> object:
    node: object = cfg
    for part in path.split("."):
        node = getattr(node, part)
    return node


@pytest.mark.parametrize("override", ABSENT)
def test_plain_override_of_a_key_the_tree_does_not_spell(override: str) -> None:
    key, value = override.split("=", 1)
    result = cfgcheck.check(CONF, "config", [override, "trainer=full"])
    # trainer=full spells neither lora.rank nor devices nor loss_chunking.
    assert not any(f.rule in ("unknown-key", "invalid-value") for f in result.findings)
    composed = cfgcheck.compose(CONF, "config", ["trainer=full", override])
    node: object = composed
    for part in key.split("."):
        node = node[part]  # type: ignore[index]
    assert str(node) == value


@pytest.mark.slow
def test_every_schema_leaf_can_be_set_plainly() -> None:
    """Each leaf of the schema composes with a plain override (values of the right type)."""
    from cfgcheck.validate import to_plain

    cfg = to_plain(cfgcheck.compose(CONF, "config", ["trainer=full"]))
    for path in schema_paths():
        if "." not in path or path.count(".") > 2:
            continue
        section, *rest = path.split(".")
        node = cfg.get(section, {})
        for part in rest:
            node = node.get(part) if isinstance(node, dict) else None
        text = format_value(node if node is not None else 1)
        if text is None:
            continue  # a mapping value: set key by key
        composed = cfgcheck.compose(CONF, "config", ["trainer=full", f"{path}={text}"])
        assert composed is not None


def test_group_choices_and_prefixed_overrides_keep_hydras_meaning() -> None:
    assert plain_overrides(["model=llama-3-8b"]) == ["model=llama-3-8b"]
    assert plain_overrides(["+trainer.x=1", "++a.b=1", "~trainer.lora"]) == [
        "+trainer.x=1",
        "++a.b=1",
        "~trainer.lora",
    ]
    assert plain_overrides(["hydra.job.name=x", "db@pkg=x", "trainer/gpu=a"]) == [
        "hydra.job.name=x",
        "db@pkg=x",
        "trainer/gpu=a",
    ]
    assert plain_overrides(["seed=3", "trainer.lora.rank=16"]) == [
        "++seed=3",
        "++trainer.lora.rank=16",
    ]
    assert plain_overrides(plain_overrides(["seed=3"])) == ["++seed=3"]  # idempotent
    assert plain_key("model=phi-2") is None
    composed = cfgcheck.compose(CONF, "config", ["model=llama-3-8b"])
    assert composed.model.name == "llama-3-8b"


def test_a_typo_gets_the_did_you_mean_on_the_first_run() -> None:
    result = cfgcheck.check(CONF, "config", ["trainer.lora.rnak=16"])
    [finding] = result.by_rule("unknown-key")
    assert finding.paths == ("trainer.lora.rnak",)
    assert "did you mean trainer.lora.rank?" in finding.hint
    assert "rank, alpha, dropout, targets" in finding.hint
    assert any("trainer.lora.rank=16" in fix.overrides for fix in finding.fixes)
    # A top-level key that is not in the schema: Hydra's one-line exit 2, with a suggestion.
    proc = run_cfgcheck("check", "sed=1")
    assert proc.returncode == 2
    assert "did you mean seed?" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_source_location_names_the_override_as_written() -> None:
    result = cfgcheck.check(CONF, "config", ["trainer.devices=2"])
    [finding] = result.by_rule("strategy-device-count")
    location = finding.locations["trainer.devices"]
    assert location is not None and location.file == "<override trainer.devices=2>"


def test_cli_accepts_plain_overrides_and_the_cache_agrees(tmp_path: Path) -> None:
    args = ["check", "--format", "json", "trainer=full", "trainer.lora.rank=16"]
    first = run_cfgcheck(*args)
    second = run_cfgcheck(*args)  # a cache hit
    assert first.returncode == second.returncode, first.stderr
    assert json.loads(first.stdout) == json.loads(second.stdout)
    assert "lora-settings-unused" in first.stdout


def test_sweep_over_a_key_the_tree_does_not_spell() -> None:
    from cfgcheck.hydra.sweep import check_sweep

    result = check_sweep(CONF, "config", ["trainer=full", "trainer.lora.rank=8,16"])
    assert [p.overrides for p in result.points] == [
        ("trainer=full", "trainer.lora.rank=8"),
        ("trainer=full", "trainer.lora.rank=16"),
    ]
    for point in result.points:
        assert point.error is None
        assert point.result is not None and point.result.by_rule("lora-settings-unused")


def test_memory_and_data_accept_plain_overrides() -> None:
    for command in ("memory", "data"):
        proc = run_cfgcheck(
            command, "tokenizer=demo-bpe", "trainer=full", "trainer.loss_chunking=chunked"
        )
        assert proc.returncode in (0, 1), proc.stderr
        assert "use +" not in proc.stderr


def test_format_value_reads_back_through_hydra() -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for value in [16, 2e-05, True, None, "q_proj", "a b", "1e-4", "true", ["q_proj", "v_proj"]]:
        text = format_value(value)
        assert text is not None
        parsed = parser.parse_override(f"k={text}").value()
        assert parsed == value, (value, text, parsed)


def test_hydra_main_accepts_plain_overrides(tmp_path: Path) -> None:
    """``@cfgcheck.main``, where Hydra parses argv itself: a key the tree does not spell."""
    import shutil

    from tests.test_hydra_main import APP, markers, run_app

    shutil.copytree(CONF, tmp_path / "conf")
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "markers").mkdir()
    proc = run_app(tmp_path, "trainer=full", "trainer.loss_chunking=chunked")
    assert proc.returncode == 0, proc.stderr
    assert markers(tmp_path) == {
        "tinyllama-1.1b-1024": "cfgcheck.schema.run.RunConfig DictConfig 42"
    }
    bad = run_app(tmp_path, "trainer.devices=2")
    assert bad.returncode == 1
    assert "<override trainer.devices=2>" in bad.stderr
