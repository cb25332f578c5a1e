"""Differential test on TRL's native path: random `trl sft`, `trl dpo` and `trl grpo` configs
over tiny models saved with ``save_pretrained`` (a RoPE Llama, a learned-position GPT-2 and
three MoE bodies: Mixtral, Qwen3-MoE, OLMoE), real word-level tokenizers and text datasets
with lengths around ``max_length`` and the model's positions. The real side parses each file
with TRL's own `trl sft` / `trl dpo` / `trl grpo` parser and trains one step with SFTTrainer /
DPOTrainer / GRPOTrainer on CPU (GRPO generates its completions with transformers, scored by a
length reward); the verdicts must agree: no miss (cfgcheck ok, TRL fails) and no false alarm
(cfgcheck error, TRL trains). A failure that depends on the data alone (no truncation on
learned positions) must at least be warned of.

A few configs run in CI; ``CFGCHECK_TRL_DIFF_N=50 CFGCHECK_TRL_DIFF_SEEDS=0,1,2,3`` runs more.
"""

from __future__ import annotations

import os
import random
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.sources import check_native
from tests.conftest import requires
from tests.model_folders import tokenizer_files

pytestmark = requires("trl", "torch", "transformers", "datasets")

N = int(os.environ.get("CFGCHECK_TRL_DIFF_N", "6"))
SEEDS = [int(s) for s in os.environ.get("CFGCHECK_TRL_DIFF_SEEDS", "0").split(",")]
POSITIONS = 64
ARCHS = ("llama", "gpt2", "mixtral", "qwen3_moe", "olmoe")


@dataclass(frozen=True)
class Draw:
    trainer: str
    arch: str
    max_length: int | None
    words: int
    packing: bool
    padding_free: bool
    pad_token: str | None
    batch: int
    generations: int = 2  # GRPO
    completion: int = 8  # GRPO max_completion_length
    accumulation: int = 1

    def yaml(self, folder: Path) -> str:
        lines = [f"model_name_or_path: {folder}", "bf16: false"]
        if self.trainer == "grpo":
            lines.append(f"num_generations: {self.generations}")
            lines.append(f"max_completion_length: {self.completion}")
            lines.append(f"gradient_accumulation_steps: {self.accumulation}")
            lines.append(f"per_device_train_batch_size: {self.batch}")
            if self.pad_token is not None:
                lines.append(f"pad_token: '{self.pad_token}'")
            return "\n".join(lines) + "\n"
        lines.append(f"max_length: {'null' if self.max_length is None else self.max_length}")
        if self.trainer == "sft":
            lines.append(f"packing: {str(self.packing).lower()}")
        if self.padding_free:
            lines.append("padding_free: true")
        if self.pad_token is not None:
            lines.append(f"pad_token: '{self.pad_token}'")
        lines.append(f"per_device_train_batch_size: {self.batch}")
        return "\n".join(lines) + "\n"


def draw(rng: random.Random) -> Draw:
    max_length = rng.choice([32, 48, 96, None])
    # samples around the length that matters: max_length, or the positions when unbounded
    around = max_length or POSITIONS
    words = max(4, around + rng.choice([-20, -2, 8, 30]))
    trainer = rng.choice(["sft", "sft", "dpo", "grpo"])
    if trainer == "grpo":  # prompts around the positions, a short completion
        return Draw(
            trainer="grpo",
            arch=rng.choice(ARCHS),
            max_length=None,
            words=max(4, POSITIONS // 2 + rng.choice([-24, -8, 0, 8])),
            packing=False,
            padding_free=False,
            pad_token=rng.choice([None, None, "<unk>", "<nope>"]),
            batch=rng.choice([1, 2, 4]),
            generations=rng.choice([2, 3, 4]),
            completion=rng.choice([4, 8, 16]),
            accumulation=rng.choice([1, 2]),
        )
    return Draw(
        trainer=trainer,
        arch=rng.choice(ARCHS),
        max_length=max_length,
        words=words,
        packing=rng.random() < 0.3,
        padding_free=rng.random() < 0.3,
        pad_token=rng.choice([None, None, "<unk>", "<nope>"]),
        batch=rng.choice([1, 2]),
    )


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("diff")
    llama = root / "tiny-llama"
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=POSITIONS,
            bos_token_id=1,
            eos_token_id=2,
        )
    ).save_pretrained(llama)
    gpt2 = root / "tiny-gpt2"
    GPT2LMHeadModel(
        GPT2Config(
            vocab_size=64, n_positions=POSITIONS, n_embd=32, n_layer=1, n_head=4, eos_token_id=2
        )
    ).save_pretrained(gpt2)
    folders = {"llama": llama, "gpt2": gpt2, **_moe(root)}
    for folder in folders.values():
        tokenizer_files(folder, 64)
    return folders


