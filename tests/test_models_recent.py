"""Every decoder family transformers ships, read generically: model.pretrained on the
published config.json of recent families (tests/model_folders_recent.py) gives the exact
parameter count transformers builds (total and, for mixture-of-experts, active), the module
names PEFT matches, and a memory estimate; an architecture transformers cannot build is one
line and exit 2."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import cfgcheck
from cfgcheck.memory.params import count_params, lora_params
from cfgcheck.models.files import ModelFolderError
from cfgcheck.models.resolve import resolve_pretrained
from cfgcheck.schema.model import ModelConfig
from tests.conftest import requires, run_cfgcheck
from tests.model_folders import hub_cache, write_config
from tests.model_folders_recent import PUBLISHED_PARAMS, RECENT
from tests.sources.support import write

pytestmark = requires("torch", "transformers")
# Model cards that state "active" without the input embedding (a lookup, not a matmul).
ACTIVE_WITHOUT_EMBEDDING = {"openai/gpt-oss-20b", "deepseek-ai/DeepSeek-V2-Lite"}
BIG = {
    "CohereForAI/c4ai-command-r-v01",
    "mistralai/Mixtral-8x7B-v0.1",
    "Qwen/Qwen3-30B-A3B",
    "deepseek-ai/DeepSeek-V3",
    "meta-llama/Llama-4-Scout-17B-16E",
}


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


def meta_model(data: dict[str, Any]) -> Any:
    """The model transformers itself builds from the file (AutoConfig, no cfgcheck code)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**data)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize(
    "hub_id", [pytest.param(h, marks=pytest.mark.slow) if h in BIG else h for h in RECENT]
)
def test_published_counts_total_and_active(tmp_path: Path, hub_id: str) -> None:
    m = model_of(tmp_path, hub_id)
    pc = count_params(m)
    model = meta_model(RECENT[hub_id])
    assert pc.total == sum(p.numel() for p in model.parameters())
    total, active, rounding = PUBLISHED_PARAMS[hub_id]
    assert abs(pc.total / 1e9 - total) <= rounding
    embed = model.get_input_embeddings()
    assert m.rows == embed.num_embeddings and m.n_embd == embed.embedding_dim
    assert m.tie_embeddings == (model.get_output_embeddings().weight is embed.weight)
    if active is None:
        assert pc.active == pc.total and m.n_expert is None
        return
    assert m.n_expert and m.n_expert_per_token
    shown = pc.active - (pc.embedding if hub_id in ACTIVE_WITHOUT_EMBEDDING else 0)
    # cards round (or truncate) to one decimal, or to a whole billion
    assert abs(shown / 1e9 - active) <= max(0.1, rounding)
    # active = total minus the experts a token skips, by transformers' own expert tensors
    skipped = 0
    for module in model.modules():
        if type(module).__name__.endswith("Experts"):
            per = sum(p.numel() for p in module.parameters()) // module.num_experts
            skipped += per * (module.num_experts - m.n_expert_per_token)
    assert pc.active == pc.total - skipped


def test_gemma3_nested_text_config_and_its_local_global_layers(tmp_path: Path) -> None:
    m = model_of(tmp_path, "google/gemma-3-4b-it")
    assert (m.n_layer, m.n_embd, m.n_head, m.kv_heads, m.head_dim) == (34, 2560, 8, 4, 256)
    assert m.rows == 262208 and m.block_size == 131072 and m.tie_embeddings
    assert m.sliding_window_size == 1024 and m.sliding_window_pattern == 6
    assert m.n_sliding_layers == 34 - 34 // 6  # 5 local layers for every global one
    assert m.norm_qk and m.mlp == "geglu"
    one = model_of(tmp_path, "google/gemma-3-1b-it")
    assert (one.rows, one.block_size, one.sliding_window_size) == (262144, 32768, 512)


def test_gpt_oss_alternates_sliding_and_full_attention(tmp_path: Path) -> None:
    m = model_of(tmp_path, "openai/gpt-oss-20b")
    assert m.sliding_window_size == 128 and m.sliding_window_pattern == 2
    assert [m.uses_sliding_window(i) for i in range(4)] == [True, False, True, False]
    assert (m.n_expert, m.n_expert_per_token) == (32, 4)


# --- LoRA targets as PEFT resolves them, on tiny random-weight MoE models --------------------

TINY_MIXTRAL: dict[str, Any] = {
    "model_type": "mixtral",
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 64,
    "max_position_embeddings": 64,
}
TINY_QWEN2_MOE: dict[str, Any] = {
    "model_type": "qwen2_moe",
    "hidden_size": 32,
    "intermediate_size": 48,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 40,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 64,
    "max_position_embeddings": 64,
}


