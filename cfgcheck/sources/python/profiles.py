"""What the libraries a script uses handle themselves (see :mod:`cfgcheck.sources.profiles`).

- Unsloth (unslothai/unsloth at 015bdef0): ``max_seq_length`` above the model's context
  extends RoPE (unsloth/models/llama.py:2566-2590: "can be magically be extended"), so it is no
  crash; its tokenizer loader gives a pad token (unsloth/tokenizer_utils.py
  ``_fix_pad_token``); ``use_gradient_checkpointing="unsloth"`` offloads the checkpointed
  activations to CPU memory (unsloth_zoo ``Unsloth_Offloaded_Gradient_Checkpointer``), which
  cfgcheck's estimate does not model, so an estimate over the GPU is a warning.
- TRL's ``SFTTrainer`` (and Unsloth's patched one): :data:`cfgcheck.sources.profiles.TRL`.
"""

from __future__ import annotations

from cfgcheck.sources.base import NativeConfig
from cfgcheck.sources.profiles import TRL, Adjustment, Profile

_UNSLOTH = (
    Adjustment(
        "seq-len-over-block-size",
        "warning",
        "Unsloth extends RoPE by max_seq_length / max_position_embeddings instead of failing "
        "(unsloth/models/llama.py:2566): no crash, but positions past the pretrained context "
        "are untrained",
        "error",
    ),
    Adjustment(
        "pad-token-missing",
        None,
        "Unsloth's loader gives the tokenizer a pad token (unsloth/tokenizer_utils.py)",
    ),
    Adjustment(
        "attention-unsupported",
        None,
        "Unsloth replaces the attention forward with its own, logit soft-capping included "
        "(unsloth/models/gemma2.py Gemma2Attention_fast_forward)",
    ),
)
_OFFLOAD = Adjustment(
    "gpu-memory",
    "warning",
    "use_gradient_checkpointing='unsloth' offloads the checkpointed activations to CPU memory "
    "(unsloth_zoo), which this estimate does not model: it is an upper bound",
    "error",
)


# torchtune 0.6.1 torchtune/data/_collate.py: padded_collate_sft(batch, padding_idx=0,
# ignore_idx=-100) pads tokens with 0 and labels with -100 by position; padded_collate takes
# padding_idx itself. Neither reads a tokenizer's pad token.
_TORCHTUNE_COLLATE = (
    Adjustment(
        "pad-token-missing",
        None,
        "torchtune's padded_collate_sft pads with padding_idx=0 and labels with -100 by "
        "position (torchtune/data/_collate.py); the tokenizer's pad token is never used",
    ),
    Adjustment("pad-is-eos", None, "torchtune pads labels with -100 by position"),
)


def profile_of(native: NativeConfig) -> Profile:
    from cfgcheck.sources.python import CodeConfig

    if not isinstance(native, CodeConfig):
        return Profile("code")
    notes = native.collected.notes
    unsloth = "unsloth" in notes.get("loader", "") or notes.get("peft") == "unsloth"
    sft = "SFT" in notes.get("trainer", "") or "SFT" in notes.get("args", "")
    adjustments: list[Adjustment] = []
    if "pad_token_set" in notes:
        adjustments.append(
            Adjustment(
                "pad-token-missing",
                None,
                f"the code gives the tokenizer a pad token ({notes['pad_token_set']})",
            )
        )
    if unsloth:
        adjustments += _UNSLOTH
        key = "peft" if notes.get("peft") == "unsloth" else "load"
        offload = native.get(f"{key}.use_gradient_checkpointing", "unsloth")
        if offload == "unsloth":
            adjustments.append(_OFFLOAD)
    if sft or unsloth:
        adjustments += [a for a in TRL.adjustments if a.rule != "pad-token-missing" or not unsloth]
    if "loader" in native.collected.calls and "trainer" not in notes:
        adjustments += _TORCHTUNE_COLLATE if "torchtune_dataset" in notes else ()
        name = "Lightning" if "lightning" in notes else "PyTorch"
        return Profile(name, tuple(adjustments))
    name = "Unsloth" if unsloth else "TRL" if sft else "transformers"
    return Profile(name, tuple(adjustments))
