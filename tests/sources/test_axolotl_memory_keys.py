"""Axolotl's memory keys and modes, on examples published in axolotl-ai-cloud/axolotl at
067b021c (copied under tests/sources/native/axolotl with their source): FSDP activation
checkpointing, context parallelism, activation offloading, the Cut Cross-Entropy plugin's
default, the reference model of rl: modes, and the keys of the plugins plugins: lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from cfgcheck.memory.estimate import estimate
from cfgcheck.sources import check_native, load_native
from cfgcheck.validate import validate
from tests.sources.support import example, line_of, write

QAT = example("axolotl", "llama-3-3b-qat-fsdp2.yaml")
ALST = example("axolotl", "alst-llama3-8b-fsdp2.yaml")
GIB = 1024**3
BASE = "base_model: meta-llama/Llama-3.2-1B\nsequence_len: 2048\nmicro_batch_size: 2\nbf16: true\n"


def _peak_gib(file: Path, overrides: list[str] | None = None) -> float:
    loaded = load_native(file, "axolotl", overrides or [])
    cfg = validate(loaded.config).config
    assert cfg is not None
    return estimate(cfg.model, cfg.data, cfg.trainer).total_gib


@pytest.mark.parametrize(
    "name",
    [
        "llama-3-3b-qat-fsdp2.yaml",
        "alst-llama3-8b-fsdp2.yaml",
        "swanlab-dpo-completions.yml",
        "swanlab-lora-profiling.yml",
        "llama-3-instruct-dpo-lora-8b.yml",
        "llama-3-qlora-1b-kto.yaml",
    ],
)
def test_published_examples_get_no_false_error(name: str) -> None:
    result = check_native(example("axolotl", name), "axolotl", gpu="H100")
    assert result.ok, [(f.rule, f.message) for f in result.errors]
    assert not [f for f in result.warnings if f.rule == "unknown-native-key"]


def test_fsdp_activation_checkpointing_checkpoints_every_layer() -> None:
    loaded = load_native(QAT, "axolotl")
    assert loaded.config["trainer"]["gradient_checkpointing"] is True
    at = loaded.source_map.lookup("trainer.gradient_checkpointing")
    assert at is not None and at.line == line_of(QAT, "fsdp_activation_checkpointing")
    on = _peak_gib(QAT)
    off = _peak_gib(QAT, ["fsdp_config.fsdp_activation_checkpointing=false"])
    # the example trains at 8192 tokens x 16 on one H100 class GPU; unread, it was 486 GiB
    assert on < 80 < 400 < off


def test_context_parallel_splits_the_sequence_and_sets_the_gpus() -> None:
    loaded = load_native(ALST, "axolotl")
    t = loaded.config["trainer"]
    assert (t["context_parallel"], t["devices"], t["activation_offloading"]) == (8, 8, True)
    split = _peak_gib(ALST)
    whole = _peak_gib(ALST, ["context_parallel_size=1"])
    assert split < 80 < whole


def test_activation_offloading_keeps_two_layer_inputs(tmp_path: Path) -> None:
    text = BASE + "gradient_checkpointing: true\n"
    plain = _peak_gib(write(tmp_path, "a.yml", text))
    offloaded = _peak_gib(write(tmp_path, "b.yml", text + "activation_offloading: true\n"))
    assert offloaded < plain


def test_cut_cross_entropy_is_on_when_the_plugin_is_listed(tmp_path: Path) -> None:
    plugin = "plugins:\n  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin\n"
    listed = load_native(write(tmp_path, "a.yml", BASE + plugin), "axolotl").config
    assert listed["trainer"]["loss_chunking"] == "fused"  # args.py cut_cross_entropy = True
    off = load_native(
        write(tmp_path, "b.yml", BASE + plugin + "cut_cross_entropy: false\n"), "axolotl"
    ).config
    assert off["trainer"]["loss_chunking"] == "none"
    none = load_native(write(tmp_path, "c.yml", BASE), "axolotl").config
    assert none["trainer"]["loss_chunking"] == "none"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("rl: dpo\n", True),  # full fine-tuning: train.py setup_reference_model loads it again
        ("rl: kto\n", True),
        ("rl: orpo\n", False),  # ORPO has no reference model
        ("rl: dpo\nadapter: lora\nlora_r: 8\nlora_alpha: 16\n", False),  # adapter disabled
        ("rl: dpo\nadapter: lora\nlora_r: 8\nlora_alpha: 16\nrl_adapter_ref_model: true\n", True),
        ("", False),
    ],
)
def test_reference_model_of_rl_modes(tmp_path: Path, extra: str, expected: bool) -> None:
    file = write(tmp_path, "rl.yml", BASE + extra)
    trainer = load_native(file, "axolotl").config["trainer"]
    assert trainer.get("reference_model", False) is expected


def test_reference_model_adds_a_copy_of_the_weights(tmp_path: Path) -> None:
    loaded = load_native(write(tmp_path, "b.yml", BASE + "rl: dpo\n"), "axolotl")
    cfg = validate(loaded.config).config
    assert cfg is not None
    result = estimate(cfg.model, cfg.data, cfg.trainer)
    assert result.get("reference_model") == result.get("weights")
    assert result.get("reference_model") / GIB == pytest.approx(1_235_814_400 * 2 / GIB, rel=0.05)


def test_plugin_keys_are_known_only_when_the_plugin_is_listed(tmp_path: Path) -> None:
    keys = "swanlab_project: demo\nswanlab_mode: local\n"
    unlisted = check_native(write(tmp_path, "a.yml", BASE + keys), "axolotl")
    found = [f for f in unlisted.findings if f.rule == "unknown-native-key"]
    assert {f.paths[0] for f in found} == {"swanlab_project", "swanlab_mode"}
    assert all("swanlab plugin" in f.message for f in found)
    plugin = "plugins:\n  - axolotl.integrations.swanlab.SwanLabPlugin\n"
    listed = check_native(write(tmp_path, "b.yml", BASE + plugin + keys), "axolotl")
    assert not [f for f in listed.findings if f.rule == "unknown-native-key"]


def test_plugin_key_table_comes_from_the_generator() -> None:
    from cfgcheck.sources.axolotl_plugins import plugin_keys

    assert "swanlab_log_completions" in plugin_keys()["swanlab"]
    assert "cut_cross_entropy" in plugin_keys()["cut_cross_entropy"]


@pytest.mark.parametrize(("mode", "pairs"), [("dpo", 2), ("orpo", 2), ("kto", 1), ("grpo", 1)])
def test_preference_modes_run_chosen_and_rejected_together(
    tmp_path: Path, mode: str, pairs: int
) -> None:
    file = write(tmp_path, "rl.yml", BASE + f"rl: {mode}\n")
    trainer = load_native(file, "axolotl").config["trainer"]
    assert trainer.get("sequences_per_sample", 1) == pairs


def test_a_pair_doubles_the_activations(tmp_path: Path) -> None:
    from cfgcheck.memory.estimate import estimate as run_estimate

    lora = "adapter: lora\nlora_r: 8\nlora_alpha: 16\nlora_target_linear: true\n"
    peaks = []
    for extra in ("", "rl: dpo\n"):
        loaded = load_native(write(tmp_path, f"p{len(peaks)}.yml", BASE + lora + extra), "axolotl")
        cfg = validate(loaded.config).config
        assert cfg is not None
        peaks.append(run_estimate(cfg.model, cfg.data, cfg.trainer).get("activations"))
    assert peaks[1] == pytest.approx(2 * peaks[0], rel=0.01)


def test_reward_model_is_a_classifier_scoring_pairs() -> None:
    file = example("axolotl", "qwen2-reward-model.yaml")
    loaded = load_native(file, "axolotl")
    m, t = loaded.config["model"], loaded.config["trainer"]
    assert (m["head"], m["num_labels"], t["sequences_per_sample"]) == (
        "sequence_classification",
        1,
        2,
    )
    at = loaded.source_map.lookup("model.head")
    assert at is not None and at.line == line_of(file, "model_type")
    result = check_native(file, "axolotl", gpu="H100")
    assert result.ok and not result.warnings, [(f.rule, f.message) for f in result.findings]


def test_published_full_dpo_example_counts_its_reference_model() -> None:
    file = example("axolotl", "qwen2-dpo.yaml")
    t = load_native(file, "axolotl").config["trainer"]
    assert (t["reference_model"], t["sequences_per_sample"]) == (True, 2)
    assert check_native(file, "axolotl", gpu="H100").ok
