"""The validator service on hostile input: interpolations must not leak the server's
environment, nothing is instantiated, files outside the allowed roots are never read, and
oversized or pathological documents are refused with a 4xx instead of crashing the server."""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from cfgcheck.service import ServiceSettings, create_app
from cfgcheck.service import runner as service_runner
from cfgcheck.service.interpolation import uses_resolver
from tests.conftest import CONF, REPO
from tests.factories import bpe, save_file

SECRET = "s3cr3t-7f1c9e-do-not-leak"
YAML = {"content-type": "application/yaml"}


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> str:
    """A real environment variable of the server process (the app runs in-process)."""
    monkeypatch.setenv("CFGCHECK_SERVICE_SECRET", SECRET)
    return "CFGCHECK_SERVICE_SECRET"


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.chdir(REPO)
    with TestClient(create_app(ServiceSettings(config_dir=CONF, allowed_roots=(REPO,)))) as c:
        yield c


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Records every config that reaches validation (to prove refusals come first)."""
    seen: list[Any] = []
    real = service_runner.validate_config

    def recording(config: Any) -> Any:
        seen.append(config)
        return real(config)

    monkeypatch.setattr(service_runner, "validate_config", recording)
    return seen


def assert_no_leak(response: Any, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in response.text
        assert all(secret not in v for v in response.headers.values())


# --- interpolations -------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "${oc.env:CFGCHECK_SERVICE_SECRET}",
        "run-${oc.env:CFGCHECK_SERVICE_SECRET}",
        "${oc.env:CFGCHECK_SERVICE_SECRET,fallback}",
        "${oc.decode:${oc.env:CFGCHECK_SERVICE_SECRET}}",
        "${leak_secret:}",
        "${${name}:x}",
    ],
)
def test_resolver_in_body_is_refused(
    client: TestClient, cfg: dict[str, Any], secret_env: str, value: str
) -> None:
    for where in (("name",), ("data", "template"), ("trainer", "lora", "targets")):
        body = copy.deepcopy(cfg)
        target = body
        for key in where[:-1]:
            target = target[key]
        target[where[-1]] = [value] if where[-1] == "targets" else value
        for r in (
            client.post("/v1/validate", json=body),
            client.post("/v1/validate", content=yaml.safe_dump(body), headers=YAML),
        ):
            assert r.status_code == 422, r.text
            assert "resolver interpolations are not accepted" in r.json()["detail"]
            assert ".".join(where) in r.json()["detail"]
            assert_no_leak(r, SECRET)


def test_node_interpolation_in_body_is_refused_unparsed(
    client: TestClient, cfg: dict[str, Any]
) -> None:
    # Refused by a substring test, before OmegaConf's (slow, recursive) grammar parser.
    cfg["trainer"]["precision"] = "${model.name}"
    r = client.post("/v1/validate", json=cfg)
    assert r.status_code == 422
    assert "trainer.precision" in r.json()["detail"]
    assert "tinyllama" not in r.text


@pytest.mark.parametrize(
    "override",
    [
        "name=${oc.env:CFGCHECK_SERVICE_SECRET}",
        "name='${oc.env:CFGCHECK_SERVICE_SECRET}'",
        'name="x-${oc.env:CFGCHECK_SERVICE_SECRET}"',
        r"name=\${oc.env:CFGCHECK_SERVICE_SECRET}",
        "+tokenizer.pad_token=${oc.env:CFGCHECK_SERVICE_SECRET}",
        "trainer.precision=${oc.env:CFGCHECK_SERVICE_SECRET}",
        "data.paths=[${oc.env:CFGCHECK_SERVICE_SECRET}]",
        "+trainer.extra={a:${oc.env:CFGCHECK_SERVICE_SECRET}}",
        "output_dir=${oc.env:CFGCHECK_SERVICE_SECRET}",
        "name=${leak_secret:}",
        "trainer.precision=${name}",
    ],
)
def test_interpolation_in_override_never_leaks(
    client: TestClient, secret_env: str, override: str
) -> None:
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("leak_secret", lambda: SECRET, replace=True)
    try:
        r = client.post("/v1/validate", json={"overrides": [override]})
    finally:
        OmegaConf.clear_resolver("leak_secret")
    assert r.status_code == 422, r.text
    assert "interpolation" in r.json()["detail"]
    assert_no_leak(r, SECRET)


def test_resolver_in_the_servers_own_conf_is_refused_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secret_env: str
) -> None:
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    main = conf / "config.yaml"
    main.write_text(main.read_text() + f"\noutput_dir: out/${{oc.env:{secret_env}}}\n")
    monkeypatch.chdir(REPO)
    app = create_app(ServiceSettings(config_dir=conf, allowed_roots=(REPO,)))
    with TestClient(app) as c:
        r = c.post("/v1/validate", json={"config_name": "config"})
    assert r.status_code == 422
    assert "output_dir" in r.json()["detail"]
    assert_no_leak(r, SECRET)


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ("plain", False),
        ("${name}", False),
        ("${model.name}-${data.max_seq_length}", False),
        (r"\${oc.env:HOME}", False),
        ("${oc.env:HOME}", True),
        ("a${b}${oc.decode:1}", True),
        ("${custom:}", True),
        ("${${x}:y}", True),
        ("${unterminated", True),
    ],
)
def test_uses_resolver(text: str, calls: bool) -> None:
    assert uses_resolver(text) is calls


# --- _target_ -------------------------------------------------------------------------


def test_target_in_body_is_data_not_code(
    client: TestClient, cfg: dict[str, Any], tmp_path: Path
) -> None:
    marker = tmp_path / "instantiated"
    cfg["_target_"] = "os.makedirs"
    cfg["name"] = str(marker)
    cfg["trainer"]["lora"]["_target_"] = "os.makedirs"
    cfg["trainer"]["lora"]["name"] = str(marker)
    r = client.post("/v1/validate", json=cfg)
    assert r.status_code == 200
    unknown = {p for f in r.json()["findings"] if f["rule"] == "unknown-key" for p in f["paths"]}
    # A top-level _target_ is a section cfgcheck does not own (it passes unchecked); inside a
    # section it is an unknown key. Neither is ever called.
    assert "trainer.lora._target_" in unknown
    assert not marker.exists()


def test_target_in_override_is_data_not_code(client: TestClient, tmp_path: Path) -> None:
    marker = tmp_path / "instantiated"
    overrides = ["+_target_=os.makedirs", "+trainer._target_=os.makedirs", f"name='{marker}'"]
    r = client.post("/v1/validate", json={"overrides": overrides})
    assert r.status_code == 200
    # Top level: a section cfgcheck does not own (passes); in a section: an unknown key.
    assert any(f["paths"] == ["trainer._target_"] for f in r.json()["findings"])
    assert not marker.exists()


# --- paths ----------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """An allowed root holding a real tokenizer, and secrets outside it reached by symlinks."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    save_file(bpe(), root / "tok")
    outside.mkdir()
    secret_file = outside / "tokenizer.json"
    secret_file.write_text(json.dumps({"secret": SECRET}))
    (root / "link.json").symlink_to(secret_file)
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    (root / "sneaky").mkdir()
    (root / "sneaky" / "tokenizer.json").symlink_to(secret_file)
    (root / "data.jsonl").write_text('{"text": "hello"}\n')
    os.mkfifo(root / "fifo")  # reading it would block a worker thread forever
    (root / "fifodir").mkdir()
    os.mkfifo(root / "fifodir" / "tokenizer.json")
    monkeypatch.chdir(root)
    return {"root": root, "outside": outside, "secret": secret_file}