SMALL: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 64,
    "max_position_embeddings": 64,
    "eos_token_id": None,
    "bos_token_id": None,
}
TINY: dict[str, dict[str, Any]] = {
    "mixtral": TINY_MIXTRAL,
    "qwen2_moe": TINY_QWEN2_MOE,
    "qwen3_moe": {"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 16, **SMALL},
    "olmoe": {"model_type": "olmoe", "num_experts": 4, "num_experts_per_tok": 2, **SMALL},
    "gpt_oss": {"model_type": "gpt_oss", "num_local_experts": 4, "num_experts_per_tok": 2,
                **SMALL},
}  # fmt: skip
TARGETS = [
    ["q_proj", "v_proj"],
    "all-linear",
    ["w1", "w3", "w2"],
    ["gate_proj", "up_proj", "down_proj"],
    ["gate_proj", "down_proj"],
    ["q_proj", "gate"],
    ["q_proj", "experts"],
    ["router"],
]


def peft_trainable(data: dict[str, Any], targets: Any, dropout: float = 0.0) -> int:
    """PEFT's own count of LoRA parameters on the real tiny model (raises as PEFT raises)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**data))
    config = LoraConfig(r=4, target_modules=targets, lora_dropout=dropout)
    peft = get_peft_model(model, config)
    return sum(p.numel() for p in peft.parameters() if p.requires_grad)


def tiny(data: dict[str, Any]) -> ModelConfig:
    from cfgcheck.models.generic import generic_model

    values = {k: v.value for k, v in generic_model(data, "config.json", "").items()}
    return ModelConfig(name=f"tiny-{data['model_type']}", **values)


def run_config(m: ModelConfig, targets: list[str], dropout: float = 0.0) -> dict[str, Any]:
    return {
        "name": "moe",
        "model": m.model_dump(exclude_none=True),
        "data": {"max_seq_length": 64},
        "trainer": {
            "micro_batch_size": 1,
            "finetuning": "lora",
            "lora": {"rank": 4, "alpha": 8, "targets": targets, "dropout": dropout},
        },
    }


def lora_errors(result: cfgcheck.CheckResult) -> list[str]:
    rules = ("lora-target-unknown", "lora-target-experts")
    return [f.message for r in rules for f in result.by_rule(r) if f.severity == "error"]


@requires("peft")
@pytest.mark.parametrize("family", sorted(TINY))
@pytest.mark.parametrize(
    "targets", TARGETS, ids=lambda t: "-".join(t) if isinstance(t, list) else t
)
def test_lora_targets_as_peft_resolves_them(family: str, targets: Any) -> None:
    """Ground truth: PEFT's get_peft_model on the tiny random-weight model. Where PEFT raises
    (a name it cannot find, a router or experts module it cannot wrap, half of a fused pair),
    cfgcheck reports an error; where it trains, cfgcheck counts the same parameters (the
    converted expert and router parameters included) and reports no error."""
    data = TINY[family]
    m = tiny(data)
    listed = [targets] if isinstance(targets, str) else targets
    try:
        expected: int | None = peft_trainable(data, targets)
    except ValueError:
        expected = None
    errors = lora_errors(cfgcheck.validate(run_config(m, listed)))
    if expected is None:
        assert errors, f"PEFT raises for {targets} on {family}, cfgcheck says nothing"
    else:
        assert not errors
        assert lora_params(m, 4, listed) == expected


@requires("peft")
def test_expert_adapters_refuse_dropout_as_peft_does() -> None:
    with pytest.raises(ValueError, match="lora_dropout"):
        peft_trainable(TINY["qwen3_moe"], ["gate_proj", "up_proj"], dropout=0.05)
    m = tiny(TINY["qwen3_moe"])
    result = cfgcheck.validate(run_config(m, ["gate_proj", "up_proj"], dropout=0.05))
    assert any("ParamWrapper" in e for e in lora_errors(result))
    assert peft_trainable(TINY["qwen3_moe"], ["q_proj"], dropout=0.05) > 0
    assert not lora_errors(cfgcheck.validate(run_config(m, ["q_proj"], dropout=0.05)))


@requires("peft")
def test_experts_peft_cannot_reach_are_a_warning() -> None:
    """gpt-oss: no target name reaches its fused experts; all-linear trains attention only."""
    data = TINY["gpt_oss"]
    m = tiny(data)
    assert peft_trainable(data, "all-linear") == lora_params(m, 4, ["all-linear"])
    assert lora_params(m, 4, ["all-linear"]) == lora_params(m, 4, ["q_proj", "k_proj", "v_proj",
                                                                  "o_proj"])  # fmt: skip
    found = cfgcheck.validate(run_config(m, ["all-linear"])).by_rule("lora-target-experts")
    assert found and found[0].severity == "warning" and "target_parameters" in found[0].hint


# --- memory estimate, CLI, failures --------------------------------------------------------


@pytest.mark.slow
def test_memory_estimate_of_a_moe_counts_all_experts_and_states_its_margin(
    tmp_path: Path,
) -> None:
    folder = write_config(tmp_path / "OLMoE-1B-7B-0924", RECENT["allenai/OLMoE-1B-7B-0924"])
    proc = run_cfgcheck(
        "memory", "~model", f"+model.pretrained={folder}", "trainer.finetuning=full",
        "--format", "json", timeout=180,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr

    report = json.loads(proc.stdout)
    m = model_of(tmp_path, "allenai/OLMoE-1B-7B-0924")
    pc = count_params(m)
    assert report["estimate"]["params"] == pc.total
    # OLMoE full fine-tuning is measured (benchmarks/calibration/h200.jsonl): the calibrated
    # margin, not the 25 % of an unmeasured family
    assert report["estimate"]["margin"] == 0.10
    assert report["estimate"]["active_params"] == pc.active < pc.total
    weights = next(c for c in report["estimate"]["components"] if c["key"] == "weights")
    assert weights["bytes"] == 2 * pc.total  # every expert, bf16-true (the default)


@pytest.mark.slow
def test_an_architecture_transformers_does_not_ship_is_one_line_exit_2(tmp_path: Path) -> None:
    folder = write_config(tmp_path / "m", {"model_type": "my_private_arch", "hidden_size": 8})
    proc = run_cfgcheck("check", "~model", f"+model.pretrained={folder}", timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "my_private_arch" in lines[0] and "trust_remote_code" in lines[0]
    assert "write the model section by hand" in lines[0] and "Traceback" not in proc.stderr


def test_without_transformers_the_line_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cfgcheck.memory import traced

    traced._trace.cache_clear()
    monkeypatch.setitem(sys.modules, "transformers", None)
    folder = write_config(tmp_path / "m", TINY_MIXTRAL)
    with pytest.raises(ModelFolderError, match=r"install cfgcheck\[transformers\]"):
        resolve_pretrained(str(folder))
    traced._trace.cache_clear()


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("axolotl", "base_model: {ref}\nadapter: lora\nlora_r: 8\nlora_target_linear: true\n"),
        ("trl", "model_name_or_path: {ref}\nmax_length: 512\n"),
    ],
)
def test_native_configs_naming_a_moe_need_no_model_section(
    tmp_path: Path, empty_hub_cache: Path, fmt: str, text: str
) -> None:
    from cfgcheck.sources import check_native

    hub_cache(empty_hub_cache, "allenai/OLMoE-1B-7B-0924", RECENT["allenai/OLMoE-1B-7B-0924"],
              "a" * 40)  # fmt: skip
    file = write(tmp_path, "run.yaml", text.format(ref="allenai/OLMoE-1B-7B-0924"))
    result = check_native(file, fmt, gpu="H100")
    assert result.config is not None, [(f.rule, f.message) for f in result.findings]
    assert result.config.model.n_expert == 64 and result.config.model.architecture == "olmoe"
    assert result.config.model.name == "allenai/OLMoE-1B-7B-0924"


def test_gpt_oss_has_no_sdpa_path_and_runs_eager(tmp_path: Path) -> None:
    """GptOssPreTrainedModel sets _supports_sdpa = False (its attention sinks): transformers
    raises for attn_implementation="sdpa"; the rule says so and the estimate counts eager."""
    from transformers import AutoConfig, AutoModelForCausalLM

    data = {**TINY["gpt_oss"]}
    with pytest.raises(ValueError, match="scaled_dot_product_attention"):
        AutoModelForCausalLM.from_config(AutoConfig.for_model(**data), attn_implementation="sdpa")
    m = tiny(data)
    cfg = run_config(m, ["q_proj"])
    cfg["trainer"]["attention"] = "sdpa"
    found = cfgcheck.validate(cfg).by_rule("attention-unsupported")
    assert found and "GptOssForCausalLM" in found[0].message
    cfg["trainer"]["attention"] = "eager"
    assert not cfgcheck.validate(cfg).by_rule("attention-unsupported")


@pytest.mark.parametrize(
    ("fmt", "text", "arch"),
    [
        ("litgpt", "checkpoint_dir: checkpoints/Qwen/Qwen3-30B-A3B\nprecision: bf16-true\n",
         "qwen3_moe"),
        ("axolotl", "base_model: mistralai/Mixtral-8x7B-Instruct-v0.1\nadapter: lora\nlora_r: 8\n"
         "lora_target_modules:\n  - q_proj\n  - v_proj\n", "mixtral"),
        ("trl", "model_name_or_path: google/gemma-3-4b-it\nmax_length: 1024\n", "gemma3"),
        ("trl", "model_name_or_path: HuggingFaceTB/SmolLM3-3B\nmax_length: 1024\n", "smollm3"),
        ("axolotl", "base_model: microsoft/phi-4\nadapter: qlora\nload_in_4bit: true\n"
         "lora_r: 16\nlora_target_linear: true\n", "phi3"),
    ],
)  # fmt: skip
def test_native_configs_naming_a_preset_model_need_no_model_section(
    tmp_path: Path, fmt: str, text: str, arch: str
) -> None:
    """The native adapters' model key resolves to a preset offline (empty Hub cache)."""
    from cfgcheck.sources import check_native

    file = write(tmp_path, "run.yaml", text)
    result = check_native(file, fmt, gpu="H100")
    assert result.config is not None, [(f.rule, f.message) for f in result.findings]
    assert result.config.model.architecture == arch
    loads = [f for f in result.findings if f.rule in ("missing-key", "invalid-value")]
    assert not loads, [(f.rule, f.message) for f in loads]


@requires("peft")
def test_peft_conversion_tables_are_peft_and_transformers_own() -> None:
    """cfgcheck's copy of PEFT's MoE name conversion, and the families it applies to, equal
    PEFT's and transformers' own tables (a new release that changes them fails here)."""
    from peft.utils import transformers_weight_conversion as conv

    from cfgcheck.memory.traced import PEFT_MOE_FUSED, PEFT_MOE_NAMES, trace

    assert conv._MOE_TARGET_MODULE_MAPPING == PEFT_MOE_NAMES
    assert {k: tuple(v["gate_up_proj"]) for k, v in conv._MOE_FUSED_TARGETS.items()} == (
        PEFT_MOE_FUSED
    )
    for family, data in TINY.items():
        expected = conv._MODEL_TO_CONVERSION_PATTERN.get(family)
        assert trace(data).peft_moe == (expected if expected in PEFT_MOE_NAMES else None)


@pytest.mark.slow
@pytest.mark.parametrize("edit", [(), ("model.hf_config.num_hidden_layers=2",)])
def test_a_traced_preset_without_transformers(edit: tuple[str, ...]) -> None:
    """conf/model/mixtral-8x7b.yaml carries its config.json: without transformers it is checked
    from its shipped trace (cfgcheck/memory/trace_cache.py); a config no trace was shipped for
    stops with one line naming the extra, exit 2 (never a rule's traceback)."""
    import subprocess

    code = (
        "import sys; sys.modules['transformers'] = None; "
        f"sys.argv = ['cfgcheck', 'check', 'model=mixtral-8x7b', *{list(edit)!r}]; "
        "from cfgcheck.cli import main; raise SystemExit(main())"
    )
    from tests.conftest import REPO

    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,  # the shipped conf/, whatever directory an earlier test left
        env={**os.environ, "CFGCHECK_NO_CACHE": "1"},
    )
    if not edit:
        assert proc.returncode in (0, 1) and "cfgcheck[transformers]" not in proc.stderr
        assert "Traceback" not in proc.stderr and "mixtral-8x7b" in proc.stdout, proc.stderr
        return
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cfgcheck[transformers]" in lines[0], proc.stderr


