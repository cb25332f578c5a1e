"""LLaMA-Factory v1 (``USE_V1=1 llamafactory-cli sft FILE``): its published ``examples/v1``
configs get a verdict, v1 files are told from v0 ones, and the keys reach cfgcheck's sections
with their lines: ``dist_config: {name: fsdpturbo, ep_size: N}`` becomes
``trainer.expert_parallel_size``.

The examples are copied unchanged under tests/sources/native/llamafactory/examples/v1/ (paths
and commit in their header and SOURCES.md); the tests run from that folder, as
llamafactory-cli runs from its repository root. The key list is generated from the source by
scripts/gen_llamafactory_v1_keys.py (cfgcheck/sources/keys/llamafactory_v1.json)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult
from cfgcheck.sources import check_native, load_native
from cfgcheck.sources.llamafactory_v1 import is_v1, spec
from tests.conftest import requires
from tests.sources.support import NATIVE, is_default, line_of, one, write

ROOT = NATIVE / "llamafactory"
V1 = Path("examples/v1")
EP = V1 / "train_full/train_full_qwen3_moe_fsdpturbo_ep_fsdp.yaml"
LORA = V1 / "train_lora/train_lora_sft.yaml"
QLORA = V1 / "train_qlora/quantization.yaml"
ULYSSES = V1 / "train_full/train_full_ulysses_cp.yaml"
EXAMPLES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / V1).rglob("*.yaml"))
# Models that are neither presets nor cached here: a preset of the same family instead
# (Qwen3.5 is newer than the installed transformers' families).
MODEL_FOR = {"Qwen/Qwen3-4B": "Qwen/Qwen3-8B", "Qwen/Qwen3.5-0.8B": "Qwen/Qwen3-0.6B"}
MOE = "Qwen/Qwen3-30B-A3B"


@pytest.fixture(autouse=True)
def in_llamafactory_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("HF_HUB_CACHE", str(ROOT / "no-hub-cache"))
    yield


def model_override(name: str) -> list[str]:
    text = (ROOT / name).read_text()
    model = next(
        line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model:")
    )
    if name == str(EP):
        return [f"model={MOE}"]
    return [f"model={MODEL_FOR[model]}"] if model in MODEL_FOR else []


def check(file: Path | str, *overrides: str, gpu: str | None = None) -> CheckResult:
    return check_native(file, "llamafactory", list(overrides), gpu=gpu)


def rules(result: CheckResult) -> list[tuple[str, str]]:
    return [(f.rule, f.message) for f in result.findings]


def test_every_v1_example_is_copied() -> None:
    assert len(EXAMPLES) == 17
    for name in EXAMPLES:
        head = (ROOT / name).read_text().splitlines()[:2]
        assert head[0] == f"# Copied unchanged from hiyouga/LLaMA-Factory, {name}"
        assert head[1] == f"# at commit {spec()['commit']}."


@pytest.mark.parametrize("name", EXAMPLES)
def test_published_v1_examples_get_a_verdict(name: str) -> None:
    loaded = load_native(name, "llamafactory", model_override(name))
    assert loaded.format.name == "llamafactory-v1"
    result = check(name, *model_override(name))
    expected = {"gpu-memory"}  # no GPU visible: the estimate is an info
    if name == str(ULYSSES):
        # bf16: false under fsdp2: fsdp2.py get_mp_policy computes in fp32, and transformers'
        # flash_attention_forward casts fp32 q/k/v only to the first Linear's weight dtype
        # (integrations/flash_attention.py get_target_dtype), FSDP2's unsharded fp32 one
        expected.add("flash-attention-precision")
    else:
        assert result.ok, rules(result)
    assert {f.rule for f in result.findings} <= expected, rules(result)


def test_v1_and_v0_files_are_told_apart() -> None:
    v0 = ROOT / "examples/train_lora/llama3_lora_sft.yaml"
    assert load_native(v0, "llamafactory").format.name == "llamafactory"
    assert load_native(LORA, "llamafactory", ["model=Qwen/Qwen3-8B"]).format.name == (
        "llamafactory-v1"
    )
    assert load_native(LORA, "llamafactory-v1", ["model=Qwen/Qwen3-8B"]).format.name == (
        "llamafactory-v1"
    )
    # --framework-version v0 reads it as v0, which finds no model_name_or_path in it
    with pytest.raises(ConfigLoadError, match="set model_name_or_path"):
        load_native(LORA, "llamafactory", options={"framework_version": "v0"})
    assert is_v1({"model": "x", "dist_config": {}}) and not is_v1({"model_name_or_path": "x"})
    # a key of both versions alone does not say v1 (cutoff_len is v0's too)
    assert not is_v1({"cutoff_len": 1024, "learning_rate": 1e-4})


def test_expert_parallel_reaches_the_trainer() -> None:
    loaded = load_native(EP, "llamafactory", [f"model={MOE}"])
    t, smap = loaded.config["trainer"], loaded.source_map
    # interface.py FSDPTurboParams.ep_size; fsdpturbo.py: ep divides dp = world // cp_size
    assert (t["expert_parallel_size"], t["devices"], t["strategy"]) == (16, 16, "fsdp")
    line = line_of(ROOT / EP, "ep_size")
    for path in ("trainer.expert_parallel_size", "trainer.devices"):
        location = smap.lookup(path)
        assert location is not None and location.line == line, path
    assert loaded.config["data"]["max_seq_length"] == 256
    result = check(EP, f"model={MOE}", gpu="H100")
    assert result.ok, rules(result)
    from cfgcheck.memory import estimate

    cfg = result.config
    assert cfg is not None
    est = estimate(cfg.model, cfg.data, cfg.trainer)
    # full sharding over the 16 GPUs already divides every parameter by 16: expert parallelism
    # changes what a GPU holds, not its share (docs/memory.md "Expert parallelism"), and the
    # estimate says it is not measured on a GPU
    assert any("expert_parallel_size=16" in u for u in est.uncalibrated), est.uncalibrated


def test_ep_size_needs_fsdpturbo() -> None:
    """FSDP2Params has no ep_size: parse_params raises "Unknown params for
    DistributedPlugin.FSDP2Params: ['ep_size']" (v1/utils/plugin.py)."""
    result = check(EP, f"model={MOE}", "dist_config.name=fsdp2")
    found = {f.paths[0]: f for f in result.by_rule("unknown-native-key")}
    assert set(found) == {"dist_config.ep_size", "dist_config.ep_dispatcher"}
    f = found["dist_config.ep_size"]
    assert f.severity == "error" and "Unknown params" in f.message
    assert check(EP, f"model={MOE}").ok  # fsdpturbo has both


