"""The ``--deepspeed`` JSON of a launch, against transformers' own
``HfTrainerDeepSpeedConfig.trainer_config_process`` (integrations/deepspeed.py): the ``"auto"``
values cfgcheck fills and the mismatches it refuses are the ones the real method produces, on
the published configs and on planted ones; a launch whose JSON disagrees with its flags is an
error naming the real message."""

from __future__ import annotations

import copy
import json
from functools import partialmethod
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.sources import check_native
from cfgcheck.sources.deepspeed import fill_match
from tests.conftest import requires

LAUNCH = Path(__file__).resolve().parent / "native" / "launch"
PUBLISHED_JSON = [
    LAUNCH / "published" / "fastchat" / "playground" / "deepspeed_config_s2.json",
    LAUNCH / "published" / "fastchat" / "playground" / "deepspeed_config_s3.json",
    LAUNCH / "published" / "qwen" / "finetune" / "ds_config_zero2.json",
    LAUNCH / "published" / "qwen" / "finetune" / "ds_config_zero3.json",
]
PLANTED: list[dict[str, Any]] = [
    {"train_micro_batch_size_per_gpu": 4, "train_batch_size": "auto"},
    {"train_batch_size": 64, "gradient_accumulation_steps": 2, "gradient_clipping": 0.5},
    {"optimizer": {"params": {"lr": 1e-3, "betas": [0.9, 0.95], "eps": "auto"}}},
    {"scheduler": {"params": {"warmup_min_lr": "auto", "warmup_max_lr": 2e-5}}},
    {"fp16": {"enabled": True}, "bf16": {"enabled": "auto"}},
    {"bf16": {"enabled": False}},
]
FLAGS = [
    {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "bf16": True},
    {"learning_rate": 1e-3, "adam_beta2": 0.95, "max_grad_norm": 0.5, "fp16": True},
]


def _real(config: dict[str, Any], args: Any) -> tuple[dict[str, Any], list[str]]:
    """transformers' trainer_config_process on ``config`` (its methods on accelerate's
    HfDeepSpeedConfig: the transformers class checks that deepspeed is installed first)."""
    from accelerate.utils.deepspeed import HfDeepSpeedConfig
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig as Hf

    class Real(HfDeepSpeedConfig):  # type: ignore[misc]
        fill_match = Hf.fill_match
        fill_only = partialmethod(Hf.fill_match, must_match=False)
        trainer_config_process = Hf.trainer_config_process

    real = Real(copy.deepcopy(config))
    real.mismatches = []
    real.trainer_config_process(args)
    return real.config, list(real.mismatches)


@requires("transformers", "accelerate", "torch")
@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize(
    "config",
    [json.loads(p.read_text()) for p in PUBLISHED_JSON] + PLANTED,
    ids=[p.name for p in PUBLISHED_JSON] + [f"planted{i}" for i in range(len(PLANTED))],
)
def test_auto_values_and_mismatches_agree_with_trainer_config_process(
    tmp_path: Path, config: dict[str, Any], flags: dict[str, Any]
) -> None:
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, **flags)
    real_config, real_mismatches = _real(config, args)
    values = {k: getattr(args, k) for k in dir(args) if not k.startswith("_")}
    filled, mismatches = fill_match(config, values, args.world_size)
    assert filled == real_config
    assert [f"- ds {k}={d} vs hf {h}={v}" for k, d, h, v in mismatches] == real_mismatches


