"""The validator service API in-process (FastAPI TestClient): verdicts, schema, health,
OpenAPI, content types, malformed bodies, limits on size and time, compose requests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from cfgcheck import validate
from cfgcheck.jsonschema import json_schemas
from cfgcheck.service import ServiceSettings, create_app
from cfgcheck.service import runner as service_runner
from cfgcheck.service.models import CheckResponse
from tests.conftest import CONF, REPO

YAML = {"content-type": "application/yaml"}


def client_for(**overrides: Any) -> TestClient:
    settings = ServiceSettings(**{"config_dir": CONF, "allowed_roots": (REPO,), **overrides})
    return TestClient(create_app(settings))


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.chdir(REPO)  # relative data paths of the shipped conf/ resolve here
    with client_for() as c:
        yield c


def test_healthz(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"


def test_schema_is_the_json_schemas(client: TestClient) -> None:
    r = client.get("/v1/schema")
    assert r.status_code == 200
    assert r.json() == json.loads(json.dumps(json_schemas()))


def test_openapi_describes_request_and_response(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    op = doc["paths"]["/v1/validate"]["post"]
    content = op["requestBody"]["content"]
    assert set(content) >= {"application/json", "application/yaml", "text/yaml"}
    refs = {s["$ref"] for s in content["application/json"]["schema"]["oneOf"]}
    assert refs == {
        "#/components/schemas/RunConfig",
        "#/components/schemas/ComposeRequest",
        "#/components/schemas/NativeRequest",
    }
    schemas = doc["components"]["schemas"]
    assert {"RunConfig", "ModelConfig", "ComposeRequest", "CheckResponse"} <= set(schemas)
    assert set(schemas["RunConfig"]["required"]) == {"model", "tokenizer", "data", "trainer"}
    ok = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/CheckResponse"}
    assert {"400", "408", "413", "415", "422", "503", "504"} <= set(op["responses"])
    assert {"/v1/schema", "/healthz"} <= set(doc["paths"])


def test_valid_config_as_json(client: TestClient, cfg: dict[str, Any]) -> None:
    r = client.post("/v1/validate", json=cfg)
    assert r.status_code == 200
    assert r.json() == validate(cfg).to_dict()
    assert r.json()["ok"] is True


def test_error_verdict_is_200_with_findings(client: TestClient, cfg: dict[str, Any]) -> None:
    cfg["data"]["max_seq_length"] = 3063
    r = client.post("/v1/validate", json=cfg)
    assert r.status_code == 200
    body = r.json()
    assert body["ok"] is False
    finding = next(f for f in body["findings"] if f["rule"] == "seq-len-over-block-size")
    assert "3063" in finding["message"] and "2048" in finding["message"]
    assert body == validate(cfg).to_dict()


@pytest.mark.parametrize(
    "content_type",
    ["application/yaml", "application/x-yaml", "text/yaml", "text/yaml; charset=utf-8"],
)
def test_yaml_bodies(client: TestClient, cfg: dict[str, Any], content_type: str) -> None:
    cfg["trainer"]["micro_batch_size"] = 0
    r = client.post(
        "/v1/validate", content=yaml.safe_dump(cfg), headers={"content-type": content_type}
    )
    assert r.status_code == 200
    assert r.json() == validate(cfg).to_dict()
    assert "trainer.micro_batch_size" in {p for f in r.json()["findings"] for p in f["paths"]}


def test_compose_request_matches_library_check(client: TestClient) -> None:
    import cfgcheck

    overrides = ["data.max_seq_length=9000", "model=llama-3-8b", "tokenizer=llama-3"]
    r = client.post("/v1/validate", json={"config_name": "config", "overrides": overrides})
    assert r.status_code == 200
    assert r.json() == cfgcheck.check(CONF, "config", overrides).to_dict()
    assert r.json()["ok"] is False
    parsed = CheckResponse.model_validate(r.json())  # the documented response model
    located = [loc for f in parsed.findings for loc in f.locations or () if loc is not None]
    assert "<override data.max_seq_length=9000>" in {loc.file for loc in located}


def test_compose_request_defaults_to_config(client: TestClient) -> None:
    r = client.post("/v1/validate", json={"overrides": []})
    assert r.status_code == 200
    assert r.json()["ok"] is True


@pytest.mark.parametrize(
    ("body", "phrase"),
    [
        ({"overrides": ["model=no-such-model"]}, "Could not find 'model/no-such-model'"),
        ({"config_name": "nope"}, "primary config not found"),
        ({"overrides": ["data.max_seq_length=="]}, "override"),
        ({"overrides": ["data.max_seq_length"]}, "override"),
        ({"config_name": "config", "overrides": [], "extra": 1}, "extra"),
        ({"overrides": "model=phi-2"}, "overrides"),
        ({"config_name": 3}, "config_name"),
    ],
)
def test_compose_errors_are_422_one_line(
    client: TestClient, body: dict[str, Any], phrase: str
) -> None:
    r = client.post("/v1/validate", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    assert phrase in detail
    assert str(CONF) not in detail  # the server's own layout is not echoed


@pytest.mark.parametrize(
    ("content", "content_type", "status", "phrase"),
    [
        ("{", "application/json", 400, "malformed JSON"),
        ("{'a': 1}", "application/json", 400, "malformed JSON"),
        ("model: [1,\n", "application/yaml", 400, "malformed YAML"),
        ("a: 1\n---\nb: 2\n", "application/yaml", 400, "malformed YAML"),
        ("a: !!python/object/apply:os.system [true]", "application/yaml", 400, "malformed YAML"),
        ("", "application/json", 400, "empty"),
        ("[1, 2]", "application/json", 422, "must be a mapping"),
        ('"text"', "application/json", 422, "must be a mapping"),
        ("null", "application/json", 422, "must be a mapping"),
        ("{}", "text/plain", 415, "unsupported Content-Type"),
        ("{}", "application/x-www-form-urlencoded", 415, "unsupported Content-Type"),
    ],
)
def test_malformed_requests(
    client: TestClient, content: str, content_type: str, status: int, phrase: str
) -> None:
    r = client.post("/v1/validate", content=content, headers={"content-type": content_type})
    assert r.status_code == status, r.text
    assert phrase in r.json()["detail"]
    assert "Traceback" not in r.text


def test_not_utf8_is_400(client: TestClient) -> None:
    r = client.post(
        "/v1/validate", content=b"\xff\xfe{}", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert "UTF-8" in r.json()["detail"]


def test_body_over_the_limit_by_content_length(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    with client_for(max_body_bytes=1000) as c:
        r = c.post("/v1/validate", content=b"{" + b" " * 2000 + b"}", headers=dict(YAML))
    assert r.status_code == 413
    assert "2002 bytes" in r.json()["detail"] and "1000" in r.json()["detail"]


def test_body_over_the_limit_while_streaming(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    sent: list[int] = []

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
        for _ in range(50):
            sent.append(1)
            yield b" " * 100

    with client_for(max_body_bytes=1000) as c:
        r = c.post("/v1/validate", content=chunks(), headers=dict(YAML))
    assert r.status_code == 413
    assert "limit of 1000 bytes" in r.json()["detail"]


def test_body_under_the_limit_is_read_whole(client: TestClient, cfg: dict[str, Any]) -> None:
    text = json.dumps(cfg).encode()

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(text), 64):
            yield text[i : i + 64]

    r = client.post("/v1/validate", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 200
    assert r.json()["ok"] is True


def test_invalid_content_length_is_400() -> None:
    import asyncio

    from cfgcheck.service.body import read_limited
    from cfgcheck.service.errors import RequestError

    async def empty() -> Any:
        if False:
            yield b""

    with pytest.raises(RequestError) as e:
        asyncio.run(read_limited("ten", empty(), 100))
    assert e.value.status == 400


def test_slow_body_answers_408() -> None:
    import asyncio

    from cfgcheck.service.body import read_within
    from cfgcheck.service.errors import RequestError

    async def trickle() -> Any:
        for _ in range(100):
            await asyncio.sleep(0.05)
            yield b" "

    with pytest.raises(RequestError) as e:
        asyncio.run(read_within(None, trickle(), 1000, 0.2))
    assert e.value.status == 408
    assert "within 0.2 s" in e.value.detail


def test_time_limit_answers_504(monkeypatch: pytest.MonkeyPatch, cfg: dict[str, Any]) -> None:
    monkeypatch.chdir(REPO)
    release = threading.Event()
    real = service_runner.validate_config

    def slow(config: Any) -> Any:
        release.wait(5)
        return real(config)

    monkeypatch.setattr(service_runner, "validate_config", slow)
    with client_for(request_timeout_s=0.2) as c:
        start = time.monotonic()
        r = c.post("/v1/validate", json=cfg)
        elapsed = time.monotonic() - start
        release.set()
    assert r.status_code == 504
    assert "longer than 0.2 s" in r.json()["detail"]
    assert elapsed < 4  # answered at the limit, not when the work ended


def test_work_past_its_deadline_stops_at_the_next_stage(
    monkeypatch: pytest.MonkeyPatch, cfg: dict[str, Any]
) -> None:
    """A request answered 504 does not go on to validate (the costly stage) afterwards."""
    monkeypatch.chdir(REPO)
    release = threading.Event()
    stopped = threading.Event()
    validated: list[Any] = []
    real_refused = service_runner.refused_paths

    def slow_paths(config: Any, roots: Any) -> Any:
        release.wait(5)
        return real_refused(config, roots)

    def counted(config: Any) -> Any:
        validated.append(config)
        return validate(config)

    monkeypatch.setattr(service_runner, "refused_paths", slow_paths)
    monkeypatch.setattr(service_runner, "validate_config", counted)
    real_run = service_runner.Runner.run

    def run(self: Any, *args: Any) -> str:
        try:
            return real_run(self, *args)
        finally:
            stopped.set()

    monkeypatch.setattr(service_runner.Runner, "run", run)
    with client_for(request_timeout_s=0.2) as c:
        r = c.post("/v1/validate", json=cfg)
        release.set()
        assert stopped.wait(5)
    assert r.status_code == 504
    assert validated == []


def test_busy_answers_503(monkeypatch: pytest.MonkeyPatch, cfg: dict[str, Any]) -> None:
    monkeypatch.chdir(REPO)
    release = threading.Event()
    real = service_runner.validate_config

    def blocked(config: Any) -> Any:
        release.wait(5)
        return real(config)

    monkeypatch.setattr(service_runner, "validate_config", blocked)
    with client_for(request_timeout_s=0.2, threads=1, max_queue=0) as c:
        first = c.post("/v1/validate", json=cfg)  # times out; its thread still holds the slot
        second = c.post("/v1/validate", json=cfg)
        release.set()
        for _ in range(50):  # the slot frees once the first validation's thread ends
            third = c.post("/v1/validate", json=cfg)
            if third.status_code == 200:
                break
            time.sleep(0.05)
    assert first.status_code == 504
    assert second.status_code == 503
    assert second.headers["retry-after"] == "1"
    assert "in flight" in second.json()["detail"]
    assert third.status_code == 200


def test_missing_config_dir_fails_at_startup(tmp_path: Any) -> None:
    from cfgcheck.errors import ConfigLoadError

    with pytest.raises(ConfigLoadError, match="config directory not found"):
        create_app(ServiceSettings(config_dir=tmp_path / "nope"))


def test_settings_must_be_positive() -> None:
    from cfgcheck.service.settings import SettingsError

    with pytest.raises(SettingsError, match="max_depth=0"):
        ServiceSettings(max_depth=0)


def test_compositions_are_cached_until_the_conf_changes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    monkeypatch.chdir(REPO)
    app = create_app(ServiceSettings(config_dir=conf, allowed_roots=(REPO,)))
    body = {"overrides": ["data.max_seq_length=3063"]}
    with TestClient(app) as c:
        first = c.post("/v1/validate", json=body)
        again = c.post("/v1/validate", json=body)
        model = conf / "model" / "tinyllama-1.1b.yaml"
        model.write_text(model.read_text().replace("block_size: 2048", "block_size: 4096"))
        st = model.stat()
        os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        edited = c.post("/v1/validate", json=body)
    assert first.text == again.text
    assert first.json()["ok"] is False
    assert edited.status_code == 200 and edited.json()["ok"] is True
    cache = app.state.runner.cache
    assert (cache.hits, cache.misses) == (1, 2)


def test_a_bug_in_validation_is_a_one_line_500(
    monkeypatch: pytest.MonkeyPatch, cfg: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(REPO)

    def broken(config: Any) -> Any:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(service_runner, "validate_config", broken)
    with client_for() as c:
        r = c.post("/v1/validate", json=cfg)
    assert r.status_code == 500
    assert r.json() == {"detail": "internal error while validating (ZeroDivisionError); logged"}
    assert "Traceback" not in r.text
    # One log line per internal error (a traceback per request would flood the log under
    # load); the traceback only at DEBUG level.
    errors = [rec for rec in caplog.records if rec.levelname == "ERROR"]
    assert len(errors) == 1 and errors[0].exc_info is None
    assert "ZeroDivisionError: division by zero" in errors[0].getMessage()


def test_app_serves_again_after_its_lifespan_restarts() -> None:
    """A second lifespan (server restart, another client) must not inherit a shut-down pool."""
    app = create_app(ServiceSettings(config_dir=CONF, allowed_roots=(REPO,)))
    body = {"config_name": "config", "overrides": []}
    for _ in range(2):
        with TestClient(app) as client:
            response = client.post("/v1/validate", json=body)
            assert response.status_code == 200, response.text
            assert response.json()["ok"] is True
