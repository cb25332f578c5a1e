"""A team's own config: sections cfgcheck does not own pass, and the ``cfgcheck:`` mapping node
is validated with findings, locations and verified fixes in the team's own keys. Real Hydra
compositions throughout (no mocks of Hydra or OmegaConf)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import cfgcheck
from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult, Finding
from cfgcheck.project.settings import NONE
from tests.adoption import assert_one_line_error, line_of, run_in, team_tree
from tests.conftest import CONF


def only(result: CheckResult, rule: str) -> Finding:
    [finding] = result.by_rule(rule)
    return finding


# -- 1. sections cfgcheck does not own ------------------------------------------------------


def test_foreign_top_level_sections_pass_unchecked() -> None:
    result = cfgcheck.check(
        CONF, "config", ["+optimizer.lr=1e-4", "+logger.wandb.project=x", "+callbacks=[a,b]"]
    )
    assert result.ok and not result.by_rule("unknown-key")


def test_a_name_one_edit_from_a_section_is_still_unknown_with_did_you_mean() -> None:
    result = cfgcheck.check(CONF, "config", ["+tokenizr.vocab_size=3", "+trainre.x=1"])
    unknown = {f.paths[0]: f for f in result.by_rule("unknown-key")}
    assert set(unknown) == {"tokenizr", "trainre"}
    assert "did you mean tokenizer?" in unknown["tokenizr"].hint
    assert "did you mean trainer?" in unknown["trainre"].hint
    assert not result.ok


def test_foreign_section_with_an_unresolvable_interpolation_is_not_resolved() -> None:
    # The lightning-hydra-template's paths section interpolates ${hydra:runtime.output_dir},
    # which only resolves inside a running Hydra app: cfgcheck never resolves it.
    result = cfgcheck.validate({**_default(), "paths": {"out": "${hydra:runtime.output_dir}"}})
    assert result.ok


def _default() -> dict[str, Any]:
    from cfgcheck.validate import to_plain

    plain: dict[str, Any] = to_plain(cfgcheck.compose(CONF, "config"))
    return plain


# -- 2. the mapping node ---------------------------------------------------------------------


@pytest.fixture
def team(tmp_path: Path) -> Path:
    return team_tree(tmp_path)


def test_team_tree_passes_untouched(team: Path) -> None:
    result = cfgcheck.check(team, "train", settings=NONE)
    assert result.ok, [f.message for f in result.findings]
    assert result.config is not None and result.config.data.max_seq_length == 1024
    assert result.config.trainer.learning_rate == 2.0e-4  # ${optimizer.lr}


def test_finding_names_and_locates_the_key_the_chain_ends_at(team: Path) -> None:
    result = cfgcheck.check(team, "train", ["training=long"], settings=NONE)
    finding = only(result, "seq-len-over-block-size")
    # data.max_seq_length -> ${training.seq} -> ${.max_len}: training.max_len holds the value.
    assert finding.paths == ("training.max_len", "cfgcheck.model.block_size")
    long_file = team / "training" / "long.yaml"
    where = finding.locations["training.max_len"]
    assert where is not None and Path(where.file).resolve() == long_file.resolve()
    assert where.line == line_of(long_file, "max_len:")
    # A literal in the node is located at the node's own line.
    block = finding.locations["cfgcheck.model.block_size"]
    assert block is not None and block.line == line_of(team / "train.yaml", "block_size:")
    # The fix is an override of the team's key, and it works.
    overrides = [o for fix in finding.fixes for o in fix.overrides]
    assert "training.max_len=2048" in overrides
    assert not any(o.startswith("data.") for o in overrides)
    fixed = cfgcheck.check(team, "train", ["training=long", "training.max_len=2048"], settings=NONE)
    assert fixed.ok


def test_command_line_override_of_the_team_key_is_the_location(team: Path) -> None:
    result = cfgcheck.check(team, "train", ["training.max_len=3063"], settings=NONE)
    finding = only(result, "seq-len-over-block-size")
    where = finding.locations["training.max_len"]
    assert where is not None and where.file == "<override training.max_len=3063>"


def test_an_override_of_the_node_itself_is_told_in_the_node(team: Path) -> None:
    bad = ["cfgcheck.tokenizer.vocab_size=32001"]  # replaces ${tok.size} with a literal
    finding = only(cfgcheck.check(team, "train", bad, settings=NONE), "vocab-mismatch")
    assert finding.paths == ("cfgcheck.tokenizer.vocab_size", "cfgcheck.model.vocab_size")
    where = finding.locations["cfgcheck.tokenizer.vocab_size"]
    assert where is not None and where.file == "<override cfgcheck.tokenizer.vocab_size=32001>"
    assert finding.fixes[0].overrides == ("cfgcheck.model.vocab_size=32001",)
    assert cfgcheck.check(team, "train", [*bad, *finding.fixes[0].overrides], settings=NONE).ok


def test_every_fix_in_team_keys_passes_on_the_team_command_line(team: Path) -> None:
    result = cfgcheck.check(team, "train", ["tok.size=32001"], settings=NONE)
    finding = only(result, "vocab-mismatch")
    assert "tok.size" in finding.paths
    for fix in finding.fixes:  # each fix, pasted on the team's command line, passes
        assert cfgcheck.check(team, "train", ["tok.size=32001", *fix.overrides], settings=NONE).ok


def test_cached_composition_locates_the_same(team: Path) -> None:
    first = cfgcheck.check(team, "train", ["training=long"], settings=NONE)
    again = cfgcheck.check(team, "train", ["training=long"], settings=NONE)  # a cache hit
    assert [f.to_dict() for f in first.findings] == [f.to_dict() for f in again.findings]


def test_nothing_outside_the_node_is_checked(team: Path) -> None:
    result = cfgcheck.check(team, "train", ["+trainr.x=1", "+model.whatever=2"], settings=NONE)
    assert result.ok


@pytest.mark.parametrize(
    ("edit", "needles"),
    [
        (("${training.seq}", "${training.sq}"), ["training.sq", "did you mean training.seq?"]),
        (("${training.seq}", "${a.b}"), ["${a.b}"]),
        (("batch: 4", "batch: ${..cfgcheck.trainer.micro_batch_size}"), ["cycle"]),
        (("\ncfgcheck:\n  name: team-run\n", "\ncfgcheck: [1]\nx:\n  name: team-run\n"), ["list"]),
    ],
    ids=["missing-key", "missing-root", "cycle", "not-a-mapping"],
)
def test_bad_mapping_is_one_line_exit_2(
    team: Path, edit: tuple[str, str], needles: list[str]
) -> None:
    old, new = edit
    for file in (team / "train.yaml", team / "training" / "base.yaml"):
        text = file.read_text()
        if old in text:
            file.write_text(text.replace(old, new))
            break
    else:
        raise AssertionError(old)
    with pytest.raises(ConfigLoadError):
        cfgcheck.check(team, "train", settings=NONE)
    proc = run_in(team.parent, "check", "--config-dir", "conf", "--config-name", "train")
    assert_one_line_error(proc, *needles)


def test_cli_json_sweep_and_hook_speak_the_team_keys(team: Path) -> None:
    root = team.parent
    proc = run_in(root, "check", "--config-dir", "conf", "--config-name", "train",
                  "--format", "json", "training.max_len=3063")  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    [finding] = [f for f in json.loads(proc.stdout)["findings"] if f["severity"] == "error"]
    assert finding["paths"][0] == "training.max_len"
    assert finding["fixes"][0]["overrides"] == ["training.max_len=2048"]

    proc = run_in(root, "check", "--sweep", "--config-dir", "conf", "--config-name", "train",
                  "--format", "json", "training.max_len=1024,3063")  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    points = json.loads(proc.stdout)["points"]
    assert [p["ok"] for p in points] == [True, False]
    failing = points[1]["findings"][0]
    assert failing["paths"][0] == "training.max_len"
    assert failing["locations"][0]["file"] == "<override training.max_len=3063>"

    proc = run_in(root, "hook", "--config-dir", "conf", "conf/training/long.yaml")
    assert proc.returncode == 1, proc.stdout
    assert "conf/training/long.yaml:1: training.max_len set here" in proc.stdout


def test_service_validates_through_the_node(team: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from cfgcheck.service import ServiceSettings, create_app

    monkeypatch.chdir(team.parent)
    # The service refuses resolver calls anywhere in a tree (its own rule): drop the team's
    # ${oc.env:...} path for this test.
    train = team / "train.yaml"
    train.write_text(train.read_text().replace("${oc.env:TEAM_OUT,/tmp/team-out}", "/tmp/o"))
    app = create_app(ServiceSettings(config_dir=team, allowed_roots=(team.parent,)))
    with TestClient(app) as client:
        r = client.post(
            "/v1/validate", json={"config_name": "train", "overrides": ["training=long"]}
        )
        assert r.status_code == 200, r.text
        [finding] = [f for f in r.json()["findings"] if f["severity"] == "error"]
        assert finding["paths"][0] == "training.max_len"
        assert finding["locations"][0]["file"].endswith("training/long.yaml")
        assert finding["fixes"][0]["overrides"] == ["training.max_len=2048"]
        # A body that is a team tree: its resolver calls never run (the environment stays
        # private), as for any body.
        body = {"secret": "${oc.env:HOME}", "cfgcheck": {"name": "${secret}"}}
        r = client.post("/v1/validate", json=body)
        assert r.status_code == 422 and "resolver" in r.text


def test_shipped_team_example_passes_untouched() -> None:
    # examples/team/ (docs/adoption.md): the mapping node over a team's own names.
    team = Path(__file__).resolve().parent.parent / "examples" / "team" / "conf"
    result = cfgcheck.check(team, "train", settings=NONE)
    assert result.ok and not result.findings, [f.message for f in result.findings]
