"""Estimate vs published peak memory of real training runs (measured-memory.csv).

Each row becomes a cfgcheck config: the model preset from conf/model/, the row's method,
quantization, micro batch, sequence length, precision, optimizer, checkpointing and LoRA
settings, plus what the row's *source* did (one mapping per source, never per row):

* litgpt-resource-tables: LitGPT finetune/lora.py (10/2023): lm_head and loss in chunks of
  128 tokens (loss_chunking=chunked); torch SDPA with is_causal and no mask, which runs the
  FlashAttention-2 kernel in bf16 on an A100 (attention=flash: no mask, no s x s tensor);
  LoRA dropout 0.05 (its default); gradient accumulation (batch 128 / micro batch 4).
  Metric: max_memory_allocated() / 1e9 -> compared with cfgcheck's *allocated* figure.
  Its 1304 tokens run once: the script forces the longest sample into the first batch
  (finetune/lora.py at f6841380 ``get_batch``: ``ix[0] = longest_seq_ix`` on iteration 0, "so
  potential OOMs happen right away") and draws random, shorter batches after, so no step of
  that length follows another. The estimate assumes one does (LitGPT's loop still holds the
  previous step's logits when a forward ends), so these rows are *upper bounds*
  (``length: once``).
* torchtune-readme-old: torchtune single-device LoRA/QLoRA recipes: full fp32 logits and
  loss (loss_chunking=none); SDPA with is_causal and no mask, the flash kernel on an RTX 4090
  (attention=flash); LoRA dropout 0.05. The README's "peak memory" is read as
  torch's peak reserved -> compared with cfgcheck's *reserved* figure.
* peft-metamathqa: transformers + PEFT: full logits upcast to fp32 (none); SDPA with the
  padding mask of batches padded to the longest (attention=sdpa, micro batch 4 > 1: masked);
  LoRA dropout 0 (PEFT's default). Metric: 99th percentile of reserved -> *reserved*.
  Its 768 is a truncation cap, not a length the batches reach: method_comparison/MetaMathQA
  data.py keeps samples of at most 1300 characters (``CHAR_LIMIT``), run.py pads each
  length-bucketed batch to its longest sample, and the published results average about 212
  tokens a sample (tokens/sec x train time / samples of results/lora--llama-3.2-3B-rank32.json).
  The longest padded batch is not published, so these rows are *upper bounds*
  (``length: cap``): the estimate at the cap must not be below the measurement, and the rows
  stay out of the accuracy statistics.

* litgpt-config-hub (``litgpt-config-hub-a10g.csv``, one A10G): each row is its LitGPT
  config file run through cfgcheck's own LitGPT source (``cfgcheck.sources.litgpt``, exactly
  ``cfgcheck memory --from litgpt FILE``): framework litgpt, chunked lm_head and loss, sdpa
  without a mask, the file's LoRA switches, quantize, micro and global batch, Alpaca2k padded
  to the longest sample and cut at max_seq_length (512: the peak batch is a full-length one,
  Alpaca2k has samples longer than that). Metric: max_memory_allocated() / 1e9 -> *allocated*.
  The row's columns are checked against what the source read from the file.

Data length: LitGPT pads each batch to its longest sample; the rows' 1304 is Alpaca's longest
sample, so each row's seq_len is used as the padded length (data.max_seq_length).
Each source sets ``trainer.framework`` (litgpt, torchtune, hf): whose conventions apply.

Usage: python benchmarks/memory_accuracy.py [--csv PATH ...] [--hub-csv PATH]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from cfgcheck.memory import estimate
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CSV = ROOT / "benchmarks" / "reference" / "measured-memory.csv"
FMS_CSV = ROOT / "benchmarks" / "reference" / "fms-acceleration-a100.csv"
HUB_CSV = ROOT / "benchmarks" / "reference" / "litgpt-config-hub-a10g.csv"
HUB_CONFIGS = ROOT / "benchmarks" / "reference" / "litgpt-config-hub"
HUB_FIELDS = [
    "config",
    "model",
    "method",
    "quantize",
    "precision",
    "lora_r",
    "lora_dropout",
    "lora_layers",
    "micro_batch",
    "global_batch",
    "max_seq_length",
    "devices",
    "gpu",
    "peak_gb",
]
FIELDS = [
    "source",
    "model",
    "method",
    "quantization",
    "micro_batch",
    "seq_len",
    "precision",
    "optimizer",
    "grad_checkpointing",
    "lora_r",
    "lora_targets",
    "gpus",
    "gpu",
    "metric",
    "peak_gb",
]
TARGETS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj"}

# Rows whose length column is not a length consecutive steps reach: a truncation cap no batch
# provably reaches (``cap``), or a longest sample that runs once (``once``). The estimate at
# that length is an upper bound for them (published figures round to 0.01 GB: BOUND_SLACK).
BOUND_LENGTHS = ("cap", "once")
BOUND_SLACK = 0.01

# What each source's training code does, beyond the row's columns.
SOURCES: dict[str, dict[str, Any]] = {
    "litgpt-resource-tables": {
        "trainer": {
            "framework": "litgpt",
            "loss_chunking": "chunked",
            "attention": "flash",
            "lora_dropout": 0.05,
            "gradient_accumulation_steps": 32,
        },
        "metric": "allocated",
        "length": "once",
    },
    "torchtune-readme-old": {
        "trainer": {
            "framework": "torchtune",
            "loss_chunking": "none",
            "attention": "flash",
            "lora_dropout": 0.05,
            "gradient_accumulation_steps": 1,
        },
        "metric": "reserved",
    },
    "peft-metamathqa": {
        "trainer": {
            "framework": "hf",
            "loss_chunking": "none",
            "attention": "sdpa",
            "lora_dropout": 0.0,
            "gradient_accumulation_steps": 1,
        },
        "metric": "reserved",
        "length": "cap",
    },
    "fms-acceleration-a100": {
        "trainer": {
            "framework": "hf",
            "loss_chunking": "none",
            "attention": "flash",
            "lora_dropout": 0.1,
            "gradient_accumulation_steps": 1,
        },
        "data": {"collator": "packed"},
        "multi_gpu": "fsdp",
        "metric": "allocated",
    },
    # rows of litgpt-config-hub-a10g.csv: each config file through cfgcheck.sources.litgpt
    "litgpt-config-hub": {"native": "litgpt", "metric": "allocated"},
}


def _read_csv(path: Path, fields: list[str]) -> list[dict[str, str]]:
    """A reference CSV's rows (comment lines start with ``#``) as dicts of ``fields``."""
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return [dict(zip(fields, row, strict=True)) for row in csv.reader(lines)]


