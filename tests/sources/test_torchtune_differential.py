"""Differential test on torchtune's native path: random tiny recipe configs, shaped like the
published ``recipes/configs/llama3_2/1B_lora_single_device.yaml`` (copied in
tests/sources/native/torchtune/, see its SOURCES.md), over a tiny Llama 3.2 built by torchtune's
own ``lora_llama3_2`` / ``llama3_2`` builders with tiny dims, its weights saved by
transformers' ``save_pretrained`` and loaded by torchtune's ``FullModelHFCheckpointer``, a real
SentencePiece tokenizer (``llama2_tokenizer``) and a JSON text dataset with samples around
``tokenizer.max_seq_len`` and the model's ``max_seq_len``.

The real side runs torchtune 0.6.1's own recipe (``__init__``, ``setup``, one ``train`` step
on CPU) in a subprocess (tests/sources/torchtune_real.py); cfgcheck's side is
``check_native(file, "torchtune")``. No miss (cfgcheck ok, torchtune fails) and no false alarm
(cfgcheck error, torchtune trains). A failure that depends on the data alone (samples longer
than the model when nothing cuts them) must at least be warned of, and an error whose
condition the data happens not to meet (``tokenizer.max_seq_len`` above the model's while
every sample is shorter) is counted apart, as data-dependent.

cfgcheck's side is told the installed version (``--framework-version``, as a user states the
torchtune a run uses), so it reads that version's tables: the draws include what differs between
0.6.1 and main (``log_level`` left out: main's recipe requires it, 0.6.1's never reads it;
``LinearCrossEntropyLoss``: main's, absent from 0.6.1).

Two configs of seed 1 run in CI (one names LinearCrossEntropyLoss, one leaves out
log_level); ``CFGCHECK_TT_DIFF_N=50 CFGCHECK_TT_DIFF_SEEDS=0,1,2,3`` runs
more.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources import check_native, load_native
from cfgcheck.sources.torchtune import recipe_of
from tests.conftest import requires

pytestmark = requires("torchtune", "torchao", "torch", "transformers", "sentencepiece")

N = int(os.environ.get("CFGCHECK_TT_DIFF_N", "2"))
SEEDS = [int(s) for s in os.environ.get("CFGCHECK_TT_DIFF_SEEDS", "1").split(",")]
POSITIONS = 64  # the model's max_seq_len
VOCAB = 64
ROOT = Path(__file__).resolve().parents[2]
# The torchtune the real side runs, stated to cfgcheck as a user states it.
STATED = (
    {"framework_version": importlib.metadata.version("torchtune")} if find_spec("torchtune") else {}
)
MODULES = (
    ["q_proj", "v_proj"],
    ["q_proj", "k_proj", "v_proj", "output_proj"],
    ["output_proj"],
    ["o_proj"],
    ["q_proj", "o_proj"],
    [],
)
COLLATES = (
    None,
    None,
    None,
    "torchtune.data.padded_collate_sft",
    "torch.utils.data.default_collate",
    "torchtune.data.left_pad_sequence",
)


@dataclass(frozen=True)
class Draw:
    lora: bool
    modules: tuple[str, ...]
    mlp: bool
    output: bool
    max_seq_len: int | None
    words: int
    packed: bool
    batch: int
    accumulation: int
    dtype: str | None
    collate: str | None
    checkpointing: bool
    offloading: bool
    loss: str
    typo: bool
    log_level: bool

    def yaml(self, folder: Path, data: Path, out: Path) -> str:
        shape = {
            "vocab_size": VOCAB,
            "num_layers": 1,
            "num_heads": 4,
            "num_kv_heads": 2,
            "embed_dim": 32,
            "intermediate_dim": 64,
            "max_seq_len": POSITIONS,
        }
        model: dict[str, Any] = {
            "_component_": "torchtune.models.llama3_2."
            + ("lora_llama3_2" if self.lora else "llama3_2"),
        }
        if self.lora:
            model |= {
                "lora_attn_modules": list(self.modules),
                "apply_lora_to_mlp": self.mlp,
                "apply_lora_to_output": self.output,
                "lora_rank": 4,
                "lora_alpha": 8,
            }
        model |= shape
        if self.typo:
            model["num_layer"] = 1
        config: dict[str, Any] = {
            "output_dir": str(out),
            "model": model,
            "tokenizer": {
                "_component_": "torchtune.models.llama2.llama2_tokenizer",
                "path": str(folder.parent / "tokenizer.model"),
                "max_seq_len": self.max_seq_len,
                "prompt_template": None,
            },
            "checkpointer": {
                "_component_": "torchtune.training.FullModelHFCheckpointer",
                "checkpoint_dir": str(folder),
                "checkpoint_files": ["model.safetensors"],
                "recipe_checkpoint": None,
                "output_dir": "${output_dir}",
                "model_type": "LLAMA3_2",
            },
            "resume_from_checkpoint": False,
            "save_adapter_weights_only": False,
            "dataset": {
                "_component_": "torchtune.datasets.text_completion_dataset",
                "source": "json",
                "data_files": str(data),
                "split": "train",
                "packed": self.packed,
            },
            "seed": 0,
            "shuffle": True,
            "batch_size": self.batch,
            "optimizer": {"_component_": "torch.optim.AdamW", "lr": 3e-4},
            "lr_scheduler": {
                "_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup",
                "num_warmup_steps": 1,
            },
            "loss": {"_component_": self.loss},
            "epochs": 1,
            "max_steps_per_epoch": 1,
            "gradient_accumulation_steps": self.accumulation,
            "clip_grad_norm": None,
            "compile": False,
            "metric_logger": {
                "_component_": "torchtune.training.metric_logging.DiskLogger",
                "log_dir": "${output_dir}/logs",
            },
            "log_every_n_steps": 1,
            "log_peak_memory_stats": False,
            "device": "cpu",
            "dtype": self.dtype,
            "enable_activation_checkpointing": self.checkpointing,
            "enable_activation_offloading": self.offloading,
        }
        if self.log_level:
            config["log_level"] = "INFO"
        if self.collate is not None:
            config["collate_fn"] = self.collate
        if not self.lora:  # full_finetune_single_device reads cfg.optimizer_in_bwd
            config["optimizer_in_bwd"] = False
        return json.dumps(config, indent=1)  # JSON is YAML


def draw(rng: random.Random) -> Draw:
    """Each trap is drawn rarely enough that about half the configs train."""
    max_seq_len = rng.choice([None, 32, 48, POSITIONS, POSITIONS, 96])
    # samples around the length that matters: the cut, or the model's positions when uncut
    around = max_seq_len or POSITIONS
    checkpointing = rng.random() < 0.3
    return Draw(
        lora=rng.random() < 0.8,
        modules=tuple(rng.choice(MODULES[:2] * 6 + MODULES[2:])),
        mlp=rng.random() < 0.4,
        output=rng.random() < 0.05,
        max_seq_len=max_seq_len,
        words=max(4, around + rng.choice([-20, -2, 8, 30])),
        packed=rng.random() < 0.25,
        batch=rng.choice([1, 2, 3]),
        accumulation=rng.choice([1, 1, 2]),
        dtype=rng.choice(["fp32"] * 5 + ["bf16"] * 4 + [None, "fp16"]),
        collate=rng.choice(COLLATES[:1] * 12 + COLLATES[3:]),
        checkpointing=checkpointing,
        # offloading runs on CUDA only ("enable_activation_offloading should only be True
        # when training on CUDA"): on CPU only its refusal without checkpointing is compared
        offloading=not checkpointing and rng.random() < 0.07,
        loss=rng.choice(
            ["torchtune.modules.loss.CEWithChunkedOutputLoss"] * 3
            + ["torch.nn.CrossEntropyLoss"] * 3
            + ["torchtune.modules.loss.LinearCrossEntropyLoss"]
        ),
        typo=rng.random() < 0.05,
        log_level=rng.random() < 0.7,
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama 3.2 (tied output, as torchtune's llama3_2 builder) in Hugging Face format,
    and a SentencePiece word model of 60 pieces next to it."""
    import sentencepiece as spm
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("tt")
    torch.manual_seed(0)
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=POSITIONS,
            tie_word_embeddings=True,
            bos_token_id=1,
            eos_token_id=2,
            rope_theta=500000.0,
        )
    ).save_pretrained(root / "model")
    lines = [" ".join(f"w{3 + (i * 7 + j) % 50}" for j in range(8)) for i in range(300)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=VOCAB,
        model_type="word",
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    (root / "tokenizer.model").write_bytes(model.getvalue())
    return root / "model"


def dataset(path: Path, words: int) -> Path:
    with path.open("w") as f:
        for i in range(6):
            text = " ".join(f"w{3 + (i * 7 + j) % 50}" for j in range(words))
            f.write(json.dumps({"text": text}) + "\n")
    return path


def real(runs: list[tuple[str, Path]], timeout: float) -> list[str | None]:
    """torchtune's verdict per config: None when the recipe trained a step."""
    argv = [f"{recipe}={file}" for recipe, file in runs]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "tests.sources.torchtune_real", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    verdicts: dict[int, str | None] = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            _, i, rest = line.split(" ", 2)
            verdicts[int(i)] = None if rest == "OK" else rest
    if len(verdicts) != len(runs):
        raise AssertionError(f"the torchtune runner stopped: {done.stderr[-2000:]}")
    return [verdicts[i] for i in range(len(runs))]


def compare(tmp_path: Path, folder: Path, seed: int, n: int) -> dict[str, list[Any]]:
    rng = random.Random(seed)
    draws, runs, results = [], [], []
    out: dict[str, list[Any]] = {
        k: [] for k in ("agree", "miss", "false_alarm", "warned_only", "data_dependent")
    }
    out["unreadable"] = []
    out["refused_by_torchtune"] = []
    for i in range(n):
        d = draw(rng)
        file = tmp_path / f"tt-{seed}-{i}.yaml"
        data = dataset(tmp_path / f"data-{seed}-{i}.json", d.words)
        file.write_text(d.yaml(folder, data, tmp_path / f"out-{seed}-{i}"))
        try:
            result = check_native(file, "torchtune", options=STATED)
        except ConfigLoadError as e:  # exit 2: counted, never compared
            out["unreadable"].append((d, str(e)))
            continue
        draws.append(d)
        results.append(result)
        # the recipe tune run would be given: the LoRA or full single-device one
        runs.append((recipe_of(load_native(file, "torchtune", options=STATED).native), file))
    verdicts = real(runs, timeout=60 + 30 * n) if runs else []
    for d, result, failed in zip(draws, results, verdicts, strict=True):
        if failed:
            out["refused_by_torchtune"].append(failed)
        errors = [(f.rule, f.message[:200]) for f in result.errors]
        longest = d.words + 2  # words, the bos and eos text_completion_dataset adds
        uncut = d.max_seq_len is None and not d.packed
        if bool(failed) == bool(errors):
            out["agree"].append(d)
        elif failed:
            warned = [f.rule for f in result.findings if f.severity == "warning"]
            if uncut and longest > POSITIONS and warned:
                out["warned_only"].append((d, failed, warned))
            else:
                out["miss"].append((d, failed, [(f.rule, f.severity) for f in result.findings]))
        elif (
            {rule for rule, _ in errors} == {"torchtune-max-seq-len"}
            and not d.packed
            and longest <= POSITIONS
        ):
            out["data_dependent"].append((d, errors))  # no sample is long enough to fail
        else:
            out["false_alarm"].append((d, errors))
    return out


def report(seed: int, n: int, out: dict[str, list[Any]]) -> str:
    return f"seed {seed}: {n} configs, " + ", ".join(f"{k} {len(v)}" for k, v in out.items())


@pytest.mark.parametrize("seed", SEEDS)
def test_cfgcheck_agrees_with_torchtune(tmp_path: Path, folder: Path, seed: int) -> None:
    out = compare(tmp_path, folder, seed, N)
    print(report(seed, N, out))
    assert not out["miss"], out["miss"]
    assert not out["false_alarm"], out["false_alarm"]
