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


def _candidates(t: TrainerConfig) -> list[tuple[str, TrainerConfig]]:
    out: list[tuple[str, TrainerConfig]] = []
    if not t.gradient_checkpointing:
        out.append(
            (
                "trainer.gradient_checkpointing=true",
                t.model_copy(update={"gradient_checkpointing": True}),
            )
        )
    if t.micro_batch_size > 1:
        micro = t.micro_batch_size // 2
        accum = t.gradient_accumulation_steps * t.micro_batch_size // micro
        if micro * accum == t.micro_batch_size * t.gradient_accumulation_steps:
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


def fixes(m: ModelConfig, d: DataConfig, t: TrainerConfig) -> list[Fix]:
    """Every applicable fix that lowers the per-GPU estimate, largest saving first."""
    base = estimate(m, d, t).total_bytes
    found = []
    for setting, changed in _candidates(t):
        total = estimate(m, d, changed).total_bytes
        if total < base:
            found.append(Fix(setting, total, base - total))
    return sorted(found, key=lambda f: -f.saved_bytes)
