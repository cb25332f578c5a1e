"""The torchtune failures cfgcheck reports, reproduced on CPU with torchtune's own code (the
``frameworks`` extra installs torchtune 0.6 and torchao) and torch's: each test plants the seed
in a published config, takes the error cfgcheck quotes, raises the real one with a tiny model
built by torchtune's own component builders, and runs the fixed setting."""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchtune")
pytest.importorskip("torchao")

from omegaconf import OmegaConf  # noqa: E402
from omegaconf.errors import ConfigAttributeError, InterpolationKeyError  # noqa: E402
from torch.utils.data import default_collate  # noqa: E402

from cfgcheck.errors import ConfigLoadError  # noqa: E402
from cfgcheck.sources import check_native, load_native  # noqa: E402
from tests.sources.support import NATIVE, one, write  # noqa: E402

LORA_1B = NATIVE / "torchtune" / "llama3_2_1B_lora_single_device.yaml"
PHI3 = NATIVE / "torchtune" / "phi3_mini_lora_single_device.yaml"
TINY = {
    "vocab_size": 64,
    "num_layers": 1,
    "num_heads": 4,
    "num_kv_heads": 2,
    "embed_dim": 32,
    "max_seq_len": 16,
    "intermediate_dim": 64,
}
# What torchtune's SFTDataset yields: unpadded token and label lists of each sample's length.
SAMPLES = [
    {"tokens": [5, 6, 7, 8, 9], "labels": [5, 6, 7, 8, 9]},
    {"tokens": [5, 6, 7], "labels": [-100, 6, 7]},
    {"tokens": [5, 6, 7, 8], "labels": [5, 6, 7, 8]},
    {"tokens": [5, 6], "labels": [5, 6]},
]


def quoted(message: str) -> list[str]:
    """The errors a finding quotes ("TypeError: ..." in double quotes)."""
    return re.findall(r'"([^"]+)"', message)


def loss_of(model: Any, batch: dict[str, Any]) -> Any:
    logits = model(batch["tokens"])
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), batch["labels"].reshape(-1)
    )


def tiny_lora(modules: list[str]) -> Any:
    from torchtune.models.llama3_2 import lora_llama3_2
    from torchtune.modules.peft import get_adapter_params, set_trainable_params

    torch.manual_seed(0)
    model = lora_llama3_2(lora_attn_modules=modules, lora_rank=4, lora_alpha=8, **TINY)
    set_trainable_params(model, get_adapter_params(model))  # as _setup_model does
    return model


def test_default_collate_seed_is_torchtunes_type_error_then_torchs_ragged_error() -> None:
    from torchtune.data import padded_collate_sft

    finding = one(
        check_native(LORA_1B, "torchtune", ["collate_fn=torch.utils.data.default_collate"]),
        "torchtune-collate",
    )
    type_error, ragged = quoted(finding.message)
    # recipes/lora_finetune_single_device.py _setup_data: partial(collate_fn, padding_idx=...,
    # ignore_idx=...) -- the collate torchtune builds from the config
    as_the_recipe_calls = functools.partial(default_collate, padding_idx=0, ignore_idx=-100)
    with pytest.raises(TypeError) as e:
        as_the_recipe_calls(SAMPLES)
    assert type_error == f"TypeError: {e.value}"
    with pytest.raises(RuntimeError) as r:
        default_collate(SAMPLES)  # batch_size=4 samples of different lengths
    assert ragged == f"RuntimeError: {r.value}"
    # the fix: torchtune's padded_collate_sft pads each batch to its longest sample
    batch = functools.partial(padded_collate_sft, padding_idx=0, ignore_idx=-100)(SAMPLES)
    assert batch["tokens"].shape == (4, 5) and batch["labels"][3, 2:].eq(-100).all()
    model = tiny_lora(["q_proj", "v_proj"])
    loss_of(model, batch).backward()


def test_max_seq_len_seed_is_transformer_decoders_value_error() -> None:
    from torchtune.models.llama3_2 import llama3_2

    finding = one(
        check_native(PHI3, "torchtune", ["tokenizer.max_seq_len=8192"]), "torchtune-max-seq-len"
    )
    (error,) = quoted(finding.message)
    model = llama3_2(**TINY)  # max_seq_len=16, as the builder's context
    with pytest.raises(ValueError) as e:
        model(torch.randint(0, 64, (1, 20)))
    # the same message as cfgcheck's, with the tiny model's numbers
    assert f"ValueError: {e.value}" == error.replace("8192", "20").replace("4096", "16")
    model(torch.randint(0, 64, (1, 16)))  # cut to the model's max_seq_len: runs


