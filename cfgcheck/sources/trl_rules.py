"""What TRL and transformers really do with a config, per version (each cited), where it
differs from cfgcheck's generic rules.

* Positions past the context. transformers does not refuse a sequence longer than
  ``max_position_embeddings``: a rotary (RoPE) model computes the angles for any position and
  trains on (positions it never saw in pretraining); a model with *learned absolute* position
  embeddings (GPT-2's ``wpe``, OPT, GPT-Neo, GPT-BigCode, BioGPT) indexes its position table
  past its end and fails with ``IndexError: index out of range in self`` (CPU; a device-side
  assert on CUDA). tests/sources/test_trl_ground_truth.py reproduces both with tiny models.
  So the generic ``seq-len-over-block-size`` (LitGPT's "Cannot attend to" guard) does not
  apply to TRL; this rule says the TRL verdict instead.
* ``padding_free``. TRL >= 1.0 ``SFTTrainer.__init__`` raises ``ValueError: When
  `padding_free=True` without packing, `max_length` is not enforced...`` (trl/trainer/
  sft_trainer.py) when padding_free is on, packing off and max_length set (1024 by default).
  Up to 1.9 TRL warns that padding-free "flattens batches into a single sequence" and only
  FlashAttention-2 reliably supports it; transformers before 4.57 builds no block-diagonal mask
  from ``position_ids`` for sdpa/eager (``find_packed_sequence_indices``, masking_utils.py,
  absent from 4.52), so samples of one batch attend to each other. TRL 1.16 drops the warning:
  its collator passes ``position_ids`` and ``cu_seq_lens`` and transformers 5 masks per sample.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources import deepspeed
from cfgcheck.sources.base import NativeConfig
from cfgcheck.sources.trl_prompt import prompt_unbounded
from cfgcheck.sources.trl_run import run_of
from cfgcheck.sources.trl_versions import version_tuple

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

# transformers model_type values whose positions are a learned table (nn.Embedding).
LEARNED_POSITIONS = frozenset({"gpt2", "opt", "gpt_neo", "gpt_bigcode", "biogpt", "xglm"})
PADDING_FREE_RAISES_SINCE = (1, 0)  # the "max_length is not enforced" ValueError
PADDING_FREE_WARNS_UNTIL = (1, 16)  # the flash-attention warning is gone in 1.16


def positions_past_context(native: NativeConfig, cfg: RunConfig | None) -> Iterator[Finding]:
    if cfg is None:
        return
    from cfgcheck.memory.modules import architecture_of

    d, m = cfg.data, cfg.model
    block = m.block_size
    length = d.max_seq_length
    multiple = d.pad_to_multiple_of
    if multiple and d.collator != "packed" and d.truncation:
        length = -(-length // multiple) * multiple  # the collator rounds the batch up
    arch = architecture_of(m)
    if not d.truncation and arch in LEARNED_POSITIONS and "max_length" in native.data:
        # max_length: null keeps every token: the data decides
        yield Finding(
            "trl-positions-past-context",
            "warning",
            ("max_length", "model.block_size"),
            f"max_length=null keeps every token, and {m.name} ({arch}) has a learned table "
            f"of {block} positions: the first sample longer than {block} tokens fails with "
            f'"IndexError: index out of range in self"; run `cfgcheck data` (or --scan-data) '
            "to know whether any is",
            f"set max_length<={block} to truncate",
            fixes=(Fix((f"max_length={block}",), f"truncate to {block} tokens"),),
        )
        return
    if length <= block:
        return
    run = run_of(native)
    key = "max_length" if run.reads("max_length") else "max_completion_length"
    set_key = next(
        (k for k in (key, "max_seq_length", "max_prompt_length") if k in native.data),
        "data.max_seq_length",
    )
    fixes = (
        (
            Fix(
                (*((f"~{set_key}",) if set_key == "max_seq_length" else ()), f"max_length={block}"),
                f"truncate to the model's {block} positions",
            ),
        )
        if key == "max_length"
        else ()
    )
    if arch in LEARNED_POSITIONS:
        yield Finding(
            "trl-positions-past-context",
            "error",
            (set_key, "data.max_seq_length", "model.block_size"),
            f"{run.config_class} lets sequences reach {length} tokens but {m.name} "
            f"({arch}) has a learned table of {block} positions: the first batch longer than "
            f'{block} tokens fails in the position embedding with "IndexError: index out of '
            f'range in self" (a device-side assert on CUDA)',
            f"set {key} so that sequences stay within {block} tokens",
            fixes=fixes,
        )
        return
    yield Finding(
        "trl-positions-past-context",
        "warning",
        (set_key, "data.max_seq_length", "model.block_size"),
        f"{run.config_class} lets sequences reach {length} tokens, past the {block} positions "
        f"{m.name} was pretrained on: transformers computes rotary angles for any position, so "
        f"the run trains, but on positions the model never saw (quality), and each extra "
        f"token costs activation memory",
        f"set {key} so that sequences stay within {block} tokens, unless you mean to extend "
        "the context (then scale RoPE: rope_scaling in the model's config)",
        fixes=fixes,
    )


def padding_free(native: NativeConfig, cfg: RunConfig | None) -> Iterator[Finding]:
    if not native.get("padding_free"):
        return
    run = run_of(native)
    version = version_tuple(run.version.table)
    if run.trainer.name != "sft":
        return
    packing = bool(native.get("packing"))
    max_length = native.get("max_length") if "max_length" in native.data else 1024
    if version >= PADDING_FREE_RAISES_SINCE and not packing and max_length is not None:
        yield Finding(
            "trl-padding-free-max-length",
            "error",
            ("padding_free", "max_length"),
            f"padding_free=true without packing and max_length={max_length}: SFTTrainer "
            f'refuses to start (TRL {run.version.table}): "ValueError: When `padding_free=True` '
            f"without packing, `max_length` is not enforced. Either enable packing (e.g., "
            f"`packing=True, packing_strategy='bfd'`), provide already truncated inputs, or set "
            f'`max_length=None`." (trl/trainer/sft_trainer.py)',
            "enable packing (packing: true), or set max_length: null with inputs already truncated",
            fixes=(
                Fix(("packing=true",), "pack: padding-free with a bounded length"),
                Fix(("max_length=null",), "no truncation (inputs already short enough)"),
            ),
        )
    attention = str(native.get("attn_implementation") or "sdpa")
    batch = native.get("per_device_train_batch_size") or run.default(
        "per_device_train_batch_size", 8
    )
    if (
        version < PADDING_FREE_WARNS_UNTIL
        and "flash" not in attention
        and isinstance(batch, int)
        and batch > 1
    ):
        yield Finding(
            "trl-padding-free-attention",
            "warning",
            ("padding_free", "attn_implementation"),
            f"padding_free=true with attn_implementation={attention} and "
            f"{batch} samples a batch: TRL {run.version.table} flattens the batch into one "
            f'sequence and warns "Padding-free training is enabled, but the attention '
            f"implementation is not set to 'flash_attention_2'\"; without FlashAttention-2 "
            f"(and before transformers 4.57 masks packed position_ids) the samples of a "
            f"batch attend to each other",
            "set attn_implementation: flash_attention_2 (flash-attn installed, Ampere or "
            "newer GPU), or padding_free: false",
            fixes=(Fix(("attn_implementation=flash_attention_2",), "FlashAttention-2"),),
        )


def grpo_generation_batch(native: NativeConfig, cfg: RunConfig | None) -> Iterator[Finding]:
    """GRPOConfig.__post_init__ (trl/trainer/grpo_config.py): the generation batch
    (``generation_batch_size``, else per_device_train_batch_size x processes x
    steps_per_generation, which defaults to gradient_accumulation_steps) must hold whole
    groups of ``num_generations`` completions, or GRPOConfig raises before training."""
    run = run_of(native)
    if run.trainer.name != "grpo" or cfg is None or not run.reads("num_generations"):
        return
    generations = native.get("num_generations") or run.default("num_generations", 8)
    per_device = cfg.trainer.micro_batch_size
    world = cfg.trainer.world_size
    steps = native.get("steps_per_generation") or cfg.trainer.gradient_accumulation_steps
    batch = native.get("generation_batch_size") or per_device * world * steps
    if not isinstance(generations, int) or not isinstance(batch, int) or batch < 1:
        return
    if generations < 2:
        yield Finding(
            "trl-grpo-generation-batch",
            "error",
            ("num_generations",),
            f'num_generations={generations}: GRPOConfig refuses it, "ValueError: GRPO requires '
            f"at least 2 generations per prompt to calculate the advantages. You provided "
            f'{generations}, which is less than the minimum required." '
            "(trl/trainer/grpo_config.py __post_init__)",
            "set num_generations to 2 or more (a divisor of the generation batch)",
            fixes=(Fix(("num_generations=2",), "the fewest GRPO accepts"),),
        )
        return
    if batch % generations == 0:
        return
    if version_tuple(run.version.table) >= (0, 20):
        quote = (
            f'"ValueError: generation_batch_size ({batch}) must be divisible by '
            f'num_generations ({generations})."'
        )
    else:
        quote = (
            f'"ValueError: The effective train batch size ({world} x {per_device} x {steps}) '
            f"must be evenly divisible by the number of generations per prompt "
            f'({generations}). ..."'
        )
    good = [n for n in range(2, batch + 1) if batch % n == 0]
    fixes = (
        (Fix((f"num_generations={max(n for n in good if n <= generations)}",), "fewer"),)
        if any(n <= generations for n in good)
        else ()
    )
    yield Finding(
        "trl-grpo-generation-batch",
        "error",
        ("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps"),
        f"GRPO generates {batch} completions a step ({per_device} a device x {world} "
        f"processes x {steps} steps per generation), not a multiple of num_generations="
        f"{generations}: GRPOConfig refuses it (TRL {run.version.table}, "
        f"trl/trainer/grpo_config.py __post_init__): {quote}",
        f"make per_device_train_batch_size x processes x gradient_accumulation_steps a "
        f"multiple of num_generations (valid num_generations here: {good[:8]})",
        fixes=fixes,
    )


def fp16_and_bf16(native: NativeConfig, cfg: RunConfig | None) -> Iterator[Finding]:
    """transformers' TrainingArguments.__post_init__ (training_args.py): ``raise
    ValueError("At most one of fp16 and bf16 can be True, but not both")``."""
    if native.get("fp16") is True and native.get("bf16") is True:
        yield Finding(
            "trl-fp16-and-bf16",
            "error",
            ("fp16", "bf16"),
            'fp16 and bf16 are both true: TrainingArguments refuses it, "ValueError: At '
            'most one of fp16 and bf16 can be True, but not both" (transformers '
            "training_args.py)",
            "keep bf16: true (Ampere or newer) and drop fp16, or the reverse on older GPUs",
            fixes=(
                Fix(("fp16=false",), "bf16 only"),
                Fix(("bf16=false",), "fp16 only"),
            ),
        )


def sft_refusals(native: NativeConfig, cfg: RunConfig | None) -> Iterator[Finding]:
    """What SFTTrainer itself refuses at start (trl/trainer/sft_trainer.py):

    * ``packing`` with ``max_length: null``: "When packing is enabled, `max_length` can't be
      `None`." (_prepare_dataset; TRL >= 0.20);
    * PEFT on ``lm_head``: "Applying a PEFT adapter to `lm_head` is not supported: the
      log-probabilities are computed from `lm_head.weight` directly..." (__init__; TRL 1.16,
      absent from 1.9)."""
    run = run_of(native)
    if run.trainer.name != "sft":
        return
    version = version_tuple(run.version.table)
    unbounded = "max_length" in native.data and native.get("max_length") is None
    if native.get("packing") and unbounded and version >= (0, 20):
        yield Finding(
            "trl-packing-without-max-length",
            "error",
            ("packing", "max_length"),
            'packing=true with max_length=null: SFTTrainer refuses to start, "ValueError: '
            "When packing is enabled, `max_length` can't be `None`.\" (trl/trainer/"
            f"sft_trainer.py _prepare_dataset, TRL {run.version.table})",
            "set max_length to the packed sequence length",
            fixes=(Fix(("max_length=1024",), "pack into 1024-token rows (the default)"),),
        )
    targets = native.get("lora_target_modules")
    names = [targets] if isinstance(targets, str) else targets or []
    if native.get("use_peft") and "lm_head" in names and version >= (1, 16):
        rest = [t for t in names if t != "lm_head"]
        yield Finding(
            "trl-peft-lm-head",
            "error",
            ("lora_target_modules",),
            'lora_target_modules names lm_head: SFTTrainer refuses to start, "ValueError: '
            "Applying a PEFT adapter to `lm_head` is not supported: the log-probabilities are "
            'computed from `lm_head.weight` directly, so the adapter would never be trained." '
            f"(trl/trainer/sft_trainer.py, TRL {run.version.table})",
            "remove lm_head from lora_target_modules",
            fixes=(Fix((f"lora_target_modules=[{','.join(rest)}]",), "without lm_head"),)
            if rest
            else (),
        )


TRL_RULES = (
    sft_refusals,
    positions_past_context,
    prompt_unbounded,
    padding_free,
    grpo_generation_batch,
    fp16_and_bf16,
    deepspeed.batch_rule,
)
