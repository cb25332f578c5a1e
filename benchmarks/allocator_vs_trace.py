"""The generated event sequence (cfgcheck/memory/events.py) against the real op sequence of the
same step, both replayed through the allocator simulation (cfgcheck/memory/allocsim.py).

The real sequence is gpu_measure.py's loop traced on CPU op by op (tests/alloc_tracer.py,
``record=True``) on Llamas whose tensors are MiB-sized, so that segments and splitting matter,
with cuBLAS's workspaces where CUDA takes them (``cuda_events``); needs torch, transformers
and peft.

    python benchmarks/allocator_vs_trace.py
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # PYTHONPATH first


def main() -> int:
    import torch

    from cfgcheck.memory.allocsim import simulate
    from cfgcheck.memory.event_seq import blas_workspace
    from cfgcheck.memory.events import step_events
    from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig
    from tests.alloc_tracer import cuda_events, traced_step

    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)
    all_linear = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    print("| run | traced alloc MiB | resv MiB | generated alloc MiB | err | resv MiB | err |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for tie in (False, True):
        for ft in ("full", "lora"):
            for ckpt in (False, True):
                m = ModelConfig(
                    name="llama-mid",
                    block_size=4096,
                    vocab_size=32000,
                    n_layer=4,
                    n_embd=512,
                    n_head=8,
                    n_query_groups=2,
                    head_size=64,
                    intermediate_size=2048,
                    tie_embeddings=tie,
                )
                t = TrainerConfig(
                    micro_batch_size=2,
                    precision="bf16-true",
                    optimizer="adamw",
                    gradient_checkpointing=ckpt,
                    finetuning=ft,
                    attention="sdpa",
                    lora={"rank": 16, "alpha": 16.0, "dropout": 0.0, "targets": all_linear},
                )
                d = DataConfig(max_seq_length=512)
                spec = {"model": m.model_dump(), "trainer": t.model_dump(), "data": d.model_dump()}
                r = traced_step(spec, record=True)
                tr = simulate(cuda_events(r, blas_workspace(t)))  # with cuBLAS's workspaces
                gen = simulate(step_events(m, d, t))
                mib = 2**20
                name = f"{'tied' if tie else 'untied'} {ft}{' ckpt' if ckpt else ''}"
                print(
                    f"| {name} | {tr.peak_allocated / mib:.1f} | {tr.peak_reserved / mib:.1f} | "
                    f"{gen.peak_allocated / mib:.1f} | "
                    f"{(gen.peak_allocated - tr.peak_allocated) / tr.peak_allocated:+.1%} | "
                    f"{gen.peak_reserved / mib:.1f} | "
                    f"{(gen.peak_reserved - tr.peak_reserved) / tr.peak_reserved:+.1%} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
