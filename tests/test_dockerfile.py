"""The service's container recipe (``Dockerfile``). Docker is not run here: the file is parsed
and checked against the README's set-up and pyproject.toml, its start command is parsed by
cfgcheck's own parser, and (slow) its install steps are replayed without docker: a
non-editable wheel of the checkout, installed alone, checks the copied conf/ from a folder
holding only what the image copies. The HEALTHCHECK command is run against a real server in
tests/test_service_workers.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cfgcheck.cli import build_parser
from tests.conftest import REPO

DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    assert not pending, "a continuation line ends the Dockerfile"
    return [(word.upper(), rest.strip()) for word, _, rest in (x.partition(" ") for x in lines)]


def args_of(name: str) -> list[str]:
    return [rest for word, rest in instructions() if word == name]


def runs() -> list[str]:
    return args_of("RUN")


def healthcheck_command() -> list[str]:
    """The HEALTHCHECK's exec-form command."""
    (spec,) = args_of("HEALTHCHECK")
    command = spec.split(" CMD ", 1)[1]
    argv: list[str] = json.loads(command)
    return argv


def test_base_image_is_python_311_slim_and_matches_requires_python() -> None:
    assert args_of("FROM") == ["python:3.11-slim"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"


def test_torch_is_pinned_first_as_in_the_readme() -> None:
    readme_pins = re.findall(r"pip install torch==([\w.]+)", (REPO / "README.md").read_text())
    assert readme_pins, "the README's set-up no longer pins torch"
    torch = [i for i, r in enumerate(runs()) if "torch==" in r]
    extras = [i for i, r in enumerate(runs()) if re.search(r"pip install \"\.\[", r)]
    assert len(torch) == 1 and len(extras) == 1
    assert torch[0] < extras[0], "torch must be installed before the extras"
    (pin,) = re.findall(r"torch==([\w.]+)", runs()[torch[0]])
    assert {pin} == set(readme_pins)
    assert "download.pytorch.org/whl/cpu" in " ".join(args_of("ARG"))


def test_installed_extras_exist_and_carry_the_service() -> None:
    extras_line = next(r for r in runs() if re.search(r"pip install \"\.\[", r))
    (names,) = re.findall(r"\.\[([\w,]+)\]", extras_line)
    optional = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(names.split(",")) <= set(optional)
    service = " ".join(optional["service"])
    assert "fastapi" in service and "uvicorn" in service
    assert "service" in names.split(",")


def test_runs_as_a_non_root_user() -> None:
    (user,) = args_of("USER")
    assert user not in {"root", "0"} and not user.startswith("0:")
    assert any("useradd" in r and user in r for r in runs())


def test_start_command_parses_and_listens_on_the_exposed_port() -> None:
    (entry,) = args_of("ENTRYPOINT")
    (cmd,) = args_of("CMD")
    argv = [*json.loads(entry), *json.loads(cmd)]
    assert argv[0] == "cfgcheck"
    args = build_parser("serve").parse_args(argv[1:])
    assert args.command == "serve" and args.host == "0.0.0.0"
    assert args_of("EXPOSE") == [str(args.port)]
    assert args.workers is None  # one worker per core the container may use
    assert (REPO / args.config_dir).is_dir()
    assert f":{args.port}/healthz" in " ".join(healthcheck_command())


def test_copied_paths_exist_and_are_not_docker_ignored() -> None:
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for spec in args_of("COPY"):
        *sources, _ = spec.split()
        for source in sources:
            assert (REPO / source).exists(), source
            assert source.rstrip("/") in kept, f"{source} is excluded by .dockerignore"


@pytest.mark.slow
def test_install_steps_replayed_without_docker(tmp_path: Path) -> None:
    """`pip install .` (non-editable: the image has no checkout) gives a package that checks
    the copied conf/ from a folder holding only what the image copies."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(REPO),
        ],
        check=True,
        timeout=300,
    )
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            *map(str, wheels.glob("*.whl")),
        ],
        check=True,
        timeout=300,
    )
    app = tmp_path / "app"
    for spec in args_of("COPY"):
        *sources, _ = spec.split()
        for source in sources:
            if (REPO / source).is_dir() and source.rstrip("/") in {"conf", "datasets"}:
                shutil.copytree(REPO / source, app / source)
    code = (
        "import sys, cfgcheck, cfgcheck.cli; print(cfgcheck.__file__); "
        "sys.exit(cfgcheck.cli.main(['check']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=app,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith(str(site))
    assert "config OK" in proc.stdout
