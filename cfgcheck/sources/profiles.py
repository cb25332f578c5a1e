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
            None,
            "Axolotl raises max_position_embeddings to sequence_len (src/axolotl/loaders/"
            "model.py _adjust_model_config); see axolotl-positions-past-context",
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
        # transformers never refuses a length past max_position_embeddings: the TRL rule
        # trl-positions-past-context (sources/trl_rules.py) gives the verdict per architecture.
        Adjustment(
            "seq-len-over-block-size",
            None,
            "transformers has no block-size guard; see trl-positions-past-context",
        ),
        Adjustment(
            "pad-multiple-over-block-size",
            None,
            "TRL's collator pads the batch; see trl-positions-past-context",
        ),
        # TRL truncates in its own dataset step (SFTTrainer._prepare_dataset, a `truncate` map over
        # input_ids) and pads in its collator
        # (DataCollatorForLanguageModeling: pad(..., pad_to_multiple_of=...)); the tokenizer
        # is never called with pad_to_multiple_of, so nothing raises for a max_length that is
        # not a multiple, and the one length key is both cfgcheck lengths.
        Adjustment(
            "pad-multiple-mismatch",
            None,
            "TRL pads to the multiple in its collator, never in the tokenizer call "
            "(trl/trainer/sft_trainer.py DataCollatorForLanguageModeling)",
        ),
        Adjustment(
            "max-length-over-max-seq-length",
            None,
            "TRL has one length key (max_length); its collator rounds the batch up",
        ),
    ),
)

# No attn_implementation: transformers picks sdpa where the class supports it and falls back
# to eager where it does not (PreTrainedModel._check_and_adjust_attn_implementation,
# modeling_utils.py: "from None to sdpa (to potentially eager)"), so Gemma 2 trains.
TRL_DEFAULT_ATTENTION = dataclasses.replace(
    TRL,
    adjustments=(
        *TRL.adjustments,
        Adjustment(
            "attention-unsupported",
            None,
            "no attn_implementation: transformers falls back to eager (modeling_utils.py "
            "_check_and_adjust_attn_implementation)",
        ),
    ),
)

# torchtune (pytorch/torchtune at bd2a0fc7, recipes/lora_finetune_single_device.py and
# siblings): the recipe's own errors for these premises are torchtune_rules' findings, in
# torchtune's keys and words, so the generic ones would say the same thing twice.
# - a sample longer than the model's max_seq_len: TransformerDecoder.forward raises
#   "seq_len (N) of input tensor should be smaller than max_seq_len (M)"
#   (torchtune_rules.max_seq_len_rules);
# - the collate: _setup_data calls partial(collate_fn, padding_idx=tokenizer.pad_id,
#   ignore_idx=loss_fn.ignore_index), padded_collate_sft pads tokens with pad_id and labels
#   with ignore_idx by position (torchtune/data/_collate.py), so the tokenizer's pad token is
#   never a label (torchtune_rules.collate_rules);
# - LoRA module names: torchtune's, checked by torchtune_rules.lora_module_rules.
TORCHTUNE = Profile(
    "torchtune",
    (
        Adjustment(
            "seq-len-over-block-size",
            None,
            "torchtune-max-seq-len reports it in torchtune's words",
        ),
        Adjustment("ragged-batch", None, "torchtune-collate reports it in torchtune's words"),
        Adjustment(
            "pad-token-missing",
            None,
            "padded_collate_sft pads with the tokenizer's pad_id (torchtune/data/_collate.py)",
        ),
        Adjustment(
            "pad-is-eos",
            None,
            "padded_collate_sft pads labels with ignore_idx by position "
            "(torchtune/data/_collate.py)",
        ),
    ),
)

# What a torchtune recipe config leaves open about the memory a run needs, each making the
# full-context single-process estimate a bound rather than a certainty (first match wins):
# - a recipe that does not train (generate, eleuther_eval, quantize: it reads no optimizer);
# - a recipe that trains by another method than supervised fine-tuning (DPO, PPO, GRPO,
#   knowledge distillation), whose extra models and batches the estimate does not count;
# - memory savings the estimate does not model (compile, activation offloading,
#   optimizer_in_bwd: recipes/full_finetune_distributed.py and siblings; fsdp_cpu_offload is
#   trainer.offload, counted);
# - a distributed recipe whose process count neither the file's `tune run` comment nor the
#   command gives (torchrun's --nproc_per_node decides the shard size);
# - tokenizer.max_seq_len: null (every published torchtune config): no sample is cut, a batch
#   is as long as its longest sample (padded_collate_sft), so the estimate at the model's
#   whole context is a bound the data may never reach.
TORCHTUNE_NOT_TRAINING = Adjustment(
    "gpu-memory",
    None,
    "the recipe does not train (it reads no optimizer): the training estimate does not apply",
)
TORCHTUNE_NOT_SFT = Adjustment(
    "gpu-memory",
    "warning",
    "the estimate models supervised fine-tuning; this recipe also holds what its method "
    "needs (DPO's chosen and rejected batches and reference outputs, PPO's policy, value and "
    "reward models, distillation's teacher), which it does not count",
    "error",
)
TORCHTUNE_UNMODELLED_SAVINGS = Adjustment(
    "gpu-memory",
    "warning",
    "the config turns on memory savings the estimate does not model (compile: fused kernels; "
    "enable_activation_offloading: "
    "activations on the CPU; optimizer_in_bwd: each gradient freed as its step runs), so the "
    "estimate is an upper bound",
    "error",
)
TORCHTUNE_WORLD_UNKNOWN = Adjustment(
    "gpu-memory",
    "warning",
    "a distributed recipe with no process count in the file: the estimate assumes one "
    "process; pass --nproc-per-node N as `tune run --nproc_per_node N` would",
    "error",
)
TORCHTUNE_UNCUT = Adjustment(
    "gpu-memory",
    "warning",
    "tokenizer.max_seq_len is unset, so torchtune cuts no sample and the estimate assumes "
    "batches as long as the model's context; the real peak follows the longest batch of your "
    "data (`cfgcheck data`, --scan-data), or set tokenizer.max_seq_len",
    "error",
)
