"""Exact parameter counts: published totals, a hand-computed shape, and transformers on meta."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from cfgcheck.memory.params import count_params, lora_params
from cfgcheck.schema.model import ModelConfig
from tests.conftest import MODEL_FOLDER_OPTION

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "benchmarks" / "reference" / "param-counts.csv"
PRESETS = sorted(
    p for p in (REPO / "conf" / "model").glob("*.yaml") if p.stem != MODEL_FOLDER_OPTION
)


def preset(name: str) -> ModelConfig:
    return ModelConfig.model_validate(
        yaml.safe_load((REPO / "conf" / "model" / f"{name}.yaml").read_text())
    )


def published() -> list[tuple[str, int]]:
    lines = [ln for ln in REFERENCE.read_text().splitlines() if ln and not ln.startswith("#")]
    return [(row[0], int(row[-1])) for row in csv.reader(lines)]


def tiny(**kw: object) -> ModelConfig:
    base: dict[str, object] = {
        "name": "tiny",
        "block_size": 16,
        "vocab_size": 10,
        "n_layer": 2,
        "n_embd": 8,
        "n_head": 2,
        "n_query_groups": 1,
        "intermediate_size": 16,
    }
    return ModelConfig.model_validate(base | kw)


@pytest.mark.skipif(not published(), reason="reference/param-counts.csv not available")
@pytest.mark.parametrize(("name", "total"), published())
def test_published_totals_reproduced_to_the_parameter(name: str, total: int) -> None:
    assert count_params(preset(name)).total == total


def test_hand_computed_tiny_llama() -> None:
    # per layer: q 8x8, k 8x4, v 8x4, o 8x8, gate/up/down 3 x 8x16, two RMSNorms of 8
    per_layer = 64 + 32 + 32 + 64 + 3 * 128 + 16
    assert count_params(tiny()).total == 2 * per_layer + 80 + 80 + 8


def test_tied_embeddings_and_biases() -> None:
    assert count_params(tiny(tie_embeddings=True)).total == count_params(tiny()).total - 80
    # q/k/v bias: 8 + 4 + 4 per layer; lm_head bias: 10
    assert count_params(tiny(attn_bias=True)).total == count_params(tiny()).total + 2 * 16
    assert count_params(tiny(lm_head_bias=True)).total == count_params(tiny()).total + 10


def test_lora_params_by_hand() -> None:
    # r * (in + out): q 8+8, v 8+4, two layers
    assert lora_params(tiny(), 2, ["q_proj", "v_proj"]) == 2 * 2 * (16 + 12)
    # LitGPT's switches adapt the same projections; under PEFT "q" names no module (the
    # lora-target-unknown rule reports it) and adapts nothing.
    qv = lora_params(tiny(), 2, ["q_proj", "v_proj"])
    assert lora_params(tiny(), 2, ["query", "value"], framework="litgpt") == qv
    assert lora_params(tiny(), 2, ["lora_query", "v_proj"], framework="litgpt") == qv
    assert lora_params(tiny(), 2, ["q", "v"]) == 0


@pytest.mark.meta
@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_preset_matches_transformers_on_meta_device(path: Path) -> None:
    pytest.importorskip("transformers")
    from cfgcheck.memory.hf_shapes import meta_param_count

    m = ModelConfig.model_validate(yaml.safe_load(path.read_text()))
    assert count_params(m).total == meta_param_count(m)


def test_a_traced_models_adapted_linears_follow_its_shared_norm() -> None:
    """Two models of one trace that differ in ``shared_attention_norm`` (the MLP reads the
    attention's input) get their own adapted linears: the traced path's memo is keyed by the
    trace and that field, as :func:`cfgcheck.memory.params.block_linears` reads both."""
    from cfgcheck.memory.modules import traced
    from cfgcheck.memory.params import adapted_modules, block_linears

    m = preset("gemma-3-1b")
    shared = m.model_copy(update={"shared_attention_norm": True})
    assert traced(m) is not None and traced(shared) is traced(m)
    targets = ["q_proj", "gate_proj", "up_proj"]
    for model in (m, shared, m):  # each after the other's entry is made
        got = {x.name: x.source for x, _ in adapted_modules(model, targets).linears}
        assert got == {x.name: x.source for x in block_linears(model)}
    assert {x.name: x.source for x in block_linears(shared)}["gate_proj"] == "attn_in"
