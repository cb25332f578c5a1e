"""``--from`` on the command line (check, memory, hook), the real pre-commit hook per format,
the service's ``format`` requests and the library call, each with a native file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import cfgcheck
from tests.conftest import REPO, HookRepo, requires, run_cfgcheck
from tests.sources.support import example, line_of, write

AXOLOTL = example("axolotl", "mistral-lora.yml")
LITGPT = example("litgpt", "tiny-llama-lora.yaml")


def test_check_from_exit_codes_and_native_lines(tmp_path: Path) -> None:
    ok = run_cfgcheck("check", "--from", "litgpt", str(LITGPT), "--gpu", "H100")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "config OK" in ok.stdout

    bad = run_cfgcheck(
        "check",
        "--from",
        "litgpt",
        str(LITGPT),
        "quantize=bnb.nf4",
        "precision=bf16-mixed",
        "--format",
        "json",
    )
    assert bad.returncode == 1, bad.stderr
    finding = next(
        f
        for f in json.loads(bad.stdout)["findings"]
        if f["rule"] == "litgpt-quantize-mixed-precision"
    )
    assert finding["fixes"] == [
        {
            "overrides": ["precision=bf16-true"],
            "summary": finding["fixes"][0]["summary"],
            "flags": [],
            "shell": "precision=bf16-true",
        }
    ]

    planted = write(
        tmp_path, "typo.yml", AXOLOTL.read_text().replace("sequence_len:", "sequence_length:")
    )
    warn = run_cfgcheck("check", "--from", "axolotl", str(planted), "--format", "github")
    assert warn.returncode == 0, warn.stdout + warn.stderr
    line = line_of(planted, "sequence_length")
    assert (
        f"::warning file={planted},line={line},title=cfgcheck unknown-native-key::" in warn.stdout
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "litgpt"], "needs the config FILE"),
        (["--from", "litgpt", "no/such.yaml"], "does not exist"),
        (["--from", "axolotl", str(LITGPT)], "names no model: set base_model"),
        (
            [
                "--from",
                "trl",
                str(example("trl", "example_config.yaml")),
                "model_name_or_path=x/unknown",
            ],
            "not a cfgcheck preset",
        ),
        (["--from", "axolotl", str(AXOLOTL), "sequence_len"], "bad override"),
    ],
)
def test_unreadable_inputs_exit_2_with_one_line(args: list[str], message: str) -> None:
    proc = run_cfgcheck("check", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and proc.stderr.count("\n") == 1 and not proc.stdout


def test_memory_from_a_native_file() -> None:
    proc = run_cfgcheck(
        "memory", "--from", "axolotl", str(AXOLOTL), "--gpu", "H100", "--format", "json"
    )
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["fits"] is True and payload["estimate"]["seq_len"] == 8192
    small = run_cfgcheck(
        "memory", "--from", "axolotl", str(AXOLOTL), "sequence_len=1024", "--format", "json"
    )
    assert json.loads(small.stdout)["estimate"]["seq_len"] == 1024


def test_library_call() -> None:
    result = cfgcheck.check_native(AXOLOTL, "axolotl", ["sequence_len=40000"], gpu="H100")
    (finding,) = result.by_rule("axolotl-positions-past-context")
    assert finding.severity == "warning"
    assert str(finding.locations["data.max_seq_length"]) == "<override sequence_len=40000>"


def test_hook_from_checks_each_file(tmp_path: Path) -> None:
    bad = write(
        tmp_path, "bad.yml", AXOLOTL.read_text() + "deepspeed: zero2.json\nfsdp: [full_shard]\n"
    )
    proc = run_cfgcheck("hook", "--from", "axolotl", str(AXOLOTL), str(bad))
    assert proc.returncode == 1, proc.stdout
    assert f"{bad}:{line_of(bad, 'deepspeed')}: deepspeed set here" in proc.stdout
    assert "2 axolotl config(s) checked: failed" in proc.stdout


@pytest.mark.slow
def test_pre_commit_hook_per_format(tmp_path: Path, hook_repo: HookRepo) -> None:
    from tests.test_precommit import git, pre_commit_run

    project = tmp_path / "project"
    (project / "examples").mkdir(parents=True)
    config = project / "examples" / "lora.yml"
    shutil.copy(AXOLOTL, config)
    git(project, "init", "-q")
    git(project, "add", ".")
    git(project, "commit", "-q", "-m", "configs")

    def run_hook() -> subprocess.CompletedProcess[str]:
        return pre_commit_run(hook_repo, "cfgcheck-axolotl", project)

    config.write_text(AXOLOTL.read_text() + "deepspeed: zero2.json\nfsdp: [full_shard]\n")
    git(project, "add", ".")
    bad = run_hook()
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "error[axolotl-deepspeed-with-fsdp]" in bad.stdout
    assert f"examples/lora.yml:{line_of(config, 'fsdp')}: fsdp set here" in bad.stdout
    shutil.copy(AXOLOTL, config)
    git(project, "add", ".")
    good = run_hook()
    assert good.returncode == 0, good.stdout + good.stderr


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    from fastapi.testclient import TestClient

    from cfgcheck.service import ServiceSettings, create_app

    monkeypatch.chdir(REPO)
    settings = ServiceSettings(config_dir=REPO / "conf", allowed_roots=(REPO,))
    with TestClient(create_app(settings)) as c:
        yield c


@requires("fastapi", "httpx")
def test_service_format_requests(client: object) -> None:
    from fastapi.testclient import TestClient

    assert isinstance(client, TestClient)
    text = AXOLOTL.read_text()
    body = {
        "format": "axolotl",
        "config": text,
        "filename": "lora.yml",
        "overrides": ["sequence_len=40000"],
    }
    answer = client.post("/v1/validate", json=body)
    assert answer.status_code == 200, answer.text
    verdict = answer.json()
    finding = next(f for f in verdict["findings"] if f["rule"] == "axolotl-positions-past-context")
    assert finding["severity"] == "warning"
    assert finding["locations"][0] == {"file": "<override sequence_len=40000>", "line": None}
    planted = text.replace("sequence_len: 8192", "sequence_length: 8192")
    typo = client.post(
        "/v1/validate", json={"format": "axolotl", "config": planted, "filename": "lora.yml"}
    ).json()
    unknown = next(f for f in typo["findings"] if f["rule"] == "unknown-native-key")
    line = 1 + planted.splitlines().index("sequence_length: 8192")
    assert unknown["locations"][0] == {"file": "lora.yml", "line": line}
    for refused, detail in [
        ({"format": "axolotl", "config": "base_model: nobody/none\n"}, "not a cfgcheck preset"),
        ({"format": "axolotl", "config": "base_model: /etc\n"}, "paths refused"),
        ({"format": "fairseq", "config": "a: 1\n"}, "invalid native request"),
        ({"format": "axolotl", "config": "a: [" * 80}, "nesting deeper"),
    ]:
        answer = client.post("/v1/validate", json=refused)
        assert answer.status_code == 422 and detail in answer.json()["detail"], answer.text
    schema = client.get("/openapi.json").json()
    assert "NativeRequest" in schema["components"]["schemas"]


@pytest.mark.parametrize("fmt", ["litgpt", "axolotl", "trl"])
def test_check_from_imports_neither_torch_nor_transformers(fmt: str) -> None:
    file = {"litgpt": LITGPT, "axolotl": AXOLOTL, "trl": example("trl", "example_config.yaml")}[fmt]
    code = (
        "import sys\nfrom cfgcheck.cli import main\n"
        f"main(['check', '--from', {fmt!r}, {str(file)!r}])\n"
        "print(sorted(m for m in ('torch', 'transformers', 'hydra') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout + proc.stderr


def test_sweep_with_from_is_refused() -> None:
    proc = run_cfgcheck(
        "check", "--sweep", "--from", "axolotl", str(AXOLOTL), "sequence_len=1024,2048"
    )
    assert proc.returncode == 2 and "--sweep" in proc.stderr, proc.stderr
