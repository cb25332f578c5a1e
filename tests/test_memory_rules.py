"""gpu-memory and gpu-capability findings, in-process and through the real CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from cfgcheck import check
from cfgcheck.memory import devices

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"
GIB = 1024**3


def rules(*overrides: str) -> dict[str, Any]:
    with devices.use_provider(list):
        result = check(CONF, "config", list(overrides))
    return {f.rule: f for f in result.findings if f.rule.startswith("gpu-")}


def test_default_fits_its_declared_gpu() -> None:
    assert rules() == {}


def test_over_the_gpu_is_an_error_with_savings_per_fix() -> None:
    found = rules("model=llama-2-7b", "trainer.gpu.name=A10G")
    f = found["gpu-memory"]
    assert f.severity == "error" and "A10G" in f.message and "llama-2-7b" in f.message
    by_setting = {fix.overrides: fix.summary for fix in f.fixes}
    assert "saves" in by_setting[("trainer.gradient_checkpointing=true",)]
    # the largest micro batch that fits, with the accumulation that keeps the global batch
    assert (
        "fits"
        in by_setting[("trainer.micro_batch_size=1", "trainer.gradient_accumulation_steps=16")]
    )


def _figures(pattern: str, text: str) -> list[float]:
    match = re.search(pattern, text)
    assert match is not None, text
    return [float(g) for g in match.groups()]


def test_savings_add_up_to_the_peak_the_finding_states() -> None:
    """ "saves X GiB (-> Y GiB)": X + Y is the peak of the message, for every fix (the peak is
    the estimate on the GPU, its allocator cache capped by what the GPU has left)."""
    for overrides in (
        ("model=llama-2-7b", "trainer.gpu.name=A10G"),
        ("model=llama-2-13b", "trainer=full", "data.max_seq_length=3063"),
    ):
        f = rules(*overrides)["gpu-memory"]
        [peak] = _figures(r"estimated peak ([\d.]+) GiB", f.message)
        assert f.fixes
        for fix in f.fixes:
            saved, after = _figures(r"saves ([\d.]+) GiB \(-> ([\d.]+) GiB", fix.summary)
            assert round(saved + after, 1) == peak, (fix.summary, peak)


def test_the_suggested_fix_passes() -> None:
    fixed = rules(
        "model=llama-2-7b", "trainer.gpu.name=A10G", "trainer.gradient_checkpointing=true"
    )
    assert "gpu-memory" not in fixed


def test_above_90_percent_is_a_warning() -> None:
    from cfgcheck.memory.estimate import estimate

    with devices.use_provider(list):
        cfg = check(CONF, "config", []).config
    assert cfg is not None
    need = estimate(cfg.model, cfg.data, cfg.trainer).total_bytes / GIB
    found = rules(f"+trainer.gpu.memory_gib={need / 0.95:.3f}", "trainer.gpu.name=null")
    assert found["gpu-memory"].severity == "warning"


def test_no_gpu_known_is_an_info_not_a_silent_pass() -> None:
    f = rules("trainer.gpu=null")["gpu-memory"]
    assert f.severity == "info" and "could not check" in f.message


def test_unknown_gpu_name_is_an_error() -> None:
    found = rules("trainer.gpu.name=GTX480")
    f = found["gpu-name"]  # reported once, by the gpu-name rule (tests/test_gpu_names.py)
    assert f.severity == "error" and "A10G" in f.hint and "gpu-memory" not in found


def test_live_gpu_free_memory_is_used() -> None:
    def provider() -> list[devices.Device]:
        return [devices.Device(0, "NVIDIA L4", 22 * GIB, 4 * GIB, (8, 9), "live")]

    with devices.use_provider(provider):
        result = check(CONF, "config", [])
    (f,) = [f for f in result.findings if f.rule == "gpu-memory"]
    assert f.severity == "error" and "live GPU 0" in f.message


def test_bf16_and_flash_on_a_gpu_without_them() -> None:
    found = [
        f.message
        for f in check(CONF, "config", ["trainer.gpu.name=T4", "trainer.attention=flash"]).errors
    ]
    assert any("bf16" in m and "7.5" in m for m in found)
    assert any("FlashAttention" in m for m in found)
    assert not [
        f
        for f in check(CONF, "config", ["trainer.gpu.name=A10G"]).errors
        if f.rule == "gpu-capability"
    ]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, devices.NO_LIVE_ENV: "1"}
    return subprocess.run(
        [sys.executable, "-m", "cfgcheck", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_cli_memory_text_and_json_agree() -> None:
    text = cli("memory")
    assert text.returncode == 0, text.stderr
    assert "activations" in text.stdout and "available:" in text.stdout
    proc = cli("memory", "--format", "json")
    data = json.loads(proc.stdout)
    comps = data["estimate"]["components"]
    assert abs(sum(c["bytes"] for c in comps) / GIB - data["estimate"]["total_gib"]) < 0.01
    assert f"{data['estimate']['total_gib']:.2f}" in text.stdout
    assert data["fits"] is True and data["available"]["device"] == "A100-80GB"


def test_cli_memory_over_the_gpu_exits_1() -> None:
    proc = cli("memory", "model=llama-2-7b", "trainer.gpu.name=A10G", "--format", "json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["fits"] is False


def test_cli_check_json_has_memory_findings() -> None:
    proc = cli("check", "--format", "json", "model=llama-2-7b", "trainer.gpu.name=A10G")
    assert proc.returncode == 1
    found = {f["rule"]: f for f in json.loads(proc.stdout)["findings"]}
    assert found["gpu-memory"]["severity"] == "error"
    ok = cli(
        "check", "model=llama-2-7b", "trainer.gpu.name=A10G", "trainer.gradient_checkpointing=true"
    )
    assert ok.returncode == 0, ok.stdout


def test_check_fast_path_does_not_import_torch() -> None:
    code = (
        "import sys, cfgcheck; cfgcheck.check('conf', 'config', ['trainer.gpu=null']); "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert proc.stdout.split() == ["False", "False"], proc.stderr


def test_a_tiny_declared_memory_is_an_error_not_a_crash() -> None:
    # found by the service fuzzer: memory_gib=5e-324 rounds to 0 bytes
    f = rules("+trainer.gpu.memory_gib=5e-324", "trainer.gpu.name=null")["gpu-memory"]
    assert f.severity == "error"


def test_fits_only_within_the_stated_margin() -> None:
    """An estimate under the GPU but not with its margin: "may not fit", a warning, never
    "fits"; the JSON says so and the exit status stays 0 (the estimate does fit)."""
    base = json.loads(cli("memory", "--format", "json").stdout)["estimate"]
    between = (base["total_gib"] + base["upper_gib"]) / 2
    proc = cli("memory", "--format", "json", f"++trainer.gpu.memory_gib={between:.3f}")
    data = json.loads(proc.stdout)
    assert proc.returncode == 0
    assert data["verdict"] == "may not fit" and data["fits"] is False
    text = cli("memory", f"++trainer.gpu.memory_gib={between:.3f}").stdout
    available = next(line for line in text.splitlines() if line.startswith("available:"))
    assert available.endswith("MAY NOT FIT")
    found = rules(f"++trainer.gpu.memory_gib={between:.3f}")
    assert (
        found["gpu-memory"].severity == "warning" and "may not fit" in found["gpu-memory"].message
    )


def test_uncalibrated_settings_are_named_with_a_wider_margin() -> None:
    data = json.loads(cli("memory", "--format", "json", "++trainer.optimizer=sgd").stdout)
    est = data["estimate"]
    assert est["calibrated"] is False and est["margin"] == 0.25
    assert est["uncalibrated"] == ["trainer.optimizer=sgd"]
    text = cli("memory", "++trainer.optimizer=sgd").stdout
    assert "not calibrated on measured runs: trainer.optimizer=sgd" in text
    calibrated = json.loads(cli("memory", "--format", "json").stdout)["estimate"]
    assert calibrated["calibrated"] is True and calibrated["margin"] == 0.10


def test_png_breakdown(tmp_path: Path) -> None:
    out = tmp_path / "memory.png"
    proc = cli("memory", "model=llama-2-7b", "trainer.gpu.name=A10G", "--png", str(out))
    assert proc.returncode == 1, proc.stderr  # does not fit; the picture is written anyway
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_without_matplotlib_names_the_extra(tmp_path: Path, monkeypatch: Any) -> None:
    import pytest

    from cfgcheck.memory.estimate import estimate
    from cfgcheck.memory.plot import write_png
    from cfgcheck.plotting import PlotUnavailableError

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with devices.use_provider(list):
        cfg = check(CONF, "config", []).config
    assert cfg is not None
    est = estimate(cfg.model, cfg.data, cfg.trainer)
    with pytest.raises(PlotUnavailableError, match=r"cfgcheck\[plot\]"):
        write_png(est, tmp_path / "m.png", None, "GPU", None)
