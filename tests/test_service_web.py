"""The service's web page in-process (FastAPI TestClient), JavaScript off: the form POST and
the shared link give the JSON API's verdict, each finding on its line of the pasted file; the
memory panel; the same limits and refusals as ``POST /v1/validate``; every value escaped;
the Content-Security-Policy. The browser tests are tests/test_service_web_browser.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from cfgcheck.service import ServiceSettings, create_app
from cfgcheck.service.web.routes import CSP
from tests.conftest import CONF, REPO
from tests.web_support import GIB, api_finding, line_of, seed_cases, seed_yaml

SEEDS = seed_cases()
LITGPT = REPO / "tests" / "sources" / "native" / "litgpt" / "falcon-7b-lora.yaml"
XSS = "<script>alert(1)</script>"


def client_for(**overrides: Any) -> TestClient:
    settings = ServiceSettings(**{"config_dir": CONF, "allowed_roots": (REPO,), **overrides})
    return TestClient(create_app(settings))


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    cwd = Path.cwd()
    os.chdir(REPO)  # relative data paths of the shipped conf/ resolve here
    try:
        with client_for() as c:
            yield c
    finally:
        os.chdir(cwd)


def post(client: TestClient, **fields: str) -> Any:
    return client.post("/", data=fields)


def highlighted(page: str) -> dict[int, str]:
    """Line -> severity of the highlighted lines of the pasted file's listing."""
    return {int(n): sev for n, sev in re.findall(r'<li id="L(\d+)" class="hl hl-(\w+)">', page)}


def copyable(page: str, prefix: str = "fix-") -> list[str]:
    import html

    found = re.findall(rf'<code class="copyable" id="{prefix}[\d-]+">([^<]*)</code>', page)
    return [html.unescape(t) for t in found]


def test_blank_page_and_its_headers(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert r.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP and "style-src 'self'" in CSP
    assert "default-src 'none'" in CSP and "unsafe-inline" not in CSP
    assert r.headers["x-content-type-options"] == "nosniff"
    # Every input has a label; no inline script or style; nothing from another host.
    ids = set(re.findall(r'<(?:input|select|textarea)[^>]* id="([^"]+)"', r.text))
    labelled = set(re.findall(r'<label for="([^"]+)"', r.text))
    assert ids and ids <= labelled, ids - labelled
    assert re.findall(r"<script[^>]*>", r.text) == ['<script src="/static/web.js" defer>']
    assert " style=" not in r.text and "<style" not in r.text
    assert not re.findall(r'(?:src|href)="(?:https?:)?//', r.text)


@pytest.mark.parametrize("name", ["web.css", "web.js"])
def test_static_files(client: TestClient, name: str) -> None:
    r = client.get(f"/static/{name}")
    assert r.status_code == 200 and r.content
    assert r.headers["content-security-policy"] == CSP
    assert r.headers["content-type"].startswith(
        "text/css" if name.endswith("css") else "text/javascript"
    )
    assert "http://" not in r.text and "https://" not in r.text  # no remote loads


@pytest.mark.parametrize("name", ["app.py", "..%2F__init__.py", "%2E%2E%2Fapp.py", "web.css.map"])
def test_static_names_are_not_paths(client: TestClient, name: str) -> None:
    assert client.get(f"/static/{name}").status_code == 404


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_seed_failure_posted_without_javascript(client: TestClient, seed: str) -> None:
    text, rule = SEEDS[seed]
    api = client.post("/v1/validate", content=text, headers={"content-type": "application/yaml"})
    finding = api_finding(api.json(), rule)
    r = post(client, mode="paste", format="cfgcheck", config=text)
    assert r.status_code == 200
    assert f'<code class="rule">{rule}</code>' in r.text
    assert 'class="summary bad"' in r.text
    # Each path of the finding that the pasted text sets is highlighted on its line.
    lines = [n for p in finding["paths"] if (n := line_of(text, p)) is not None]
    assert lines, finding["paths"]
    marks = highlighted(r.text)
    for n in lines:
        assert marks.get(n) == "error", (n, marks)
        assert f'href="#L{n}"' in r.text
    # The copyable fixes are the CLI's (the JSON API gives what `cfgcheck check` prints).
    assert [fx["shell"] for fx in finding["fixes"]] <= copyable(r.text)
    assert finding["fixes"], finding


def test_shared_link_gives_the_same_page(client: TestClient) -> None:
    text, _ = SEEDS["litgpt-cannot-attend"]
    posted = post(client, mode="paste", config=text, gpu="H100")
    link = re.search(r'<a href="(/\?[^"]+)" id="share">', posted.text)
    assert link is not None
    import html

    shared = client.get(html.unescape(link.group(1)))
    assert shared.status_code == 200
    assert highlighted(shared.text) == highlighted(posted.text)
    assert copyable(shared.text) == copyable(posted.text)
    assert 'data-gpu="H100"' in shared.text and 'class="fits chosen"' in shared.text


def test_preset_knobs_become_overrides(client: TestClient) -> None:
    r = post(client, mode="preset", max_seq_length="3063", micro_batch_size="2", lora_rank="16")
    assert r.status_code == 200
    assert "seq-len-over-block-size" in r.text
    link = re.search(r'<a href="/\?([^"]+)" id="share">', r.text)
    assert link is not None and "config=" not in link.group(1) and "format=" not in link.group(1)


def test_stacked_bar_total_is_cfgcheck_memory(client: TestClient) -> None:
    overrides = ["model=llama-3-8b", "tokenizer=llama-3", "trainer.finetuning=full"]
    r = post(client, mode="preset", model="llama-3-8b", tokenizer="llama-3", finetuning="full")
    env = {**os.environ, "CFGCHECK_NO_LIVE_GPU": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "cfgcheck", "memory", "--format", "json", *overrides],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=False,
    )
    cli = json.loads(proc.stdout)
    total = int(re.search(r'data-total-bytes="(\d+)"', r.text).group(1))  # type: ignore[union-attr]
    segments = [int(b) for b in re.findall(r'data-bytes="(\d+)"', r.text)]
    assert sum(segments) == total
    assert abs(total / GIB - cli["estimate"]["total_gib"]) < 0.001
    assert cli["verdict"] in r.text


