"""Published TRL recipes (alignment-handbook, open-r1; see native/trl/SOURCES.md for the
repository, path and commit of each) get a verdict without a false error, read with the TRL
version their repository pins, the trainer their folder names and the accelerate config
their README launches them with; and mistakes planted in them are found at their line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cfgcheck.sources import check_native, load_native
from tests.sources.support import NATIVE, line_of, located_at, one, write

TRL = NATIVE / "trl"
ZERO3 = str(TRL / "accelerate" / "ah-zero3.yaml")
# Each recipe's model, by a preset of the same family and size where the recipe's own
# checkpoint (a fine-tune, not a preset's Hub id) is not cached here; StarCoder2-15B has no
# preset (a generically read family: model.pretrained on its config.json), so a dense model
# of its size stands in.
STAND_IN = {
    "Qwen/Qwen2.5-1.5B-Instruct": "Qwen/Qwen2.5-1.5B",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": "Qwen/Qwen2.5-1.5B",
    "Qwen/Qwen2.5-Coder-7B-Instruct": "Qwen/Qwen2.5-7B",
    "Qwen/Qwen2.5-Coder-32B-Instruct": "Qwen/Qwen2.5-7B",
    "open-r1/Qwen2.5-Math-7B-RoPE-300k": "Qwen/Qwen2.5-7B",
    "alignment-handbook/mistral-7b-sft-constitutional-ai": "mistralai/Mistral-7B-v0.1",
    "alignment-handbook/zephyr-7b-sft-full": "mistralai/Mistral-7B-v0.1",
    "alignment-handbook/zephyr-7b-sft-qlora": "mistralai/Mistral-7B-v0.1",
    "teknium/OpenHermes-2.5-Mistral-7B": "mistralai/Mistral-7B-v0.1",
    "mistralai/Mistral-7B-v0.1": "mistralai/Mistral-7B-v0.1",
    "HuggingFaceH4/zephyr-7b-gemma-sft-v0.1": "google/gemma-7b",
    "google/gemma-7b": "google/gemma-7b",
    "HuggingFaceTB/SmolLM-360M": "HuggingFaceTB/SmolLM2-360M",
    "loubnabnl/smollm2-360M-sft": "HuggingFaceTB/SmolLM2-360M",
    "loubnabnl/smollm2-1.7B-sft": "HuggingFaceTB/SmolLM2-1.7B",
    "HuggingFaceTB/SmolLM2-1.7B": "HuggingFaceTB/SmolLM2-1.7B",
    "HuggingFaceTB/SmolLM2-360M": "HuggingFaceTB/SmolLM2-360M",
    "HuggingFaceTB/SmolLM3-3B-Base": "HuggingFaceTB/SmolLM3-3B",
    "HuggingFaceTB/SmolLM3-3B-checkpoints": "HuggingFaceTB/SmolLM3-3B",
    "mistral-community/Mixtral-8x22B-v0.1": "mistral-community/Mixtral-8x22B-v0.1",
    "HuggingFaceH4/starchat2-15b-sft-v0.1": "meta-llama/Llama-2-13b-hf",
    "bigcode/starcoder2-15b": "meta-llama/Llama-2-13b-hf",
}
# The TRL each repository pins (setup.py at the copied commit).
PINS = {"open-r1": "0.18.0", "alignment-handbook": "0.19.1"}


def recipes() -> list[Path]:
    return sorted(p for d in PINS for p in (TRL / d).glob("*.yaml"))


def model_of(path: Path) -> str:
    for line in path.read_text().splitlines():
        if line.startswith("model_name_or_path:"):
            return line.split(":", 1)[1].split(" #")[0].strip()
    raise AssertionError(path)


def options(path: Path) -> dict[str, str]:
    return {"framework_version": PINS[path.parent.name], "accelerate_config": ZERO3}


def check(path: Path, *overrides: str, **extra: str) -> object:
    stand_in = STAND_IN.get(model_of(path))
    if stand_in is None:
        pytest.skip(f"{path.name}: no preset of its model's family")
    return check_native(
        path,
        "trl",
        [f"model_name_or_path={stand_in}", *overrides],
        gpu="H100",
        options={**options(path), **extra},
    )


# How open-r1's README launches its GRPO recipes (huggingface/open-r1 at 1416fa0, README.md
# lines 314 and 384): 7 training processes beside one GPU serving vLLM
# (`accelerate launch ... --num_processes=7`), so 7 x 16 x 4 completions split into groups of
# num_generations=14.
LAUNCH = {
    "Qwen2.5-1.5B-Instruct--grpo--config_demo_code.yaml": ("num_processes=7",),
    "Qwen2.5-1.5B-Instruct--grpo--config_demo_code_ioi.yaml": ("num_processes=7",),
}
# Zephyr-141B "will require 4 nodes of 8 GPUs (80GB of VRAM)", launched with FSDP
# (huggingface/alignment-handbook at 925acdf, recipes/zephyr-141b-A35b/README.md: `sbatch
# --nodes=4 recipes/launch.slurm zephyr-141b-A35b orpo full fsdp`, accelerate's fsdp.yaml): on
# the one node of 8 GPUs of the other recipes' launch it does not fit (a true gpu-memory error)
LAUNCH["zephyr-141b-A35b--orpo--config_full.yaml"] = ("num_machines=4", "num_processes=32")
ACCELERATE = {"zephyr-141b-A35b--orpo--config_full.yaml": str(TRL / "accelerate" / "ah-fsdp.yaml")}
# True findings in published recipes: the codeforces recipe sets vllm_device, which TRL read
# up to 0.17 only, though open-r1 pins 0.18.0.
TRUE_ERRORS = {"Qwen2.5-Coder-7B-Instruct--grpo--config_codeforces.yaml": {"unknown-native-key"}}


@pytest.mark.parametrize("path", recipes(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_published_recipe_has_no_false_error(path: Path) -> None:
    extra = {"accelerate_config": ACCELERATE[path.name]} if path.name in ACCELERATE else {}
    result = check(path, *LAUNCH.get(path.name, ()), **extra)
    rules = {f.rule for f in result.errors}  # type: ignore[attr-defined]
    assert rules == TRUE_ERRORS.get(path.name, set()), [
        (f.rule, f.message)
        for f in result.errors  # type: ignore[attr-defined]
    ]


@pytest.mark.parametrize(
    ("keys", "trainer"),
    [
        ("max_length: 512\n", "sft"),
        ("beta: 0.1\nmax_length: 512\nloss_type: [sigmoid]\n", "dpo"),
        ("num_generations: 8\nmax_completion_length: 256\n", "grpo"),
        ("desirable_weight: 1.0\nundesirable_weight: 1.0\n", "kto"),
    ],
)
def test_the_trainer_comes_from_the_keys(tmp_path: Path, keys: str, trainer: str) -> None:
    from cfgcheck.sources.trl_run import run_of

    file = write(tmp_path, "config.yaml", "model_name_or_path: Qwen/Qwen2.5-0.5B\n" + keys)
    run = run_of(load_native(file, "trl", options={"framework_version": "1.16.0"}).native)
    assert (run.trainer.name, run.trainer.origin) == (trainer, "its keys")


def test_there_are_a_few_dozen() -> None:
    assert len(recipes()) >= 30


@pytest.mark.parametrize(
    ("name", "trainer"),
    [
        ("open-r1/Qwen2.5-1.5B-Instruct--grpo--config_demo.yaml", "grpo"),
        ("open-r1/OpenR1-Distill-7B--sft--config_distill.yaml", "sft"),
        ("alignment-handbook/zephyr-7b-beta--dpo--config_full.yaml", "dpo"),
        ("alignment-handbook/zephyr-141b-A35b--orpo--config_full.yaml", "orpo"),
    ],
)
def test_the_trainer_comes_from_the_recipe_folder(name: str, trainer: str) -> None:
    from cfgcheck.sources.trl_run import run_of

    path = TRL / name
    native = load_native(path, "trl", options=options(path)).native
    run = run_of(native)
    assert run.trainer.name == trainer
    assert run.recipe == path.parent.name


def test_grpo_lengths_are_prompt_plus_completion() -> None:
    path = TRL / "open-r1" / "Qwen2.5-1.5B-Instruct--grpo--config_demo.yaml"
    loaded = load_native(
        path, "trl", ["model_name_or_path=Qwen/Qwen2.5-1.5B"], options=options(path)
    )
    assert loaded.config["data"]["max_seq_length"] == 512 + 1024
    where = loaded.source_map.lookup("data.max_seq_length")
    assert where is not None and where.line == line_of(path, "max_completion_length")


def test_the_accelerate_config_sets_devices_and_sharding() -> None:
    path = TRL / "alignment-handbook" / "zephyr-7b-beta--sft--config_full.yaml"
    loaded = load_native(
        path, "trl", ["model_name_or_path=mistralai/Mistral-7B-v0.1"], options=options(path)
    )
    t = loaded.config["trainer"]
    assert (t["strategy"], t["devices"]) == ("zero3", 8)
    # and without it the same recipe is one GPU: a full 7B fine-tune does not fit an H100
    alone = check_native(
        path,
        "trl",
        ["model_name_or_path=mistralai/Mistral-7B-v0.1"],
        gpu="H100",
        options={"framework_version": "0.19.1"},
    )
    assert alone.by_rule("gpu-memory")


def test_recipe_keys_are_known_only_for_the_recipe(tmp_path: Path) -> None:
    # open-r1's script fields are accepted for the open-r1 recipe; a plain TRL config with one
    # of them is told which script reads it
    path = TRL / "open-r1" / "Qwen2.5-1.5B-Instruct--grpo--config_demo.yaml"
    result = check(path)
    assert not result.by_rule("unknown-native-key")  # type: ignore[attr-defined]
    # a plain TRL config with a recipe's field is read as that recipe
    plain = write(
        tmp_path,
        "sft.yaml",
        "model_name_or_path: Qwen/Qwen2.5-1.5B\nmax_length: 1024\nhub_model_revision: main\n",
    )
    result = check_native(plain, "trl", gpu="H100")
    assert not result.by_rule("unknown-native-key")


@pytest.mark.parametrize(
    ("key", "candidate", "same"),
    [
        ("lerning_rate", "learning_rate", True),
        ("lora_target_module", "lora_target_modules", True),
        ("hub_model_revision", "model_revision", False),
        ("chat_template", "chat_template_path", False),
        ("warmup_ratio", "warmup_steps", False),
    ],
)
def test_did_you_mean_only_for_the_same_setting(key: str, candidate: str, same: bool) -> None:
    from cfgcheck.sources.unknown import same_meaning

    assert same_meaning(key, candidate) is same


def test_a_misspelt_key_gets_a_fix(tmp_path: Path) -> None:
    file = write(
        tmp_path, "sft.yaml", "model_name_or_path: Qwen/Qwen2.5-1.5B\nlerning_rate: 1.0e-5\n"
    )
    found = one(check_native(file, "trl", gpu="H100"), "unknown-native-key")
    assert found.fixes and found.fixes[0].overrides == ("~lerning_rate", "learning_rate=1e-05")


def test_version_specific_keys_name_the_version_and_rename() -> None:
    # alignment-handbook recipes are written for trl 0.19 (max_seq_length, torch_dtype valid
    # there); read with 1.16 they fail, and the finding says so with the rename, at the line
    path = TRL / "alignment-handbook" / "zephyr-7b-beta--sft--config_full.yaml"
    result = check_native(
        path,
        "trl",
        ["model_name_or_path=mistralai/Mistral-7B-v0.1"],
        gpu="H100",
        options={"framework_version": "1.16.0", "accelerate_config": ZERO3},
    )
    renamed = [f for f in result.by_rule("unknown-native-key") if "max_seq_length" in f.paths]
    assert len(renamed) == 1 and renamed[0].severity == "error"
    assert "max_seq_length -> max_length (since 0.20" in renamed[0].message
    assert renamed[0].fixes and "max_length=" in renamed[0].fixes[0].overrides[1]
    located_at(renamed[0], "max_seq_length", path, line_of(path, "max_seq_length"))


def test_a_rename_is_a_rename_and_a_warning_when_the_version_is_not_known(tmp_path: Path) -> None:
    from cfgcheck.sources import trl_versions as tv

    file = write(
        tmp_path,
        "sft.yaml",
        "model_name_or_path: Qwen/Qwen2.5-1.5B\nmax_length: 1024\ntorch_dtype: bfloat16\n",
    )
    stated = {"framework_version": "1.16.0"}
    known = one(check_native(file, "trl", gpu="H100", options=stated), "unknown-native-key")
    assert known.severity == "error" and "torch_dtype -> dtype" in known.message
    assert known.fixes[0].overrides == ("~torch_dtype", "dtype=bfloat16")  # never "remove"
    # no trl installed, no flag, no pin: the newest is assumed, and that is only a warning
    version = tv.resolve_version(None, "", None, installed="")
    assert version.known is False
    with pytest.MonkeyPatch.context() as mp:  # as on a machine without trl
        mp.setattr(tv, "_installed", lambda dist: None)
        assumed = one(check_native(file, "trl", gpu="H100"), "unknown-native-key")
    assert assumed.severity == "warning" and "no version stated" in assumed.message
    assert assumed.fixes == known.fixes
    pinned = tv.resolve_version(None, "# requires: trl==0.18.2\n", None, installed="")
    assert (pinned.table, pinned.known) == ("0.18.2", True)


def test_grpo_with_vllm_colocated_as_open_r1_launches_it() -> None:
    """open-r1's README (lines 218-224 at 1416fa0): the DeepSeek-R1-Distill-Qwen-1.5B GRPO demo
    on one node of 8 GPUs with `--vllm_mode colocate`: vLLM takes TRL 0.18's default
    vllm_gpu_memory_utilization (0.3) of each H100 beside the training step, and it fits;
    asking vLLM for 0.8 of the GPU does not."""
    from cfgcheck.memory.estimate import estimate
    from cfgcheck.validate import validate

    path = TRL / "open-r1" / "DeepSeek-R1-Distill-Qwen-1.5B--grpo--config_demo.yaml"
    result = check(path, "vllm_mode=colocate")
    assert result.ok, [(f.rule, f.message) for f in result.errors]  # type: ignore[attr-defined]
    loaded = load_native(
        path,
        "trl",
        ["model_name_or_path=Qwen/Qwen2.5-1.5B", "vllm_mode=colocate"],
        options=options(path),
    )
    cfg = validate(loaded.config).config
    assert cfg is not None
    on_h100 = estimate(cfg.model, cfg.data, cfg.trainer).with_vllm(80 * 1024**3)
    assert on_h100.get("vllm") == int(0.3 * 80 * 1024**3)
    greedy = check(path, "vllm_mode=colocate", "vllm_gpu_memory_utilization=0.8")
    assert greedy.by_rule("gpu-memory")  # type: ignore[attr-defined]


def test_zephyr_141b_needs_the_four_nodes_its_readme_names() -> None:
    """Mixtral-8x22B full ORPO: one node of 8 H100s under ZeRO-3 does not hold it (the
    handbook's README asks for 4 nodes of 8 GPUs); its own launch fits the estimate."""
    path = TRL / "alignment-handbook" / "zephyr-141b-A35b--orpo--config_full.yaml"
    one_node = {f.rule for f in check(path).errors}  # type: ignore[attr-defined]
    assert one_node == {"gpu-memory"}
    four = check(path, *LAUNCH[path.name], accelerate_config=ACCELERATE[path.name])
    assert not four.errors  # type: ignore[attr-defined]
