"""LitGPT's LoRA on a mixture-of-experts model (Lightning-AI/litgpt 0.5.13, litgpt/lora.py
``LLaMAMoE``): with ``lora_mlp`` the router and every expert's three linears get an adapter.
cfgcheck's trainable count for ``trainer.framework=litgpt`` is checked against LitGPT's own
model built on the meta device when litgpt is importable (it is not a dependency of cfgcheck:
``pip install --no-deps litgpt`` into a separate target suffices, its lora module imports
torch and lightning only); the count without the MLP switch is checked everywhere."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from tests.conftest import requires

pytestmark = requires("torch", "transformers")

SWITCHES = [
    ["query", "value"],
    ["query", "value", "mlp"],
    ["query", "key", "value", "projection", "mlp"],
]


def mixtral() -> Any:
    from cfgcheck.schema import ModelConfig
    from tests.test_memory_tracer_moe import run_of

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ModelConfig(**run_of("mixtral", "lora")["model"])


def litgpt_trainable(m: Any, switches: list[str], rank: int) -> int:
    """LitGPT's own count: its LoRA GPT of the same shape, only LoRA trainable."""
    import torch
    from litgpt.lora import GPT, Config, mark_only_lora_as_trainable

    on = {f"lora_{s}": True for s in switches}
    config = Config(
        name="tiny-mixtral", block_size=256, n_layer=m.n_layer, n_embd=m.n_embd,
        n_head=m.n_head, n_query_groups=m.n_query_groups, vocab_size=256,
        padded_vocab_size=256, bias=False, parallel_residual=False, norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMoE", intermediate_size=m.mlp_width // m.n_expert_per_token,
        n_expert=m.n_expert, n_expert_per_token=m.n_expert_per_token,
        lora_r=rank, lora_alpha=16, **on,
    )  # fmt: skip
    with torch.device("meta"):
        model = GPT(config)
    mark_only_lora_as_trainable(model)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_mlp_switch_adapts_the_router_and_every_expert() -> None:
    from cfgcheck.memory.params import lora_params

    m, r = mixtral(), 8
    h, e, width = m.n_embd, m.n_expert, m.mlp_width // m.n_expert_per_token
    attention = lora_params(m, r, ["query", "value"], "litgpt")
    with_mlp = lora_params(m, r, ["query", "value", "mlp"], "litgpt")
    # per MoE layer: the router (hidden -> n_expert) and fc_1, fc_2, proj of each expert
    assert with_mlp - attention == m.n_layer * r * ((h + e) + e * 3 * (h + width))
    # PEFT on the same model adapts no expert by the name "mlp" (no such module)
    assert lora_params(m, r, ["q_proj", "v_proj"], "hf") == attention


@requires("litgpt")
@pytest.mark.parametrize("switches", SWITCHES, ids="+".join)
def test_litgpt_moe_lora_count_equals_litgpt(switches: list[str]) -> None:
    from cfgcheck.memory.params import lora_params

    m = mixtral()
    assert lora_params(m, 8, switches, "litgpt") == litgpt_trainable(m, switches, 8)