def test_an_unset_max_seq_len_warns_with_transformer_decoders_value_error() -> None:
    """Found by tests/sources/test_torchtune_differential.py: with tokenizer.max_seq_len
    unset nothing cuts a sample, and one longer than the model fails in forward."""
    from torchtune.models.llama3_2 import llama3_2

    finding = one(
        check_native(PHI3, "torchtune", ["tokenizer.max_seq_len=null"]), "torchtune-max-seq-len"
    )
    assert finding.severity == "warning"
    (error,) = quoted(finding.message)
    model = llama3_2(**TINY)  # max_seq_len=16
    with pytest.raises(ValueError) as e:
        model(torch.randint(0, 64, (1, 20)))
    assert f"ValueError: {e.value}" == error.replace("<length>", "20").replace("4096", "16")
    # cut to the model's max_seq_len (the fix): runs
    assert finding.fixes[0].overrides == ("tokenizer.max_seq_len=4096",)
    model(torch.randint(0, 64, (1, 16)))


def test_lora_module_names_seed(tmp_path: Path) -> None:
    from torchtune.modules.peft import get_adapter_params

    text = LORA_1B.read_text().replace(
        "lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']", "lora_attn_modules: ['o_proj']"
    )
    text = text.replace("apply_lora_to_mlp: True", "apply_lora_to_mlp: False")
    finding = one(
        check_native(write(tmp_path, "l.yaml", text), "torchtune"), "torchtune-lora-modules"
    )
    (error,) = quoted(finding.message)
    model = tiny_lora(["o_proj"])
    assert get_adapter_params(model) == {}  # the name is silently skipped
    batch = {"tokens": torch.randint(0, 64, (2, 8)), "labels": torch.randint(0, 64, (2, 8))}
    with pytest.raises(RuntimeError) as e:
        loss_of(model, batch).backward()
    assert error == f"RuntimeError: {e.value}"
    # the warning's claim: with one real name, only that projection gets an adapter
    partial = tiny_lora(["q_proj", "o_proj"])
    assert {k.split(".")[3] for k in get_adapter_params(partial)} == {"q_proj"}
    # the fix, torchtune's name, trains
    fixed = tiny_lora(finding.fixes[0].overrides[0].split("=[")[1].rstrip("]").split(","))
    loss_of(fixed, batch).backward()
    grads = [p.grad for n, p in fixed.named_parameters() if "lora" in n]
    assert grads and all(g is not None for g in grads)


def test_a_wrong_lora_name_beside_a_right_one_fails_saving_the_hf_checkpoint() -> None:
    """Found by tests/sources/test_torchtune_differential.py: the recipe's save_checkpoint
    passes get_lora_module_names(...) as the adapter config's target_modules, and
    FullModelHFCheckpointer converts it with tune_to_peft_adapter_config, which raises."""
    from torchtune.models.convert_weights import tune_to_peft_adapter_config
    from torchtune.modules.peft import get_lora_module_names

    finding = one(
        check_native(LORA_1B, "torchtune", ["model.lora_attn_modules=[q_proj,o_proj]"]),
        "torchtune-lora-modules",
    )
    (error,) = quoted(finding.message)

    def save(modules: list[str]) -> dict[str, Any]:
        names = get_lora_module_names(modules, True, False)  # as the 1B config: MLP on
        return tune_to_peft_adapter_config({"r": 8, "lora_alpha": 16, "target_modules": names})

    with pytest.raises(ValueError) as e:
        save(["q_proj", "o_proj"])
    assert error == f"ValueError: {e.value}"
    fixed = finding.fixes[0].overrides[0].split("=[")[1].rstrip("]").split(",")
    assert "o_proj" in save(fixed)["target_modules"]  # output_proj, in PEFT's name