def read_rows(path: Path) -> list[dict[str, str]]:
    return _read_csv(path, FIELDS)


def row_config(row: dict[str, str]) -> tuple[ModelConfig, DataConfig, TrainerConfig, str]:
    source = SOURCES[row["source"]]
    extra = dict(source["trainer"])
    model = ModelConfig.model_validate(
        yaml.safe_load((ROOT / "conf" / "model" / f"{row['model']}.yaml").read_text())
    )
    data = DataConfig.model_validate(
        {"max_seq_length": int(row["seq_len"]), **source.get("data", {})}
    )
    method = row["method"]
    lora: dict[str, Any] = {"dropout": extra.pop("lora_dropout")}
    if method != "full":
        lora |= {"rank": int(row["lora_r"]), "targets": [TARGETS[c] for c in row["lora_targets"]]}
    trainer = TrainerConfig.model_validate(
        {
            "micro_batch_size": int(row["micro_batch"]),
            "devices": int(row["gpus"]),
            **({"strategy": source["multi_gpu"]} if int(row["gpus"]) > 1 else {}),
            "precision": row["precision"],
            "optimizer": row["optimizer"],
            "gradient_checkpointing": row["grad_checkpointing"] == "true",
            "finetuning": method,
            "quantization": {"none": "none", "nf4": "nf4", "nf4-dq": "nf4-dq"}[row["quantization"]],
            "lora": lora,
            **extra,
        }
    )
    return model, data, trainer, source["metric"]


def evaluate(path: Path) -> list[dict[str, Any]]:
    results = []
    for row in read_rows(path):
        model, data, trainer, metric = row_config(row)
        est = estimate(model, data, trainer)
        value = est.allocated_bytes if metric == "allocated" else est.reserved_bytes
        estimated = value / 1e9  # the sources report GB = 1e9 bytes
        measured = float(row["peak_gb"])
        results.append(
            {
                "source": row["source"],
                "config": f"{row['model']} {row['method']} {row['quantization']} "
                f"b={row['micro_batch']} s={row['seq_len']}"
                f"{' ckpt' if trainer.gradient_checkpointing else ''}"
                f"{'' if row['method'] == 'full' else ' r=' + row['lora_r']}" + _gpus(trainer),
                "metric": metric,
                "measured": measured,
                "estimated": estimated,
                "error": (estimated - measured) / measured,
                "bound": SOURCES[row["source"]].get("length") in BOUND_LENGTHS,
            }
        )
    return results


