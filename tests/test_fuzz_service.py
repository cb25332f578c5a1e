"""The hostile corpus of :mod:`tests.hostile` through the validator service (issue 11).

In-process (TestClient): every body and override is answered with a verdict or a documented
4xx with one line, never a 5xx. Then a crash canary: a real ``cfgcheck serve`` subprocess on
127.0.0.1 gets the bodies that once killed or starved it (the 60 KB block-nesting body that
crashed libyaml's composer with SIGSEGV among them) and must still answer ``/healthz`` after
each one.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from cfgcheck.service import ServiceSettings, create_app
from tests.conftest import CONF, REPO
from tests.hostile import BAD_VALUES, CONF_FILES, FUZZ_EXAMPLES, OVERRIDES

YAML = {"content-type": "application/yaml"}
ANSWERED = {200, 400, 408, 413, 415, 422}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = create_app(ServiceSettings(config_dir=CONF, allowed_roots=(REPO,), request_timeout_s=30))
    with TestClient(app) as c:
        yield c


def assert_answered(r: Any) -> None:
    assert r.status_code in ANSWERED, (r.status_code, r.text[:300])
    if r.status_code != 200:
        detail = r.json()["detail"]
        assert isinstance(detail, str) and "\n" not in detail and "Traceback" not in detail


@pytest.mark.parametrize("name", sorted(CONF_FILES))
def test_hostile_yaml_bodies(client: TestClient, name: str) -> None:
    assert_answered(client.post("/v1/validate", content=CONF_FILES[name], headers=YAML))


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a": ' * 10_000 + b"1" + b"}" * 10_000,
        b'{"model": {"block_size": ' + b"9" * 310 + b"}}",
        b'{"model": {"block_size": ' + b"9" * 5000 + b"}}",
        b'{"name": NaN}',
        b'{"name": Infinity}',
        json.dumps({"k" * 300: 1}).encode(),
        json.dumps({"name": "${" * 300 + "a" + "}" * 300}).encode(),
        json.dumps({"name": "${a}" * 200_000}).encode(),
        "\ufeff{}".encode(),
        '{"name": "caf\xe9"}'.encode("latin-1"),
        '{"name": "x"}'.encode("utf-16"),
    ],
    ids=lambda b: bytes(b[:20]).decode("latin-1"),
)
def test_hostile_json_bodies(client: TestClient, body: bytes) -> None:
    assert_answered(
        client.post("/v1/validate", content=body, headers={"content-type": "application/json"})
    )


@pytest.mark.parametrize("overrides", OVERRIDES, ids=lambda o: o[0][:30])
def test_hostile_overrides(client: TestClient, overrides: list[str]) -> None:
    body = json.dumps({"overrides": overrides})  # ASCII escapes: lone surrogates travel too
    r = client.post("/v1/validate", content=body, headers={"content-type": "application/json"})
    assert_answered(r)
    assert "root:" not in r.text  # no file outside the config dir is ever echoed


def test_group_choices_of_every_shape_stay_in_the_config_dir(client: TestClient) -> None:
    for override in (
        "model=[tinyllama-1.1b,../../../outside/evil]",
        "+model=[../../x]",
        "model=../../x",
        "model={a: ../../x}",
        "model@foo=../x",
    ):
        r = client.post("/v1/validate", json={"overrides": [override]})
        assert r.status_code == 422, (override, r.text)
    for override in ("model=null", "trainer=null"):
        r = client.post("/v1/validate", json={"overrides": [override]})
        assert r.status_code == 422 and "config group" in r.json()["detail"]


@pytest.mark.parametrize("value", BAD_VALUES, ids=lambda v: repr(v)[:20])
def test_bad_values_in_every_section(
    client: TestClient, cfg: dict[str, Any], value: object
) -> None:
    if (isinstance(value, float) and value != value) or value in (float("inf"), float("-inf")):
        return  # not JSON: the client library refuses to send them (sent raw above)
    for section, fields in cfg.items():
        if not isinstance(fields, dict):
            continue
        for field in list(fields)[:6]:
            body = copy.deepcopy(cfg)
            body[section][field] = value
            assert_answered(client.post("/v1/validate", json=body))


@given(st.binary(max_size=300), st.sampled_from(["application/yaml", "application/json"]))
@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_random_bodies(client: TestClient, body: bytes, content_type: str) -> None:
    assert_answered(
        client.post("/v1/validate", content=body, headers={"content-type": content_type})
    )


def test_dangling_symlink_in_the_servers_conf_is_a_start_up_error(tmp_path: Path) -> None:
    import shutil

    from cfgcheck.errors import ConfigLoadError

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "model" / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    with pytest.raises(ConfigLoadError, match=r"gone\.yaml: it is a dangling symlink"):
        create_app(ServiceSettings(config_dir=conf))


def test_tokenizer_model_does_not_hand_transformers_a_leaky_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cfg: dict[str, Any]
) -> None:
    root = tmp_path / "root"
    (root / "tok").mkdir(parents=True)
    (root / "tok" / "tokenizer.model").write_bytes(b"\0")
    secret = tmp_path / "secret.json"
    secret.write_text('{"secret": "s3cr3t"}')
    (root / "tok" / "tokenizer_config.json").symlink_to(secret)
    monkeypatch.chdir(root)
    app = create_app(ServiceSettings(config_dir=CONF, allowed_roots=(root,)))
    with TestClient(app) as c:
        for path in ("tok/tokenizer.model", "", "tok"):
            body = copy.deepcopy(cfg)
            body["tokenizer"]["path"] = path
            r = c.post("/v1/validate", json=body)
            assert r.status_code == 422, (path, r.text)
            assert "s3cr3t" not in r.text


# --- crash canary: a real server process -----------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CLOSED_EARLY = -1


def _post(port: int, body: bytes, content_type: str) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/validate", data=body, headers={"content-type": content_type}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except urllib.error.URLError as e:
        # The server refused the body before it was all sent (a bound crossed) and closed the
        # connection: CLOSED_EARLY, which the caller accepts only while the server stays up.
        if isinstance(e.reason, BrokenPipeError | ConnectionResetError):
            return CLOSED_EARLY
        raise


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@pytest.mark.slow
def test_crash_canary_real_server() -> None:
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cfgcheck",
            "serve",
            "--port",
            str(port),
            "--config-dir",
            str(CONF),
            "--header-timeout",
            "2",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(300):
            if _healthy(port):
                break
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            time.sleep(0.1)
        cases = [
            (CONF_FILES["block-nesting-30k"], "application/yaml"),  # was SIGSEGV
            *((CONF_FILES[n], "application/yaml") for n in sorted(CONF_FILES)),
            (
                json.dumps({"overrides": ["data.paths=[" + ",".join(["a"] * 400) + "]"]}).encode(),
                "application/json",
            ),
            (json.dumps({"name": "${a}" * 200_000}).encode(), "application/json"),
            (yaml.safe_dump({"overrides": ["model=[a,../../x]"]}).encode(), "application/yaml"),
        ]
        for body, content_type in cases:
            status = _post(port, body, content_type)
            assert status in (*ANSWERED, CLOSED_EARLY), (status, body[:40])
            assert server.poll() is None, f"the server died on {body[:40]!r}"
            assert _healthy(port)
        # A client dribbling a request head is cut off by the head deadline.
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"POST /v1/validate HTTP/1.1\r\n")
            s.settimeout(15)
            started = time.monotonic()
            closed = False
            while time.monotonic() - started < 12:
                try:
                    s.sendall(b"X")
                    time.sleep(0.3)
                except OSError:
                    closed = True
                    break
            if not closed:
                closed = s.recv(10) == b""
            assert closed
        assert _healthy(port)
    finally:
        server.terminate()
        server.wait(timeout=30)