def root_client(tree: dict[str, Path]) -> TestClient:
    return TestClient(create_app(ServiceSettings(config_dir=CONF, allowed_roots=(tree["root"],))))


def with_paths(cfg: dict[str, Any], tokenizer: str | None, data: list[str]) -> dict[str, Any]:
    body = copy.deepcopy(cfg)
    body["tokenizer"]["path"] = tokenizer
    body["data"]["paths"] = data
    return body


@pytest.mark.parametrize(
    "allowed",
    [
        lambda t: "tok/tokenizer.json",
        lambda t: "tok",
        lambda t: str(t["root"] / "tok" / "tokenizer.json"),
        lambda t: "./tok/tokenizer.json",
    ],
)
def test_paths_inside_the_roots_are_validated(
    cfg: dict[str, Any],
    tree: dict[str, Path],
    validations: list[Any],
    allowed: Callable[[dict[str, Path]], str],
) -> None:
    body = with_paths(cfg, allowed(tree), ["data.jsonl"])
    with root_client(tree) as c:
        r = c.post("/v1/validate", json=body)
    assert r.status_code == 200, r.text
    assert len(validations) == 1
    # The real tokenizer file was read: its size (not the declared 32000) is in the verdict.
    assert "vocab-mismatch" in {f["rule"] for f in r.json()["findings"]}


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (lambda t: "../outside/tokenizer.json", "'..'"),
        (lambda t: "tok/../tok/tokenizer.json", "'..'"),
        (lambda t: str(t["secret"]), "outside the directories"),
        (lambda t: "/etc/passwd", "outside the directories"),
        (lambda t: "link.json", "symlink"),
        (lambda t: "linkdir/tokenizer.json", "symlink"),
        (lambda t: "sneaky", "leads outside the readable directories"),
        (lambda t: "fifo", "is a FIFO"),
        (lambda t: "", "is empty"),
        (lambda t: "tok/" + "x" * 300, "longer than 255 bytes"),
        (lambda t: "fifodir", "FIFO"),
        (lambda t: "~/tokenizer.json", "'~'"),
        (lambda t: "hf://meta-llama/Llama-2-7b-hf", "remote"),
        (lambda t: "https://example.com/tokenizer.json", "remote"),
    ],
)
def test_paths_leaving_the_roots_are_refused_before_validation(
    cfg: dict[str, Any],
    tree: dict[str, Path],
    validations: list[Any],
    bad: Callable[[dict[str, Path]], str],
    reason: str,
) -> None:
    with root_client(tree) as c:
        as_tokenizer = c.post("/v1/validate", json=with_paths(cfg, bad(tree), ["data.jsonl"]))
        as_data = c.post("/v1/validate", json=with_paths(cfg, None, ["data.jsonl", bad(tree)]))
    assert as_tokenizer.status_code == 422
    assert "tokenizer.path" in as_tokenizer.json()["detail"]
    assert reason in as_tokenizer.json()["detail"]
    assert as_data.status_code == 422
    assert "data.paths[1]" in as_data.json()["detail"]
    assert validations == []
    assert_no_leak(as_tokenizer, SECRET)
    assert_no_leak(as_data, SECRET)


