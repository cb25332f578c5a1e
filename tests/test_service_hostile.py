"""The validator service on the second round of hostile requests (issue 25): text that is
not Unicode, thousands of unknown keys, concurrent first requests, and native requests whose
model is resolved before the path check. Each attack is reproduced first; anything that
could hang runs in a subprocess with a timeout, so a regression fails instead of hanging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from cfgcheck.service import ServiceSettings, create_app
from tests.conftest import CONF, REPO

JSON = {"content-type": "application/json"}


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.chdir(REPO)
    app = create_app(ServiceSettings(config_dir=CONF, allowed_roots=(REPO,)))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def run_bounded(code: str, timeout: float = 120) -> str:
    """Run ``code`` in a fresh interpreter (this checkout first on the path); its stdout.
    A hang is a failed test, not a stuck suite."""
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


# --- 1. lone surrogates ------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        '{"tokenizer": {"path": "\\ud800"}}',
        '{"model": {"pretrained": "\\ud800"}}',
        '{"model": {"pretrained": "x\\udfffy"}}',
        '{"model": {"\\ud83d": 1}}',
        '{"config_name": "config", "overrides": ["model.name=\\udc80"]}',
        '{"format": "trl", "config": "model_name_or_path: \\ud800"}',
    ],
)
def test_lone_surrogate_is_a_4xx_of_one_line(client: TestClient, body: str) -> None:
    response = client.post("/v1/validate", content=body.encode(), headers=JSON)
    assert 400 <= response.status_code < 500, response.text
    detail = response.json()["detail"]
    assert "lone surrogate" in detail
    assert "\n" not in detail
    detail.encode("utf-8")  # the reply itself is valid UTF-8 text


def test_lone_surrogate_in_a_yaml_body(client: TestClient) -> None:
    response = client.post(
        "/v1/validate",
        content=b'tokenizer:\n  path: "\\ud800"\n',
        headers={"content-type": "application/yaml"},
    )
    assert 400 <= response.status_code < 500, response.text  # PyYAML refuses the escape
    assert "\n" not in response.json()["detail"]


# --- 2. thousands of unknown keys -----------------------------------------------------------


def test_19000_unknown_keys_are_validated_in_linear_time() -> None:
    """Each unknown key cost a did-you-mean search and a fix checked by validating the whole
    config again: quadratic, hours for 19,000 keys (1,000 keys took 3 minutes). Now the first
    ``MAX_UNKNOWN_KEYS`` are reported one by one and the rest as one finding."""
    out = run_bounded(
        """
        import json
        from fastapi.testclient import TestClient
        from cfgcheck.compose import compose
        from cfgcheck.service import ServiceSettings, create_app
        from cfgcheck.validate import to_plain
        from tests.conftest import CONF, REPO

        cfg = to_plain(compose(CONF, "config", []))
        cfg["model"].update({f"unknown_{i}": i for i in range(19_000)})
        app = create_app(ServiceSettings(config_dir=CONF, allowed_roots=(REPO,)))
        with TestClient(app) as client:
            response = client.post("/v1/validate", json=cfg)
        print(json.dumps({"status": response.status_code, "body": response.json()}))
        """,
        timeout=120,
    )
    answer = json.loads(out)
    assert answer["status"] == 200
    from cfgcheck.validate import MAX_UNKNOWN_KEYS

    unknown = [f for f in answer["body"]["findings"] if f["rule"] == "unknown-key"]
    assert len(unknown) == MAX_UNKNOWN_KEYS + 1
    summary = [f for f in unknown if f["paths"] == ["model"]]
    assert len(summary) == 1
    assert f"{19_000 - MAX_UNKNOWN_KEYS} more unknown keys under model" in summary[0]["message"]


def test_a_few_unknown_keys_keep_their_fixes(cfg: dict[str, Any]) -> None:
    from cfgcheck import validate

    cfg["model"]["n_layr"] = 2
    result = validate(cfg)
    [finding] = [f for f in result.findings if f.rule == "unknown-key"]
    assert "did you mean model.n_layer" in finding.hint
    assert any("model.n_layer=2" in fix.overrides for fix in finding.fixes)
