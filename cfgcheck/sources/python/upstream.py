"""Where each default of the python source comes from, as shown in "default of the libraries ...".

The citations (repository, file, line) are in :mod:`cfgcheck.sources.python.build`.
"""

from __future__ import annotations

from typing import Any

UNSLOTH = "unsloth/models/loader.py FastLanguageModel.from_pretrained"
UNSLOTH_PEFT = "unsloth/models/llama.py get_peft_model"
ARGS = "transformers TrainingArguments"
SFT = "trl/trainer/sft_config.py SFTConfig"
TOKENIZER = "transformers tokenizer __call__"
LOADER = "torch DataLoader"
LIGHTNING = "lightning Trainer"
UNSLOTH_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _bool(value: Any) -> bool:
    return bool(value)
