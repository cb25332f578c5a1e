"""Expert parallelism (cfgcheck/memory/expert_parallel.py): per-GPU weights, gradients and
optimizer states of a mixture-of-experts model with the routed experts split over
``trainer.expert_parallel_size`` GPUs, against the per-module parameter counts of the model
transformers itself builds on the meta device from the published config.json; the
divisibility rule; Axolotl's published expert-parallel examples (copied under
tests/sources/native/axolotl with their source) mapped to the fields."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.memory import sharding
from cfgcheck.memory.estimate import GIB, estimate
from cfgcheck.models.resolve import resolve_pretrained
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig
from cfgcheck.sources import check_native, load_native
from cfgcheck.validate import validate
from tests.conftest import requires
from tests.model_folders import hub_cache, write_config
from tests.model_folders_recent import RECENT
from tests.sources.support import example, line_of

pytestmark = requires("torch", "transformers")

QWEN3_MOE = "Qwen/Qwen3-30B-A3B"
QWEN15_MOE = "Qwen/Qwen1.5-MoE-A2.7B"  # 60 routed experts and a shared expert


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def model_of(tmp_path: Path, hub_id: str) -> ModelConfig:
    folder = write_config(tmp_path / hub_id.split("/")[1], RECENT[hub_id])
    values = {k: v.value for k, v in resolve_pretrained(str(folder)).values.items()}
    return ModelConfig(name=hub_id, **values)


def routed_and_rest(data: dict[str, Any]) -> tuple[int, int]:
    """(routed expert parameters, all other parameters) of the model transformers builds,
    by module: a parameter of a module whose name ends in ``.experts`` (the fused 3D
    ``gate_up_proj`` / ``down_proj`` Axolotl's shard_expert_weights slices) is routed; the
    router (``mlp.gate``), the shared expert, attention, norms, embeddings are the rest."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**data))
    routed = rest = 0
    for name, p in model.named_parameters():
        module = name.rsplit(".", 1)[0]
        if module.endswith(".experts") and p.dim() == 3:
            routed += p.numel()
        else:
            rest += p.numel()
    return routed, rest


def trainer(ep: int, **kw: Any) -> TrainerConfig:
    base: dict[str, Any] = {
        "micro_batch_size": 1,
        "devices": 8,
        "strategy": "ddp",
        "precision": "bf16-true",
        "gradient_checkpointing": True,
        "expert_parallel_size": ep,
    }
    return TrainerConfig(**{**base, **kw})


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_qwen3_moe_full_finetuning_per_gpu(tmp_path: Path, ep: int) -> None:
    """Full fine-tuning of Qwen3-30B-A3B in bf16 under DDP on 8 GPUs: weights and gradients
    are 2 bytes a parameter, AdamW's two states 2 x 2; the routed experts' share is divided
    by ep, the rest (router, attention, embeddings) held whole on every GPU."""
    m = model_of(tmp_path, QWEN3_MOE)
    routed, rest = routed_and_rest(RECENT[QWEN3_MOE])
    assert routed > 0.9 * (routed + rest)  # 128 experts: most of the 30.5 B parameters
    e = estimate(m, DataConfig(max_seq_length=2048), trainer(ep))
    per_gpu = rest + routed // ep
    assert e.get("weights") == 2 * per_gpu
    assert e.get("optimizer_states") == 4 * per_gpu
    if e.phase == "optimizer step":
        assert e.get("gradients") == 2 * per_gpu
        assert e.get("optimizer_step") == 2 * per_gpu  # AdamW's sqrt(exp_avg_sq) list
    # DDP buckets the gradients of the replicated parameters only (the experts are
    # _ddp_params_and_buffers_to_ignore in Axolotl's shard_expert_weights)
    assert e.get("sharding_buffers") == 2 * (rest if ep > 1 else rest + routed)
    assert e.get("ep_buffer") == 0  # no backend buffer declared
    if ep > 1:
        assert any("expert_parallel_size" in g for g in e.uncalibrated)


def test_qwen3_moe_fsdp_with_ep_gathers_only_the_local_experts(tmp_path: Path) -> None:
    """FSDP over 8 GPUs with ep=8: every parameter is 1/8 a GPU either way; a layer's gather
    brings its non-expert parameters and 16 of its 128 experts."""
    m = model_of(tmp_path, QWEN3_MOE)
    routed, rest = routed_and_rest(RECENT[QWEN3_MOE])
    data = DataConfig(max_seq_length=2048)
    fsdp = estimate(m, data, trainer(1, strategy="fsdp"))
    both = estimate(m, data, trainer(8, strategy="fsdp"))
    assert both.get("weights") == fsdp.get("weights") == 2 * (rest + routed) // 8
    assert both.get("optimizer_states") == fsdp.get("optimizer_states")
    layer_experts = routed // 48
    per_block = both.params.per_block
    # two units in the compute dtype (the running one and the prefetched one) + one layer of
    # unsharded gradients: 3 x 2 bytes
    # (alive while units run: sharding.buffer_bytes, whichever phase is the peak); the unit
    # is the largest of a layer, the embedding and the lm_head
    pc = both.params
    assert sharding.buffer_bytes(m, trainer(1, strategy="fsdp"), 0) == 6 * per_block
    local = per_block - layer_experts + layer_experts // 8
    assert local < pc.embedding < per_block  # Qwen3-30B-A3B: the embedding is then the unit
    unit = max(local, pc.embedding, pc.lm_head)
    assert sharding.buffer_bytes(m, trainer(8, strategy="fsdp"), 0) == 6 * unit


def test_lora_divides_only_the_frozen_experts(tmp_path: Path) -> None:
    m = model_of(tmp_path, QWEN3_MOE)
    routed, rest = routed_and_rest(RECENT[QWEN3_MOE])
    lora = {"finetuning": "lora", "lora": {"rank": 16}}
    t = trainer(4, expert_parallel_buffer_mib=256, **lora)
    e = estimate(m, DataConfig(max_seq_length=2048), t)
    plain = estimate(m, DataConfig(max_seq_length=2048), trainer(1, **lora))
    assert e.get("adapters") > 0
    assert e.get("weights") == 2 * (rest + routed // 4)
    assert e.get("adapters") == plain.get("adapters")
    assert e.get("optimizer_states") == plain.get("optimizer_states")
    assert e.get("ep_buffer") == 256 * 2**20  # DeepEP's cudaMalloc, outside torch's counters
    assert e.allocated_bytes == e.total_bytes - e.get("fragmentation") - int(0.75 * GIB) - (
        256 * 2**20
    )


def test_shared_expert_and_router_are_not_divided(tmp_path: Path) -> None:
    """Qwen1.5-MoE: 60 routed experts and one shared expert per layer."""
    m = model_of(tmp_path, QWEN15_MOE)
    routed, rest = routed_and_rest(RECENT[QWEN15_MOE])
    e = estimate(m, DataConfig(max_seq_length=1024), trainer(4, devices=4))
    assert e.get("weights") == 2 * (rest + routed // 4)


def _only(findings: list[Any], rule: str) -> Any:
    hits = [f for f in findings if f.rule == rule]
    assert len(hits) == 1, [(f.rule, f.message) for f in findings]
    return hits[0]


def _with(cfg: dict[str, Any], model: dict[str, Any] | None = None, **trainer: Any) -> Any:
    run = copy.deepcopy(cfg)
    if model is not None:
        run["model"] = model
    run["trainer"].update(trainer)
    return validate(run).findings


def test_divisibility_errors(tmp_path: Path, cfg: dict[str, Any]) -> None:
    folder = write_config(tmp_path / "q15", RECENT[QWEN15_MOE])
    moe = {"pretrained": str(folder), "name": QWEN15_MOE}
    rule = "expert-parallel-mismatch"
    ok = _with(cfg, moe, devices=8, strategy="ddp", expert_parallel_size=4)
    assert not [f for f in ok if f.rule == rule]
    f = _only(_with(cfg, moe, devices=8, strategy="ddp", expert_parallel_size=8), rule)
    assert f.severity == "error"
    assert "num_experts=60 not divisible by ep_size=8" in f.message
    assert "trainer.expert_parallel_size=4" in [o for fix in f.fixes for o in fix.overrides]
    odd = _with(cfg, moe, devices=6, strategy="ddp", expert_parallel_size=4)
    msgs = [g.message for g in odd if g.rule == rule]
    assert any("expert_parallel_size (4) must divide world_size (6)" in x for x in msgs)


def test_dense_model_warns(cfg: dict[str, Any]) -> None:
    found = _with(cfg, devices=2, strategy="ddp", expert_parallel_size=2)
    f = _only(found, "expert-parallel-mismatch")
    assert f.severity == "warning" and "dense model" in f.message


# --- Axolotl's published examples (examples/expert_parallel/ at 067b021c) ----------------

INSTRUCT = "Qwen/Qwen3-30B-A3B-Instruct-2507"


def _cache_instruct(cache: Path) -> None:
    """The examples' base model in the Hugging Face cache: Qwen3-30B-A3B's shape (the 2507
    Instruct config.json differs only in max_position_embeddings, 262144)."""
    hub_cache(cache, INSTRUCT, {**RECENT[QWEN3_MOE], "max_position_embeddings": 262144}, "b" * 40)


@pytest.mark.parametrize(
    ("name", "ep", "devices", "strategy", "shard_group"),
    [
        ("qwen3-30ba3b-ep-fft-4gpu.yaml", 4, 4, "ddp", None),
        ("qwen3-30ba3b-ep-fsdp-fft-4gpu.yaml", 2, 4, "fsdp", 4),
        ("qwen3-30ba3b-ep-lora-4gpu.yaml", 4, 4, "ddp", None),
    ],
)
def test_axolotl_examples_map_expert_parallelism(
    empty_hub_cache: Path, name: str, ep: int, devices: int, strategy: str, shard_group: Any
) -> None:
    _cache_instruct(empty_hub_cache)
    file = example("axolotl", name)
    loaded = load_native(file, "axolotl")
    t = loaded.config["trainer"]
    assert t["expert_parallel_size"] == ep
    assert t["devices"] == devices  # ep x dp_shard_size: "world size 4"
    assert t["strategy"] == strategy
    assert t.get("shard_group") == shard_group  # the outer wrap: ep x dp_shard
    assert t["expert_parallel_buffer_mib"] == 256  # args.py num_nvl_bytes = 256 << 20
    at = loaded.source_map.lookup("trainer.expert_parallel_size")
    assert at is not None and at.line == line_of(file, "expert_parallel_size")
    result = check_native(file, "axolotl", gpu="H100")
    assert result.ok, [(f.rule, f.message) for f in result.errors]
    assert not [f for f in result.warnings if f.rule == "unknown-native-key"]


def test_axolotl_ep_example_estimate(empty_hub_cache: Path) -> None:
    """The 4-GPU full fine-tuning example: 30.5 B parameters in bf16 with 8-bit AdamW do not
    fit one H100 replicated (DDP), and do with a quarter of the experts a GPU."""
    _cache_instruct(empty_hub_cache)
    file = example("axolotl", "qwen3-30ba3b-ep-fft-4gpu.yaml")
    cfg = validate(load_native(file, "axolotl").config).config
    assert cfg is not None
    split = estimate(cfg.model, cfg.data, cfg.trainer)
    whole = estimate(
        cfg.model, cfg.data, cfg.trainer.model_copy(update={"expert_parallel_size": 1})
    )
    assert split.get("ep_buffer") == 256 * 2**20
    assert whole.total_gib > 80 > split.total_gib


def test_plugin_not_listed_maps_nothing(tmp_path: Path, empty_hub_cache: Path) -> None:
    _cache_instruct(empty_hub_cache)
    text = example("axolotl", "qwen3-30ba3b-ep-fft-4gpu.yaml").read_text()
    text = text.replace("  - axolotl.integrations.expert_parallel.ExpertParallelPlugin\n", "")
    text = text.replace("plugins:\n", "")
    file = tmp_path / "no-plugin.yaml"
    file.write_text(text)
    # Axolotl merges the plugin's args model only for listed plugins (integrations/base.py
    # PluginManager.get_input_args): the key is dropped, the run is not expert-parallel
    t = load_native(file, "axolotl").config["trainer"]
    assert t.get("expert_parallel_size", 1) == 1
    assert t.get("devices", 1) == 1


def test_schema_field_is_bounded() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        TrainerConfig(micro_batch_size=1, expert_parallel_size=0)
    assert json.dumps(TrainerConfig.model_json_schema()).count("expert_parallel_size") >= 1


def test_eight_bit_states_count_the_experts(tmp_path: Path) -> None:
    """bitsandbytes' 8-bit AdamW keeps, per tensor of at least 4096 elements, two uint8 states
    and two fp32 absmax per 256 (weights.MIN_8BIT_SIZE): the fused 3D expert tensors included,
    so the per-tensor list sums to the model's parameters and the experts' states divide."""
    from cfgcheck.memory import weights

    m = model_of(tmp_path, QWEN3_MOE)
    routed, rest = routed_and_rest(RECENT[QWEN3_MOE])
    t = trainer(1, optimizer="adamw_8bit")
    tensors = weights.trainable_tensors(m, t)
    assert sum(n * c for n, c in tensors) == routed + rest
    layer = RECENT[QWEN3_MOE]
    gate_up = layer["num_experts"] * 2 * layer["moe_intermediate_size"] * layer["hidden_size"]
    assert (gate_up, 1) in tensors
    states = weights.optimizer_state_bytes(m, t)
    assert 2 * (routed + rest) < states < 2.05 * (routed + rest)
    e = estimate(m, DataConfig(max_seq_length=2048), trainer(4, optimizer="adamw_8bit"))
    assert abs(e.get("optimizer_states") - states * (rest + routed / 4) / (rest + routed)) < 2**20


# --- Axolotl's own code (tests/axolotl_ep_code.py, copied from 067b021c) ----------------

TINY_MOE: dict[str, Any] = {
    "model_type": "qwen3_moe",
    "hidden_size": 64,
    "intermediate_size": 96,
    "moe_intermediate_size": 48,
    "head_dim": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_experts_per_tok": 2,
    "vocab_size": 256,
    "max_position_embeddings": 256,
}


class _FakeDist:
    """One rank of an EP group of ``size`` (no process group: the slicing is local)."""

    def __init__(self, size: int, rank: int) -> None:
        self.size, self.rank = size, rank

    def get_world_size(self, group: object = None) -> int:
        return self.size

    def get_rank(self, group: object = None) -> int:
        return self.rank


def _axolotl_shard(data: dict[str, Any], ep: int, rank: int) -> Any:
    """Axolotl's shard_expert_weights on the model transformers builds (real tiny weights),
    as rank ``rank`` of ``ep``; the CUDA scatter replaced by the slice it delivers."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests import axolotl_ep_code as ax

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**data))

    def scatter(module: Any, attr: str, e_local: int, dp_size: int) -> None:
        ax._replace_with_slice(module, attr, rank * e_local, (rank + 1) * e_local)

    old = (ax.dist, ax._scatter_expert_from_rank0)
    ax.dist, ax._scatter_expert_from_rank0 = _FakeDist(ep, rank), scatter  # type: ignore[assignment]
    try:
        ax.shard_expert_weights(model, object())
    finally:
        ax.dist, ax._scatter_expert_from_rank0 = old  # type: ignore[assignment]
    return model


@pytest.mark.parametrize("ep", [2, 4])
def test_axolotl_sharding_leaves_what_the_estimate_counts(tmp_path: Path, ep: int) -> None:
    """After Axolotl's shard_expert_weights a rank holds exactly the weights the estimate
    counts per GPU (bf16: 2 bytes a parameter), shared parts whole."""
    data = {**TINY_MOE, "num_experts": 8}
    model = _axolotl_shard(data, ep, rank=ep - 1)
    held = sum(p.numel() for p in model.parameters())
    folder = write_config(tmp_path / "tiny", data)
    values = {k: v.value for k, v in resolve_pretrained(str(folder)).values.items()}
    m = ModelConfig(name="tiny-qwen3-moe", **values)
    e = estimate(m, DataConfig(max_seq_length=64), trainer(ep, devices=ep))
    assert e.get("weights") == 2 * held
    routed, rest = routed_and_rest(data)
    assert held == rest + routed // ep


def test_axolotl_refuses_what_the_rule_refuses(tmp_path: Path, cfg: dict[str, Any]) -> None:
    """num_experts=6 on 4 EP ranks: Axolotl's shard_expert_weights raises, and so does its
    mesh builder for 4 EP ranks on 6 GPUs; cfgcheck's rule errors on both, not on the fix."""
    from tests import axolotl_ep_code as ax

    with pytest.raises(ValueError, match="num_experts=6 not divisible by ep_size=4"):
        _axolotl_shard({**TINY_MOE, "num_experts": 6}, 4, rank=0)
    _axolotl_shard({**TINY_MOE, "num_experts": 6}, 2, rank=0)  # the fix runs
    with pytest.raises(ValueError, match=r"expert_parallel_size \(4\) must divide world_size"):
        ax._get_parallel_config_kwargs(6, expert_parallel_size=4)
    ax._get_parallel_config_kwargs(8, expert_parallel_size=4, is_fsdp=True)

    folder = write_config(tmp_path / "tiny6", {**TINY_MOE, "num_experts": 6})
    moe = {"pretrained": str(folder), "name": "tiny-qwen3-moe"}
    rule = "expert-parallel-mismatch"
    bad = [f for f in _with(cfg, moe, devices=4, strategy="ddp", expert_parallel_size=4)]
    assert [f.severity for f in bad if f.rule == rule] == ["error"]
    world = _with(cfg, moe, devices=6, strategy="ddp", expert_parallel_size=4)
    assert "error" in [f.severity for f in world if f.rule == rule]
    ok = _with(cfg, moe, devices=4, strategy="ddp", expert_parallel_size=2)
    assert not [f for f in ok if f.rule == rule]
