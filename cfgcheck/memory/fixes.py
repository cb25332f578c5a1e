"""What each memory fix saves: the config re-estimated with the fix applied."""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory.estimate import estimate
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig


@dataclass(frozen=True)
class Fix:
    setting: str  # the overrides to apply, e.g. "trainer.gradient_checkpointing=true"
    total_bytes: int  # per-GPU estimate with the fix
    saved_bytes: int


def _smaller_micro_batches(micro: int) -> list[int]:
    """Smaller micro batches that divide ``micro`` (so the global batch stays the same),
    largest first: ``micro / d`` for d up to 64, and 1."""
    found = {micro // d for d in range(2, min(micro, 64) + 1) if micro % d == 0} | {1}
    return sorted((k for k in found if k < micro), reverse=True)


def _candidates(t: TrainerConfig) -> list[tuple[str, TrainerConfig]]:
    out: list[tuple[str, TrainerConfig]] = []
    if not t.gradient_checkpointing:
        out.append(
            (
                "trainer.gradient_checkpointing=true",
                t.model_copy(update={"gradient_checkpointing": True}),
            )
        )
    for micro in _smaller_micro_batches(t.micro_batch_size):
        accum = t.gradient_accumulation_steps * t.micro_batch_size // micro
        out.append(
            (
                f"trainer.micro_batch_size={micro} trainer.gradient_accumulation_steps={accum}",
                t.model_copy(
                    update={"micro_batch_size": micro, "gradient_accumulation_steps": accum}
                ),
            )
        )
    if t.loss_chunking == "none":
        out.append(
            ("trainer.loss_chunking=chunked", t.model_copy(update={"loss_chunking": "chunked"}))
        )
    if t.finetuning == "full":
        lora = t.lora.model_copy(update={"rank": t.lora.rank or 16})
        out.append(
            (
                f"trainer.finetuning=lora trainer.lora.rank={lora.rank}",
                t.model_copy(update={"finetuning": "lora", "lora": lora}),
            )
        )
    if t.quantization == "none":
        lora = t.lora.model_copy(update={"rank": t.lora.rank or 16})
        out.append(
            (
                "trainer.finetuning=qlora trainer.quantization=nf4-dq "
                f"trainer.lora.rank={lora.rank}",
                t.model_copy(
                    update={"finetuning": "qlora", "quantization": "nf4-dq", "lora": lora}
                ),
            )
        )
    if t.strategy not in ("fsdp", "zero3"):
        devices = max(2, t.devices)
        more = "" if devices == t.devices else f" trainer.devices={devices}"
        out.append(
            (
                f"trainer.strategy=fsdp{more}",
                t.model_copy(update={"strategy": "fsdp", "devices": devices}),
            )
        )
    return out


def fixes(m: ModelConfig, d: DataConfig, t: TrainerConfig, budget: int | None = None) -> list[Fix]:
    """Every applicable fix that lowers the per-GPU estimate, largest saving first.

    Of the smaller micro batches only one is kept: the largest that fits ``budget`` (bytes),
    else the smallest.
    """
    base = estimate(m, d, t).total_bytes
    found: list[Fix] = []
    micro: Fix | None = None
    for setting, changed in _candidates(t):
        total = estimate(m, d, changed).total_bytes
        if total >= base:
            continue
        fix = Fix(setting, total, base - total)
        if not setting.startswith("trainer.micro_batch_size="):
            found.append(fix)
        elif micro is None or budget is None or micro.total_bytes > budget:
            micro = fix  # candidates come largest micro batch first
    if micro is not None:
        found.append(micro)
    return sorted(found, key=lambda f: -f.saved_bytes)
