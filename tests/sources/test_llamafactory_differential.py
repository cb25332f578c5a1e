"""Differential test on LLaMA-Factory's native path: random tiny ``llamafactory-cli train``
configs, shaped like the published examples/train_lora/*.yaml (copied in
tests/sources/native/llamafactory/, see its SOURCES.md), over a tiny Llama saved with
``save_pretrained``, a real word-level tokenizer and a ``dataset_info.json`` with an SFT and a
preference dataset. The real side is LLaMA-Factory's own start-up (``get_train_args`` with every
refusal of hparams/parser.py, the tokenizer, the template, the dataset list; see
tests/sources/llamafactory_real.py) in a subprocess; cfgcheck's side is
``check_native(file, "llamafactory")``. No miss and no false alarm.

LLaMA-Factory pins transformers below the version this venv holds, so it is not installed
with it. The test runs where ``CFGCHECK_LLAMAFACTORY_PYTHON`` names a Python that imports
``llamafactory``, e.g. a throwaway venv that reads the shared site-packages::

    python -m venv /tmp/lfvenv
    echo "$(python -c 'import site; print(site.getsitepackages()[0])')" \\
        > /tmp/lfvenv/lib/python3.11/site-packages/shared.pth
    /tmp/lfvenv/bin/pip install --no-deps llamafactory==0.9.5
    export CFGCHECK_LLAMAFACTORY_PYTHON=/tmp/lfvenv/bin/python
    python -m pytest tests/sources/test_llamafactory_differential.py

``CFGCHECK_LF_DIFF_N`` / ``CFGCHECK_LF_DIFF_SEEDS`` draw more configs (default 3, seed 0).
The draws keep to a CPU's reach: no bf16/fp16 (the parser refuses them without a GPU: "Your
setup doesn't support bf16/gpu"), no quantized model loading (only the parser's refusals of
``quantization_bit``).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources import check_native
from tests.conftest import requires
from tests.model_folders import tokenizer_files

PYTHON = os.environ.get("CFGCHECK_LLAMAFACTORY_PYTHON", "")
pytestmark = [
    requires("torch", "transformers"),
    pytest.mark.skipif(
        not PYTHON,
        reason="set CFGCHECK_LLAMAFACTORY_PYTHON to a Python that imports llamafactory "
        "(see the module docstring)",
    ),
]

N = int(os.environ.get("CFGCHECK_LF_DIFF_N", "3"))
SEEDS = [int(s) for s in os.environ.get("CFGCHECK_LF_DIFF_SEEDS", "0").split(",")]
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Draw:
    stage: str
    finetuning: str
    lora_target: str | None
    template: str | None
    dataset: str
    cutoff_len: int
    packing: bool | None
    neat_packing: bool
    quantization_bit: int | None
    use_dora: bool
    pissa_init: bool
    val_size: float
    eval_strategy: str | None
    typo: bool
    predict_with_generate: bool
    streaming: bool

    def config(self, folder: Path, data: Path, out: Path) -> dict[str, Any]:
        c: dict[str, Any] = {
            "model_name_or_path": str(folder),
            "stage": self.stage,
            "do_train": True,
            "finetuning_type": self.finetuning,
            "dataset": self.dataset,
            "dataset_dir": str(data),
            "cutoff_len": self.cutoff_len,
            "output_dir": str(out),
            "overwrite_output_dir": True,
            "report_to": "none",
            "per_device_train_batch_size": 1,
            "gradient_accumulation_steps": 2,
            "learning_rate": 1.0e-4,
            "num_train_epochs": 1.0,
        }
        optional = {
            "lora_target": self.lora_target,
            "template": self.template,
            "packing": self.packing,
            "quantization_bit": self.quantization_bit,
            "eval_strategy": self.eval_strategy,
        }
        c |= {k: v for k, v in optional.items() if v is not None}
        for key in ("neat_packing", "use_dora", "pissa_init", "predict_with_generate"):
            if getattr(self, key):
                c[key] = True
        if self.streaming:
            c["streaming"] = True
        if self.val_size:
            c["val_size"] = self.val_size
        if self.typo:
            c["lora_rnak"] = 8
        return c


def draw(rng: random.Random) -> Draw:
    stage = rng.choice(["sft", "sft", "pt", "dpo", "kto"])
    finetuning = rng.choice(["lora", "lora", "full", "freeze"])
    return Draw(
        stage=stage,
        finetuning=finetuning,
        lora_target=rng.choice(["all", "q_proj,v_proj", None]),
        template=rng.choice(["default", "llama3", "qwen3_nothink", None] * 3 + ["nope"]),
        dataset=rng.choice(["tiny"] * 6 + ["tiny_pref"] * 3 + ["absent"]),
        cutoff_len=rng.choice([32, 2048]),
        packing=rng.choice([None, None, True, False]),
        neat_packing=rng.random() < 0.08,
        quantization_bit=rng.choice([None] * 8 + [4, 8, 5]),
        use_dora=rng.random() < 0.1,
        pissa_init=rng.random() < 0.06,
        val_size=rng.choice([0.0, 0.0, 0.1]),
        eval_strategy=rng.choice([None] * 5 + ["steps"]),
        typo=rng.random() < 0.05,
        predict_with_generate=rng.random() < 0.05,
        streaming=rng.random() < 0.05,
    )


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("lf")
    model = root / "tiny-llama"
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            bos_token_id=1,
            eos_token_id=2,
        )
    ).save_pretrained(model)
    tokenizer_files(model, 64)
    data = root / "data"
    data.mkdir()
    info = {
        "tiny": {"file_name": "tiny.json"},
        "tiny_pref": {
            "file_name": "pref.json",
            "ranking": True,
            "columns": {"prompt": "instruction", "chosen": "chosen", "rejected": "rejected"},
        },
    }
    (data / "dataset_info.json").write_text(json.dumps(info))
    rows = [{"instruction": "w3 w4", "input": "", "output": "w5 w6"}] * 4
    (data / "tiny.json").write_text(json.dumps(rows))
    pref = [{"instruction": "w3 w4", "chosen": "w5", "rejected": "w6"}] * 4
    (data / "pref.json").write_text(json.dumps(pref))
    return model, data


def real(files: list[Path], timeout: float) -> list[str | None]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), DISABLE_VERSION_CHECK="1")
    done = subprocess.run(
        [PYTHON, "-m", "tests.sources.llamafactory_real", *map(str, files)],
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
    if len(verdicts) != len(files):
        raise AssertionError(f"the LLaMA-Factory runner stopped: {done.stderr[-2000:]}")
    return [verdicts[i] for i in range(len(files))]


def compare(tmp_path: Path, folders: tuple[Path, Path], seed: int, n: int) -> dict[str, Any]:
    model, data = folders
    rng = random.Random(seed)
    keys = ("agree", "miss", "false_alarm", "unreadable", "environment", "refused_by_llamafactory")
    out: dict[str, list[Any]] = {k: [] for k in keys}
    draws, files, results = [], [], []
    for i in range(n):
        d = draw(rng)
        # next to dataset_dir: cfgcheck reads files inside the config's folder only
        file = data.parent / f"lf-{seed}-{i}.yaml"
        file.write_text(json.dumps(d.config(model, data, tmp_path / f"out-{seed}-{i}")))
        try:
            result = check_native(file, "llamafactory")
        except ConfigLoadError as e:
            out["unreadable"].append((d, str(e)))
            continue
        draws.append(d)
        files.append(file)
        results.append(result)
    verdicts = real(files, timeout=120 + 10 * n) if files else []
    for d, result, failed in zip(draws, results, verdicts, strict=True):
        if failed and "To fix: run `pip install" in failed:
            # check_version(..., mandatory=True) (extras/misc.py): a package this machine
            # lacks (jieba, nltk, rouge_chinese for predict_with_generate), not the config
            out["environment"].append((d, failed))
            continue
        if failed:
            out["refused_by_llamafactory"].append(failed)
        errors = [(f.rule, f.message[:200]) for f in result.errors]
        if bool(failed) == bool(errors):
            out["agree"].append(d)
        elif failed:
            out["miss"].append((d, failed, [(f.rule, f.severity) for f in result.findings]))
        else:
            out["false_alarm"].append((d, errors))
    return out


@pytest.mark.parametrize(
    ("extra", "refused"),
    [({"stage": "dpo"}, True), ({"stage": "dpo", "pref_loss": "orpo"}, False)],
)
def test_pissa_with_a_reference_model_is_refused_as_llamafactory_does(
    tmp_path: Path, folders: tuple[Path, Path], extra: dict[str, str], refused: bool
) -> None:
    """Found by the differential: finetuning_args.py:621 refuses PiSSA where DPO keeps a
    reference model (any pref_loss but orpo and simpo)."""
    base = draw(random.Random(0)).config(*folders, tmp_path / "out")
    config = base | {"finetuning_type": "lora", "pissa_init": True, "dataset": "tiny_pref"}
    config |= {"quantization_bit": None, "template": "default"} | extra
    for key in ("lora_rnak", "streaming", "eval_strategy", "predict_with_generate"):
        config.pop(key, None)
    file = folders[1].parent / f"pissa-{len(extra)}.yaml"
    file.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    (failed,) = real([file], timeout=180)
    errors = check_native(file, "llamafactory").errors
    assert bool(failed) == refused and bool(errors) == refused, (failed, errors)
    if refused:
        assert failed == "ValueError: Cannot use PiSSA for current training stage."
        assert "Cannot use PiSSA for current training stage." in errors[0].message


@pytest.mark.parametrize("seed", SEEDS)
def test_cfgcheck_agrees_with_llamafactory(
    tmp_path: Path, folders: tuple[Path, Path], seed: int
) -> None:
    out = compare(tmp_path, folders, seed, N)
    print(f"seed {seed}: {N} configs, " + ", ".join(f"{k} {len(v)}" for k, v in out.items()))
    assert not out["miss"], out["miss"]
    assert not out["false_alarm"], out["false_alarm"]