def test_every_refused_path_is_named(cfg: dict[str, Any], tree: dict[str, Path]) -> None:
    body = with_paths(cfg, "/etc/passwd", ["data.jsonl", "../x", "~/y"])
    with root_client(tree) as c:
        detail = c.post("/v1/validate", json=body).json()["detail"]
    assert all(p in detail for p in ("tokenizer.path", "data.paths[1]", "data.paths[2]"))
    assert "data.paths[0]" not in detail


def test_path_overrides_are_confined_too(tree: dict[str, Path], validations: list[Any]) -> None:
    with root_client(tree) as c:
        r = c.post(
            "/v1/validate",
            json={"overrides": [f"+tokenizer.path={tree['secret']}", "data.paths=[data.jsonl]"]},
        )
    assert r.status_code == 422
    assert "tokenizer.path" in r.json()["detail"]
    assert validations == []
    assert_no_leak(r, SECRET)


def test_the_server_never_downloads(client: TestClient) -> None:
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert os.environ.get("TRANSFORMERS_OFFLINE") == "1"


# --- overrides and config names --------------------------------------------------------


@pytest.fixture
def conf_with_secret_beside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (tmp_path / "secret.yaml").write_text(f"leaked: {SECRET}\n")
    monkeypatch.chdir(REPO)
    return conf


