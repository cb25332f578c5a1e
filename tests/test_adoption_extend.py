"""A team's own schema (a ``cfgcheck.RunConfig`` subclass) and own rules (``@cfgcheck.rule``,
the ``cfgcheck.rules`` entry-point group of an installed package)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import cfgcheck
from cfgcheck.errors import ConfigLoadError
from cfgcheck.project.settings import NONE
from cfgcheck.rules._registry import unregister
from tests.adoption import assert_one_line_error, line_of, run_in, team_tree
from tests.conftest import REPO

TEAM_SCHEMA = '''
from pydantic import Field, model_validator

import cfgcheck
from cfgcheck.schema import DataConfig
from cfgcheck.schema._base import Section


class EvalConfig(Section):
    every_n_steps: int = Field(500, gt=0)
    max_seq_length: int = 1024


class TeamData(DataConfig):
    max_seq_length: int = Field(gt=0, le=2048)  # the team's cluster never trains longer


class TeamRun(cfgcheck.RunConfig):
    eval: EvalConfig = Field(default_factory=EvalConfig)
    data: TeamData


@cfgcheck.rule("eval-longer-than-train", requires=["eval", "data"])
def eval_longer_than_train(run):
    """Evaluation never feeds longer sequences than training.

    The eval loop reuses the training collator and its buffers.
    """
    if run.eval.max_seq_length > run.data.max_seq_length:
        yield cfgcheck.Problem(
            "error",
            ("eval.max_seq_length", "data.max_seq_length"),
            f"eval.max_seq_length={run.eval.max_seq_length} is above "
            f"data.max_seq_length={run.data.max_seq_length}",
            "shorten the evaluation sequences",
            fixes=(cfgcheck.Fix((f"eval.max_seq_length={run.data.max_seq_length}",), "match"),),
        )
'''


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    conf = team_tree(tmp_path)
    train = conf / "train.yaml"
    train.write_text(
        train.read_text().replace(
            "\ntok:\n",
            "  eval:\n    max_seq_length: ${evaluation.len}\n\nevaluation:\n  len: 512\n\ntok:\n",
        )
    )
    (tmp_path / "team_pkg").mkdir()
    (tmp_path / "team_pkg" / "__init__.py").write_text("")
    (tmp_path / "team_pkg" / "conf.py").write_text(TEAM_SCHEMA)
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("team_pkg")]:
        del sys.modules[name]
    unregister("eval-longer-than-train")


def test_team_schema_sections_rules_and_locations_in_the_library(project: Path) -> None:
    conf = project / "conf"
    good = cfgcheck.check(conf, "train", schema="team_pkg.conf:TeamRun", settings=NONE)
    assert good.ok, good.findings
    assert type(good.config).__name__ == "TeamRun" and good.config is not None
    assert good.config.eval.max_seq_length == 512  # type: ignore[attr-defined]

    # A tighter field of the team's schema, told in the team's key.
    long = cfgcheck.check(
        conf, "train", ["training.max_len=4096"], schema="team_pkg.conf:TeamRun", settings=NONE
    )
    [invalid] = long.by_rule("invalid-value")
    assert invalid.paths == ("training.max_len",)
    assert invalid.fixes and invalid.fixes[0].overrides == ("training.max_len=2048",)

    # The team's rule on its own section: located at the team's keys, fix verified.
    from team_pkg.conf import TeamRun  # type: ignore[import-not-found]

    bad = cfgcheck.check(conf, "train", ["evaluation.len=4000"], schema=TeamRun, settings=NONE)
    [finding] = bad.by_rule("eval-longer-than-train")
    assert finding.paths == ("evaluation.len", "training.max_len")
    where = finding.locations["evaluation.len"]
    assert where is not None and where.file == "<override evaluation.len=4000>"
    assert finding.fixes[0].overrides == ("evaluation.len=1024",)
    fixed = ["evaluation.len=4000", *finding.fixes[0].overrides]
    assert cfgcheck.check(conf, "train", fixed, schema=TeamRun, settings=NONE).ok
    # Set in the file: located at the team's line.
    train = conf / "train.yaml"
    train.write_text(train.read_text().replace("len: 512", "len: 4000"))
    [finding] = cfgcheck.check(conf, "train", schema=TeamRun, settings=NONE).by_rule(
        "eval-longer-than-train"
    )
    where = finding.locations["evaluation.len"]
    assert where is not None and where.line == line_of(train, "len: 4000")
    assert Path(where.file).resolve() == train.resolve()


def test_team_schema_error_in_its_own_section(project: Path) -> None:
    result = cfgcheck.check(
        project / "conf",
        "train",
        ["+cfgcheck.eval.every_n_step=3"],
        schema="team_pkg.conf:TeamRun",
        settings=NONE,
    )
    [unknown] = result.by_rule("unknown-key")
    assert unknown.paths == ("cfgcheck.eval.every_n_step",)
    assert "did you mean eval.every_n_steps?" in unknown.hint


def test_team_schema_from_the_cli_settings_and_json_schema(project: Path) -> None:
    proc = run_in(project, "check", "--config-dir", "conf", "--config-name", "train",
                  "--schema", "team_pkg.conf:TeamRun", "evaluation.len=4000")  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "error[eval-longer-than-train] evaluation.len, training.max_len" in proc.stdout

    (project / "pyproject.toml").write_text(
        '[tool.cfgcheck]\nconfig-dir = "conf"\nconfig-name = "train"\n'
        'schema = "team_pkg.conf:TeamRun"\n'
    )
    proc = run_in(project / "conf", "check", "training.max_len=4096")
    assert proc.returncode == 1 and "invalid-value" in proc.stdout, proc.stdout

    proc = run_in(project, "schema", "--out", "schemas")
    assert proc.returncode == 0, proc.stderr
    run = json.loads((project / "schemas" / "run.schema.json").read_text())
    assert "eval" in run["properties"]
    data = json.loads((project / "schemas" / "data.schema.json").read_text())
    assert data["properties"]["max_seq_length"]["maximum"] == 2048
    assert (project / "schemas" / "eval.schema.json").is_file()


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ("team_pkg.conf", "package.module:ClassName"),
        ("team_pkg.nope:X", "cannot import team_pkg.nope"),
        ("team_pkg.conf:Nope", "has no Nope"),
        ("team_pkg.conf:EvalConfig", "not a subclass of cfgcheck.RunConfig"),
    ],
)
def test_bad_schema_is_one_line(project: Path, ref: str, needle: str) -> None:
    proc = run_in(project, "check", "--config-dir", "conf", "--config-name", "train",
                  "--schema", ref)  # fmt: skip
    assert_one_line_error(proc, needle)
    with pytest.raises(ConfigLoadError):
        cfgcheck.check(project / "conf", "train", schema=ref, settings=NONE)


def test_hydra_app_task_receives_the_team_schema(project: Path) -> None:
    (project / "app.py").write_text(
        "import cfgcheck\nfrom team_pkg.conf import TeamRun\n\n"
        '@cfgcheck.main(config_path="conf", config_name="train", version_base="1.3", '
        "schema=TeamRun)\n"
        "def task(run):\n"
        "    print('TASK', type(run).__name__, run.eval.max_seq_length)\n\n"
        "if __name__ == '__main__':\n    task()\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{project}", "NO_COLOR": "1"}
    out = f"hydra.run.dir={project / 'out'}"
    proc = subprocess.run([sys.executable, "app.py", out], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and "TASK TeamRun 512" in proc.stdout, proc.stderr
    proc = subprocess.run([sys.executable, "app.py", out, "evaluation.len=4000"], cwd=project,
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 1 and "TASK" not in proc.stdout
    assert "error[eval-longer-than-train]" in proc.stderr
    assert "<override evaluation.len=4000>: evaluation.len set here" in proc.stderr


# -- rules from an installed package (entry points) ------------------------------------------

PLUGIN = '''
import cfgcheck


@cfgcheck.rule("team-min-batch", requires=["trainer"])
def min_batch(run):
    """Micro batches of at least 2 on our cluster.

    Batch-norm layers of our adapters need two samples.
    """
    if run.trainer.micro_batch_size < 2:
        yield cfgcheck.Problem(
            "error",
            ("trainer.micro_batch_size",),
            f"trainer.micro_batch_size={run.trainer.micro_batch_size} is below 2",
            "use 2 or more",
            fixes=(cfgcheck.Fix(("trainer.micro_batch_size=2",), "two samples"),),
        )
'''


def install(site: Path, name: str, modules: dict[str, str], entry_points: dict[str, str]) -> None:
    """A real installed distribution (dist-info with entry_points.txt), as pip leaves one."""
    for module, text in modules.items():
        (site / f"{module}.py").write_text(text)
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = [f"{k} = {v}" for k, v in entry_points.items()]
    (info / "entry_points.txt").write_text("[cfgcheck.rules]\n" + "\n".join(lines) + "\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    team_tree(tmp_path / "project")
    (tmp_path / "site").mkdir()
    return tmp_path


def test_plugin_rule_runs_is_listed_explained_and_fixed_in_team_keys(site: Path) -> None:
    install(site / "site", "team-rules", {"team_rules": PLUGIN}, {"team": "team_rules"})
    args = ("--config-dir", "conf", "--config-name", "train")
    where = str(site / "site")
    proc = run_in(site / "project", "check", *args, "--format", "json", "training.batch=1",
                  extra_path=where)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    [finding] = json.loads(proc.stdout)["findings"]
    assert finding["rule"] == "team-min-batch" and finding["paths"] == ["training.batch"]
    assert finding["locations"][0]["file"] == "<override training.batch=1>"
    assert finding["fixes"][0]["overrides"] == ["training.batch=2"]
    assert run_in(site / "project", "check", *args, extra_path=where).returncode == 0

    proc = run_in(site, "rules", extra_path=where)
    assert "team-min-batch" in proc.stdout and "Micro batches of at least 2" in proc.stdout
    proc = run_in(site, "explain", "team-min-batch", extra_path=where)
    assert proc.returncode == 0 and "Batch-norm layers" in proc.stdout, proc.stderr


@pytest.mark.parametrize(
    ("modules", "points", "needles"),
    [
        (
            {"broken_rules": "raise RuntimeError('boom at import')"},
            {"broken": "broken_rules"},
            ["rule plugin 'broken' of broken-rules 1.0", "RuntimeError: boom at import"],
        ),
        (
            {"broken_rules": PLUGIN.replace("team-min-batch", "vocab-mismatch")},
            {"dup": "broken_rules"},
            ["rule plugin 'dup' of broken-rules 1.0", "'vocab-mismatch' registered twice"],
        ),
        (
            {"broken_rules": ""},
            {"missing": "broken_rules_typo"},
            ["broken-rules 1.0", "ModuleNotFoundError"],
        ),
    ],
    ids=["import-error", "duplicate-id", "missing-module"],
)
def test_broken_plugin_is_one_line_naming_the_package(
    site: Path, modules: dict[str, str], points: dict[str, str], needles: list[str]
) -> None:
    install(site / "site", "broken-rules", modules, points)
    where = str(site / "site")
    for args in (("check", "--config-dir", "conf", "--config-name", "train"), ("rules",)):
        proc = run_in(site / "project", *args, extra_path=where)
        assert_one_line_error(proc, *needles)


def test_service_started_with_a_team_schema(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from cfgcheck.service import ServiceSettings, create_app

    monkeypatch.chdir(project)
    train = project / "conf" / "train.yaml"  # the service refuses resolver calls in a tree
    train.write_text(train.read_text().replace("${oc.env:TEAM_OUT,/tmp/team-out}", "/tmp/o"))
    settings = ServiceSettings(
        config_dir=project / "conf", allowed_roots=(project,), schema="team_pkg.conf:TeamRun"
    )
    with TestClient(create_app(settings)) as client:
        assert "eval" in client.get("/v1/schema").json()["run"]["properties"]
        body = {"config_name": "train", "overrides": ["evaluation.len=4000"]}
        r = client.post("/v1/validate", json=body)
        assert r.status_code == 200, r.text
        [finding] = r.json()["findings"]
        assert finding["rule"] == "eval-longer-than-train"
        assert finding["paths"] == ["evaluation.len", "training.max_len"]
        assert finding["fixes"][0]["overrides"] == ["evaluation.len=1024"]
