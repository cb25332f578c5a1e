"""Symlinks in a config tree: followed as Hydra follows them while they stay inside the tree;
a file or folder linked from outside is refused before anything reads it (no content from
outside is echoed), and an edit behind an inside link is a new composition, never a cached
verdict (cfgcheck.safeio.config_files, cfgcheck.compose_cache)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import CONF, run_cfgcheck

SECRET = "TOPSECRET-7f3a9c"


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    tree = tmp_path / "conf"
    shutil.copytree(CONF, tree)
    return tree


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "private"
    folder.mkdir()
    (folder / "k.yaml").write_text(f"secret_key: {SECRET}\n", "utf-8")
    return folder


def assert_refused(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert needle in out and SECRET not in out and "Traceback" not in out


@pytest.mark.parametrize("command", ["check", "memory"])
def test_a_file_linked_from_outside_is_refused_unread(
    conf: Path, outside: Path, command: str
) -> None:
    (conf / "model" / "k.yaml").symlink_to(outside / "k.yaml")
    proc = run_cfgcheck(command, "--config-dir", str(conf), "model=k")
    assert_refused(proc, "is a link to a file outside the config directory")
    # unselected, it is refused all the same: Hydra may read any file of the tree
    assert_refused(run_cfgcheck(command, "--config-dir", str(conf)), "outside the config")


def test_the_hook_refuses_a_linked_secret_a_pull_request_adds(conf: Path, outside: Path) -> None:
    link = conf / "model" / "k.yaml"
    link.symlink_to(outside / "k.yaml")
    proc = run_cfgcheck("hook", "--config-dir", str(conf), str(link))
    assert_refused(proc, "outside the config directory")


def test_a_group_folder_linked_from_outside_is_refused(conf: Path, outside: Path) -> None:
    (conf / "private").symlink_to(outside, target_is_directory=True)
    proc = run_cfgcheck("check", "--config-dir", str(conf), "+private=k")
    assert_refused(proc, "is a link to a folder outside the config directory")


def test_links_inside_the_tree_are_followed_and_edits_behind_them_are_seen(conf: Path) -> None:
    shared = conf / "_shared"
    shared.mkdir()
    (conf / "data").rename(shared / "data")
    (conf / "data").symlink_to(shared / "data", target_is_directory=True)
    first = run_cfgcheck("check", "--config-dir", str(conf))
    assert first.returncode == 0, first.stdout + first.stderr
    # an edit behind the link: the cached composition must not answer
    target = shared / "data" / "alpaca-tiny.yaml"
    text = target.read_text("utf-8")
    assert "max_seq_length:" in text
    lines = [
        "max_seq_length: 3063" if line.startswith("max_seq_length:") else line
        for line in text.splitlines()
    ]
    target.write_text("\n".join(lines) + "\n", "utf-8")
    second = run_cfgcheck("check", "--config-dir", str(conf))
    assert second.returncode == 1, second.stdout + second.stderr
    assert "seq-len-over-block-size" in second.stdout


def test_a_link_cycle_inside_the_tree_is_walked_once(conf: Path) -> None:
    (conf / "model" / "again").symlink_to(conf, target_is_directory=True)
    proc = run_cfgcheck("check", "--config-dir", str(conf), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