def test_a_config_asking_for_unbounded_build_work_is_refused(tmp_path: Path) -> None:
    """A hostile config.json (or hf_config in a service request) cannot make the meta build
    run for ever: layers and experts are bounded before transformers builds anything."""
    for change in ({"num_hidden_layers": 10**7}, {"num_local_experts": 10**6}):
        folder = write_config(tmp_path / str(len(change)), {**TINY_MIXTRAL, **change})
        with pytest.raises(ModelFolderError, match="is beyond"):
            resolve_pretrained(str(folder))


DENSE_TINY: dict[str, dict[str, Any]] = {
    "falcon": {"model_type": "falcon", "new_decoder_architecture": True, "num_kv_heads": 2},
    "gpt_neox": {"model_type": "gpt_neox"},
    "starcoder2": {"model_type": "starcoder2", "sliding_window": None},
    "olmo2": {"model_type": "olmo2"},
    "gemma3_text": {"model_type": "gemma3_text", "head_dim": 16},
    "cohere": {"model_type": "cohere"},
    "cohere-qk-norm": {"model_type": "cohere", "use_qk_norm": True},  # Command R+'s q/k norms
}
DENSE_TARGETS = [
    "all-linear",
    ["q_proj", "v_proj"],
    ["query_key_value"],
    ["dense", "dense_h_to_4h"],
    ["c_fc", "c_proj", "q_proj"],
    ["lm_head", "q_proj"],
    ["embed_tokens", "q_proj"],
    ["q_norm", "q_proj"],
]


