"""Project settings (``[tool.cfgcheck]`` / ``.cfgcheck.toml``) and inline suppressions
(``# cfgcheck: ignore[rule-id]``), on real Hydra compositions of a team's tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cfgcheck
from cfgcheck.errors import ConfigLoadError
from cfgcheck.project.settings import NONE, find_settings
from tests.adoption import assert_one_line_error, line_of, run_in, team_tree
from tests.conftest import CONF, REPO


@pytest.fixture
def project(tmp_path: Path) -> Path:
    team_tree(tmp_path)
    return tmp_path


def write_settings(root: Path, body: str, *, dotfile: bool = False) -> Path:
    if dotfile:
        path = root / ".cfgcheck.toml"
        path.write_text(body)
    else:
        path = root / "pyproject.toml"
        path.write_text('[project]\nname = "team"\n\n[tool.cfgcheck]\n' + body)
    return path


BASIC = 'config-dir = "conf"\nconfig-name = "train"\n'


def rules_of(proc_stdout: str) -> list[tuple[str, str]]:
    return [(f["rule"], f["severity"]) for f in json.loads(proc_stdout)["findings"]]


# -- settings --------------------------------------------------------------------------------


def test_config_dir_and_name_come_from_the_settings(project: Path) -> None:
    write_settings(project, BASIC)
    proc = run_in(project, "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_in(project / "conf" / "training", "check", "training.max_len=3063")
    assert proc.returncode == 1  # found from a subdirectory, paths relative to the file
    assert "training.max_len" in proc.stdout


def test_severity_ignore_select_and_cli_winning(project: Path) -> None:
    write_settings(
        project,
        BASIC + 'ignore = ["seq-len-over-block-size"]\n'
        '[tool.cfgcheck.severity]\nvocab-mismatch = "warning"\n',
    )
    bad = ["training.max_len=3063", "tok.size=32001"]
    proc = run_in(project, "check", "--format", "json", *bad)
    assert proc.returncode == 0, proc.stdout  # ignored, and demoted to a warning
    assert rules_of(proc.stdout) == [("vocab-mismatch", "warning")]
    # --select wins over the file's ignore; --ignore replaces the file's list.
    proc = run_in(project, "check", "--format", "json", "--select", "seq-len-over-block-size", *bad)
    assert proc.returncode == 1 and rules_of(proc.stdout) == [("seq-len-over-block-size", "error")]
    proc = run_in(project, "check", "--format", "json", "--ignore", "vocab-mismatch", *bad)
    assert proc.returncode == 1 and rules_of(proc.stdout) == [("seq-len-over-block-size", "error")]


def test_per_file_ignores_and_default_gpu_in_the_library(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_settings(
        project,
        BASIC + 'gpu = "T4"\n[tool.cfgcheck.per-file-ignores]\n'
        '"conf/training/long.yaml" = ["seq-len-over-block-size"]\n',
    )
    train = project / "conf" / "train.yaml"
    train.write_text(train.read_text().replace("    gpu: {name: A100-80GB}\n", ""))
    monkeypatch.chdir(project)
    base = cfgcheck.check(project / "conf")
    long = cfgcheck.check(project / "conf", overrides=["training=long"])
    override = cfgcheck.check(project / "conf", overrides=["training.max_len=3063"])
    # The settings' GPU (a T4: no bf16) stands in for the one the config does not name, and
    # is located at the settings.
    precision = base.findings[0]
    assert precision.severity == "error" and "T4" in precision.message, precision
    gpu_where = [str(loc) for loc in precision.locations.values() if loc is not None]
    assert any("pyproject.toml [tool.cfgcheck] gpu" in w for w in gpu_where), gpu_where
    # A finding located in long.yaml is ignored there, not when an override sets the value.
    assert not long.by_rule("seq-len-over-block-size")
    assert override.by_rule("seq-len-over-block-size")


def test_dotfile_wins_and_pyproject_without_the_table_is_passed_over(project: Path) -> None:
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert find_settings(project) == NONE
    write_settings(project, 'config-name = "train"\n', dotfile=True)
    write_settings(project, 'config-name = "nope"\n')
    settings = find_settings(project / "conf")
    assert settings.file == project / ".cfgcheck.toml" and settings.config_name == "train"


@pytest.mark.parametrize(
    ("body", "needles"),
    [
        ('confg-dir = "conf"\n', ["unknown setting 'confg-dir'", "did you mean 'config-dir'?"]),
        ('ignore = ["seq-len-over-blocksize"]\n', ["did you mean 'seq-len-over-block-size'?"]),
        ('[tool.cfgcheck.severity]\ngpu-memory = "fatal"\n', ["gpu-memory", "error, warning"]),
        ("select = 3\n", ["select must be a list"]),
        ("this is = not toml\n", ["not valid TOML"]),
    ],
    ids=["setting", "rule-id", "severity", "type", "toml"],
)
def test_bad_settings_are_one_line_exit_2(project: Path, body: str, needles: list[str]) -> None:
    write_settings(project, BASIC + body)
    assert_one_line_error(run_in(project, "check"), "pyproject.toml", *needles)
    with pytest.raises(ConfigLoadError):
        find_settings(project)


def test_bad_cli_rule_id_is_one_line(project: Path) -> None:
    write_settings(project, BASIC)
    proc = run_in(project, "check", "--select", "vocab-mismatc")
    assert_one_line_error(proc, "--select", "did you mean 'vocab-mismatch'?")


def test_shipped_tree_without_settings_is_unchanged() -> None:
    assert find_settings(CONF) == NONE  # this repository's pyproject.toml has no table
    assert cfgcheck.check(CONF, "config").ok


# -- inline suppressions ---------------------------------------------------------------------


def suppress(project: Path, file: str, key: str, comment: str) -> int:
    path = project / "conf" / file
    lines = path.read_text().splitlines()
    number = line_of(path, key)
    lines[number - 1] += f"  # {comment}"
    path.write_text("\n".join(lines) + "\n")
    return number


def test_suppression_silences_the_finding_on_its_line(project: Path) -> None:
    suppress(project, "training/long.yaml", "max_len:", "cfgcheck: ignore[seq-len-over-block-size]")
    result = cfgcheck.check(project / "conf", "train", ["training=long"], settings=NONE)
    assert result.ok and not result.findings
    # The same value set elsewhere (an override) is not on that line: reported.
    result = cfgcheck.check(project / "conf", "train", ["training.max_len=3063"], settings=NONE)
    assert result.by_rule("seq-len-over-block-size")


def test_unused_and_misspelled_suppressions_are_warnings(project: Path) -> None:
    line = suppress(
        project, "training/base.yaml", "max_len:", "cfgcheck: ignore[vocab-mismatch, ragged-bach]"
    )
    batch = suppress(project, "training/base.yaml", "batch:", "cfgcheck: ignroe[ragged-batch]")
    result = cfgcheck.check(project / "conf", "train", settings=NONE)
    assert result.ok  # warnings only
    warnings = result.by_rule("unused-suppression")
    assert {f.severity for f in warnings} == {"warning"}
    messages = " | ".join(f.message + " " + f.hint for f in warnings)
    assert "unused suppression ignore[vocab-mismatch]" in messages
    assert "did you mean ignore[ragged-batch]?" in messages
    assert "is not a suppression cfgcheck reads" in messages
    lines = sorted(loc.line for f in warnings for loc in f.locations.values() if loc)
    assert lines == [line, line, batch]
    assert {f.paths[0] for f in warnings} == {"training.max_len", "training.batch"}


def test_suppressions_through_the_cli_hook_and_a_file_outside_the_composition(
    project: Path,
) -> None:
    write_settings(project, BASIC)
    suppress(project, "training/long.yaml", "max_len:", "cfgcheck: ignore[seq-len-over-block-size]")
    proc = run_in(project, "check", "training=long")
    assert proc.returncode == 0 and "unused" not in proc.stdout, proc.stdout
    # long.yaml is not part of the default composition: its suppression is not "unused" there.
    proc = run_in(project, "check")
    assert proc.returncode == 0 and "unused-suppression" not in proc.stdout, proc.stdout
    proc = run_in(project, "hook", "conf/training/long.yaml")
    assert proc.returncode == 0, proc.stdout
    proc = run_in(project, "check", "--sweep", "training.max_len=1024,3063", "training=long")
    assert proc.returncode == 1  # the 3063 override is not on the suppressed line


def test_settings_and_suppressions_in_a_hydra_app(project: Path) -> None:
    write_settings(project, BASIC + '[tool.cfgcheck.severity]\nseq-len-over-block-size = "info"\n')
    (project / "app.py").write_text(
        "import cfgcheck\n\n"
        '@cfgcheck.main(config_path="conf", config_name="train", version_base="1.3")\n'
        "def task(run):\n"
        "    print('TASK', run.data.max_seq_length)\n\n"
        "if __name__ == '__main__':\n    task()\n"
    )
    shutil.rmtree(project / "outputs", ignore_errors=True)
    proc = _run_app(project, "training.max_len=3063")
    assert proc.returncode == 0 and "TASK 3063" in proc.stdout, proc.stderr
    proc = _run_app(project, "tok.size=32001")
    assert proc.returncode == 1 and "TASK" not in proc.stdout
    assert "<override tok.size=32001>: tok.size set here" in proc.stderr


def _run_app(project: Path, *overrides: str) -> subprocess.CompletedProcess[str]:

    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "app.py", f"hydra.run.dir={project / 'out'}", *overrides],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_settings_apply_to_a_native_file(tmp_path: Path) -> None:
    native = REPO / "tests" / "sources" / "native" / "litgpt" / "tiny-llama-lora.yaml"
    args = ("check", "--format", "json", "--from", "litgpt", str(native))
    before = rules_of(run_in(tmp_path, *args, "train.max_seq_length=8000").stdout)
    assert ("seq-len-over-block-size", "warning") in before and ("gpu-memory", "info") in before
    write_settings(
        tmp_path,
        'ignore = ["seq-len-over-block-size"]\n[tool.cfgcheck.severity]\ngpu-memory = "warning"\n',
    )
    after = rules_of(run_in(tmp_path, *args, "train.max_seq_length=8000").stdout)
    assert after == [("gpu-memory", "warning")]