def test_the_memory_panel_names_the_host_memory_of_an_offload(client: TestClient) -> None:
    import yaml

    conf = REPO / "conf"
    sections = {"model": "model/llama-3-8b", "tokenizer": "tokenizer/llama-3"}
    sections |= {"data": "data/alpaca-tiny", "trainer": "trainer/fsdp-8gpu"}
    flat = {k: yaml.safe_load((conf / f"{v}.yaml").read_text()) for k, v in sections.items()}
    flat["trainer"] |= {"strategy": "zero3", "offload": {"optimizer": "cpu"}}
    text = yaml.safe_dump(flat)
    r = post(client, mode="paste", format="cfgcheck", config=text, gpu="H100")
    assert r.status_code == 200
    assert "Host (CPU) memory for the offload" in r.text and "GiB per node." in r.text


def test_picking_a_gpu_gives_its_fixes(client: TestClient) -> None:
    text, _ = SEEDS["litgpt-cannot-attend"]
    r = post(client, mode="paste", config=text, pick="T4")
    assert r.status_code == 200
    assert 'class="does-not-fit chosen" data-gpu="T4"' in r.text
    assert "What makes it fit on T4" in r.text
    fixes = copyable(r.text, "memfix-")
    assert fixes and all(re.fullmatch(r"(trainer|data)\.[\w.]+=\S+( \S+)*", f) for f in fixes)
    assert "(-&gt; " in r.text  # each fix with its estimate


def test_native_format_findings_and_fixes_in_its_keys(client: TestClient) -> None:
    text = LITGPT.read_text()
    r = post(client, mode="paste", format="litgpt", config=text, filename="lora.yaml", gpu="T4")
    assert r.status_code == 200
    marks = highlighted(r.text)
    assert marks and set(marks.values()) <= {"error", "warning", "info"}
    assert all(not f.startswith("trainer.") for f in copyable(r.text, "memfix-"))
    assert "lora.yaml:" in r.text


@pytest.mark.parametrize("where", ["value", "key", "override", "query"])
def test_script_in_the_input_renders_as_text(client: TestClient, where: str) -> None:
    text, _ = SEEDS["litgpt-cannot-attend"]
    if where == "value":
        text = text.replace("name: tinyllama-alpaca-lora", f"name: '{XSS}'")
        r = post(client, mode="paste", config=text)
    elif where == "key":
        r = post(client, mode="paste", config=f"{XSS}: 1\n" + text)
    elif where == "override":
        r = post(
            client, mode="paste", format="litgpt", config=LITGPT.read_text(), overrides=f"{XSS}=1"
        )
    else:
        r = client.get("/?" + urlencode({"config": f"model: {{name: '{XSS}'}}"}))
    assert XSS not in r.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text
    assert re.findall(r"<script[^>]*>", r.text) == ['<script src="/static/web.js" defer>']
    assert r.headers["content-security-policy"] == CSP


def test_body_limit_applies_to_the_form() -> None:
    with client_for(max_body_bytes=2000) as c:
        r = c.post("/", data={"config": "x: 1\n" * 1000})
        assert r.status_code == 413 and "over the limit" in r.text
        assert r.headers["content-security-policy"] == CSP
        r = c.get("/?" + urlencode({"config": "x: 1\n" * 1000}))
        assert r.status_code == 413
        assert (
            c.post(
                "/v1/validate",
                content="x: 1\n" * 1000,
                headers={"content-type": "application/yaml"},
            ).status_code
            == 413
        )


