"""LitGPT configs: published config_hub files pass, every mapping and default, planted mistakes
found at the native line, LitGPT's own refusals, and the LitGPT rule profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from cfgcheck.sources import check_native, load_native
from tests.sources.support import (
    applying_fixes_clears,
    example,
    is_default,
    line_of,
    located_at,
    one,
    write,
)

TINY = example("litgpt", "tiny-llama-lora.yaml")
PUBLISHED = [
    "tiny-llama-lora.yaml",
    "llama-2-7b-qlora.yaml",
    "mistral-7b-lora.yaml",
    "llama-3-8b-full.yaml",
    "phi-2-lora.yaml",
]
TINY_ID = "checkpoints/TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_configs_pass(name: str) -> None:
    result = check_native(example("litgpt", name), "litgpt", gpu="H100")
    assert result.ok and not result.warnings, [(f.rule, f.message) for f in result.findings]
    assert result.config is not None and result.config.trainer.framework == "litgpt"


def test_mapping_of_the_tiny_llama_lora_config() -> None:
    loaded = load_native(TINY, "litgpt")
    cfg, smap = loaded.config, loaded.source_map
    # checkpoints/<org>/<name> is the Hub id LitGPT downloads
    assert cfg["model"] == {"pretrained": "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"}
    assert cfg["data"]["max_seq_length"] == 512 and cfg["data"]["truncation"] is True
    t = cfg["trainer"]
    assert (t["precision"], t["quantization"], t["finetuning"]) == ("bf16-true", "none", "lora")
    assert (t["micro_batch_size"], t["global_batch_size"], t["gradient_accumulation_steps"]) == (
        8,
        8,
        1,
    )
    assert t["lora"] == {
        "rank": 32,
        "alpha": 16,
        "dropout": 0.05,
        "targets": [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
            "lm_head",
        ],
    }
    assert t["learning_rate"] == 0.0002 and t["optimizer"] == "adamw"
    assert cfg["seed"] == 1337 and cfg["output_dir"] == "out/finetune/lora-tiny-llama-1.1b"
    for path, key in [
        ("data.max_seq_length", "max_seq_length"),
        ("trainer.precision", "precision"),
        ("trainer.lora.rank", "lora_r"),
        ("trainer.micro_batch_size", "micro_batch_size"),
        ("trainer.global_batch_size", "global_batch_size"),
        ("trainer.learning_rate", "lr"),
        ("model.pretrained", "checkpoint_dir"),
    ]:
        location = smap.lookup(path)
        assert location is not None and location.line == line_of(TINY, key), (path, location)


def test_defaults_of_the_finetune_command(tmp_path: Path) -> None:
    file = write(tmp_path, "min.yaml", f"checkpoint_dir: {TINY_ID}\n")
    loaded = load_native(file, "litgpt")
    cfg, smap = loaded.config, loaded.source_map
    t = cfg["trainer"]
    # litgpt/finetune/full.py setup(): micro 1, global 16 -> accumulation 16; no LoRA keys
    assert (t["micro_batch_size"], t["global_batch_size"], t["gradient_accumulation_steps"]) == (
        1,
        16,
        16,
    )
    assert t["finetuning"] == "full" and t["quantization"] == "none"
    assert t["precision"] == "bf16-mixed"  # get_default_supported_precision(training=True)
    assert (t["loss_chunking"], t["attention"], t["gradient_checkpointing"]) == (
        "chunked",
        "sdpa",
        False,
    )
    assert (t["strategy"], t["devices"], t["num_nodes"]) == ("single", 1, 1)
    assert t["learning_rate"] == 1e-3  # optimizer="AdamW" with torch's default lr
    # train.max_seq_length unset: samples are not cut, the block is the limit
    assert cfg["data"]["max_seq_length"] == 2048 and cfg["data"]["truncation"] is False
    assert (cfg["data"]["padding"], cfg["data"]["collator"]) == ("longest", "padded")
    assert cfg["seed"] == 1337
    for path in (
        "trainer.precision",
        "trainer.micro_batch_size",
        "data.max_seq_length",
        "trainer.loss_chunking",
        "trainer.attention",
        "seed",
    ):
        assert is_default(smap.lookup(path), "LitGPT"), path
    assert "get_default_supported_precision" in str(smap.lookup("trainer.precision"))


def test_lora_defaults(tmp_path: Path) -> None:
    file = write(tmp_path, "lora.yaml", f"checkpoint_dir: {TINY_ID}\nlora_r: 4\n")
    lora = load_native(file, "litgpt").config["trainer"]["lora"]
    # lora.py setup(): alpha 16, dropout 0.05, query and value only
    assert lora == {"rank": 4, "alpha": 16, "dropout": 0.05, "targets": ["q_proj", "v_proj"]}


def test_accumulation_rounds_down_and_the_mismatch_is_a_warning(tmp_path: Path) -> None:
    text = (
        f"checkpoint_dir: {TINY_ID}\ndevices: 2\n"
        "train:\n  global_batch_size: 16\n  micro_batch_size: 3\n"
    )
    file = write(tmp_path, "b.yaml", text)
    cfg = load_native(file, "litgpt").config
    assert cfg["trainer"]["gradient_accumulation_steps"] == 2  # 16 // 2 // 3
    result = check_native(file, "litgpt", gpu="H100")
    finding = one(result, "batch-size-mismatch")
    assert (
        finding.severity == "warning" and "LitGPT rounds the accumulation down" in finding.message
    )


def test_over_block_length_is_a_warning_in_finetuning(tmp_path: Path) -> None:
    # The seed failure: "Cannot attend to 3063, block size is only 2048" comes when a sample
    # that long reaches the model; finetune sets model.max_seq_length to the longest sample.
    result = check_native(TINY, "litgpt", ["train.max_seq_length=3063"], gpu="H100")
    finding = one(result, "seq-len-over-block-size")
    assert finding.severity == "warning" and "LitGPT finetune" in finding.message
    assert str(finding.locations["data.max_seq_length"]) == "<override train.max_seq_length=3063>"
    planted = write(
        tmp_path,
        "long.yaml",
        TINY.read_text().replace("max_seq_length: 512", "max_seq_length: 3063"),
    )
    located_at(
        one(check_native(planted, "litgpt"), "seq-len-over-block-size"),
        "data.max_seq_length",
        planted,
        line_of(planted, "max_seq_length"),
    )


def test_over_block_length_stays_an_error_in_pretraining(tmp_path: Path) -> None:
    text = (
        f"initial_checkpoint_dir: {TINY_ID}\ntokenizer_dir: {TINY_ID}\n"
        "train:\n  max_seq_length: 3063\n"
    )
    file = write(tmp_path, "pretrain.yaml", text)
    finding = one(check_native(file, "litgpt"), "seq-len-over-block-size")
    assert finding.severity == "error"


@pytest.mark.parametrize(
    ("overrides", "rule", "paths"),
    [
        (
            ["quantize=bnb.nf4", "precision=bf16-mixed"],
            "litgpt-quantize-mixed-precision",
            ("quantize", "precision"),
        ),
        (
            ["quantize=bnb.nf4", "devices=2", "train.global_batch_size=16"],
            "litgpt-quantize-multi-device",
            ("quantize", "devices"),
        ),
        (
            ["quantize=bnb.nf4", "optimizer=SGD"],
            "litgpt-quantize-optimizer",
            ("quantize", "optimizer"),
        ),
        (["train.global_batch_size=4"], "litgpt-batch-too-small", ("train.global_batch_size",)),
    ],
)
def test_litgpt_refusals_with_native_fixes(
    overrides: list[str], rule: str, paths: tuple[str, ...]
) -> None:
    result = check_native(TINY, "litgpt", overrides, gpu="H100")
    finding = one(result, rule)
    assert finding.severity == "error"
    for path in paths:
        assert finding.locations[path] is not None
    applying_fixes_clears(TINY, "litgpt", overrides, finding)


def test_quantize_with_the_default_precision_is_refused(tmp_path: Path) -> None:
    # precision unset -> bf16-mixed, which LitGPT refuses with quantize
    file = write(tmp_path, "q.yaml", f"checkpoint_dir: {TINY_ID}\nquantize: bnb.nf4\nlora_r: 8\n")
    finding = one(check_native(file, "litgpt", gpu="H100"), "litgpt-quantize-mixed-precision")
    located_at(finding, "quantize", file, 2)
    assert "default" in finding.message
    applying_fixes_clears(file, "litgpt", [], finding)


def test_planted_mistakes_in_a_published_config_at_their_lines(tmp_path: Path) -> None:
    text = (
        TINY.read_text()
        .replace("quantize:\n", "quantize: bnb.nf4\n")
        .replace("precision: bf16-true", "precision: bf16-mixed")
        .replace("  max_seq_length: 512", "  max_seq_lenght: 512")
    )
    file = write(tmp_path, "planted.yaml", text)
    result = check_native(file, "litgpt", gpu="H100")
    mixed = one(result, "litgpt-quantize-mixed-precision")
    located_at(mixed, "quantize", file, line_of(file, "quantize"))
    located_at(mixed, "precision", file, line_of(file, "precision"))
    typo = one(result, "unknown-native-key")
    assert typo.severity == "error" and "did you mean train.max_seq_length" in typo.hint
    located_at(typo, "train.max_seq_lenght", file, line_of(file, "max_seq_lenght"))


def test_unknown_model_is_a_load_error(tmp_path: Path) -> None:
    from cfgcheck.errors import ConfigLoadError

    file = write(tmp_path, "x.yaml", "checkpoint_dir: checkpoints/nobody/no-such-model\n")
    with pytest.raises(
        ConfigLoadError,
        match=r"x\.yaml:1: checkpoint_dir=nobody/no-such-model: .*not a cfgcheck preset",
    ):
        check_native(file, "litgpt")
    with pytest.raises(ConfigLoadError, match="names no model: set checkpoint_dir"):
        check_native(write(tmp_path, "y.yaml", "devices: 1\n"), "litgpt")


@pytest.mark.parametrize(
    ("checkpoint", "targets"),
    [
        (
            "checkpoints/microsoft/phi-2",
            ["q_proj", "k_proj", "v_proj", "dense", "fc1", "fc2", "lm_head"],
        ),
        (
            "checkpoints/microsoft/Phi-3-mini-4k-instruct",
            ["qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"],
        ),
        (
            TINY_ID,
            [
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                "gate_proj",
                "up_proj",
                "down_proj",
                "lm_head",
            ],
        ),
    ],
)
def test_lora_switches_become_the_architectures_module_names(
    checkpoint: str, targets: list[str]
) -> None:
    # phi-2-lora.yaml switches every LoRA target on (query ... head)
    file = example("litgpt", "phi-2-lora.yaml")
    result = check_native(file, "litgpt", [f"checkpoint_dir={checkpoint}"], gpu="H100")
    assert result.config is not None and result.config.trainer.lora.targets == targets


def test_memory_fixes_come_back_in_litgpt_keys() -> None:
    # 2048-token samples at micro batch 8 do not fit an A10G; the fix trading micro batch for
    # accumulation is LitGPT's train.micro_batch_size alone (it derives the accumulation).
    overrides = ["train.max_seq_length=2048"]
    finding = one(check_native(TINY, "litgpt", overrides, gpu="A10G"), "gpu-memory")
    assert finding.severity == "error" and finding.fixes
    for fix in finding.fixes:
        assert all(o.startswith("train.") for o in fix.overrides), fix
        after = check_native(TINY, "litgpt", [*overrides, *fix.overrides], gpu="A10G")
        assert not after.by_rule("gpu-memory") and after.ok, [f.message for f in after.findings]


# --- litgpt pretrain and older releases -------------------------------------------------------

PRETRAIN = ["pretrain-tinyllama.yaml", "pretrain-microllama.yaml", "pretrain-tinystories.yaml"]
# config_hub files of LitGPT v0.3.1, before `optimizer:` (train.learning_rate, train.beta1...)
V031 = [
    "v031-tiny-llama-lora.yaml",
    "v031-llama-2-7b-qlora.yaml",
    "v031-phi-2-full.yaml",
    "v031-pretrain-tinystories.yaml",
]


@pytest.mark.parametrize("name", PRETRAIN)
def test_published_pretrain_configs_pass(name: str) -> None:
    result = check_native(example("litgpt", name), "litgpt", gpu="H100")
    assert result.ok and not result.warnings, [(f.rule, f.message) for f in result.findings]


def test_pretrain_model_name_resolves_from_litgpts_config_table() -> None:
    file = example("litgpt", "pretrain-tinyllama.yaml")
    loaded = load_native(file, "litgpt")
    m, t = loaded.config["model"], loaded.config["trainer"]
    # litgpt/config.py tiny-llama-1.1b: 22 layers, 2048 wide, 4 query groups, block 2048
    assert (m["name"], m["n_layer"], m["n_embd"], m["n_query_groups"]) == (
        "tiny-llama-1.1b",
        22,
        2048,
        4,
    )
    assert loaded.source_map.lookup("model.n_layer").line == line_of(file, "model_name")
    # devices: auto counts as one device (litgpt/utils.py parse_devices: the machine decides)
    assert (t["devices"], t["strategy"], t["gradient_checkpointing"]) == (1, "single", False)
    assert loaded.config["data"]["max_seq_length"] == 2048
    eight = load_native(file, "litgpt", ["devices=8"]).config["trainer"]
    assert (eight["devices"], eight["strategy"], eight["gradient_accumulation_steps"]) == (
        8,
        "fsdp",
        16,  # 512 // 8 // 4
    )


def test_inline_model_config_is_the_shape() -> None:
    file = example("litgpt", "pretrain-tinystories.yaml")
    m = load_native(file, "litgpt").config["model"]
    assert (m["name"], m["n_layer"], m["n_embd"], m["block_size"], m["mlp"]) == (
        "stories15M",
        6,
        288,
        256,
        "swiglu",
    )


def test_pretrain_max_seq_length_null_is_the_block(tmp_path: Path) -> None:
    text = "model_name: pythia-14m\ntrain:\n  max_seq_length:\n"
    cfg = load_native(write(tmp_path, "p.yaml", text), "litgpt").config
    assert cfg["data"]["max_seq_length"] == 512  # pythia-14m block_size (litgpt/config.py)


def test_unknown_model_name_is_a_load_error(tmp_path: Path) -> None:
    from cfgcheck.errors import ConfigLoadError

    with pytest.raises(ConfigLoadError, match="model_name=no-such-model"):
        load_native(write(tmp_path, "p.yaml", "model_name: no-such-model\n"), "litgpt")


@pytest.mark.parametrize("name", V031)
def test_v031_configs_get_no_error_and_a_warning_per_old_key(name: str) -> None:
    file = example("litgpt", name)
    result = check_native(file, "litgpt", gpu="H100")
    assert result.ok, [(f.rule, f.message) for f in result.errors]
    old = {f.paths[0] for f in result.warnings if f.rule == "unknown-native-key"}
    assert old == {"train.learning_rate", "train.weight_decay", "train.beta1", "train.beta2"}
    lr = next(f for f in result.warnings if f.paths[0] == "train.learning_rate")
    assert "LitGPT 0.3.1" in lr.message and "optimizer.init_args.lr" in lr.message
    located_at(lr, "train.learning_rate", file, line_of(file, "learning_rate"))
    assert result.config is not None
    assert result.config.trainer.learning_rate == float(
        load_native(file, "litgpt").native.get("train.learning_rate")
    )


def test_old_release_keys_come_from_the_generated_table() -> None:
    from cfgcheck.sources.litgpt_versions import older_keys

    assert older_keys()["train.learning_rate"] == ["0.3.1"]


def test_pretrain_shards_within_a_node() -> None:
    """pretrain.py: FSDPStrategy(sharding_strategy="HYBRID_SHARD"): 8 GPUs x 4 nodes hold
    what 8 GPUs on one node hold; 32 GPUs on one node shard four times finer."""
    from cfgcheck.memory.estimate import estimate
    from cfgcheck.validate import validate

    file = example("litgpt", "pretrain-tinyllama.yaml")

    def peak(*overrides: str) -> int:
        cfg = validate(load_native(file, "litgpt", list(overrides)).config).config
        assert cfg is not None
        return estimate(cfg.model, cfg.data, cfg.trainer).get("optimizer_states")

    one_node = peak("devices=8", "num_nodes=1")
    assert peak("devices=8", "num_nodes=4") == one_node
    assert peak("devices=32", "num_nodes=1") * 4 == pytest.approx(one_node, rel=0.01)


def test_a_checkpoint_cfgcheck_cannot_resolve_takes_litgpts_config_table() -> None:
    """`litgpt download tiiuae/falcon-7b` writes model_config.yaml from Config.from_name, so
    with no local folder, cache entry or preset the table is the shape."""
    file = example("litgpt", "falcon-7b-lora.yaml")
    loaded = load_native(file, "litgpt")
    m = loaded.config["model"]
    assert (m["name"], m["n_layer"], m["n_embd"], m["n_query_groups"]) == ("falcon-7b", 32, 4544, 1)
    assert loaded.model_key == "checkpoint_dir"
    result = check_native(file, "litgpt", gpu="H100")
    assert result.ok and not result.warnings, [(f.rule, f.message) for f in result.findings]