@requires("peft")
@pytest.mark.parametrize("family", sorted(DENSE_TINY))
@pytest.mark.parametrize(
    "targets", DENSE_TARGETS, ids=lambda t: "-".join(t) if isinstance(t, list) else t
)
def test_dense_traced_lora_targets_as_peft_resolves_them(family: str, targets: Any) -> None:
    """The traced module tree against PEFT itself on the tiny dense families: an error where
    PEFT raises (nothing matches, a norm matched), else PEFT's exact trainable count."""
    data = {**SMALL, **DENSE_TINY[family]}
    m = tiny(data)
    listed = [targets] if isinstance(targets, str) else targets
    try:
        expected: int | None = peft_trainable(data, targets)
    except ValueError:
        expected = None
    errors = lora_errors(cfgcheck.validate(run_config(m, listed)))
    if expected is None:
        assert errors, f"PEFT raises for {targets} on {family}, cfgcheck says nothing"
    else:
        assert not errors, errors
        assert lora_params(m, 4, listed) == expected


@pytest.mark.parametrize("qk_norm", [False, True], ids=["", "qk-norm"])
def test_cohere_block_is_read_as_transformers_builds_it(qk_norm: bool) -> None:
    """CohereDecoderLayer feeds attention and MLP from its one ``input_layernorm`` and adds
    both to the residual (models/cohere/modeling_cohere.py): a parallel block with a shared
    norm, of the ``CohereLayerNorm`` kind (a weight, no bias); the parameter count is the
    built model's, the q/k norms' ``(heads, head_dim)`` weights included."""
    data = {**SMALL, "model_type": "cohere", "use_qk_norm": qk_norm}
    m = tiny(data)
    model = meta_model(data)
    layer = model.model.layers[0]
    norms = [n for n, x in layer.named_children() if "Norm" in type(x).__name__]
    assert norms == ["input_layernorm"]
    assert type(layer.input_layernorm).__name__ == "CohereLayerNorm"
    assert [n for n, _ in layer.input_layernorm.named_parameters()] == ["weight"]
    assert m.parallel_residual and m.shared_attention_norm
    assert m.norm == "cohere_layernorm" and m.norm_qk == qk_norm
    assert count_params(m).total == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("hub_id", ["tiiuae/falcon-7b", "EleutherAI/gpt-j-6b"])
