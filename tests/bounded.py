"""Run one hostile case in a fresh process, bounded in time and memory, and judge its end.

Every case of the hostile suites ends the same way or fails: exit 2 (or a verdict, exit 0/1,
where the input is legal) within ``timeout`` seconds, under ``RLIMIT_AS`` (a process that
tries to allocate past it gets MemoryError or dies, and the case fails), with one line and no
traceback, and never any byte of the planted secret (:data:`SECRET`, written into every
outside file a case links to).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO

SECRET = "SECRET-4c1d-outside-content"  # planted in every file outside the project
MEMORY_LIMIT = 3 << 30  # address space of one case (cfgcheck check needs well under 1 GiB)
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Ended:
    returncode: int
    out: str  # stdout + stderr


def _limit(memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def run_bounded(
    *args: str,
    cwd: Path = REPO,
    timeout: float = TIMEOUT_S,
    memory: int = MEMORY_LIMIT,
    env: dict[str, str] | None = None,
) -> Ended:
    """``python -m cfgcheck ARGS`` in ``cwd`` under the limits; a timeout fails the caller's
    test through :class:`subprocess.TimeoutExpired` (the process is killed)."""
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "CFGCHECK_CACHE_DIR": os.path.join(tempfile.gettempdir(), "cfgcheck-bounded-cache"),
        **(env or {}),
    }
    environ.pop("CFGCHECK_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-m", "cfgcheck", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=timeout,
        check=False,
        preexec_fn=lambda: _limit(memory),
    )
    return Ended(done.returncode, done.stdout + done.stderr)


def assert_refused(ended: Ended, *expected: str) -> str:
    """Exit 2, one ``cfgcheck: error:`` line, no traceback, no secret; each ``expected``
    text in it. The line, for further checks."""
    out = ended.out.strip()
    assert ended.returncode == 2, out[-2000:]
    assert "Traceback" not in out, out[-2000:]
    assert SECRET not in out
    errors = [line for line in out.splitlines() if line.startswith("cfgcheck: error:")]
    assert len(errors) == 1, out[-2000:]
    for text in expected:
        assert text in errors[0], errors[0]
    return errors[0]


def assert_ended(ended: Ended) -> None:
    """A bounded end: a verdict (0, 1) or one-line refusal (2); no traceback, no secret."""
    out = ended.out
    assert ended.returncode in (0, 1, 2), out[-2000:]
    assert "Traceback" not in out, out[-2000:]
    assert SECRET not in out
    if ended.returncode == 2:
        assert "cfgcheck: error:" in out or "error" in out.lower(), out[-2000:]


def sparse(path: Path, size: int) -> Path:
    """A sparse file of ``size`` bytes (no disk used) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)
    return path


def plant(outside: Path, name: str = "secret.txt") -> Path:
    """A file outside the project holding :data:`SECRET` (in YAML, JSON and plain forms)."""
    outside.mkdir(parents=True, exist_ok=True)
    path = outside / name
    path.write_text(f'{{"name": "{SECRET}", "n_layer": 2, "text": "{SECRET}"}}\n')
    return path
