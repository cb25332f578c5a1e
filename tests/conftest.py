"""Shared fixtures: the repository root, the shipped conf/, and a composed default config."""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# Memory verdicts in the tests use the GPU the config declares, never a GPU that happens to be
# on the machine running them (subprocesses inherit this).
os.environ["CFGCHECK_NO_LIVE_GPU"] = "1"
# Compositions are cached in a directory of this test session, never in the user's ~/.cache.
os.environ["CFGCHECK_CACHE_DIR"] = tempfile.mkdtemp(prefix="cfgcheck-test-cache-")

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"
# conf/model/pretrained.yaml names a model folder or Hub id (model.pretrained) and spells no
# shape: the one model option that is not a preset of the registry.
MODEL_FOLDER_OPTION = "pretrained"

# The real installed command (the console script), or the module where it is not on PATH.
CFGCHECK = shutil.which("cfgcheck")
COMMAND = [CFGCHECK] if CFGCHECK else [sys.executable, "-m", "cfgcheck"]


def run_cfgcheck(
    *args: str, cwd: Path = REPO, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the real ``cfgcheck`` command in a fresh process; never raises on its exit code."""
    return subprocess.run(
        [*COMMAND, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def requires(*modules: str) -> pytest.MarkDecorator:
    """Skip a test whose optional dependency is not installed, naming the extra to install."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    how = sorted({_INSTALL.get(m, f"pip install {m}") for m in missing})
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}: {'; '.join(how)}")


# the extra (pyproject.toml) that installs each optional module the tests need
_INSTALL = {
    "torch": "pip install torch==2.13.0",
    "transformers": "pip install 'cfgcheck[transformers]'",
    "tokenizers": "pip install 'cfgcheck[transformers]'",
    "peft": "pip install 'cfgcheck[peft]'",
    "trl": "pip install 'cfgcheck[frameworks]'",
    "torchtune": "pip install 'cfgcheck[frameworks]'",
    "datasets": "pip install 'cfgcheck[python]'",
    "lightning": "pip install 'cfgcheck[python]'",
    "fastapi": "pip install 'cfgcheck[service]'",
    "pyarrow": "pip install 'cfgcheck[data]'",
    "ray": "pip install 'cfgcheck[ray]'",
    "selenium": "pip install 'cfgcheck[browser]'",
    "litgpt": "pip install litgpt (not a cfgcheck extra)",
}


@pytest.fixture(scope="session")
def default_config() -> dict[str, Any]:
    """The shipped default run config, composed once with Hydra, as a plain dict."""
    from cfgcheck import compose
    from cfgcheck.validate import to_plain

    plain: dict[str, Any] = to_plain(compose(CONF, "config"))
    return plain


@pytest.fixture
def cfg(default_config: dict[str, Any]) -> dict[str, Any]:
    """A fresh deep copy of the default config that a test may edit."""
    return copy.deepcopy(default_config)


@dataclass(frozen=True)
class HookRepo:
    """A git repository of this working tree's package at a commit, and the PRE_COMMIT_HOME
    the session's pre-commit runs share (tests/test_precommit.py ``pre_commit_run``)."""

    path: Path
    ref: str
    home: Path


@pytest.fixture(scope="session")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> HookRepo:
    """This working tree's package committed into a fresh git repository, once a session: every
    pre-commit run of the session installs the hook from it into one PRE_COMMIT_HOME, so the
    hook's environment (a virtualenv and ``pip install`` of the package) is built once."""
    from tests.test_precommit import snapshot_hook_repo

    root = tmp_path_factory.mktemp("pre-commit")
    (root / "hook-repo").mkdir()
    ref = snapshot_hook_repo(root / "hook-repo")
    return HookRepo(root / "hook-repo", ref, root / "pre-commit-home")