def test_a_misspelled_key_is_refused() -> None:
    result = check(LORA, "model=Qwen/Qwen3-8B", "micro_bach_size=2")
    f = one(result, "unknown-native-key")
    assert f.paths == ("micro_bach_size",) and "micro_batch_size" in f.hint


def test_mapping_of_the_lora_example() -> None:
    loaded = load_native(LORA, "llamafactory", ["model=Qwen/Qwen3-8B"])
    cfg, smap = loaded.config, loaded.source_map
    t, d = cfg["trainer"], cfg["data"]
    assert t["lora"] == {"rank": 16, "alpha": 32.0, "dropout": 0.05, "targets": ["all-linear"]}
    assert (t["finetuning"], t["quantization"], t["strategy"]) == ("lora", "none", "fsdp")
    assert (t["micro_batch_size"], t["gradient_accumulation_steps"]) == (1, 1)
    assert (t["precision"], t["gradient_checkpointing"], t["attention"]) == (
        "bf16-true",
        True,
        "sdpa",
    )
    assert (t["optimizer"], t["loss_chunking"], t["learning_rate"]) == ("adamw", "none", 1e-4)
    assert (d["max_seq_length"], d["collator"], d["padding"]) == (2048, "padded", "longest")
    for path, key in [
        ("trainer.lora.rank", "r"),
        ("trainer.lora.alpha", "lora_alpha"),
        ("trainer.lora.targets", "target_modules"),
        ("trainer.micro_batch_size", "micro_batch_size"),
        ("data.max_seq_length", "cutoff_len"),
        ("trainer.strategy", "dcp_path"),  # name: fsdp2 is the line above dcp_path
    ]:
        location = smap.lookup(path)
        line = line_of(ROOT / LORA, key) - (key == "dcp_path")
        assert location is not None and location.line == line, path
    for path in ("trainer.gradient_checkpointing", "trainer.precision", "trainer.optimizer"):
        assert is_default(smap.lookup(path), "LLaMA-Factory v1"), path


