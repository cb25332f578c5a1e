"""Every size the schema accepts is bounded by a physical limit (cfgcheck.schema.bounds): an
int64 size is an ``invalid-value`` naming the bound, on every entry point, in bounded time;
and the largest accepted sizes all at once are still checked in bounded time (no per-layer or
per-token loop that an accepted value can make endless)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from cfgcheck.schema import bounds
from cfgcheck.schema.run import RunConfig
from tests.conftest import run_cfgcheck

INT64 = 9223372036854775807

# Every bounded override of cfgcheck's own layout, with its bound.
OVERRIDES: dict[str, bounds.Bound] = {
    "model.n_layer": bounds.LAYERS,
    "model.n_embd": bounds.WIDTH,
    "model.n_head": bounds.HEADS,
    "model.n_query_groups": bounds.HEADS,
    "model.head_size": bounds.HEAD_SIZE,
    "model.intermediate_size": bounds.MLP_WIDTH,
    "model.vocab_size": bounds.VOCAB,
    "model.block_size": bounds.TOKENS,
    "model.sliding_window_size": bounds.TOKENS,
    "data.max_seq_length": bounds.TOKENS,
    "data.max_length": bounds.TOKENS,
    "data.pad_to_multiple_of": bounds.TOKENS,
    "tokenizer.vocab_size": bounds.VOCAB,
    "tokenizer.pad_token_id": bounds.TOKEN_ID,
    "trainer.micro_batch_size": bounds.BATCH,
    "trainer.gradient_accumulation_steps": bounds.STEPS,
    "trainer.devices": bounds.DEVICES,
    "trainer.num_nodes": bounds.DEVICES,
    "trainer.lora.rank": bounds.WIDTH,
}


def assert_bounded(output: str, bound: bounds.Bound) -> None:
    assert f"at most {bound.maximum:,} {bound.what}" in output, output[-2000:]
    assert bound.largest_real in output


@pytest.mark.parametrize("path", sorted(OVERRIDES))
def test_an_int64_size_is_refused_naming_its_bound(path: str) -> None:
    proc = run_cfgcheck("check", f"{path}={INT64}", timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert_bounded(proc.stdout, OVERRIDES[path])
    assert f"fix: set {path} to the real value, at most {OVERRIDES[path].maximum}" in proc.stdout


@pytest.mark.parametrize("command", ["memory", "check"])
def test_int64_layers_end_quickly_on_memory_and_check(command: str) -> None:
    proc = run_cfgcheck(command, f"model.n_layer={INT64}", timeout=60)
    assert proc.returncode in (1, 2), proc.stdout + proc.stderr
    assert_bounded(proc.stdout + proc.stderr, bounds.LAYERS)


def test_the_bounds_sit_above_every_shipped_preset() -> None:
    """No real model is refused: every preset of the registry validates as a model section."""
    from cfgcheck.models.presets import all_presets
    from cfgcheck.schema.model import ModelConfig

    presets = all_presets()
    assert presets
    for preset in presets:
        ModelConfig.model_validate(dict(preset.config))


def test_largest_accepted_sizes_all_at_once_end_in_bounded_time() -> None:
    proc = run_cfgcheck(
        "check",
        f"model.n_layer={bounds.LAYERS.maximum}",
        f"model.n_embd={bounds.WIDTH.maximum}",
        f"model.n_head={bounds.HEADS.maximum}",
        f"model.intermediate_size={bounds.MLP_WIDTH.maximum}",
        f"model.vocab_size={bounds.VOCAB.maximum}",
        f"model.block_size={bounds.TOKENS.maximum}",
        f"data.max_seq_length={bounds.TOKENS.maximum}",
        f"trainer.micro_batch_size={bounds.BATCH.maximum}",
        f"trainer.gradient_accumulation_steps={bounds.STEPS.maximum}",
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # real findings, no bound crossed
    assert "at most" not in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("key", "bound"),
    [
        ("num_hidden_layers", bounds.LAYERS),
        ("hidden_size", bounds.WIDTH),
        ("vocab_size", bounds.VOCAB),
        ("max_position_embeddings", bounds.TOKENS),
        ("intermediate_size", bounds.MLP_WIDTH),
    ],
)
def test_a_model_folder_with_an_int64_size_is_refused(
    tmp_path: Path, key: str, bound: bounds.Bound
) -> None:
    config = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
    }
    config[key] = INT64
    (tmp_path / "config.json").write_text(json.dumps(config))
    proc = run_cfgcheck("check", "model=pretrained", f"model.pretrained={tmp_path}", timeout=60)
    assert proc.returncode in (1, 2), proc.stdout + proc.stderr
    assert_bounded(proc.stdout + proc.stderr, bound)


def test_a_native_config_with_an_int64_size_is_refused(tmp_path: Path) -> None:
    src = Path(__file__).parent / "sources" / "native" / "litgpt" / "tiny-llama-lora.yaml"
    native = tmp_path / "lora.yaml"
    native.write_text(src.read_text() + f"\ntrain:\n  micro_batch_size: {INT64}\n", "utf-8")
    proc = run_cfgcheck("check", "--from", "litgpt", str(native), timeout=60)
    assert proc.returncode in (1, 2), proc.stdout + proc.stderr
    assert "at most" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_sweep_point_with_an_int64_size_is_refused_alone() -> None:
    proc = run_cfgcheck("check", "--sweep", f"model.n_layer=2,{INT64}", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert_bounded(proc.stdout, bounds.LAYERS)


def test_the_library_raises_a_validation_error_naming_the_bound() -> None:
    with pytest.raises(ValidationError, match="at most 1,024 layers"):
        RunConfig.model_validate(
            {
                "name": "x",
                "model": {
                    "name": "m",
                    "block_size": 8,
                    "vocab_size": 8,
                    "n_layer": INT64,
                    "n_embd": 8,
                    "n_head": 2,
                },
                "tokenizer": {},
                "data": {"max_seq_length": 8},
                "trainer": {"micro_batch_size": 1},
            }
        )


def test_json_schemas_state_each_maximum() -> None:
    from cfgcheck.jsonschema import json_schemas

    model = json_schemas()["model"]
    assert model["properties"]["n_layer"]["maximum"] == bounds.LAYERS.maximum