def test_unexpected_and_missing_arguments_are_config_instantiates_type_errors() -> None:
    from torchtune import config

    finding = one(
        check_native(LORA_1B, "torchtune", ["model.lora_rnak=16"]), "torchtune-unexpected-argument"
    )
    node = OmegaConf.create(
        {
            "_component_": "torchtune.models.llama3_2.lora_llama3_2_1b",
            "lora_attn_modules": ["q_proj"],
            "lora_rnak": 16,
        }
    )
    with pytest.raises(TypeError) as e:
        config.instantiate(node)
    assert quoted(finding.message) == [f"TypeError: {e.value}"]

    missing = one(
        check_native(LORA_1B, "torchtune", ["~tokenizer.path"]), "torchtune-missing-argument"
    )
    with pytest.raises(TypeError) as m:
        config.instantiate(
            OmegaConf.create({"_component_": "torchtune.models.llama3.llama3_tokenizer"})
        )
    assert quoted(missing.message) == [f"TypeError: {m.value}"]

    no_modules = one(
        check_native(LORA_1B, "torchtune", ["~model.lora_attn_modules"]),
        "torchtune-missing-argument",
    )
    node = OmegaConf.create({"_component_": "torchtune.models.llama3_2.lora_llama3_2_1b"})
    with pytest.raises(TypeError) as b:
        config.instantiate(node)
    assert quoted(no_modules.message) == [f"TypeError: {b.value}"]


def test_missing_key_and_interpolation_errors_are_omegaconfs() -> None:
    finding = one(check_native(LORA_1B, "torchtune", ["~batch_size"]), "torchtune-missing-key")
    cfg = OmegaConf.create({"dtype": "bf16"})
    with pytest.raises(ConfigAttributeError) as e:
        _ = cfg.batch_size  # the recipe reads cfg.batch_size
    cls = type(e.value)
    first = str(e.value).splitlines()[0]
    assert quoted(finding.message) == [f"{cls.__module__}.{cls.__name__}: {first}"]

    with pytest.raises(ConfigLoadError) as load:
        load_native(LORA_1B, "torchtune", ["output_dir=${nope}"])
    with pytest.raises(InterpolationKeyError) as i:
        OmegaConf.to_container(OmegaConf.create({"output_dir": "${nope}"}), resolve=True)
    assert f"InterpolationKeyError: {str(i.value).splitlines()[0]}" in str(load.value)


def _training() -> Any:
    """torchtune.training, which torchtune 0.6 imports with torchao's int4_weight_only: gone
    in torchao 0.15+, so the ``frameworks`` extra pins torchao<0.15."""
    return pytest.importorskip(
        "torchtune.training",
        reason="torchtune 0.6's training module needs torchao<0.15",
        exc_type=ImportError,
    )