def test_defaults_are_v1s(tmp_path: Path) -> None:
    file = write(tmp_path, "min.yaml", "model: Qwen/Qwen3-8B\npeft_config:\n  name: lora\n")
    loaded = load_native(file, "llamafactory")
    t, d = loaded.config["trainer"], loaded.config["data"]
    # LoraParams r=8, lora_alpha=16, lora_dropout=0.05, target_modules="all";
    # TrainingArguments micro_batch_size=1, cutoff_len=2048, enable_activation_checkpointing
    assert t["lora"] == {"rank": 8, "alpha": 16.0, "dropout": 0.05, "targets": ["all-linear"]}
    assert (t["micro_batch_size"], d["max_seq_length"], t["gradient_checkpointing"]) == (
        1,
        2048,
        True,
    )
    assert t["strategy"] == "single"
    where = loaded.source_map.lookup("trainer.lora.rank")
    assert where is not None and "peft.py:38 LoraParams r" in where.file
    where = loaded.source_map.lookup("data.max_seq_length")
    assert where is not None and "training_args.py:41 TrainingArguments" in where.file


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([], {"finetuning": "qlora", "quantization": "nf4-dq"}),  # BnbParams defaults
        (["quant_config.double_quantization=false"], {"quantization": "nf4"}),
        (["quant_config.quantization_bit=8"], {"finetuning": "lora", "quantization": "int8"}),
        (["~quant_config"], {"finetuning": "lora", "quantization": "none"}),
        (["global_batch_size=8"], {"gradient_accumulation_steps": 8}),
        (["enable_activation_checkpointing=false"], {"gradient_checkpointing": False}),
        (["flash_attn=eager"], {"attention": "eager"}),
        (["batching_strategy=padding_free"], {"collator": "packed"}),
        (["bf16=false"], {"precision": "32-true"}),
        (["cp_size=2"], {"context_parallel": 2, "devices": 2}),
        (["~dist_config"], {"strategy": "single", "precision": "bf16-true"}),
    ],
)
def test_derived_values(overrides: list[str], expected: dict[str, object]) -> None:
    cfg = load_native(QLORA, "llamafactory", overrides).config
    flat = {**cfg["data"], **cfg["trainer"]}
    assert {k: flat.get(k) for k in expected} == expected


def test_deepspeed_stage_from_the_named_file() -> None:
    cfg = load_native(V1 / "train_full/train_full_deepspeed.yaml", "llamafactory").config
    assert cfg["trainer"]["strategy"] == "zero3"  # examples/deepspeed/ds_z3_config.json


def test_the_key_list_is_generated() -> None:
    data = json.loads(
        (
            Path(__file__).resolve().parents[2] / "cfgcheck/sources/keys/llamafactory_v1.json"
        ).read_text()
    )
    assert data["generated_by"] == "scripts/gen_llamafactory_v1_keys.py"
    assert data["keys"]["micro_batch_size"]["where"].endswith(
        "training_args.py:33 TrainingArguments"
    )
    assert "ep_size" in data["plugins"]["dist_config"]["fsdpturbo"]["fields"]
    assert "ep_size" not in data["plugins"]["dist_config"]["fsdp2"]["fields"]


def upstream_interface(tmp_path: Path) -> Any:
    """LLaMA-Factory's own ``v1/utils/plugin.py`` and ``distributed/interface.py`` (copied
    verbatim under upstream/v1/), imported in a package laid out like theirs; their two other
    imports (its logger, ``BaseDistributed``) are stubs that raise nothing."""
    import importlib
    import sys

    root = tmp_path / "lfv1"
    dist = root / "plugins" / "trainer_plugins" / "distributed"
    dist.mkdir(parents=True)
    (root / "utils").mkdir()
    for folder in (root, root / "utils", root / "plugins", dist.parent, dist):
        (folder / "__init__.py").write_text("")
    (root / "utils" / "logging.py").write_text(
        "class _Logger:\n    def warning_rank0_once(self, *a, **k):\n        pass\n\n\n"
        "def get_logger(name):\n    return _Logger()\n"
    )
    (dist / "base.py").write_text("class BaseDistributed:\n    pass\n")
    upstream = ROOT / "upstream" / "v1"
    (root / "utils" / "plugin.py").write_text((upstream / "plugin.py").read_text())
    (dist / "interface.py").write_text((upstream / "interface.py").read_text())
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module("lfv1.plugins.trainer_plugins.distributed.interface")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "lfv1" or m.startswith("lfv1.")]:
            del sys.modules[name]


