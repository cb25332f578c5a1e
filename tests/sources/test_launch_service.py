"""The service's native endpoint takes a launch script (``"format": "launch"``): the folder it
runs from and every file it makes cfgcheck read lie inside the service's roots."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cfgcheck.findings import Location
from cfgcheck.service.errors import RequestError
from cfgcheck.service.native import check_native_request
from cfgcheck.sources.launcher.commands import ScriptResult

SEED = Path(__file__).resolve().parent / "native" / "launch" / "seed"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    for name in ("train.py", "train.sh", "two_stages.sh"):
        shutil.copy(SEED / name, root / name)
    shutil.copytree(SEED / "tiny-llama", root / "tiny-llama")
    (tmp_path / "secret.json").write_text('{"zero_optimization": {"stage": 3}}')
    (tmp_path / "outside.py").write_text("import os\nos.system('touch executed')\n")
    return root


def _ask(root: Path, script: str, **extra: object) -> object:
    body = {"format": "launch", "config": script, "filename": "train.sh", "cwd": str(root)}
    return check_native_request({**body, **extra}, [root])


def test_the_seed_is_found_in_the_entry_point_inside_the_roots(project: Path) -> None:
    answer = _ask(project, (project / "train.sh").read_text())
    (finding,) = answer.by_rule("ragged-batch")  # type: ignore[attr-defined]
    where = finding.locations["data.padding"]
    assert where is not None and where.file == "train.py"
    assert finding.locations["trainer.micro_batch_size"] == Location("train.sh", 11)


def test_several_commands_get_their_verdicts(project: Path) -> None:
    answer = _ask(project, (project / "two_stages.sh").read_text())
    assert isinstance(answer, ScriptResult)
    assert [c.line for c in answer.commands] == [4, 7]
    assert "commands" in answer.to_dict()


@pytest.mark.parametrize(
    ("script", "extra", "phrase"),
    [
        ("python train.py --model_name_or_path tiny-llama\n", {"cwd": "/"}, "paths refused: cwd"),
        (
            "python train.py --model_name_or_path tiny-llama --output_dir o\n",
            {"overrides": ["deepspeed=../secret.json"]},
            "paths refused: --deepspeed '../secret.json'",
        ),
        ("python ../outside.py --x 1\n", {}, "lies outside the project"),
        ("echo nothing to train\n", {}, "no training command found"),
        ('torchrun train.py --x "open\n', {}, "never closed"),
    ],
)
def test_what_lies_outside_the_roots_is_refused(
    project: Path, script: str, extra: dict[str, object], phrase: str
) -> None:
    with pytest.raises(RequestError) as refused:
        _ask(project, script, **extra)
    assert refused.value.status == 422
    assert phrase in refused.value.detail
    assert not (project / "executed").exists() and not (project.parent / "executed").exists()


def test_the_http_endpoint_accepts_a_launch_script(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cfgcheck.service.app import create_app
    from cfgcheck.service.settings import ServiceSettings
    from tests.conftest import CONF

    monkeypatch.chdir(project)
    settings = ServiceSettings(config_dir=CONF, allowed_roots=(project,))
    body = {"format": "launch", "config": (project / "train.sh").read_text(), "filename": "t.sh"}
    with TestClient(create_app(settings)) as client:
        response = client.post("/v1/validate", json=body)
    assert response.status_code == 200, response.text
    assert any(f["rule"] == "ragged-batch" for f in response.json()["findings"])
