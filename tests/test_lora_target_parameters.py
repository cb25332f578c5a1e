"""LoRA on parameters (``trainer.lora.target_parameters``, PEFT's
``LoraConfig(target_parameters=...)``) as the gpt-oss recipe sets it: OpenAI cookbook,
"Fine-tuning a Multilingual Reasoner with Hugging Face" (openai/openai-cookbook,
articles/gpt-oss/fine-tune-transfomers.ipynb at dcb64bfc2b4c4ec9bf1ac3abc2568cc28eadfe61):
``LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", target_parameters=[
"7.mlp.experts.gate_up_proj", "7.mlp.experts.down_proj", "15...", "23..."])``.

Ground truth: PEFT's get_peft_model on tiny random-weight gpt-oss and Qwen3-MoE models built
from their config on CPU: the trainable count cfgcheck computes equals PEFT's; a name that
matches no parameter is what PEFT drops silently, warns about or raises for, and cfgcheck
refuses; the fixed config trains the parameters asked for."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import cfgcheck
from cfgcheck.memory.params import lora_params
from cfgcheck.schema.model import ModelConfig
from tests.conftest import requires

pytestmark = requires("torch", "transformers", "peft")

SMALL: dict[str, Any] = {
    "vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 8, "max_position_embeddings": 128,
    "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
}  # fmt: skip
TINY: dict[str, dict[str, Any]] = {
    "gpt_oss": {**SMALL, "model_type": "gpt_oss", "intermediate_size": 8,
                "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen3_moe": {**SMALL, "model_type": "qwen3_moe", "intermediate_size": 16,
                  "moe_intermediate_size": 8, "num_experts": 4, "num_experts_per_tok": 2},
}  # fmt: skip
# the recipe's names on a two-layer model (layer 1 for 7/15/23), all layers, and a mix
PARAMS = {
    "recipe": ["1.mlp.experts.gate_up_proj", "1.mlp.experts.down_proj"],
    "every-layer": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
    "full-name": ["model.layers.0.mlp.experts.down_proj"],
}


def peft_run(
    data: dict[str, Any], targets: Any, params: list[str], dropout: float = 0.0
) -> tuple[int, list[str]]:
    """PEFT's trainable count and its warnings on the real tiny model (raises as PEFT does)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**data))
    config = LoraConfig(r=4, target_modules=targets, target_parameters=params, lora_dropout=dropout)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        peft = get_peft_model(model, config)
    said = [str(w.message) for w in caught if "target_parameters" in str(w.message)]
    return sum(p.numel() for p in peft.parameters() if p.requires_grad), said


def tiny(data: dict[str, Any]) -> ModelConfig:
    from cfgcheck.models.generic import generic_model

    values = {k: v.value for k, v in generic_model(data, "config.json", "").items()}
    return ModelConfig(name=f"tiny-{data['model_type']}", **values)


def run_config(
    m: ModelConfig, targets: list[str], params: list[str], dropout: float = 0.0
) -> dict[str, Any]:
    lora = {"rank": 4, "alpha": 8, "targets": targets, "dropout": dropout}
    return {
        "name": "moe",
        "model": m.model_dump(exclude_none=True),
        "data": {"max_seq_length": 64},
        "trainer": {
            "micro_batch_size": 1,
            "finetuning": "lora",
            "lora": {**lora, "target_parameters": params},
        },
    }


def errors(cfg: dict[str, Any]) -> list[str]:
    found = cfgcheck.validate(cfg).by_rule("lora-target-parameter-unknown")
    return [f.message for f in found if f.severity == "error"]


@pytest.mark.parametrize("family", sorted(TINY))
@pytest.mark.parametrize("params", sorted(PARAMS))
@pytest.mark.parametrize("targets", [["q_proj", "v_proj"], ["all-linear"]], ids=["qv", "all"])
def test_trainable_count_is_peft_s(family: str, params: str, targets: list[str]) -> None:
    """lora.ParamWrapper: lora_A (r*E, in), lora_B (out, r*E) per fused expert tensor, at
    the rank as given; counted with the module targets, and no error."""
    data, names = TINY[family], PARAMS[params]
    peft_targets = "all-linear" if targets == ["all-linear"] else targets
    expected, said = peft_run(data, peft_targets, names)
    assert not said
    m = tiny(data)
    assert lora_params(m, 4, targets, "hf", names) == expected
    added = lora_params(m, 4, targets, "hf", names) - lora_params(m, 4, targets, "hf")
    # PEFT converts all-linear on Qwen3-MoE to the same expert parameters (traced.py
    # PEFT_MOE_NAMES) and wraps each once: the explicit names add nothing there
    assert added == 0 if (family, targets) == ("qwen3_moe", ["all-linear"]) else added > 0
    assert not errors(run_config(m, targets, names))