def test_a_servers_conf_linking_outside_is_a_start_up_error(conf_with_secret_beside: Path) -> None:
    """A link from the server's conf/ to a file outside it is refused when the service starts
    (cfgcheck.safeio.config_files): no request can select it, and its content is never read."""
    from cfgcheck.errors import ConfigLoadError

    conf = conf_with_secret_beside
    (conf / "model" / "escape.yaml").symlink_to(conf.parent / "secret.yaml")
    with pytest.raises(ConfigLoadError, match="link to a file outside the config directory"):
        create_app(ServiceSettings(config_dir=conf, allowed_roots=(REPO,)))


@pytest.mark.parametrize(
    ("body", "phrase"),
    [
        ({"overrides": ["model=../../secret"]}, "must name a file under model/"),
        ({"overrides": ["+model@_global_=../../secret"]}, "must name a file under model/"),
        ({"overrides": ["hydra.searchpath=[file:///tmp]"]}, "hydra.*"),
        ({"overrides": ["hydra/launcher=basic"]}, "hydra.*"),
        ({"overrides": ["data.max_seq_length=1024,2048"]}, "sweeps"),
        ({"overrides": ["model=choice(phi-2,gemma-2b)"]}, "sweeps"),
        ({"overrides": ["data.max_seq_length=range(1,3)"]}, "sweeps"),
        ({"config_name": "../secret"}, "config_name"),
        ({"config_name": "/etc/passwd"}, "config_name"),
    ],
)
def test_overrides_that_reach_outside_are_refused(
    conf_with_secret_beside: Path, body: dict[str, Any], phrase: str
) -> None:
    app = create_app(ServiceSettings(config_dir=conf_with_secret_beside, allowed_roots=(REPO,)))
    with TestClient(app) as c:
        r = c.post("/v1/validate", json=body)
    assert r.status_code == 422, r.text
    assert phrase in r.json()["detail"]
    assert_no_leak(r, SECRET)


def test_too_many_or_too_long_overrides(client: TestClient) -> None:
    many = client.post("/v1/validate", json={"overrides": ["seed=1"] * 500})
    long = client.post("/v1/validate", json={"overrides": ["name=" + "x" * 5000]})
    assert many.status_code == 422 and "overrides" in many.json()["detail"]
    assert long.status_code == 422 and "overrides.0" in long.json()["detail"]


# --- shape and size of documents --------------------------------------------------------


def nested(depth: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        doc = {"a": doc}
    return doc


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        (json.dumps(nested(40)), "application/json"),
        ("[" * 200_000 + "]" * 200_000, "application/json"),
        ("[" * 200_000 + "]" * 200_000, "application/yaml"),  # crashes libyaml unguarded
        ("a: " + "{b: " * 100 + "1" + "}" * 100, "application/yaml"),
        (yaml.safe_dump(nested(40)), "application/yaml"),
        ("a: &x [*x]\n", "application/yaml"),  # a self-containing list
    ],
)
def test_deep_documents_are_refused(client: TestClient, content: str, content_type: str) -> None:
    """The guarantee, whichever parser stops the document first (cfgcheck's screen, or PyYAML
    >= 6.0.4's own flow-level limit): a 4xx that names the nesting, never a crash or a 5xx."""
    r = client.post("/v1/validate", content=content, headers={"content-type": content_type})
    assert 400 <= r.status_code < 500, r.text[:300]
    assert "nest" in r.json()["detail"]


def test_alias_bomb_is_refused(client: TestClient) -> None:
    lines = ["a0: [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 12)]
    lines[0] = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"
    r = client.post("/v1/validate", content="\n".join(lines), headers=YAML)
    assert r.status_code == 422
    assert "more than" in r.json()["detail"]


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        ("1: a\n", "keys must be strings"),
        ("model:\n  null: 1\n", "keys must be strings"),
        ("name: 2024-01-01\n", "name is a date"),
        ("name: !!binary aGVsbG8=\n", "name is a bytes"),
        ("data: !!set {a, b}\n", None),
    ],
)
def test_non_json_yaml_values(client: TestClient, content: str, phrase: str | None) -> None:
    r = client.post("/v1/validate", content=content, headers=YAML)
    assert r.status_code in (200, 422), r.text
    if phrase is not None:
        assert r.status_code == 422
        assert phrase in r.json()["detail"]
