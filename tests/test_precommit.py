"""The pre-commit hook, run by the real ``pre-commit`` tool, and ``cfgcheck hook`` itself."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cfgcheck.cli.hook import Target, package_header, targets
from tests.conftest import COMMAND, CONF, REPO, HookRepo

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}
# What `pip install .` of the hook repository needs.
HOOK_REPO_PATHS = ["cfgcheck", "pyproject.toml", "README.md", ".pre-commit-hooks.yaml"]


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return proc.stdout.strip()


def snapshot_hook_repo(dest: Path) -> str:
    """This working tree's package, committed into a fresh git repo; returns the commit."""
    listed = git(REPO, "ls-files", "-co", "--exclude-standard", "--", *HOOK_REPO_PATHS)
    for name in listed.splitlines():
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    git(dest, "init", "-q")
    git(dest, "add", ".")
    git(dest, "commit", "-q", "-m", "snapshot")
    return git(dest, "rev-parse", "HEAD")


def pre_commit_run(hook: HookRepo, hook_id: str, project: Path) -> subprocess.CompletedProcess[str]:
    """``pre-commit run HOOK_ID`` on the files staged in ``project``, its config naming the hook
    repository at its commit as a user's ``.pre-commit-config.yaml`` does (kept outside the
    project: ``--config``). pre-commit installs the hook's environment (a virtualenv, ``pip
    install`` of the repository) into ``PRE_COMMIT_HOME`` on the first run and reuses it, as on
    a user's later commits (``pre-commit try-repo`` builds it anew in a temporary store on
    every call)."""
    config = hook.home.parent / f"{hook_id}.pre-commit-config.yaml"
    repo = {"repo": str(hook.path), "rev": hook.ref, "hooks": [{"id": hook_id}]}
    config.write_text(yaml.safe_dump({"repos": [repo]}))
    env = {**os.environ, **GIT_ENV, "PRE_COMMIT_HOME": str(hook.home)}
    env.pop("VIRTUAL_ENV", None)
    command = [sys.executable, "-m", "pre_commit", "run", hook_id, "--config", str(config)]
    return subprocess.run(
        [*command, "--color", "never"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_hook_definition() -> None:
    hook, *native = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert [h["id"] for h in native][:3] == ["cfgcheck-litgpt", "cfgcheck-axolotl", "cfgcheck-trl"]
    assert "cfgcheck-llamafactory" in [h["id"] for h in native]
    assert "cfgcheck-python" in [h["id"] for h in native]
    python = next(h for h in native if h["id"] == "cfgcheck-python")
    assert python["entry"] == "cfgcheck hook --from python"
    assert "cfgcheck-torchtune" in [h["id"] for h in native]
    launch = next(h for h in native if h["id"] == "cfgcheck-launch")
    assert launch["entry"] == "cfgcheck hook --from launch"
    assert re.search(launch["files"], "scripts/finetune.sh")
    assert not re.search(launch["files"], "conf/config.yaml")
    assert hook["id"] == "cfgcheck" and hook["language"] == "python"
    assert hook["entry"] == "cfgcheck hook"
    assert hook["files"] == r"^conf/.*\.yaml$"


@pytest.mark.slow
def test_pre_commit_fails_on_a_bad_config_and_passes_a_good_one(
    tmp_path: Path, hook_repo: HookRepo
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copytree(CONF, project / "conf")
    shutil.copytree(REPO / "datasets", project / "datasets")
    git(project, "init", "-q")
    git(project, "add", ".")
    git(project, "commit", "-q", "-m", "configs")

    def run_hook() -> subprocess.CompletedProcess[str]:
        return pre_commit_run(hook_repo, "cfgcheck", project)

    data = project / "conf" / "data" / "alpaca-tiny.yaml"
    text = data.read_text()
    data.write_text(text.replace("max_seq_length: 1024", "max_seq_length: 3063"))
    git(project, "add", "conf/data/alpaca-tiny.yaml")
    bad = run_hook()
    line = 1 + data.read_text().splitlines().index("max_seq_length: 3063")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "cfgcheck" in bad.stdout and "Failed" in bad.stdout
    assert "error[seq-len-over-block-size]" in bad.stdout
    assert f"conf/data/alpaca-tiny.yaml:{line}: data.max_seq_length set here" in bad.stdout

    data.write_text(text.replace("max_seq_length: 1024", "max_seq_length: 2048"))
    git(project, "add", "conf/data/alpaca-tiny.yaml")
    good = run_hook()
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Passed" in good.stdout


# --- cfgcheck hook, directly -------------------------------------------------------------


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(CONF, tmp_path / "conf")
    shutil.copytree(REPO / "datasets", tmp_path / "datasets")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "conf"


def hook(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, "hook", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_every_primary_is_checked_and_a_non_default_option_is_selected(conf: Path) -> None:
    (conf / "small.yaml").write_text((conf / "config.yaml").read_text())
    found = targets(conf, ["conf/model/phi-2.yaml", "README.md"])
    assert found == [
        Target("config"),
        Target("config", ("model=phi-2",), "model"),
        Target("small"),
        Target("small", ("model=phi-2",), "model"),
    ]
    # A file the primary selects by default adds nothing beyond the primary itself.
    assert targets(conf, ["conf/data/alpaca-tiny.yaml"]) == [Target("config"), Target("small")]


def test_a_non_default_option_reports_only_its_own_findings(conf: Path) -> None:
    # phi-2 with the default Llama-2 tokenizer is a vocab mismatch, not phi-2.yaml's fault.
    ok = hook("conf/model/phi-2.yaml", cwd=conf.parent)
    assert ok.returncode == 0, ok.stdout
    assert "2 composition(s) checked: OK" in ok.stdout

    phi = conf / "model" / "phi-2.yaml"
    phi.write_text(phi.read_text().replace("n_head: 32", "n_head: 33"))
    bad = hook("conf/model/phi-2.yaml", cwd=conf.parent)
    assert bad.returncode == 1
    assert "== conf/config.yaml model=phi-2" in bad.stdout
    assert "error[head-size-mismatch]" in bad.stdout
    assert "vocab-mismatch" not in bad.stdout
    line = 1 + phi.read_text().splitlines().index("n_head: 33")
    assert f"conf/model/phi-2.yaml:{line}: model.n_head set here" in bad.stdout


def test_a_changed_option_is_checked_as_check_selects_it(conf: Path) -> None:
    """issue 13: block_size 1000 in llama-2-7b.yaml fails `cfgcheck check model=llama-2-7b`
    (data.max_seq_length=1024 > 1000, and no data option clears it): the hook fails too."""
    from tests.conftest import run_cfgcheck

    llama = conf / "model" / "llama-2-7b.yaml"
    llama.write_text(llama.read_text().replace("block_size: 4096", "block_size: 1000"))
    direct = run_cfgcheck("check", "model=llama-2-7b", cwd=conf.parent)
    assert direct.returncode == 1 and "seq-len-over-block-size" in direct.stdout
    bad = hook("conf/model/llama-2-7b.yaml", cwd=conf.parent)
    assert bad.returncode == 1, bad.stdout
    assert "== conf/config.yaml model=llama-2-7b" in bad.stdout
    assert "error[seq-len-over-block-size]" in bad.stdout


EXPERIMENT = """\
# @package _global_
# yaml-language-server: $schema=../../schemas/config.schema.json
defaults:
  - override /model: llama-2-7b

data:
  max_seq_length: {length}

trainer:
  gradient_checkpointing: true  # llama-2-7b at 4096 tokens fits the default A100-80GB
"""


def test_experiments_that_include_a_changed_file_are_checked(conf: Path) -> None:
    (conf / "experiment").mkdir()
    exp = conf / "experiment" / "long.yaml"
    exp.write_text(EXPERIMENT.format(length=8192))
    assert package_header(exp) == "_global_"
    # The experiment selects llama-2-7b: a change there takes part in it.
    assert Target("config", ("+experiment=long",)) in targets(conf, ["conf/model/llama-2-7b.yaml"])
    assert Target("config", ("+experiment=long",)) not in targets(conf, ["conf/model/phi-2.yaml"])

    bad = hook("conf/experiment/long.yaml", cwd=conf.parent)
    assert bad.returncode == 1
    assert "== conf/config.yaml +experiment=long" in bad.stdout
    line = 1 + exp.read_text().splitlines().index("  max_seq_length: 8192")
    assert f"conf/experiment/long.yaml:{line}: data.max_seq_length set here" in bad.stdout

    exp.write_text(EXPERIMENT.format(length=4096))
    good = hook("conf/experiment/long.yaml", cwd=conf.parent)
    assert good.returncode == 0, good.stdout


def test_a_broken_file_exits_2_and_github_format(conf: Path) -> None:
    (conf / "data" / "alpaca-tiny.yaml").write_text("max_seq_length: [1024\n")
    broken = hook("conf/data/alpaca-tiny.yaml", cwd=conf.parent)
    assert broken.returncode == 2
    assert "conf/config.yaml: cannot compose:" in broken.stdout

    (conf / "data" / "alpaca-tiny.yaml").write_text(
        (CONF / "data" / "alpaca-tiny.yaml").read_text().replace("1024", "3063")
    )
    gh = hook("--format", "github", "conf/data/alpaca-tiny.yaml", cwd=conf.parent)
    assert gh.returncode == 1
    assert "::error file=conf/data/alpaca-tiny.yaml,line=" in gh.stdout
