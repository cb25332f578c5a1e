"""Rule profiles: what each framework already handles itself, as data.

A framework pads, clamps or resizes some things on its own, so a finding that is a crash in a
plain transformers loop can be a quality warning (or nothing to fix) in that framework. A
:class:`Profile` lists those severity changes, each with the framework code and docs that
justify it; :func:`apply_profile` is the one place that consults it (after the rules ran), so
no rule module knows which source a config came from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cfgcheck.findings import Finding, Severity


@dataclass(frozen=True)
class Adjustment:
    """``rule`` findings (of severity ``from_severity``, or any) become ``severity``."""

    rule: str
    severity: Severity | None  # None: the finding's premise does not hold in this framework
    note: str  # appended to the message: what the framework does, and where
    from_severity: Severity | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    adjustments: tuple[Adjustment, ...] = ()

    def adjustment(self, finding: Finding) -> Adjustment | None:
        for adj in self.adjustments:
            if adj.rule == finding.rule and adj.from_severity in (None, finding.severity):
                return adj
        return None


def apply_profile(findings: Iterable[Finding], profile: Profile) -> Iterator[Finding]:
    """``findings`` with the profile's severity changes applied (message notes why)."""
    for f in findings:
        adj = profile.adjustment(f)
        if adj is None or adj.severity == f.severity:
            yield f
            continue
        if adj.severity is None:
            continue
        yield dataclasses.replace(
            f, severity=adj.severity, message=f"{f.message} [{profile.name}: {adj.note}]"
        )


# Shared by the transformers-based trainers (TRL, Axolotl).
_POSITION_MASKED_LABELS = (
    "labels are padded with -100 by position, not by token id, so a real EOS keeps its label"
)

# LitGPT's finetune scripts (litgpt/finetune/lora.py, full.py, adapter.py at 26857050):
# `model.max_seq_length = min(longest_seq_length, train.max_seq_length or inf)`; the
# setter raises "Cannot attend to N, block size is only B" (litgpt/model.py) only when the
# longest *sample* exceeds the block. Docs: tutorials/finetune.md (max_seq_length "Limits the
# length of samples"). The SFT collate (litgpt/data/base.py _sft_collate_fn) pads input_ids
# with 0 and labels with ignore_index by position, and never reads the tokenizer's pad token.
LITGPT_FINETUNE = Profile(
    "LitGPT finetune",
    (
        Adjustment(
            "seq-len-over-block-size",
            "warning",
            "finetune sets model.max_seq_length to the longest sample (litgpt/finetune/lora.py "
            "fit()), so it crashes only if a sample is longer than the block: run "
            "`cfgcheck data` or --scan-data to know",
            "error",
        ),
        Adjustment(
            "pad-token-missing",
            None,
            "LitGPT pads input_ids with 0 and labels with ignore_index itself "
            "(litgpt/data/base.py _sft_collate_fn); the tokenizer's pad token is never used",
        ),
        Adjustment(
            "pad-is-eos",
            None,
            "LitGPT pads labels with ignore_index by position (litgpt/data/base.py)",
        ),
        Adjustment(
            "batch-size-mismatch",
            "warning",
            "LitGPT rounds the accumulation down, global_batch_size // devices // "
            "micro_batch_size (litgpt/args.py TrainArgs.gradient_accumulation_iters), and "
            "trains with the smaller batch without a word",
            "error",
        ),
    ),
)

# LitGPT pretraining (litgpt/pretrain.py: `if train.max_seq_length: model.max_seq_length =
# train.max_seq_length`): every batch is max_seq_length long, so a length over the block
# always raises. The seq-len rule stays an error; padding is not used (fixed-length chunks).
LITGPT_PRETRAIN = Profile(
    "LitGPT pretrain",
    (
        Adjustment(
            "pad-token-missing",
            None,
            "pretraining cuts fixed-length chunks and never pads (litgpt/pretrain.py)",
        ),
        Adjustment("pad-is-eos", None, "pretraining never pads (litgpt/pretrain.py)"),
    ),
)

# Axolotl (axolotl-ai-cloud/axolotl at 067b021c):
# - src/axolotl/loaders/model.py _adjust_model_config: when sequence_len exceeds
#   model.config.max_position_embeddings it logs a warning and raises the latter to
#   sequence_len: no crash, but positions beyond the pretrained range are untrained.
# - same file, _resize_token_embeddings: the embedding is resized to len(tokenizer) (rounded to
#   32 with resize_token_embeddings_to_32x) when it has fewer rows: no index error, new rows
#   start untrained.
# - src/axolotl/loaders/tokenizer.py: "if tokenizer.pad_token is None and tokenizer.eos_token
#   is not None: tokenizer.pad_token = tokenizer.eos_token".
# - labels are padded with -100 by position (DataCollatorForSeq2Seq label_pad_token_id).
# - the world size comes from the launcher (WORLD_SIZE, normalize_config in
#   src/axolotl/utils/config/__init__.py), not from the file, so a sharding strategy with one
#   device in the file is normal.
# Docs: https://docs.axolotl.ai/docs/config-reference.html (sequence_len, special_tokens).
AXOLOTL = Profile(
    "Axolotl",
    (
        Adjustment(
            "seq-len-over-block-size",
            "warning",
            "Axolotl raises max_position_embeddings to sequence_len and trains on "
            "(src/axolotl/loaders/model.py _adjust_model_config): no crash, but positions past "
            "the pretrained context are untrained",
            "error",
        ),
        Adjustment(
            "vocab-mismatch",
            "warning",
            "Axolotl resizes the embedding to len(tokenizer) (src/axolotl/loaders/model.py "
            "_resize_token_embeddings): no index error, but the new rows start untrained",
            "error",
        ),
        Adjustment(
            "pad-token-missing",
            None,
            "Axolotl falls back to eos as pad (src/axolotl/loaders/tokenizer.py)",
        ),
        Adjustment("pad-is-eos", None, f"Axolotl: {_POSITION_MASKED_LABELS}"),
        Adjustment(
            "strategy-device-count",
            None,
            "Axolotl takes the device count from the launcher (WORLD_SIZE in normalize_config)",
        ),
    ),
)

