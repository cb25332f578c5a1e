"""``cfgcheck check`` run as the program ends without the interpreter's teardown
(cfgcheck.cli.exit_now): its output still arrives whole, atexit handlers still run, the exit
code is the check's; called with argv (tests, other programs) main returns as before."""

from __future__ import annotations

import json
import subprocess
import sys

from cfgcheck.cli import main
from tests.conftest import REPO

PROGRAM = """
import atexit, sys
atexit.register(lambda: print("atexit ran", file=sys.stderr))
sys.argv = ["cfgcheck", *sys.argv[1:]]
from cfgcheck.cli import main
main()
print("not reached", file=sys.stderr)
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_output_whole_atexit_run_and_the_checks_exit_code() -> None:
    failing = run("check", "--format", "json", "data.max_seq_length=3063")
    assert failing.returncode == 1
    assert json.loads(failing.stdout)["ok"] is False
    assert "atexit ran" in failing.stderr and "not reached" not in failing.stderr
    clean = run("check")
    assert clean.returncode == 0 and "config OK" in clean.stdout
    assert "atexit ran" in clean.stderr


def test_python_dash_m_exits_the_same_way() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cfgcheck", "check", "--format", "json", "data.max_seq_length=3063"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1 and json.loads(proc.stdout)["ok"] is False


def test_other_commands_and_argv_callers_return() -> None:
    rules = run("rules")  # not a check: the normal exit (main returns, the script goes on)
    assert "not reached" in rules.stderr
    assert main(["rules"]) == 0  # with argv: returns, never exits the caller