def _gpus(t: TrainerConfig) -> str:
    return "" if t.world_size == 1 else f" {t.strategy} x{t.world_size}"


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| source | run | metric | measured GB | estimate GB | error |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in results:
        mark = " (upper bound)" if r["bound"] else ""
        lines.append(
            f"| {r['source']} | {r['config']}{mark} | {r['metric']} | {r['measured']:.2f} | "
            f"{r['estimated']:.2f} | {r['error']:+.1%} |"
        )
    exact = [abs(r["error"]) for r in results if not r["bound"]]
    bounds = [r for r in results if r["bound"]]
    lines.append("")
    lines.append(
        f"{len(exact)} runs at a known length: median |error| {statistics.median(exact):.1%}, "
        f"worst |error| {max(exact):.1%}"
    )
    if bounds:
        held = sum(r["error"] >= -BOUND_SLACK for r in bounds)
        lines.append(
            f"{len(bounds)} upper-bound runs (a length cap, or a longest sample that runs once): "
            f"estimate >= measured (-{BOUND_SLACK:.0%}) in {held} of {len(bounds)}"
        )
    return "\n".join(lines)


def read_hub_rows(path: Path) -> list[dict[str, str]]:
    return _read_csv(path, HUB_FIELDS)


def hub_estimate(row: dict[str, str], configs: Path = HUB_CONFIGS) -> Any:
    """The row's LitGPT config through cfgcheck's LitGPT source, as ``cfgcheck memory --from
    litgpt FILE --gpu A10G`` reads it; the row's columns must agree with what was read."""
    from cfgcheck.sources.native import load_native
    from cfgcheck.validate import validate

    loaded = load_native(configs / row["config"], "litgpt", gpu=row["gpu"])
    run = validate(loaded.config).config
    if run is None:
        raise ValueError(f"{row['config']}: the LitGPT source gives no valid config")
    t = run.trainer
    read = {
        "model": run.model.name,
        "method": t.finetuning,
        "micro_batch": str(t.micro_batch_size),
        "max_seq_length": str(run.data.max_seq_length),
        "lora_r": "" if t.finetuning == "full" else str(t.lora.rank),
    }
    wrong = {k: (row[k], v) for k, v in read.items() if row[k] != v}
    if wrong:
        raise ValueError(f"{row['config']}: the row says / the file gives {wrong}")
    return estimate(run.model, run.data, run.trainer), run


def evaluate_hub(path: Path = HUB_CSV, configs: Path = HUB_CONFIGS) -> list[dict[str, Any]]:
    results = []
    for row in read_hub_rows(path):
        est, run = hub_estimate(row, configs)
        estimated = est.allocated_bytes / 1e9
        oom = row["peak_gb"] == "OOM"
        measured = float("nan") if oom else float(row["peak_gb"])
        results.append(
            {
                "source": "litgpt-config-hub",
                "config": row["config"],
                "metric": SOURCES["litgpt-config-hub"]["metric"],
                "measured": measured,
                "estimated": estimated,
                "error": float("nan") if oom else (estimated - measured) / measured,
                "oom": oom,
                "verdict": "" if run.trainer.gpu is None else _verdict(est, run),
            }
        )
    return results


def _verdict(est: Any, run: Any) -> str:
    """cfgcheck's verdict on the declared GPU (never a live one: the table's GPU decides)."""
    from cfgcheck.memory.devices import declared_device
    from cfgcheck.memory.verdict import verdict

    dev = declared_device(run.trainer.gpu)
    return "" if dev is None else verdict(est, dev.total_bytes)


def hub_table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| config (1xA10G) | measured GB | estimate GB (allocated) | error | verdict |",
        "|---|---:|---:|---:|---|",
    ]
    for r in results:
        measured = "OOM" if r["oom"] else f"{r['measured']:.2f}"
        error = "" if r["oom"] else f"{r['error']:+.1%}"
        lines.append(
            f"| {r['config']} | {measured} | {r['estimated']:.2f} | {error} | {r['verdict']} |"
        )
    errs = [abs(r["error"]) for r in results if not r["oom"]]
    lines.append("")
    lines.append(
        f"{len(errs)} runs: median |error| {statistics.median(errs):.1%}, "
        f"worst |error| {max(errs):.1%}; {sum(r['oom'] for r in results)} OOM rows"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, nargs="+", default=[DEFAULT_CSV, FMS_CSV])
    parser.add_argument("--hub-csv", type=Path, default=HUB_CSV)
    args = parser.parse_args(argv)
    missing = [str(p) for p in [*args.csv, args.hub_csv] if not p.is_file()]
    if missing:
        print(f"memory_accuracy: no such file {', '.join(missing)}", file=sys.stderr)
        return 2
    print(table([r for path in args.csv for r in evaluate(path)]))
    print()
    print(hub_table(evaluate_hub(args.hub_csv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