@pytest.mark.parametrize(
    ("kwargs", "status", "phrase"),
    [
        (
            {"content": b'{"config": "x"}', "headers": {"content-type": "application/json"}},
            415,
            "Content-Type",
        ),
        (
            {
                "content": b"nope=1",
                "headers": {"content-type": "application/x-www-form-urlencoded"},
            },
            400,
            "unknown form field",
        ),
        (
            {
                "content": b"config=%FF%FE",
                "headers": {"content-type": "application/x-www-form-urlencoded"},
            },
            400,
            "malformed form",
        ),
        (
            {
                "content": "config=é".encode(),
                "headers": {"content-type": "application/x-www-form-urlencoded"},
            },
            400,
            "ASCII",
        ),
    ],
)
def test_malformed_forms_are_refused(
    client: TestClient, kwargs: dict[str, Any], status: int, phrase: str
) -> None:
    r = client.post("/", **kwargs)
    assert r.status_code == status and phrase in r.text
    assert r.headers["content-security-policy"] == CSP


def test_screens_of_the_api_apply(client: TestClient) -> None:
    text, _ = SEEDS["litgpt-cannot-attend"]
    interp = post(client, mode="paste", config=text.replace("seed: 42", "seed: ${oc.env:HOME}"))
    assert interp.status_code == 422 and "interpolations are not accepted" in interp.text
    outside = post(
        client, mode="paste", config=text.replace("datasets/alpaca-tiny.jsonl", "/etc/passwd")
    )
    assert outside.status_code == 422 and "paths refused" in outside.text
    hydra = post(client, mode="preset", overrides="hydra.searchpath=[file:///etc]")
    assert hydra.status_code == 422 and "refused" in hydra.text


def test_out_of_range_knobs_are_named(client: TestClient) -> None:
    r = post(client, mode="preset", micro_batch_size="0", precision="fp8", model="../../etc")
    assert r.status_code == 200
    for phrase in (
        "micro_batch_size must be",
        "precision must be one of",
        "model must be a plain name",
    ):
        assert phrase in r.text


def test_timeout_is_the_services(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from cfgcheck.service import runner

    real = runner.validate_config

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(1.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "validate_config", slow)
    monkeypatch.chdir(REPO)
    with client_for(request_timeout_s=0.5) as c:
        r = post(c, mode="paste", config=seed_yaml([]))
    assert r.status_code == 504 and "took longer than" in r.text


def bar_total(page: str) -> int:
    found = re.search(r'data-total-bytes="(\d+)"', page)
    assert found is not None, "no memory bar"
    return int(found.group(1))


def test_hf_config_json_is_the_model(client: TestClient) -> None:
    from tests.model_folders import LLAMA2_7B

    text = json.dumps(LLAMA2_7B, indent=2)
    r = post(client, format="hf-config", config=text, tokenizer="llama-2", max_seq_length="8192")
    assert r.status_code == 200 and "seq-len-over-block-size" in r.text
    line = next(n for n, t in enumerate(text.split("\n"), 1) if "max_position_embeddings" in t)
    assert highlighted(r.text).get(line) == "error"
    assert f"config.json:{line}" in r.text
    # The same model as the server's llama-2-7b preset (made from the same published file).
    pasted = post(client, format="hf-config", config=text, tokenizer="llama-2")
    preset = post(client, mode="preset", model="llama-2-7b", tokenizer="llama-2")
    assert bar_total(pasted.text) == bar_total(preset.text)
    link = re.search(r'<a href="/\?([^"]+)" id="share">', pasted.text)
    assert link is not None and "tokenizer=llama-2" in link.group(1)


def test_hf_config_json_must_be_an_object(client: TestClient) -> None:
    r = post(client, format="hf-config", config="[1, 2]")
    assert r.status_code == 422 and "JSON object" in r.text


def test_picked_gpu_applies_to_a_pasted_run_config(client: TestClient) -> None:
    text, _ = SEEDS["litgpt-cannot-attend"]
    r = post(client, config=text, gpu="T4")
    assert '<code class="rule">gpu-memory</code>' in r.text
    assert "&lt;GPU picked on the page: T4&gt;" in r.text
    # the finding's fixes are the memory panel's
    assert set(copyable(r.text, "memfix-")) <= set(copyable(r.text))


def test_a_long_file_is_listed_up_to_a_bound(client: TestClient) -> None:
    from cfgcheck.service.web.findings_view import MAX_LISTING_LINES

    text, _ = SEEDS["litgpt-cannot-attend"]
    r = post(client, config=text + "#\n" * (MAX_LISTING_LINES + 100))
    assert r.status_code == 200
    assert f'id="L{MAX_LISTING_LINES}"' in r.text and f'id="L{MAX_LISTING_LINES + 1}"' not in r.text
    assert f"the listing stops at line {MAX_LISTING_LINES}" in r.text
    assert highlighted(r.text)  # the findings' lines are near the top
