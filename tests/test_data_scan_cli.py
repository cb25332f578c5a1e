"""End-to-end: the real ``cfgcheck data`` and ``cfgcheck check --scan-data`` commands on the
shipped conf/ (with the demo tokenizer built from the shipped dataset) and on bad inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.cli import main
from tests.conftest import REPO
from tests.conftest import run_cfgcheck as run
from tests.factories import bpe, save_folder

# The demo tokenizer is no model's tokenizer: a model built for its 1,000 tokens makes the demo
# a clean run (`cfgcheck data` ends with the whole config's verdict, as `check` gives it).
DEMO = ("tokenizer=demo-bpe", "model.vocab_size=1000")


def data_json(*args: str) -> tuple[int, dict[str, Any]]:
    proc = run("data", "--format", "json", *args)
    assert proc.stderr == "", proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_demo_scan_of_the_shipped_dataset() -> None:
    proc = run("data", *DEMO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    samples = sum(1 for line in (REPO / "datasets/alpaca-tiny.jsonl").open() if line.strip())
    assert f"datasets/alpaca-tiny.jsonl: {samples} samples" in proc.stdout
    for word in ("p50", "p99", "histogram", "<- configured", "demo-tokenizer/ tokenizer.json"):
        assert word in proc.stdout
    assert proc.stderr == ""  # no progress bar off a terminal


def test_json_scan_agrees_with_the_tokenizer() -> None:
    from tokenizers import Tokenizer

    code, out = data_json(*DEMO)
    assert code == 0 and out["ok"] is True
    tk = Tokenizer.from_file(str(REPO / "assets/demo-tokenizer/tokenizer.json"))
    template = "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n{output}"
    rows = [json.loads(x) for x in (REPO / "datasets/alpaca-tiny.jsonl").open() if x.strip()]
    lengths = [len(tk.encode(template.format(**r))) for r in rows]
    assert out["scan"]["samples"] == len(rows)
    assert out["scan"]["tokens"] == sum(lengths)
    assert out["scan"]["lengths"]["max"] == max(lengths)
    assert set(out["scan"]["padding_waste"]) == {"max_length", "longest", "packed"}


def test_scan_findings_set_the_exit_code() -> None:
    code, out = data_json(
        *DEMO, "model.block_size=64", "data.max_seq_length=64", "data.truncation=false"
    )
    assert code == 1
    (f,) = [f for f in out["findings"] if f["severity"] == "error"]
    assert f["rule"] == "data-longer-than-block-size"
    assert "block size is only 64" in f["message"]


def test_shipped_conf_without_a_tokenizer_path_is_a_clear_exit_2() -> None:
    proc = run("data")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("cfgcheck: error: the scan needs the real tokenizer")
    assert "tokenizer=demo-bpe" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (["data.paths=[nope.jsonl]"], "data file nope.jsonl does not exist"),
        (["tokenizer.path=nowhere"], "nowhere does not exist"),
        (["data.template='{missing}'"], "no field 'missing' used by data.template"),
    ],
)
def test_unreadable_inputs_exit_2(overrides: list[str], reason: str) -> None:
    proc = run("data", *DEMO, *overrides)
    assert proc.returncode == 2, proc.stdout
    assert reason in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_schema_errors_are_reported_before_scanning() -> None:
    code, out = data_json(*DEMO, "data.max_seq_length=-1")
    assert code == 1 and out["findings"][0]["rule"] == "invalid-value"
    assert "scan" not in out


def test_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "lengths.png"
    proc = run("data", *DEMO, "--png", str(png))
    assert proc.returncode == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_without_matplotlib_is_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    code = main(["data", *DEMO, "--png", str(tmp_path / "x.png")])
    err = capsys.readouterr().err
    assert code == 0 and "--png needs matplotlib" in err and "pip install matplotlib" in err
    assert not (tmp_path / "x.png").exists()


def test_check_scan_data_adds_findings(tmp_path: Path) -> None:
    proc = run(
        "check",
        "--format",
        "json",
        "--scan-data",
        *DEMO,
        "model.vocab_size=1000",
        "data.max_seq_length=48",
    )
    out = json.loads(proc.stdout)
    assert proc.returncode == 0 and "data-truncated" in {f["rule"] for f in out["findings"]}
    proc = run(
        "check",
        "--format",
        "json",
        "--scan-data",
        *DEMO,
        "data.paths=[nope.jsonl]",
        "model.vocab_size=1000",
    )
    out = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert [f["rule"] for f in out["findings"]] == ["data-unreadable"]


def test_check_scan_data_without_tokenizer_path_warns() -> None:
    proc = run("check", "--format", "json", "--scan-data")
    out = json.loads(proc.stdout)
    assert proc.returncode == 0
    assert [f["rule"] for f in out["findings"]] == ["data-scan-skipped"]


def test_relative_tokenizer_path_resolves_from_the_working_directory(tmp_path: Path) -> None:
    tok = bpe()
    save_folder(tok, tmp_path / "tok", pad_token="<unk>")
    (tmp_path / "d.jsonl").write_text('{"text": "The quick brown fox"}\n')
    conf = REPO / "conf"
    proc = run(
        "data",
        "--config-dir",
        str(conf),
        *DEMO,
        "tokenizer.path=tok",
        f"model.vocab_size={tok.get_vocab_size(with_added_tokens=True)}",
        "data.paths=[d.jsonl]",
        "data.template=null",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "d.jsonl: 1 samples" in proc.stdout


def test_default_check_imports_no_heavy_module() -> None:
    code = (
        "import sys; from cfgcheck.cli import main; rc = main(['check']); "
        "heavy = [m for m in ('torch', 'transformers', 'cfgcheck.data', 'matplotlib') "
        "if m in sys.modules]; print(heavy); sys.exit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("[]")


def test_jobs_flag_gives_the_same_scan_and_refuses_zero() -> None:
    reports = []
    for jobs in ("1", "2"):
        code, out = data_json(*DEMO, "--jobs", jobs)
        assert code == 0
        scan = out["scan"]
        del scan["seconds"], scan["jobs"]
        reports.append(scan)
    assert reports[0] == reports[1]
    assert sum(reports[0]["histogram"].values()) == reports[0]["samples"]
    proc = run("data", *DEMO, "--jobs", "0")
    assert proc.returncode == 2 and "must be at least 1" in proc.stderr
    proc = run("check", "--scan-data", "--jobs", "2", *DEMO)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- check --scan-data takes the scan's options (one definition: cli/data.add_scan_args) ---

SHORT = (*DEMO, "data.max_seq_length=48", "--jobs", "1", "--format", "json")


def _findings(*args: str) -> tuple[int, list[dict[str, Any]]]:
    proc = run(*args)
    assert proc.stderr == "", proc.stderr
    return proc.returncode, json.loads(proc.stdout)["findings"]


def test_check_scan_data_samples_as_data_does() -> None:
    """``check --scan-data --sample`` scans the same seeded sample as ``cfgcheck data``:
    the same findings, with the sample's Wilson interval; another seed, another sample."""
    sampled = ("--sample", "50%", "--seed", "3")
    code, found = _findings("check", "--scan-data", *sampled, *SHORT)
    data_code, data_found = _findings("data", *sampled, *SHORT)
    assert (code, found) == (data_code, data_found)
    (truncated,) = [f for f in found if f["rule"] == "data-truncated"]
    assert "Wilson interval" in truncated["message"] and "50% sample" in truncated["message"]
    _, full = _findings("check", "--scan-data", *SHORT)
    (whole,) = [f for f in full if f["rule"] == "data-truncated"]
    assert "Wilson" not in whole["message"] and whole["message"] != truncated["message"]
    _, other = _findings("check", "--scan-data", "--sample", "50%", "--seed", "4", *SHORT)
    assert other != found