@pytest.mark.parametrize("family", sorted(TINY))
def test_names_matching_no_parameter_are_refused(family: str) -> None:
    """PEFT 0.21: with target_modules matching, a target_parameters list that matches nothing
    is only warned about; with none it raises; one bad name beside good ones is dropped
    silently. cfgcheck refuses each, quoting what PEFT does; the fixed list trains."""
    from peft.tuners.tuners_utils import NoMatchingPeftModuleError

    data, m = TINY[family], tiny(TINY[family])
    wrong = ["7.mlp.experts.gate_up_proj"]  # the recipe's layer 7 on a two-layer model
    _, said = peft_run(data, ["q_proj"], wrong)
    # PEFT prints the list (gpt-oss) or the set its conversion made of it (Qwen3-MoE)
    assert len(said) == 1 and wrong[0] in said[0]
    assert said[0].endswith("were set but no parameter was matched.")
    found = errors(run_config(m, ["q_proj"], wrong))
    assert found and "7.mlp.experts.gate_up_proj" in found[0] and "RuntimeWarning" in found[0]

    with pytest.raises(NoMatchingPeftModuleError, match="no `target_parameters` found"):
        peft_run(data, None, wrong)
    found = errors(run_config(m, [], wrong))
    assert found and "NoMatchingPeftModuleError" in found[0]

    mixed = ["1.mlp.experts.gate_up_proj", "7.mlp.experts.down_proj"]
    count, said = peft_run(data, None, mixed)
    assert not said and count == peft_run(data, None, mixed[:1])[0]  # dropped, silently
    found = errors(run_config(m, [], mixed))
    assert found and "7.mlp.experts.down_proj" in found[0] and "without a word" in found[0]
    assert "1.mlp.experts.gate_up_proj" not in found[0].split(" match")[0]

    fixed = cfgcheck.validate(run_config(m, [], mixed[:1]))
    assert not fixed.by_rule("lora-target-parameter-unknown")
    assert lora_params(m, 4, [], "hf", mixed[:1]) == peft_run(data, None, mixed[:1])[0]


def test_dropout_with_target_parameters_is_refused() -> None:
    """lora.ParamWrapper raises on lora_dropout != 0 (peft/tuners/lora/layer.py)."""
    data, m = TINY["gpt_oss"], tiny(TINY["gpt_oss"])
    names = PARAMS["recipe"]
    with pytest.raises(ValueError, match="does not work with lora_dropout != 0"):
        peft_run(data, ["q_proj"], names, dropout=0.05)
    found = cfgcheck.validate(run_config(m, ["q_proj"], names, dropout=0.05))
    assert any(
        "lora_dropout != 0" in f.message for f in found.by_rule("lora-target-parameter-unknown")
    )
    assert not errors(run_config(m, ["q_proj"], names, dropout=0.0))


def test_expert_targets_stop_the_experts_warning_and_count_in_memory() -> None:
    """On gpt-oss, target_modules never reach the experts (lora-target-experts warns and
    names trainer.lora.target_parameters); with them set the warning goes, and the estimate
    counts the adapters (trainable parameters) and the parametrized expert copies."""
    from cfgcheck.memory.estimate import estimate
    from cfgcheck.schema import DataConfig, TrainerConfig

    def estimate_of(cfg: dict[str, Any]) -> Any:
        return estimate(m, DataConfig(**cfg["data"]), TrainerConfig(**cfg["trainer"]))

    def part(e: Any, key: str) -> int:
        return sum(c.bytes for c in e.components if c.key == key)

    m = tiny(TINY["gpt_oss"])
    bare = cfgcheck.validate(run_config(m, ["all-linear"], []))
    hint = bare.by_rule("lora-target-experts")[0].hint
    assert "trainer.lora.target_parameters" in hint
    both = run_config(m, ["all-linear"], PARAMS["every-layer"])
    assert not cfgcheck.validate(both).by_rule("lora-target-experts")
    without, with_ = estimate_of(run_config(m, ["all-linear"], [])), estimate_of(both)
    assert with_.trainable - without.trainable == 4 * 2 * 4 * (
        (16 + 16) + (8 + 16)
    )  # rank 4, two layers, four experts: gate_up (16 -> 2*8), down (8 -> 16)
    assert part(with_, "activations") > part(without, "activations")
    extra = with_.trainable - without.trainable
    # fp32 adapters (the peak is in the forward: no gradients yet), two fp32 AdamW states
    assert part(with_, "adapters") - part(without, "adapters") == 4 * extra
    assert part(with_, "optimizer_states") - part(without, "optimizer_states") == 2 * 4 * extra


@pytest.mark.parametrize("framework", ["litgpt", "torchtune"])
def test_target_parameters_outside_peft_are_refused(framework: str) -> None:
    """Only PEFT has target_parameters: torchtune's LoRA builder raises on the keyword (the
    real builder, torchtune 0.6.1), LitGPT's lora.Config has no such field (litgpt/lora.py).
    cfgcheck refuses the list instead of silently counting no adapter; without it, clean."""
    m = tiny(TINY["qwen3_moe"])
    cfg = run_config(m, ["q_proj"], PARAMS["every-layer"])
    cfg["trainer"]["framework"] = framework
    if framework == "torchtune":
        builders = pytest.importorskip("torchtune.models.llama3_2")
        with pytest.raises(TypeError, match="target_parameters"):
            builders.lora_llama3_2_1b(["q_proj"], target_parameters=PARAMS["every-layer"])
    found = errors(cfg)
    assert len(found) == 1 and f"framework={framework} has no such setting" in found[0]
    cfg["trainer"]["lora"]["target_parameters"] = []
    assert not errors(cfg)
