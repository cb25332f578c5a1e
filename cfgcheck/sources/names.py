"""Native optimizer and attention names onto cfgcheck's schema values, for every adapter.

LitGPT names optimizer classes (``torch.optim.AdamW``, ``bitsandbytes.optim.PagedAdamW8bit``),
Axolotl and TRL name transformers' ``TrainingArguments.optim`` values (``adamw_torch``,
``paged_adamw_8bit``, ``adafactor``) and ``attn_implementation`` values (``eager``, ``sdpa``,
``flash_attention_2``). What matters to the checks is the same in each: how many states the
optimizer keeps and in which precision, and which attention kernel runs.
"""

from __future__ import annotations

from typing import Any

# cfgcheck paths and the transformers ``TrainingArguments`` field that sets each, shared by
# the formats whose trainer arguments are TrainingArguments (TRL configs, LLaMA-Factory files,
# launch-script flags): a fix is that field, as the format spells its keys.
TRAINING_ARGUMENTS = {
    "trainer.micro_batch_size": "per_device_train_batch_size",
    "trainer.gradient_accumulation_steps": "gradient_accumulation_steps",
    "trainer.learning_rate": "learning_rate",
    "seed": "seed",
}


def schema_optimizer(name: Any) -> str:
    """``trainer.optimizer`` for a native optimizer name."""
    low = str(name).lower()
    if "8bit" in low:
        return "paged_adamw_8bit" if "paged" in low else "adamw_8bit"
    if low.startswith("sgd"):
        return "sgd"
    if "adafactor" in low:
        return "adafactor"
    return "adamw"  # Adam/AdamW and kin hold two states per parameter


def schema_attention(impl: Any) -> str:
    """``trainer.attention`` for an ``attn_implementation`` (None: transformers' default,
    sdpa where it is available)."""
    if impl is None:
        return "sdpa"
    text = str(impl)
    if "flash" in text:
        return "flash"
    return "eager" if text == "eager" else "sdpa"
