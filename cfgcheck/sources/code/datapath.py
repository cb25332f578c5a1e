"""What the calls on a training data path mean, for every source that reads code: which call
tokenizes, and whether a collator pads a batch of unequal samples.

Collators by source: transformers ``src/transformers/data/data_collator.py``
(``DataCollatorWithPadding``, ``DataCollatorForSeq2Seq``, ``DataCollatorForLanguageModeling``
pad through ``tokenizer.pad``; ``default_data_collator`` / ``DefaultDataCollator`` build
tensors from the lists as they are), ``trl/trainer/sft_trainer.py``
(``DataCollatorForLanguageModeling`` pads), torchtune ``torchtune/data/_collate.py``
(``padded_collate*`` pad), torch ``torch/utils/data/_utils/collate.py`` (``default_collate``
stacks).
"""

from __future__ import annotations

from cfgcheck.sources.code.calls import CallSite
from cfgcheck.sources.code.values import Known

# Collators by whether they pad a batch of unequal samples (transformers data_collator.py,
# trl/trainer/sft_trainer.py, torchtune/data/_collate.py; torch's default_collate stacks).
PADDING_COLLATORS = (
    "DataCollatorWithPadding",
    "DataCollatorForSeq2Seq",
    "DataCollatorForLanguageModeling",
    "DataCollatorForCompletionOnlyLM",
    "DataCollatorForTokenClassification",
    "padded_collate",
    "padded_collate_sft",
    "padded_collate_dpo",
    "padded_collate_packed",
    "UnslothVisionDataCollator",
)
STACKING_COLLATORS = ("default_data_collator", "DefaultDataCollator", "default_collate")


def is_tokenizer_call(call: CallSite) -> bool:
    """``tokenizer(...)``, ``processor(...)``, ``tok.apply_chat_template(..., tokenize=True)``
    or a call of what ``AutoTokenizer.from_pretrained`` / Unsloth's loader returned."""
    written = call.written.lower()
    if written.endswith("apply_chat_template"):
        tokenize = call.kwargs.get("tokenize")
        return (
            tokenize is not None
            and isinstance(tokenize.value, Known)
            and bool(tokenize.value.value)
        )
    if "tokenizer" in written.split(".")[-1] or written.split(".")[-1] in ("tok", "processor"):
        return True
    return call.name.endswith(("Tokenizer.from_pretrained()", "from_pretrained()[1]"))


def collator_kind(symbol: object) -> str | None:
    """The kind of collator the code names: "padded", "default" (stacks), or None."""
    text = str(symbol)
    if any(name in text for name in PADDING_COLLATORS):
        return "padded"
    if any(name in text for name in STACKING_COLLATORS):
        return "default"
    return None
