"""lora-target-unknown, reproduced with real PEFT on a tiny random model of each architecture:
targets no module has make ``get_peft_model`` raise; targets some modules lack adapt fewer
modules without a word; the finding's fix builds adapters and trains one real step. cfgcheck's
LoRA parameter count equals PEFT's trainable parameters for every target list here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

import cfgcheck  # noqa: E402
from cfgcheck.memory.params import lora_params  # noqa: E402
from cfgcheck.schema.model import ModelConfig  # noqa: E402
from tests.crash.support import (  # noqa: E402
    TEXTS,
    from_shape,
    run_config,
    tokenizer_folder,
    train_step,
)
from tests.test_memory_modules import BASE, LAYOUTS  # noqa: E402

pytestmark = pytest.mark.crash
RANK = 2

# Per architecture: targets no module has (PEFT raises), and targets only some modules have.
NONE_MATCH: dict[str, list[str]] = {
    "llama": ["query", "value"],  # LitGPT's switch names, given to PEFT
    "mistral": ["q", "v"],
    "qwen2": ["qkv_proj"],
    "qwen3": ["c_attn"],
    "gemma": ["dense", "fc1"],
    "gemma2": ["wq", "wv"],
    "phi": ["o_proj", "gate_proj"],
    "phi3": ["q_proj", "v_proj"],
    "gpt2": ["q_proj", "v_proj"],
}
SOME_MATCH: dict[str, list[str]] = {
    "llama": ["q_proj", "v_proj", "qkv_proj"],
    "qwen3": ["q_proj", "k_proj", "q_norm_proj"],
    "gemma2": ["q_proj", "gate_up_proj"],
    "phi": ["q_proj", "v_proj", "o_proj"],
    "phi3": ["qkv_proj", "gate_proj"],
    "gpt2": ["c_attn", "fc1"],
}


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    return tokenizer_folder(tmp_path_factory.mktemp("tok"))


def cfg(real: tuple[Path, Any], arch: str, targets: list[str]) -> dict[str, Any]:
    folder, tok = real
    model = BASE | LAYOUTS[arch] | {"architecture": arch, "vocab_size": len(tok)}
    trainer = {"finetuning": "lora", "lora": {"rank": RANK, "targets": targets, "dropout": 0.0}}
    if arch == "gemma2":  # transformers has no sdpa path for it (attention-unsupported)
        trainer["attention"] = "eager"
    return run_config(folder, tok, model=model, trainer=trainer)


def finding(c: dict[str, Any]) -> cfgcheck.Finding | None:
    found = [f for f in cfgcheck.validate(c).findings if f.rule == "lora-target-unknown"]
    assert len(found) <= 1
    return found[0] if found else None


def fixed_targets(f: cfgcheck.Finding) -> list[str]:
    (fix,) = f.fixes
    (override,) = fix.overrides
    key, value = override.split("=", 1)
    assert key == "trainer.lora.targets"
    return value.strip("[]").split(",")


def peft_model(c: dict[str, Any], targets: list[str] | str) -> Any:
    base = from_shape(ModelConfig.model_validate(c["model"]))
    config = peft.LoraConfig(r=RANK, lora_alpha=4, lora_dropout=0.0, target_modules=targets)
    return peft.get_peft_model(base, config)


def trainable(model: Any) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def batch(tok: Any) -> dict[str, Any]:
    enc = tok(list(TEXTS[:2]), padding=True, truncation=True, max_length=16, return_tensors="pt")
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    return {
        "input_ids": enc["input_ids"],
        "attention_mask": enc["attention_mask"],
        "labels": labels,
    }


def check_fix_trains(real: tuple[Path, Any], arch: str, f: cfgcheck.Finding) -> None:
    fixed = fixed_targets(f)
    good = cfg(real, arch, fixed)
    result = cfgcheck.validate(good)
    assert result.ok, [x.message for x in result.errors]
    assert finding(good) is None
    model = peft_model(good, fixed)
    m = ModelConfig.model_validate(good["model"])
    assert trainable(model) == lora_params(m, RANK, fixed)
    train_step(model, batch(real[1]))


@pytest.mark.parametrize("arch", sorted(NONE_MATCH))
def test_no_target_matches_peft_raises_and_the_fix_trains(
    real: tuple[Path, Any], arch: str
) -> None:
    bad = cfg(real, arch, NONE_MATCH[arch])
    f = finding(bad)
    assert f is not None and f.severity == "error", f
    assert "not found in the base model" in f.message
    with pytest.raises(ValueError, match="not found in the base model"):
        peft_model(bad, NONE_MATCH[arch])
    check_fix_trains(real, arch, f)


@pytest.mark.parametrize("arch", sorted(SOME_MATCH))
def test_some_targets_match_peft_adapts_fewer_silently(real: tuple[Path, Any], arch: str) -> None:
    targets = SOME_MATCH[arch]
    bad = cfg(real, arch, targets)
    f = finding(bad)
    assert f is not None and f.severity == "warning", f
    model = peft_model(bad, targets)  # no error: PEFT adapts what matches
    m = ModelConfig.model_validate(bad["model"])
    assert trainable(model) == lora_params(m, RANK, targets) > 0
    adapted = {name.rsplit(".", 1)[-1] for name, mod in model.named_modules()
               if hasattr(mod, "lora_A") and not name.endswith("lora_A")}  # fmt: skip
    assert adapted < set(targets)  # some names adapted nothing
    check_fix_trains(real, arch, f)


@pytest.mark.parametrize("arch", ["llama", "gemma2", "phi"])
def test_a_non_linear_module_is_refused_by_peft(real: tuple[Path, Any], arch: str) -> None:
    targets = ["mlp", "q_proj"] if arch != "phi" else ["input_layernorm"]
    bad = cfg(real, arch, targets)
    f = finding(bad)
    assert f is not None and f.severity == "error" and "not supported" in f.message
    with pytest.raises(ValueError, match="is not supported"):
        peft_model(bad, targets)
    check_fix_trains(real, arch, f)


@pytest.mark.parametrize("arch", sorted(LAYOUTS))
def test_all_linear_is_accepted_and_counted_as_peft_expands_it(
    real: tuple[Path, Any], arch: str
) -> None:
    c = cfg(real, arch, ["all-linear"])
    assert finding(c) is None
    model = peft_model(c, "all-linear")
    m = ModelConfig.model_validate(c["model"])
    assert trainable(model) == lora_params(m, RANK, ["all-linear"])
    train_step(model, batch(real[1]))


@pytest.mark.parametrize(
    ("arch", "targets"),
    [
        ("llama", ["embed_tokens", "lm_head"]),
        ("phi3", ["embed_tokens", "lm_head", "layers.1.self_attn.qkv_proj"]),
        ("gpt2", ["wte", "wpe", "h.0.mlp.c_proj"]),
        ("qwen3", ["self_attn.q_proj", "0.mlp.down_proj"]),
    ],
)
def test_embeddings_head_and_layer_paths_count_as_peft(
    real: tuple[Path, Any], arch: str, targets: list[str]
) -> None:
    c = cfg(real, arch, targets)
    assert finding(c) is None
    model = peft_model(c, targets)
    m = ModelConfig.model_validate(c["model"])
    assert trainable(model) == lora_params(m, RANK, targets)
