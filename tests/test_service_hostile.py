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
from pathlib import Path
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


@pytest.mark.slow
def test_19000_unknown_keys_are_validated_in_linear_time() -> None:
    """Each unknown key cost a did-you-mean search and a fix checked by validating the whole
    config again: quadratic, hours for 19,000 keys (1,000 keys took 3 minutes). Now the first
    ``MAX_UNKNOWN_KEYS`` are reported one by one and the rest as one finding. The library
    validates 19,000 that way; the service refuses a mapping of more than 1,000 keys before
    validation (cfgcheck.service.guards.MAX_KEYS_PER_MAPPING) and validates 900."""
    out = run_bounded(
        """
        import json
        from fastapi.testclient import TestClient
        from cfgcheck import validate
        from cfgcheck.compose import compose
        from cfgcheck.service import ServiceSettings, create_app
        from cfgcheck.validate import to_plain
        from tests.conftest import CONF, REPO

        cfg = to_plain(compose(CONF, "config", []))
        many = {**cfg, "model": {**cfg["model"], **{f"unknown_{i}": i for i in range(19_000)}}}
        library = [f.rule for f in validate(many).findings]
        cfg["model"].update({f"unknown_{i}": i for i in range(900)})
        app = create_app(ServiceSettings(config_dir=CONF, allowed_roots=(REPO,)))
        with TestClient(app) as client:
            response = client.post("/v1/validate", json=cfg)
            refused = client.post("/v1/validate", json=many)
        print(json.dumps({"status": response.status_code, "body": response.json(),
                          "library": library, "refused": refused.status_code}))
        """,
        timeout=120,
    )
    answer = json.loads(out)
    assert answer["status"] == 200
    assert answer["refused"] == 422
    from cfgcheck.validate import MAX_UNKNOWN_KEYS

    assert answer["library"].count("unknown-key") == MAX_UNKNOWN_KEYS + 1
    unknown = [f for f in answer["body"]["findings"] if f["rule"] == "unknown-key"]
    assert len(unknown) == MAX_UNKNOWN_KEYS + 1
    summary = [f for f in unknown if f["paths"] == ["model"]]
    assert len(summary) == 1
    assert f"{900 - MAX_UNKNOWN_KEYS} more unknown keys under model" in summary[0]["message"]


def test_a_few_unknown_keys_keep_their_fixes(cfg: dict[str, Any]) -> None:
    from cfgcheck import validate

    cfg["model"]["n_layr"] = 2
    result = validate(cfg)
    [finding] = [f for f in result.findings if f.rule == "unknown-key"]
    assert "did you mean model.n_layer" in finding.hint
    assert any("model.n_layer=2" in fix.overrides for fix in finding.fixes)


# --- 4. concurrent first requests -----------------------------------------------------------


@pytest.mark.slow
def test_concurrent_first_requests_to_a_fresh_app_get_no_500() -> None:
    """46 first requests at once, on every request kind, to an app in a fresh interpreter
    (nothing imported yet but what create_app imports): 2 of 46 got a 500 from a concurrent
    import (``_DeadlockError``) before the app imported what requests need at start-up."""
    out = run_bounded(
        """
        import json, sys, threading
        from fastapi.testclient import TestClient
        from cfgcheck.service import ServiceSettings, create_app
        from tests.conftest import CONF, REPO
        from tests.sources.support import example

        native = [
            {"format": fmt, "config": example(fmt, name).read_text(), "filename": name}
            for fmt, name in [
                ("axolotl", "mistral-lora.yml"),
                ("litgpt", "phi-2-lora.yaml"),
                ("trl", "clis-sft_config.yaml"),
            ]
        ]
        bodies = [
            {"config_name": "config", "overrides": []},
            {"config_name": "config", "overrides": ["model=phi-2", "tokenizer=phi-2"]},
            {"config_name": "config", "overrides": ["model.n_layr=3"]},
            {"model": {"pretrained": "no/such-model"}},
            {"model": {"name": "x"}, "tokenizer": {"path": "tests/no-such-tokenizer.json"}},
            *native,
        ]
        app = create_app(ServiceSettings(config_dir=CONF, allowed_roots=(REPO,), threads=8,
                                         max_queue=46, max_per_client=46,
                                         request_timeout_s=300))
        imported = set(sys.modules)
        statuses = []
        with TestClient(app, raise_server_exceptions=False) as client:
            start = threading.Barrier(46)

            def one(i):
                start.wait()
                answer = client.post("/v1/validate", json=bodies[i % len(bodies)])
                statuses.append((answer.status_code, answer.text[:300]))

            threads = [threading.Thread(target=one, args=(i,)) for i in range(46)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        watched = ("cfgcheck", "hydra", "omegaconf", "antlr4", "transformers", "torch",
                   "tokenizers", "yaml", "pydantic")
        late = sorted(m for m in set(sys.modules) - imported if m.startswith(watched))
        print(json.dumps({"statuses": statuses, "late": late}))
        """,
        timeout=300,
    )
    answer = json.loads(out)
    assert len(answer["statuses"]) == 46
    assert [s for s in answer["statuses"] if s[0] >= 500] == []
    # Deterministic (the deadlock itself is a race): the requests imported nothing that
    # create_app had not imported already.
    assert answer["late"] == []