# LLaMA-Factory (hiyouga/LLaMA-Factory at ff6d4d12):
# - data/template.py fix_special_tokens: "if tokenizer.pad_token_id is None:
#   tokenizer.pad_token = tokenizer.eos_token" ("Add pad token").
# - train/sft/workflow.py: a DataCollatorForSeq2Seq with label_pad_token_id=IGNORE_INDEX pads
#   labels by position.
# - launcher.py: torchrun over every visible GPU (NPROC_PER_NODE): the device count is the
#   launcher's.
# - hparams/parser.py _verify_model_args refuses quantization without adapters
#   (llamafactory-quantization-needs-adapters quotes it).
# - model_utils/rope.py configure_rope: max_position_embeddings grows to cover cutoff_len only
#   with rope_scaling; get_train_args sets model_max_length = cutoff_len.
_LLAMAFACTORY_COMMON = (
    Adjustment(
        "pad-token-missing",
        None,
        "LLaMA-Factory sets the pad token to eos when the tokenizer has none "
        "(data/template.py fix_special_tokens: 'Add pad token')",
    ),
    Adjustment(
        "pad-is-eos",
        None,
        "LLaMA-Factory pads labels with IGNORE_INDEX by position (DataCollatorForSeq2Seq "
        "label_pad_token_id, train/sft/workflow.py), so a real eos keeps its label",
    ),
    Adjustment(
        "strategy-device-count",
        None,
        "llamafactory-cli takes the device count from the launcher (launcher.py: torchrun "
        "over every visible GPU, NPROC_PER_NODE)",
    ),
    Adjustment(
        "quantized-full-finetuning",
        None,
        "reported as llamafactory-quantization-needs-adapters with LLaMA-Factory's message",
    ),
)
_LLAMAFACTORY_LONG_CONTEXT = Adjustment(
    "seq-len-over-block-size",
    "warning",
    "LLaMA-Factory sets model_max_length = cutoff_len and leaves max_position_embeddings as "
    "it is unless rope_scaling is set (model_utils/rope.py configure_rope): a RoPE model "
    "trains on positions past its pretrained context without an error; only samples that "
    "long are affected (--scan-data counts them). Set rope_scaling (linear, dynamic, yarn, "
    "llama3) or lower cutoff_len",
    "error",
)
_LLAMAFACTORY_SCALED_CONTEXT = Adjustment(
    "seq-len-over-block-size",
    None,
    "rope_scaling is set: LLaMA-Factory enlarges max_position_embeddings by "
    "ceil(cutoff_len / max_position_embeddings) (model_utils/rope.py configure_rope)",
)
_LLAMAFACTORY_NO_TRAINING = Adjustment(
    "gpu-memory",
    None,
    "do_train is not set: nothing trains (do_eval / do_predict run the model without "
    "gradients or optimizer states), so the training estimate does not apply",
)
LLAMAFACTORY = Profile("LLaMA-Factory", (*_LLAMAFACTORY_COMMON, _LLAMAFACTORY_LONG_CONTEXT))
LLAMAFACTORY_ROPE_SCALED = Profile(
    "LLaMA-Factory", (*_LLAMAFACTORY_COMMON, _LLAMAFACTORY_SCALED_CONTEXT)
)
LLAMAFACTORY_NO_TRAINING = Profile(
    "LLaMA-Factory",
    (*_LLAMAFACTORY_COMMON, _LLAMAFACTORY_LONG_CONTEXT, _LLAMAFACTORY_NO_TRAINING),
)

# TRL (huggingface/trl at f2cd5771):
# - trl/trainer/sft_trainer.py: `pad_token = args.pad_token or tokenizer.pad_token or
#   tokenizer.eos_token`: a tokenizer without a pad token pads with eos.
# - DataCollatorForLanguageModeling (same file) pads labels with -100 by position
#   (`labels[attention_mask == 0] = -100`), never by token id.
# - the device count comes from the launcher (accelerate / torchrun), not from the file.
# Docs: https://huggingface.co/docs/trl/sft_trainer (padding, packing).
TRL = Profile(
    "TRL",
    (
        Adjustment(
            "pad-token-missing",
            None,
            "SFTTrainer pads with eos when the tokenizer has no pad token "
            "(trl/trainer/sft_trainer.py)",
        ),
        Adjustment("pad-is-eos", None, f"TRL: {_POSITION_MASKED_LABELS}"),
        Adjustment(
            "strategy-device-count",
            None,
            "TRL takes the device count from the launcher (accelerate/torchrun)",
        ),
    ),
)
