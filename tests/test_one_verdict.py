"""One verdict everywhere: check, data, memory, hook, the service and @cfgcheck.main report the
same findings for the same config; a command that shows a part (the memory table, the scan)
still ends with the whole config's verdict and exit status."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from cfgcheck.cli import main
from tests.conftest import CONF, REPO, run_cfgcheck

# The demo tokenizer (a real tokenizer.json, so `cfgcheck data` can scan) with a matching model
# vocabulary, plus one variant per kind of finding.
BASE = ("tokenizer=demo-bpe", "model.vocab_size=1000")
CONFIGS = {
    "clean": BASE,
    "vocab-mismatch": ("tokenizer=demo-bpe",),
    "two-devices": (*BASE, "trainer.devices=2"),
    "too-long": (*BASE, "data.max_seq_length=3063"),
    "rtx3090-7b": (*BASE, "model=llama-2-7b", "model.vocab_size=1000", "trainer.gpu.name=RTX3090"),
    "a100-ambiguous": (*BASE, "trainer.gpu.name=A100"),
    "learning-rate": (*BASE, "trainer.learning_rate=0.5"),
}
Key = tuple[str, str, tuple[str, ...]]
_HEAD = re.compile(r"^(error|warning|info)\[([a-z0-9-]+)\]", re.MULTILINE)


def keys(findings: list[dict[str, object]]) -> set[Key]:
    return {(str(f["severity"]), str(f["rule"]), tuple(f["paths"])) for f in findings}  # type: ignore[arg-type]


def heads(text: str) -> set[tuple[str, str]]:
    return set(_HEAD.findall(text))


def json_run(*args: str) -> tuple[int, dict[str, object]]:
    """``cfgcheck ARGS --format json`` from the repository root: cfgcheck's command line
    (``cfgcheck.cli.main``, what the installed command runs) in this process; the installed
    command itself runs below (the issue's two cases, the hook)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(REPO), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "--format", "json"])
    assert code in (0, 1), err.getvalue()
    return code, json.loads(out.getvalue())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_check_memory_and_data_agree(name: str) -> None:
    overrides = CONFIGS[name]
    code, checked = json_run("check", *overrides)
    expected = keys(checked["findings"])  # type: ignore[arg-type]
    assert (code == 0) == checked["ok"]

    mem_code, memory = json_run("memory", *overrides)
    assert keys(memory["findings"]) == expected  # type: ignore[arg-type]
    assert mem_code == code and memory["ok"] == checked["ok"]

    data_code, data = json_run("data", *overrides)
    scan = {k for k in keys(data["findings"]) if k[1].startswith("data-")}  # type: ignore[arg-type]
    assert keys(data["findings"]) - scan == expected  # type: ignore[arg-type]
    assert data_code == (1 if code == 1 or any(k[0] == "error" for k in scan) else 0)


def test_the_issues_two_cases_end_with_the_whole_verdict() -> None:
    data = run_cfgcheck("data", "tokenizer=demo-bpe")
    assert data.returncode == 1 and "error[vocab-mismatch]" in data.stdout
    assert "config OK" not in data.stdout
    memory = run_cfgcheck("memory", "model=llama-2-7b", "trainer.gpu.name=RTX3090")
    assert memory.returncode == 1 and "error[gpu-memory]" in memory.stdout
    assert "not checked" not in memory.stdout
    unknown = run_cfgcheck("memory", "trainer.gpu.name=RTX9090")
    assert unknown.returncode == 1 and "error[gpu-name]" in unknown.stdout


@pytest.mark.parametrize("name", ["two-devices", "learning-rate", "a100-ambiguous", "clean"])
def test_service_agrees_with_check(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from cfgcheck.service import ServiceSettings, create_app

    overrides = list(CONFIGS[name])
    _, checked = json_run("check", *overrides)
    monkeypatch.chdir(REPO)
    settings = ServiceSettings(config_dir=CONF, allowed_roots=(REPO,))
    with TestClient(create_app(settings)) as client:
        r = client.post("/v1/validate", json={"config_name": "config", "overrides": overrides})
    assert r.status_code == 200, r.text
    served = r.json()
    assert keys(served["findings"]) == keys(checked["findings"])  # type: ignore[arg-type]
    assert served["ok"] == checked["ok"]


def _conf_with(tmp_path: Path, extra_yaml: str) -> Path:
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    shutil.copytree(REPO / "datasets", tmp_path / "datasets")
    primary = conf / "config.yaml"
    primary.write_text(primary.read_text() + extra_yaml)
    return conf


def test_hook_and_hydra_main_agree_with_check(tmp_path: Path) -> None:
    """The same config, written into the primary: check, the hook and @cfgcheck.main."""
    conf = _conf_with(tmp_path, "  devices: 2\n  learning_rate: 0.5\n")
    checked = run_cfgcheck("check", cwd=tmp_path)
    expected = heads(checked.stdout)
    assert ("error", "strategy-device-count") in expected
    assert ("warning", "learning-rate-range") in expected

    hook = run_cfgcheck("hook", "conf/config.yaml", cwd=tmp_path)
    assert hook.returncode == checked.returncode == 1
    assert heads(hook.stdout) == expected

    from tests.test_hydra_main import APP, run_app

    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "markers").mkdir()
    main = run_app(tmp_path)
    assert main.returncode == 1
    assert heads(main.stderr) == expected
    assert conf.is_dir()