def test_check_scan_options_need_scan_data_and_agree(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for extra in (["--sample", "1%"], ["--engine", "ray"], ["--ray-address", "auto"]):
        assert main(["check", *DEMO, *extra]) == 2
        assert "need --scan-data" in capsys.readouterr().err
    assert main(["check", "--scan-data", *DEMO, "--ray-address", "auto"]) == 2
    assert "--ray-address needs --engine ray" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # argparse: the option's own definition refuses it
        main(["check", "--scan-data", *DEMO, "--sample", "0%"])
    assert e.value.code == 2 and "above 0" in capsys.readouterr().err
    # Ray missing is one line and exit 2, not a finding about the data.
    monkeypatch.setitem(sys.modules, "ray", None)
    assert main(["check", "--scan-data", *DEMO, "--engine", "ray", "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "cfgcheck: error: --engine ray needs Ray: pip install 'cfgcheck[ray]'"


@pytest.mark.slow  # starts a local Ray
def test_check_scan_data_on_ray_gives_the_local_findings() -> None:
    pytest.importorskip("ray")
    code, local = _findings("check", "--scan-data", *SHORT)
    ray_code, on_ray = _findings("check", "--scan-data", "--engine", "ray", *SHORT)
    assert (ray_code, on_ray) == (code, local)
    assert "data-truncated" in {f["rule"] for f in on_ray}