def test_parallel_blocks_are_read_as_transformers_builds_them(tmp_path: Path, hub_id: str) -> None:
    """Falcon-7B (one k/v head, ``multi_query``; the 4 x hidden MLP FalconMLP builds) and
    GPT-J (``rotary_dim`` 64 of 256 per head, ``gelu_new``, fc_in/fc_out): one block norm
    feeding attention and MLP, its output read once by both (modules.block_linears)."""
    from cfgcheck.memory.modules import block_linears
    from cfgcheck.memory.stack import hf_activation

    m = model_of(tmp_path, hub_id)
    model = meta_model(RECENT[hub_id])
    assert m.parallel_residual and m.shared_attention_norm and m.norm == "layernorm"
    assert {x.source for x in block_linears(m)} == {"attn_in", "attn_out", "mlp_act"}
    assert m.mlp == "gelu" and m.mlp_width == 4 * m.n_embd
    from cfgcheck.memory.estimate import _act_note
    from cfgcheck.schema import TrainerConfig

    # the activations row's note in ``cfgcheck memory``
    note = _act_note(m, TrainerConfig(micro_batch_size=1, attention="sdpa"), masked=False)
    if hub_id == "tiiuae/falcon-7b":
        assert (m.n_head, m.kv_heads, m.head_dim) == (71, 1, 64)
        assert m.rotary_fraction == 1.0
        assert note.startswith("sdpa (torch's fp32 math kernel: one k/v head)")
    else:
        attn = model.transformer.h[0].attn
        assert (m.n_head, m.kv_heads, m.head_dim) == (16, 16, attn.head_dim)
        assert m.rotary_fraction * m.head_dim == attn.rotary_dim == 64
        assert hf_activation(m) == "gelu_new"
        assert {x.name: x.roles for x in block_linears(m)}["fc_out"] == ("down_proj",)
        assert note.startswith("sdpa") and "math" not in note