def test_a_json_that_disagrees_with_the_flags_is_refused_as_transformers_refuses_it(
    tmp_path: Path,
) -> None:
    seed = LAUNCH / "seed"
    (tmp_path / "tiny-llama").symlink_to(seed / "tiny-llama")
    (tmp_path / "train.py").write_text((seed / "train.py").read_text())
    (tmp_path / "train.sh").write_text(
        (seed / "train.sh").read_text().replace("--lazy_preprocess True", "--deepspeed ds.json")
    )
    ds = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": "auto"}
    ds |= {"train_batch_size": 100, "zero_optimization": {"stage": 3}}
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    result = check_native(tmp_path / "train.sh", "launch")
    (finding,) = result.by_rule("launch-deepspeed-mismatch")
    # torchrun --nproc_per_node=4, batch 2, accumulation 16: 128 per step
    assert "- ds train_micro_batch_size_per_gpu=4 vs hf per_device_train_batch_size=2" in (
        finding.message
    )
    assert "- ds train_batch_size=100 vs hf train_batch_size (calculated)=128" in finding.message
    assert "Please correct the following DeepSpeed config values" in finding.message
    assert result.config is not None and result.config.trainer.strategy == "zero3"

    ds |= {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto"}
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    assert not check_native(tmp_path / "train.sh", "launch").by_rule("launch-deepspeed-mismatch")


def test_deepspeed_without_a_gpu_count_leaves_the_global_batch_unchecked(tmp_path: Path) -> None:
    seed = LAUNCH / "seed"
    (tmp_path / "tiny-llama").symlink_to(seed / "tiny-llama")
    (tmp_path / "train.py").write_text((seed / "train.py").read_text())
    (tmp_path / "run.sh").write_text(
        "deepspeed train.py --model_name_or_path tiny-llama --output_dir o "
        "--per_device_train_batch_size 1 --model_max_length 128 --deepspeed ds.json\n"
    )
    (tmp_path / "ds.json").write_text('{"train_batch_size": 7, "zero_optimization": {"stage": 2}}')
    assert not check_native(tmp_path / "run.sh", "launch").by_rule("launch-deepspeed-mismatch")


def test_an_offloading_config_is_counted_and_its_memory_error_stays_an_error(
    tmp_path: Path,
) -> None:
    """FastChat's deepspeed_config_s2.json offloads the optimizer (offload_optimizer cpu): the
    estimate takes the states off the GPU and reports the host memory; a config that still
    does not fit is an error."""
    from cfgcheck.memory.estimate import estimate
    from cfgcheck.sources import load_native

    seed = LAUNCH / "seed"
    (tmp_path / "tiny-llama").symlink_to(seed / "tiny-llama")
    (tmp_path / "train.py").write_text((seed / "train.py").read_text())
    (tmp_path / "train.sh").write_text((seed / "train.sh").read_text())
    offloading = LAUNCH / "published" / "fastchat" / "playground" / "deepspeed_config_s2.json"
    (tmp_path / "offload.json").write_text(offloading.read_text())
    kept = json.loads(offloading.read_text())
    del kept["zero_optimization"]["offload_optimizer"]
    (tmp_path / "on_gpu.json").write_text(json.dumps(kept))
    flags = ["per_device_train_batch_size=1"]
    loaded = load_native(tmp_path / "train.sh", "launch", [*flags, "deepspeed=offload.json"])
    # no reduce_bucket_size in the JSON: DeepSpeed's default 5e8 elements stays on the GPU
    offload = {"optimizer": "cpu", "bucket_elements": 500_000_000}
    assert loaded.config["trainer"]["offload"] == offload
    where = loaded.source_map.lookup("trainer.offload.optimizer")
    assert where is not None and where.file.endswith("offload.json") and where.line == 5
    on_gpu = check_native(tmp_path / "train.sh", "launch", [*flags, "deepspeed=on_gpu.json"], "0.5")
    offload = check_native(
        tmp_path / "train.sh", "launch", [*flags, "deepspeed=offload.json"], "0.5"
    )
    assert on_gpu.config is not None and offload.config is not None
    kept_est = estimate(on_gpu.config.model, on_gpu.config.data, on_gpu.config.trainer)
    moved = estimate(offload.config.model, offload.config.data, offload.config.trainer)
    assert kept_est.get("optimizer_states") > 0 == moved.get("optimizer_states")
    assert moved.host_bytes > 0 == kept_est.host_bytes
    # the tiny model is mostly the CUDA context: 0.5 GiB is too small with or without offload
    assert [f.severity for f in on_gpu.by_rule("gpu-memory")] == ["error"]
    assert [f.severity for f in offload.by_rule("gpu-memory")] == ["error"]