def test_the_plugin_refusal_is_llamafactorys_own(tmp_path: Path) -> None:
    iface = upstream_interface(tmp_path)
    with pytest.raises(ValueError) as e:
        iface.DistributedPlugin.parse_params({"name": "fsdp2", "ep_size": 4}, iface.FSDP2Params)
    result = check(V1 / "train_full/train_full_fsdp2.yaml", "dist_config.ep_size=4")
    f = one(result, "unknown-native-key")
    assert f'"ValueError: {e.value}"' in f.message
    # fsdpturbo takes it, and refuses a size below one as cfgcheck's schema does
    params = iface.DistributedPlugin.parse_params(
        {"name": "fsdpturbo", "ep_size": 16, "ep_dispatcher": "eager"}, iface.FSDPTurboParams
    )
    assert params.ep_size == 16
    with pytest.raises(ValueError, match="ep_size must be positive"):
        iface.FSDPTurboParams(ep_size=0)


# --- entry points ------------------------------------------------------------------------------

FSDP2 = V1 / "train_full/train_full_fsdp2.yaml"


def test_cli_reads_v1_without_torch() -> None:
    import subprocess
    import sys

    from tests.conftest import run_cfgcheck

    for fmt in ("llamafactory", "llamafactory-v1"):
        ok = run_cfgcheck("check", "--from", fmt, str(FSDP2), "--gpu", "H100", cwd=ROOT)
        assert ok.returncode == 0 and "config OK" in ok.stdout, ok.stdout + ok.stderr
    code = (
        "import sys\nfrom cfgcheck.cli import main\n"
        f"main(['check', '--from', 'llamafactory', {str(FSDP2)!r}])\n"
        "print(sorted(m for m in ('torch', 'transformers', 'hydra') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout + proc.stderr


@requires("fastapi", "httpx")
def test_the_service_reads_a_v1_document() -> None:
    from fastapi.testclient import TestClient

    from cfgcheck.service import ServiceSettings, create_app
    from tests.conftest import REPO

    settings = ServiceSettings(config_dir=REPO / "conf", allowed_roots=(ROOT,))
    text = (ROOT / FSDP2).read_text()
    with TestClient(create_app(settings)) as client:
        answer = client.post(
            "/v1/validate",
            json={"format": "llamafactory", "config": text, "overrides": ["dist_config.ep_size=4"]},
        )
        assert answer.status_code == 200, answer.text
        unknown = next(f for f in answer.json()["findings"] if f["rule"] == "unknown-native-key")
        assert "FSDP2Params" in unknown["message"]


def test_fsdpturbo_needs_a_model_type_it_has_a_spec_for() -> None:
    """fsdpturbo.py FSDPTurboFSDP2Engine.prepare_model -> prepare_model_ep: "No FSDPTurbo EP
    spec is registered for model_type=..." for a type without @FSDPTurboEPModelSpec.register
    (read from the source, generated into the key list; not run: it imports fsdp_turbo, a GPU
    package, first)."""
    assert set(spec()["fsdpturbo_model_types"]) == {"qwen3_moe", "qwen3_5_moe"}
    dense = check(EP, "model=Qwen/Qwen3-8B")
    f = one(dense, "llamafactory-v1-fsdpturbo-model")
    assert "No FSDPTurbo EP spec is registered for model_type=qwen3." in f.message
    location = f.locations["dist_config.name"]
    assert location is not None and location.line == line_of(ROOT / EP, "ep_size") - 1
    assert not check(EP, f"model={MOE}").by_rule("llamafactory-v1-fsdpturbo-model")
    # fsdp2 takes any model
    fsdp2 = check(EP, "model=Qwen/Qwen3-8B", "dist_config.name=fsdp2", "~dist_config.ep_size")
    assert not fsdp2.by_rule("llamafactory-v1-fsdpturbo-model")
