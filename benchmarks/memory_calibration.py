"""Calibrate the memory estimate on a real GPU: real transformers models built from the conf/
shapes with random weights, a few real training steps per configuration, torch's peak
allocated and reserved memory against cfgcheck's estimate. Writes a markdown table.

    python benchmarks/memory_calibration.py --dry-run        # configurations + estimates, no GPU
    python benchmarks/memory_calibration.py --out docs/memory-calibration.md

Each run: bf16 weights (``bf16-true``), torch AdamW (foreach), batches of random tokens of the
full sequence length with one padded sample (so transformers hands sdpa a padding mask, as in
padded training batches), ``labels=input_ids`` (transformers' fp32 loss), 3 steps,
``set_to_none`` zero_grad. LoRA is a minimal adapter (``x @ A^T @ B^T * alpha / r`` with
dropout) on the targeted projections, base weights frozen. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cfgcheck.memory import estimate
from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig

ROOT = Path(__file__).resolve().parent.parent
GB = 1e9


@dataclass(frozen=True)
class Run:
    model: str
    finetuning: str  # full | lora
    checkpointing: bool
    seq: int
    batch: int
    attention: str  # eager | sdpa
    rank: int = 16

    @property
    def label(self) -> str:
        rank = "" if self.finetuning == "full" else f" r={self.rank}"
        ckpt = "ckpt " if self.checkpointing else ""
        shape = f"b={self.batch} s={self.seq} {self.attention}"
        return f"{self.model} {self.finetuning}{rank} {ckpt}{shape}"


RUNS: tuple[Run, ...] = (
    Run("tinyllama-1.1b", "lora", False, 512, 1, "sdpa"),
    Run("tinyllama-1.1b", "lora", False, 1024, 4, "sdpa"),
    Run("tinyllama-1.1b", "lora", False, 2048, 4, "sdpa"),
    Run("tinyllama-1.1b", "lora", True, 4096, 8, "sdpa"),
    Run("tinyllama-1.1b", "lora", False, 1024, 4, "eager"),
    Run("tinyllama-1.1b", "lora", True, 2048, 8, "eager"),
    Run("tinyllama-1.1b", "full", False, 512, 2, "sdpa"),
    Run("tinyllama-1.1b", "full", False, 1024, 4, "sdpa"),
    Run("tinyllama-1.1b", "full", True, 4096, 4, "sdpa"),
    Run("tinyllama-1.1b", "full", False, 1024, 2, "eager"),
    Run("llama-3.2-3b", "lora", False, 1024, 4, "sdpa"),
    Run("llama-3.2-3b", "lora", True, 4096, 4, "sdpa"),
    Run("llama-3.2-3b", "full", True, 2048, 4, "sdpa"),
)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def preset(name: str) -> ModelConfig:
    return ModelConfig.model_validate(
        yaml.safe_load((ROOT / "conf" / "model" / f"{name}.yaml").read_text())
    )


def configs(run: Run) -> tuple[ModelConfig, DataConfig, TrainerConfig]:
    lora: dict[str, Any] = {"dropout": 0.05}
    if run.finetuning == "lora":
        lora |= {"rank": run.rank, "targets": TARGETS}
    trainer = TrainerConfig.model_validate(
        {
            "micro_batch_size": run.batch,
            "precision": "bf16-true",
            "optimizer": "adamw",
            "gradient_checkpointing": run.checkpointing,
            "finetuning": run.finetuning,
            "attention": run.attention,
            "lora": lora,
        }
    )
    return preset(run.model), DataConfig(max_seq_length=run.seq, padding="longest"), trainer


def add_lora(model: Any, rank: int, targets: list[str], dropout: float) -> None:  # pragma: no cover
    import torch

    class LoraLinear(torch.nn.Module):
        def __init__(self, base: torch.nn.Linear) -> None:
            super().__init__()
            self.base = base
            dev, dt = base.weight.device, base.weight.dtype
            self.a = torch.nn.Parameter(
                torch.randn(rank, base.in_features, device=dev, dtype=dt) / rank
            )
            self.b = torch.nn.Parameter(torch.zeros(base.out_features, rank, device=dev, dtype=dt))
            self.drop = torch.nn.Dropout(dropout)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.base(x) + (self.drop(x) @ self.a.t() @ self.b.t()) * 2.0

    for p in model.parameters():
        p.requires_grad_(False)
    for _, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in targets and isinstance(child, torch.nn.Linear):
                setattr(module, child_name, LoraLinear(child))
    model.enable_input_require_grads()


def measure(run: Run, steps: int = 3) -> tuple[float, float]:  # pragma: no cover - needs CUDA
    import torch
    import transformers

    from cfgcheck.memory.hf_shapes import hf_config

    m, _, t = configs(run)
    cfg = hf_config(m)
    cfg._attn_implementation = run.attention
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    if run.finetuning == "lora":
        add_lora(model, run.rank, TARGETS, t.lora.dropout)
    if run.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    ids = torch.randint(0, m.vocab_size, (run.batch, run.seq), device="cuda")
    mask = torch.ones_like(ids)
    if run.batch > 1:
        mask[0, -8:] = 0
    torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    allocated, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    del model, opt, loss
    torch.cuda.empty_cache()
    return allocated / GB, reserved / GB


def table(rows: list[tuple[Run, float, float, float, float]]) -> str:
    lines = [
        "| run | allocated GB | estimate | error | reserved GB | estimate | error |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    errs = []
    for run, alloc, est_a, res, est_r in rows:
        ea, er = (est_a - alloc) / alloc, (est_r - res) / res
        errs.append(abs(ea))
        lines.append(
            f"| {run.label} | {alloc:.2f} | {est_a:.2f} | {ea:+.1%} | {res:.2f} | {est_r:.2f} "
            f"| {er:+.1%} |"
        )
    lines += [
        "",
        f"median |error| (allocated) {statistics.median(errs):.1%}, worst {max(errs):.1%}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print runs and estimates only")
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    args = parser.parse_args(argv)
    if args.dry_run:
        print("| run | estimated allocated GB | estimated reserved GB |\n|---|---:|---:|")
        for run in RUNS:
            e = estimate(*configs(run))
            print(f"| {run.label} | {e.allocated_bytes / GB:.2f} | {e.reserved_bytes / GB:.2f} |")
        return 0
    try:
        import torch
    except ImportError:
        print(
            "memory_calibration: needs torch (install cfgcheck[torch,transformers])",
            file=sys.stderr,
        )
        return 2
    if not torch.cuda.is_available():
        print("memory_calibration: no CUDA GPU; use --dry-run", file=sys.stderr)
        return 2
    rows = []
    for run in RUNS:  # pragma: no cover - needs CUDA
        e = estimate(*configs(run))
        try:
            alloc, res = measure(run)
        except torch.cuda.OutOfMemoryError:
            print(f"{run.label}: out of memory, skipped", file=sys.stderr)
            torch.cuda.empty_cache()
            continue
        rows.append((run, alloc, e.allocated_bytes / GB, res, e.reserved_bytes / GB))
        print(f"{run.label}: allocated {alloc:.2f} GB, estimate {e.allocated_bytes / GB:.2f} GB")
    text = table(rows)
    print(text)
    if args.out:
        args.out.write_text(f"# Memory calibration ({torch.cuda.get_device_name()})\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
