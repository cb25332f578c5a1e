"""learning-rate-range, reproduced: full fine-tuning at a learning rate far above the recipes
(1e-2 > 1e-3) makes a trained model forget what it knew within a handful of steps; no error
is raised. A tiny random-weight Llama is first trained to memorise batch A, then fine-tuned
on batch B for 5 AdamW steps: at the recipes' 2e-5 its loss on A stays where it was, at 1e-2
it jumps by orders of magnitude. The bounds themselves come from published recipes (LitGPT
config_hub, Axolotl examples; see cfgcheck/rules/finetuning.py), not from this tiny model."""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import cfgcheck  # noqa: E402
from tests.conftest import CONF  # noqa: E402

pytestmark = pytest.mark.crash


def _trained() -> tuple[Any, Any, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=32,
    )
    model = LlamaForCausalLM(config).train()
    g = torch.Generator().manual_seed(1)
    a, b = (torch.randint(0, 128, (8, 16), generator=g) for _ in range(2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(40):
        model(input_ids=a, labels=a).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, a, b


def _loss_on_a_after_finetuning(base: Any, a: Any, b: Any, lr: float) -> float:
    model = copy.deepcopy(base)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(5):
        model(input_ids=b, labels=b).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        return float(model(input_ids=a, labels=a).loss)


def test_a_learning_rate_far_above_full_finetuning_recipes_forgets() -> None:
    base, a, b = _trained()
    with torch.no_grad():
        known = float(base(input_ids=a, labels=a).loss)
    assert known < 0.5  # the model knows batch A
    kept = _loss_on_a_after_finetuning(base, a, b, 2e-5)
    forgot = _loss_on_a_after_finetuning(base, a, b, 1e-2)
    assert kept < 2 * known + 0.05
    assert forgot > 10 * kept

    flagged = cfgcheck.check(CONF, "config", ["trainer=full", "trainer.learning_rate=0.01"])
    [finding] = flagged.by_rule("learning-rate-range")
    assert finding.severity == "warning" and "e.g. trainer.learning_rate=2e-05" in finding.hint
    fine = cfgcheck.check(CONF, "config", ["trainer=full", "trainer.learning_rate=2e-05"])
    assert not fine.by_rule("learning-rate-range")