# --- 5. confinement before resolution -------------------------------------------------------

MARKER = "outside-marker-3b1f"


@pytest.fixture
def confined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, Path]]:
    """A service whose only root is ``inside``, and ``outside`` beside it: a model folder
    whose config.json is malformed (its parse position would be a probe) and a
    model_config.yaml naming a marker, linked from a folder inside."""
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    (inside / "m").mkdir(parents=True)
    outside.mkdir()
    (outside / "config.json").write_text('{"model_type": "llama", ' + MARKER)
    (outside / "model_config.yaml").write_text(f"name: {MARKER}\n")
    (inside / "m" / "config.json").write_text('{"model_type": "llama"}')
    (inside / "m" / "model_config.yaml").symlink_to(outside / "model_config.yaml")
    monkeypatch.chdir(inside)
    app = create_app(ServiceSettings(config_dir=CONF, allowed_roots=(inside,)))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c, tmp_path


def assert_refused_unread(response: Any, tmp_path: Path) -> None:
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail.startswith("paths refused: "), detail
    assert MARKER not in detail
    assert "line 1 column" not in detail  # nothing outside was parsed
    assert str(tmp_path / "outside") not in detail


@pytest.mark.parametrize(
    "config",
    [
        # TRL: max_length left to the model resolved model_name_or_path while loading
        "model_name_or_path: {outside}\nmax_length: null\n",
        "model_name_or_path: {missing}\nmax_length: null\n",  # no "no such folder" probe
    ],
)
def test_trl_length_left_to_the_model_is_confined_first(
    confined: tuple[TestClient, Path], config: str
) -> None:
    client, tmp_path = confined
    text = config.format(outside=tmp_path / "outside", missing=tmp_path / "missing")
    response = client.post("/v1/validate", json={"format": "trl", "config": text})
    assert_refused_unread(response, tmp_path)
    assert str(tmp_path / "missing") not in response.text


@pytest.mark.parametrize("where", ["outside", "missing"])
def test_litgpt_without_max_seq_length_is_confined_first(
    confined: tuple[TestClient, Path], where: str
) -> None:
    client, tmp_path = confined
    body = {"format": "litgpt", "config": f"checkpoint_dir: {tmp_path / where}\n"}
    response = client.post("/v1/validate", json=body)
    assert_refused_unread(response, tmp_path)
    assert "no such folder" not in response.text


def test_file_form_of_a_model_folder_confines_the_folder(
    confined: tuple[TestClient, Path],
) -> None:
    client, tmp_path = confined
    response = client.post("/v1/validate", json={"model": {"pretrained": "m/config.json"}})
    assert_refused_unread(response, tmp_path)
    assert "model_config.yaml" in response.json()["detail"]


def test_an_uncached_hub_id_does_not_name_the_servers_home(client: TestClient) -> None:
    response = client.post("/v1/validate", json={"model": {"pretrained": "no-one/no-such-model"}})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "not in the Hugging Face cache (<server path>)" in detail
    assert str(Path.home()) not in detail
    assert ".cache" not in detail
