"""attention-unsupported, reproduced: transformers refuses sdpa for Gemma 2 (soft-capped
attention scores), and the fixed config (eager) trains one real step on CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import cfgcheck  # noqa: E402
from cfgcheck.memory.hf_shapes import hf_config  # noqa: E402
from cfgcheck.schema.model import ModelConfig  # noqa: E402
from tests.crash.support import TEXTS, run_config, tokenizer_folder, train_step  # noqa: E402
from tests.test_memory_modules import BASE, LAYOUTS  # noqa: E402

pytestmark = pytest.mark.crash


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    return tokenizer_folder(tmp_path_factory.mktemp("tok"))


def test_gemma2_with_sdpa_is_refused_by_transformers_and_eager_trains(
    real: tuple[Path, Any],
) -> None:
    folder, tok = real
    model = BASE | LAYOUTS["gemma2"] | {"architecture": "gemma2", "vocab_size": len(tok)}
    bad = run_config(folder, tok, model=model, trainer={"attention": "sdpa"})
    findings = [f for f in cfgcheck.validate(bad).errors if f.rule == "attention-unsupported"]
    assert len(findings) == 1 and "scaled_dot_product_attention" in findings[0].message
    config = hf_config(ModelConfig.model_validate(bad["model"]))
    with pytest.raises(ValueError, match="does not support an attention implementation"):
        transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")

    (fix,) = findings[0].fixes
    assert fix.overrides == ("trainer.attention=eager",)
    good = run_config(folder, tok, model=model, trainer={"attention": "eager"})
    result = cfgcheck.validate(good)
    assert result.ok, [f.message for f in result.errors]
    torch.manual_seed(0)
    net = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    enc = tok(list(TEXTS[:2]), padding=True, truncation=True, max_length=16, return_tensors="pt")
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    train_step(net, {**enc, "labels": labels})