def _moe(root: Path) -> dict[str, Path]:
    """Tiny MoE bodies of three families, 4 experts, 2 a token."""
    from transformers import (
        MixtralConfig,
        MixtralForCausalLM,
        OlmoeConfig,
        OlmoeForCausalLM,
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
    )

    common: dict[str, Any] = {
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": POSITIONS,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "num_experts_per_tok": 2,
    }
    out = {}
    for name, config, model in (
        ("mixtral", MixtralConfig(**common, num_local_experts=4), MixtralForCausalLM),
        (
            "qwen3_moe",
            Qwen3MoeConfig(**common, num_experts=4, moe_intermediate_size=32),
            Qwen3MoeForCausalLM,
        ),
        ("olmoe", OlmoeConfig(**common, num_experts=4), OlmoeForCausalLM),
    ):
        out[name] = root / f"tiny-{name}"
        model(config).save_pretrained(out[name])
    return out


def real(file: Path, d: Draw, out: Path) -> str | None:
    """None when TRL trains a step, else the error it raised."""
    import importlib

    from trl import DPOTrainer, GRPOTrainer, SFTTrainer

    from datasets import Dataset

    make_parser = importlib.import_module(f"trl.scripts.{d.trainer}").make_parser

    def words(i: int, n: int) -> str:
        return " ".join(f"w{3 + (i * 7 + j) % 60}" for j in range(n))

    if d.trainer == "sft":
        data = {"text": [words(i, d.words) for i in range(4)]}
    elif d.trainer == "grpo":
        data = {"prompt": [words(i, d.words) for i in range(8)]}
    else:  # a prompt of half the words, completions of the rest
        half = d.words // 2
        data = {
            "prompt": [words(i, half) for i in range(4)],
            "chosen": [words(i + 1, d.words - half) for i in range(4)],
            "rejected": [words(i + 2, d.words - half) for i in range(4)],
        }
    argv = ["--config", str(file), "--output_dir", str(out), "--use_cpu", "true"]
    argv += ["--max_steps", "1", "--report_to", "none", "--save_strategy", "no"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, args, model_args, _ = make_parser().parse_args_and_config(argv)
            if d.trainer == "grpo":
                trainer = GRPOTrainer(
                    model=model_args.model_name_or_path,
                    reward_funcs=[_length_reward],
                    args=args,
                    train_dataset=Dataset.from_dict(data),
                )
            else:
                cls = SFTTrainer if d.trainer == "sft" else DPOTrainer
                trainer = cls(
                    model=model_args.model_name_or_path,
                    args=args,
                    train_dataset=Dataset.from_dict(data),
                )
            trainer.train()
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:200]}"
    return None


def _length_reward(completions: list[str], **kwargs: Any) -> list[float]:
    return [float(len(c)) for c in completions]


@pytest.mark.parametrize("seed", SEEDS)
def test_cfgcheck_agrees_with_trl(tmp_path: Path, folders: dict[str, Path], seed: int) -> None:
    rng = random.Random(seed)
    misses: list[Any] = []
    false_alarms: list[Any] = []
    refused = warned_only = 0
    for i in range(N):
        d = draw(rng)
        file = tmp_path / f"{d.trainer}-{seed}-{i}.yaml"
        file.write_text(d.yaml(folders[d.arch]))
        options = {"trainer": "grpo"} if d.trainer == "grpo" else {}
        result = check_native(file, "trl", options=options)
        errors = [(f.rule, f.message[:160]) for f in result.errors]
        failed = real(file, d, tmp_path / f"out{i}")
        refused += bool(failed)
        if failed and not errors:
            warned = result.by_rule("trl-positions-past-context")
            if d.max_length is None and warned:  # data-dependent: warned is the verdict
                warned_only += 1
            else:
                misses.append((d, failed, [(f.rule, f.severity) for f in result.findings]))
        elif errors and not failed:
            false_alarms.append((d, errors))
    print(
        f"seed {seed}: {N} configs, {refused} refused by TRL ({warned_only} warned of, "
        f"data-dependent), {len(misses)} misses, {len(false_alarms)} false alarms"
    )
    assert not misses, misses
    assert not false_alarms, false_alarms
