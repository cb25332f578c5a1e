"""attention-unsupported on the shipped conf/ tree (the real failure: tests/crash/)."""

from __future__ import annotations

from cfgcheck import check
from tests.conftest import CONF


def rules(*overrides: str) -> dict[str, list[tuple[str, ...]]]:
    found = check(CONF, "config", list(overrides)).findings
    return {f.rule: [x.overrides for x in f.fixes] for f in found if f.severity == "error"}


def test_gemma2_with_sdpa_is_an_error_and_its_fix_passes() -> None:
    base = ("model=gemma-2-2b", "tokenizer=gemma")
    assert rules(*base) == {"attention-unsupported": [("trainer.attention=eager",)]}
    assert rules(*base, "trainer.attention=eager") == {}


def test_no_fix_when_eager_cannot_fit() -> None:
    """Full fine-tuning of Gemma 2 9B is over an 80 GB GPU already: no fix is offered."""
    found = rules("model=gemma-2-9b", "tokenizer=gemma", "trainer=full")
    assert found["attention-unsupported"] == []


def test_other_architectures_and_frameworks_keep_sdpa() -> None:
    assert "attention-unsupported" not in rules("model=gemma-2b", "tokenizer=gemma")
    assert "attention-unsupported" not in rules("model=qwen3-0.6b", "tokenizer=qwen3")
    litgpt = ("model=gemma-2-2b", "tokenizer=gemma", "+trainer.framework=litgpt")
    assert "attention-unsupported" not in rules(*litgpt)
