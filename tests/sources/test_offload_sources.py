"""trainer.offload from every source, at the file:line that says it, on published configs:
Axolotl's ``deepspeed_configs/zero3_bf16_cpuoffload_*.json`` (native/axolotl/deepspeed_configs/
SOURCES.md) and ``fsdp_config.fsdp_offload_params`` (examples/llama-2/qlora-fsdp.yml),
LLaMA-Factory's ``examples/deepspeed/ds_z3_offload_config.json`` and ``ds_z2_offload_config.json``
(native/llamafactory/SOURCES.md), an accelerate config's ``deepspeed_config`` (alignment-handbook
deepspeed_zero3.yaml, native/trl/SOURCES.md). Launch scripts' ``--deepspeed`` JSON and
torchtune's ``fsdp_cpu_offload`` are in test_launch_deepspeed.py and test_torchtune.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cfgcheck.memory.estimate import estimate
from cfgcheck.sources import check_native, load_native
from tests.sources.support import NATIVE, line_of

AXOLOTL = NATIVE / "axolotl"
LF = NATIVE / "llamafactory"
DS = AXOLOTL / "deepspeed_configs"


def _where(loaded: object, path: str) -> tuple[str, int | None]:
    at = loaded.source_map.lookup(path)  # type: ignore[attr-defined]
    assert at is not None, path
    return Path(at.file).name, at.line


def _json_line(path: Path, key: str, after: str) -> int:
    """The line of ``"key"`` after the line holding ``"after"`` in a JSON file."""
    lines = path.read_text().splitlines()
    start = next(i for i, x in enumerate(lines) if f'"{after}"' in x)
    return next(i for i, x in enumerate(lines) if i > start and f'"{key}"' in x) + 1


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("zero3_bf16_cpuoffload_all.json", {"optimizer": "cpu", "params": "cpu"}),
        ("zero3_bf16_cpuoffload_params.json", {"params": "cpu"}),
    ],
)
def test_axolotl_deepspeed_json(name: str, expected: dict[str, str]) -> None:
    ds = DS / name
    loaded = load_native(AXOLOTL / "llama-3-lora-1b.yml", "axolotl", [f"deepspeed={ds}"])
    assert loaded.config["trainer"]["strategy"] == "zero3"
    assert loaded.config["trainer"]["offload"] == expected
    assert _where(loaded, "trainer.offload.params") == (
        name,
        _json_line(ds, "device", "offload_param"),
    )
    if "optimizer" in expected:
        line = _json_line(ds, "device", "offload_optimizer")
        assert _where(loaded, "trainer.offload.optimizer") == (name, line)


def test_axolotl_fsdp_offload_params() -> None:
    qlora = AXOLOTL / "llama-2-qlora-fsdp.yml"
    loaded = load_native(qlora, "axolotl")
    assert loaded.config["trainer"]["strategy"] == "fsdp"
    assert loaded.config["trainer"]["offload"] == {"optimizer": "cpu", "params": "cpu"}
    assert _where(loaded, "trainer.offload.params") == (
        qlora.name,
        line_of(qlora, "fsdp_offload_params"),
    )
    off = load_native(qlora, "axolotl", ["fsdp_config.fsdp_offload_params=false"])
    assert "offload" not in off.config["trainer"]


@pytest.fixture
def in_llamafactory_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(LF)  # llamafactory-cli opens paths from its root
    yield


@pytest.mark.usefixtures("in_llamafactory_root")
def test_llamafactory_offload_examples() -> None:
    sft = LF / "examples" / "train_full" / "llama3_full_sft.yaml"
    z3 = "examples/deepspeed/ds_z3_offload_config.json"
    loaded = load_native(sft, "llamafactory", [f"deepspeed={z3}"])
    assert loaded.config["trainer"]["strategy"] == "zero3"
    assert loaded.config["trainer"]["offload"] == {"optimizer": "cpu", "params": "cpu"}
    line = _json_line(LF / z3, "device", "offload_param")
    assert _where(loaded, "trainer.offload.params") == ("ds_z3_offload_config.json", line)
    z2 = "examples/deepspeed/ds_z2_offload_config.json"
    loaded = load_native(sft, "llamafactory", [f"deepspeed={z2}"])
    assert loaded.config["trainer"]["offload"] == {"optimizer": "cpu"}
    # the published example on 8 x H100 with and without the offload: the estimate drops and
    # the host memory appears
    kept = check_native(sft, "llamafactory", ["deepspeed=examples/deepspeed/ds_z3_config.json"])
    moved = check_native(sft, "llamafactory", [f"deepspeed={z3}"])
    assert kept.config is not None and moved.config is not None
    a = estimate(kept.config.model, kept.config.data, kept.config.trainer)
    b = estimate(moved.config.model, moved.config.data, moved.config.trainer)
    assert b.total_bytes < a.total_bytes and b.host_bytes > 0 == a.host_bytes


def test_accelerate_deepspeed_section_is_read(tmp_path: Path) -> None:
    # alignment-handbook's deepspeed_zero3.yaml says none for both: offload stays off, located
    zero3 = NATIVE / "trl" / "accelerate" / "ah-zero3.yaml"
    sft = NATIVE / "trl" / "example_config.yaml"
    loaded = load_native(sft, "trl", options={"accelerate_config": str(zero3)})
    assert loaded.config["trainer"]["offload"] == {"optimizer": "none", "params": "none"}
    assert _where(loaded, "trainer.offload.optimizer") == (
        zero3.name,
        line_of(zero3, "offload_optimizer_device"),
    )
    # the same file with the optimizer offloaded to the CPU, as `accelerate config` writes it
    cpu = tmp_path / "zero3-offload.yaml"
    cpu.write_text(
        zero3.read_text().replace("offload_optimizer_device: none", "offload_optimizer_device: cpu")
    )
    loaded = load_native(sft, "trl", options={"accelerate_config": str(cpu)})
    assert loaded.config["trainer"]["offload"]["optimizer"] == "cpu"


def test_python_training_arguments_deepspeed(tmp_path: Path) -> None:
    # TrainingArguments(deepspeed="ds.json") in a user's script: LLaMA-Factory's published
    # ZeRO-3 offload JSON next to it, read for its stage and offload
    ds = tmp_path / "ds.json"
    ds.write_text((LF / "examples" / "deepspeed" / "ds_z3_offload_config.json").read_text())
    script = tmp_path / "train.py"
    script.write_text(
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-2-7b-hf')\n"
        "args = TrainingArguments(output_dir='o', per_device_train_batch_size=1,\n"
        "                         deepspeed='ds.json')\n"
        "Trainer(model=model, args=args).train()\n"
    )
    loaded = load_native(script, "python")
    assert loaded.config["trainer"]["strategy"] == "zero3"
    assert loaded.config["trainer"]["offload"] == {"optimizer": "cpu", "params": "cpu"}
    line = _json_line(ds, "device", "offload_optimizer")
    assert _where(loaded, "trainer.offload.optimizer") == ("ds.json", line)