def _recipe_module(name: str) -> Any:
    import torchtune

    _training()
    site = Path(torchtune.__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location(f"_tt_{name}", site / "recipes" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the recipe file as `tune run` loads it
    return module


def test_fp16_is_refused_by_the_recipe() -> None:
    finding = one(check_native(LORA_1B, "torchtune", ["dtype=fp16"]), "torchtune-fp16")
    recipe = _recipe_module("lora_finetune_single_device")
    cfg = OmegaConf.create({"device": "cpu", "dtype": "fp16", "output_dir": "/nonexistent"})
    with pytest.raises(ValueError) as e:
        recipe.LoRAFinetuneRecipeSingleDevice(cfg)
    assert quoted(finding.message) == [f"ValueError: {e.value}"]
    ok = check_native(LORA_1B, "torchtune", ["dtype=fp16", *finding.fixes[0].overrides])
    assert not ok.by_rule("torchtune-fp16")


def test_a_single_device_recipe_under_torchrun_is_refused_by_tune_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torchtune._cli.tune import TuneCLIParser

    finding = one(
        check_native(LORA_1B, "torchtune", options={"nproc_per_node": "2"}),
        "torchtune-recipe-not-distributed",
    )
    argv = ["tune", "run", "--nproc_per_node", "2", "lora_finetune_single_device"]
    monkeypatch.setattr(sys, "argv", [*argv, "--config", "llama3_2/1B_lora_single_device"])
    parser = TuneCLIParser()
    with pytest.raises(SystemExit):
        parser.run(parser.parse_args())
    (said,) = quoted(finding.message)
    assert said in " ".join(capsys.readouterr().err.split())


def test_packing_without_max_seq_len_is_refused_by_the_dataset_builder(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    from types import SimpleNamespace

    from torchtune.datasets import alpaca_dataset

    finding = one(
        check_native(LORA_1B, "torchtune", ["dataset.packed=true"]), "torchtune-packed-max-seq-len"
    )
    data = write(tmp_path, "alpaca.json", '[{"instruction": "a", "input": "", "output": "b"}]')
    tokenizer = SimpleNamespace(max_seq_len=None)  # tokenizer.max_seq_len: null
    with pytest.raises(ValueError) as e:
        alpaca_dataset(tokenizer, source="json", data_files=str(data), split="train", packed=True)
    assert quoted(finding.message) == [f"ValueError: {e.value}"]


def test_an_unknown_dtype_is_get_dtypes_value_error() -> None:
    get_dtype = _training().get_dtype

    finding = one(check_native(LORA_1B, "torchtune", ["dtype=bfloat16"]), "torchtune-dtype")
    with pytest.raises(ValueError) as e:
        get_dtype("bfloat16", torch.device("cpu"))
    assert quoted(finding.message) == [f"ValueError: {e.value}"]


def test_offloading_without_checkpointing_is_refused_by_the_recipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    finding = one(
        check_native(LORA_1B, "torchtune", ["enable_activation_offloading=true"]),
        "torchtune-offloading",
    )
    recipe = _recipe_module("lora_finetune_single_device")
    # the recipe checks the device first (CUDA or XPU): stand a CUDA device object in for it
    monkeypatch.setattr(recipe.utils, "get_device", lambda device: torch.device("cuda"))
    cfg = OmegaConf.create(
        {
            "device": "cuda",
            "dtype": "fp32",
            "output_dir": "/nonexistent",
            "log_level": "INFO",
            "seed": 0,
            "epochs": 1,
            "max_steps_per_epoch": None,
            "resume_from_checkpoint": False,
            "gradient_accumulation_steps": 1,
            "checkpointer": {},
            "enable_activation_offloading": True,
        }
    )
    with pytest.raises(RuntimeError) as e:
        recipe.LoRAFinetuneRecipeSingleDevice(cfg)
    assert quoted(finding.message) == [f"RuntimeError: {e.value}"]


def _installed_recipe_text(name: str) -> str:
    import torchtune

    site = Path(torchtune.__file__).resolve().parent.parent
    return (site / "recipes" / f"{name}.py").read_text()


def test_a_component_the_stated_version_lacks_is_its_instantiation_error(tmp_path: Path) -> None:
    """LinearCrossEntropyLoss is main's (after 0.6.1): with the installed torchtune stated, the
    error is the InstantiationError its own config._utils raises; not stated, a warning."""
    from importlib.metadata import version

    from torchtune import config

    installed = version("torchtune")
    loss = "loss._component_=torchtune.modules.loss.LinearCrossEntropyLoss"
    stated = check_native(LORA_1B, "torchtune", [loss], options={"framework_version": installed})
    finding = one(stated, "torchtune-component-unknown")
    assert finding.severity == "error" and f"torchtune {installed}" in finding.message
    with pytest.raises(config._errors.InstantiationError) as e:
        config.instantiate(OmegaConf.create({"_component_": loss.partition("=")[2]}))
    real = " ".join(str(e.value).split())  # its three lines, as one
    assert finding.message.endswith(f'"InstantiationError: {real}"'), (finding.message, real)
    # the same file pinned with a `# requires:` comment; not stated at all: a warning
    pinned = write(
        tmp_path, "pinned.yaml", f"# requires: torchtune=={installed}\n" + LORA_1B.read_text()
    )
    assert (
        one(check_native(pinned, "torchtune", [loss]), "torchtune-component-unknown").severity
        == "error"
    )
    unstated = one(check_native(LORA_1B, "torchtune", [loss]), "torchtune-component-unknown")
    assert unstated.severity == "warning" and "torchtune main" in unstated.message
    # the published file is main's, and main has the loss
    assert not check_native(
        LORA_1B, "torchtune", [loss], options={"framework_version": "0.7.0"}
    ).by_rule("torchtune-component-unknown")


def test_log_level_is_read_by_main_only_and_never_required_of_0_6() -> None:
    """torchtune 0.6's recipe never reads cfg.log_level (main's does: get_logger(cfg.log_level)),
    so a config without it is no error for the installed version, and one with it is warned that
    the key is ignored."""
    from importlib.metadata import version

    installed = version("torchtune")
    recipe = _installed_recipe_text("lora_finetune_single_device")
    reads = "cfg.log_level" in recipe or "log_level" in recipe
    stated = {"framework_version": installed}
    without = check_native(LORA_1B, "torchtune", ["~log_level"], options=stated)
    missing = [f for f in without.by_rule("torchtune-missing-key") if "log_level" in f.message]
    assert bool(missing) == reads
    with_key = check_native(LORA_1B, "torchtune", options=stated)
    ignored = [f for f in with_key.by_rule("unknown-native-key") if f.paths == ("log_level",)]
    assert bool(ignored) != reads and all("torchtune main" in f.message for f in ignored)
    main = check_native(LORA_1B, "torchtune", ["~log_level"], options={"framework_version": "0.7"})
    assert [f.severity for f in main.by_rule("torchtune-missing-key")] == ["error"]
