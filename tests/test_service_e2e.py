"""End-to-end: the real ``cfgcheck serve`` process on a free loopback port, real HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tests.conftest import COMMAND, REPO  # noqa: E402

SECRET = "e2e-s3cr3t-4b7d-never-sent"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "CFGCHECK_E2E_SECRET": SECRET}
    proc = subprocess.Popen(
        [*COMMAND, "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # workers import torch: slow on a busy box
        while True:
            if proc.poll() is not None:
                pytest.fail(f"cfgcheck serve exited {proc.returncode}: {proc.stdout.read()}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("cfgcheck serve did not answer /healthz within 120 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        assert "Traceback" not in out, out


def cli_json(*overrides: str) -> str:
    proc = subprocess.run(
        [*COMMAND, "check", "--format", "json", *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.stdout


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["data.max_seq_length=3063"],
        ["trainer.micro_batch_size=4", "data.padding=longest", "data.collator=default"],
    ],
)
def test_verdict_is_byte_for_byte_the_cli_json(server: str, overrides: list[str]) -> None:
    r = httpx.post(f"{server}/v1/validate", json={"overrides": overrides}, timeout=30)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.text == cli_json(*overrides)


def test_yaml_body_over_http(server: str) -> None:
    import yaml

    from cfgcheck import compose
    from cfgcheck.validate import to_plain

    cfg = to_plain(compose(REPO / "conf", "config", ["data.max_seq_length=3063"]))
    r = httpx.post(
        f"{server}/v1/validate",
        content=yaml.safe_dump(cfg),
        headers={"content-type": "application/yaml"},
        timeout=30,
    )
    assert r.status_code == 200
    assert r.json()["ok"] is False
    assert "seq-len-over-block-size" in {f["rule"] for f in r.json()["findings"]}


def test_env_secret_of_the_server_process_never_leaks(server: str) -> None:
    for body in (
        {"overrides": ["name=${oc.env:CFGCHECK_E2E_SECRET}"]},
        {"overrides": ["trainer.precision='${oc.env:CFGCHECK_E2E_SECRET}'"]},
    ):
        r = httpx.post(f"{server}/v1/validate", json=body, timeout=30)
        assert r.status_code == 422
        assert SECRET not in r.text


def test_schema_health_and_openapi(server: str) -> None:
    assert httpx.get(f"{server}/healthz").json()["status"] == "ok"
    assert set(httpx.get(f"{server}/v1/schema").json()) >= {"run", "model", "data"}
    assert "/v1/validate" in httpx.get(f"{server}/openapi.json").json()["paths"]


def test_serve_with_a_missing_config_dir_exits_2() -> None:
    proc = subprocess.run(
        [*COMMAND, "serve", "--config-dir", "no-such-dir", "--port", str(free_port())],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "cfgcheck: error: config directory not found: no-such-dir"


def test_serve_help_lists_the_options() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cfgcheck", "serve", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0
    for option in ("--host", "--port", "--config-dir", "--allow-root", "--timeout"):
        assert option in proc.stdout


def test_the_cli_fast_path_does_not_import_the_web_stack() -> None:
    code = (
        "import sys, cfgcheck.cli as c; c.build_parser(); "
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette', 'httpx') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
