"""The rule catalogue: every finding id cfgcheck can emit, with what it checks, the real failure
it prevents and how to fix it.

One table, :data:`EXPLANATIONS`, keyed by finding id, is the one place an id is registered with
its explanation: registered rules, schema findings, the model-folder and dataset-scan findings
and the native formats' own findings (``litgpt-*``, ``axolotl-*``, ``trl-*``, ``torchtune-*``,
``unknown-native-key``) alike. ``cfgcheck rules``, ``cfgcheck explain ID``, ``docs/rules.md``
(``cfgcheck rules --format markdown``) and the ``doc`` link of every finding's JSON are generated
from it. A registered rule without an entry still runs and is listed (``cfgcheck explain`` says
the explanation is missing), and ``tests/test_rule_catalogue.py`` fails: it discovers the ids
the code emits (from the source, and by running checks) and refuses an id without an entry and
an entry nothing emits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cfgcheck.rules._registry import Rule

DOC_FILE = "docs/rules.md"

# Where findings come from: the sections of docs/rules.md, in this order.
SCHEMA = "Schema"
RULES = "Cross-field rules"
MODEL_FOLDER = "Model folders"
SCAN = "Dataset scan"
NATIVE = "Native formats"
PROJECT = "Project suppressions"
GROUPS = (SCHEMA, RULES, MODEL_FOLDER, SCAN, NATIVE, PROJECT)

_GROUP_INTRO = {
    SCHEMA: "Emitted by the schema on every config: a type error in one section does not hide "
    "the rules between the sections that passed.",
    RULES: "Registered rules (`cfgcheck/rules/`), run on every config whose sections they read "
    "passed the schema.",
    MODEL_FOLDER: "Emitted when `model.pretrained` fills the model section from a model folder "
    "([model folders](models.md#model-folders)).",
    SCAN: "Emitted by the dataset scan (`cfgcheck data`, `cfgcheck check --scan-data`), which "
    "tokenizes `data.paths` with the real tokenizer.",
    NATIVE: "Emitted only for `--from FORMAT FILE`: the framework's own refusals "
    "and traps, in the format's keys ([native formats](native-formats.md)).",
    PROJECT: "Emitted about a project's own `# cfgcheck: ignore[rule-id]` comments "
    "([adoption](adoption.md#inline-suppressions)).",
}


@dataclass(frozen=True)
class Explanation:
    severity: str  # "error", "warning", "info", or several ("error / warning")
    checks: str  # what is checked, in one or two sentences (the first line is the summary)
    prevents: str  # the real failure, with the error text users see
    fix: str  # how to fix it
    group: str = RULES  # where the finding comes from (one of GROUPS)


E = Explanation

EXPLANATIONS: dict[str, Explanation] = {
    "unknown-key": E(
        "error",
        "Every key belongs to the schema; a key nothing reads is reported with the known keys "
        "of its section and the closest one.",
        "A misspelled setting (`trainer.lora.rnak: 16`, `data.max_seq_lenght`) is silently "
        "ignored by the training script: the run trains with the default instead.",
        "Rename it to the suggested key (`~trainer.lora.rnak trainer.lora.rank=16`) or remove it.",
        group=SCHEMA,
    ),
    "missing-key": E(
        "error",
        "Keys without a default (the model shape, `data.max_seq_length`, "
        "`trainer.micro_batch_size`) must be set.",
        "The script fails reading the config (`omegaconf.errors.MissingMandatoryValue`, "
        "`KeyError`) or builds a model of the wrong shape.",
        "Set the key in its group file or on the command line (`data.max_seq_length=2048`); "
        "model shapes come from the model's `config.json`.",
        group=SCHEMA,
    ),
    "invalid-value": E(
        "error",
        "Each value has the schema's type and range: no text for numbers (`'2048'`), no value "
        "outside its allowed set (`trainer.precision=bf16`), no number outside its bounds.",
        "The framework rejects the value at start-up (Lightning: `ValueError: Precision 'bf16' "
        "is invalid`), or a string compares wrongly and a code path is silently skipped.",
        "Write the value as the schema's type, one of the allowed choices (the fix names the "
        "closest), or its default.",
        group=SCHEMA,
    ),
    # --- Native formats (cfgcheck/sources/): the framework's own refusals and traps ----------
    "unknown-native-key": E(
        "error / warning",
        "Every key of a LitGPT, Axolotl or TRL file is one the framework reads (the format's "
        "key list, `cfgcheck/sources/keys/*.txt`, extracted from its source at a cited commit); "
        "a key it does not know gets the closest known one and, for a renamed key, its new "
        "name. An error where the framework refuses the file (LitGPT, TRL), a warning where it "
        "drops the key silently (Axolotl).",
        "LitGPT's command line (jsonargparse) and `trl sft --config` (TrlParser: `Unknown "
        "arguments from config file`) refuse the file at start-up; Axolotl's config model "
        "ignores the key and trains with the default (`sequence_length: 4096` trains at 512).",
        "Spell the key as the fix says (`~sequence_length sequence_len=4096`), or remove it.",
        group=NATIVE,
    ),
    "litgpt-quantize-mixed-precision": E(
        "error",
        "LitGPT: `quantize` goes with a `*-true` precision, not a `*-mixed` one (`bf16-mixed` "
        "is the default when `precision` is unset).",
        "`ValueError: Quantization and mixed precision is not supported.` in "
        "`litgpt/finetune/lora.py` `setup()`, before training starts.",
        "Set `precision=bf16-true` (or `16-true` / `32-true`), or drop `quantize`.",
        group=NATIVE,
    ),
    "litgpt-quantize-multi-device": E(
        "error",
        "LitGPT: `quantize` trains on one device (`devices` x `num_nodes` = 1).",
        "`NotImplementedError: Quantization is currently not supported for multi-GPU "
        "training` in `litgpt/finetune/lora.py` `setup()`.",
        "Train quantized on one device (`devices=1 num_nodes=1`), or drop `quantize`.",
        group=NATIVE,
    ),
    "litgpt-quantize-optimizer": E(
        "error",
        "LitGPT: `quantize` trains with AdamW (LitGPT swaps in bitsandbytes' PagedAdamW).",
        "`ValueError: The chosen quantization format only supports the AdamW optimizer.` in "
        "`instantiate_bnb_optimizer` (`litgpt/utils.py`).",
        "Set `optimizer=AdamW`, or drop `quantize`.",
        group=NATIVE,
    ),
    "litgpt-batch-too-small": E(
        "error",
        "LitGPT: `train.global_batch_size` holds at least one micro batch per device "
        "(`global_batch_size // (devices x num_nodes) // micro_batch_size` >= 1).",
        "An `AssertionError` in `TrainArgs.gradient_accumulation_iters` (`litgpt/args.py`) "
        "before the first step.",
        "Raise `train.global_batch_size` to at least micro batch x devices x nodes.",
        group=NATIVE,
    ),
    "axolotl-deepspeed-with-fsdp": E(
        "error",
        "Axolotl: `deepspeed` and `fsdp` are not both set.",
        "Axolotl refuses the config: `deepspeed and fsdp cannot be used together.` "
        "(`validation.py` `check_fsdp_deepspeed`).",
        "Keep one: remove `fsdp` (and `fsdp_config`), or remove `deepspeed`.",
        group=NATIVE,
    ),
    "axolotl-cross-entropy-conflict": E(
        "error",
        "Axolotl: at most one cross-entropy replacement is enabled (`cut_cross_entropy`, "
        "`chunked_cross_entropy`, `liger_cross_entropy`, `liger_fused_linear_cross_entropy`).",
        "Axolotl refuses the config: `Only one cross entropy optimization can be enabled at a "
        "time` (`validation.py` `check_cross_entropy_conflicts`).",
        "Keep one and set the others to `false`.",
        group=NATIVE,
    ),
    "axolotl-fsdp-8bit-optimizer": E(
        "error",
        "Axolotl: no bitsandbytes 8-bit optimizer under FSDP2, and no 8-bit optimizer with "
        "FSDP1 parameter offload.",
        "Axolotl refuses the config: `FSDP2 not compatible with adamw_8bit, use "
        "adamw_torch_8bit instead` / `FSDP Offload not compatible with ...` (`validation.py` "
        "`check_fsdp2_w_8bit_optimizer`, `check_fsdp_offload_w_8bit_optimizer`).",
        "Use `optimizer=adamw_torch_8bit` under FSDP2, `adamw_torch_fused` with offload.",
        group=NATIVE,
    ),
    "axolotl-packing-attention": E(
        "warning",
        "Axolotl: `sample_packing` runs with an attention backend that isolates the packed "
        "samples (FlashAttention 2, SDPA, flex attention).",
        "No error: Axolotl logs that it `does not handle cross-sample decontamination` and "
        "trains on; each packed sample attends to the samples packed before it.",
        "Set `attn_implementation=flash_attention_2` (or `sdpa` / `flex_attention`), or turn "
        "`sample_packing` off.",
        group=NATIVE,
    ),
    "trl-max-length-truncates": E(
        "warning",
        "TRL: `max_length` is set when the model attends to more than SFTConfig's default of "
        "1024 tokens (a file written before TRL 0.16 spells it `max_seq_length`, which TRL no "
        "longer reads).",
        "No error: `SFTTrainer` truncates every sample to 1024 tokens "
        "(`trl/trainer/sft_config.py`), silently dropping the ends of longer samples.",
        "Set `max_length` to the length you mean to train on (`cfgcheck data` shows how many "
        "samples are longer).",
        group=NATIVE,
    ),
    "torchtune-collate": E(
        "error",
        "torchtune: `collate_fn` is a collate that takes the recipe's `padding_idx` and "
        "`ignore_idx` (`torchtune.data.padded_collate_sft`), not torch's `default_collate`.",
        "The recipe calls `partial(collate_fn, padding_idx=..., ignore_idx=...)`: `TypeError: "
        "default_collate() got an unexpected keyword argument 'padding_idx'`; called without "
        "them, default_collate over unpadded samples with `batch_size > 1`: `RuntimeError: each "
        "element in list of batch should be of equal size`.",
        "Set `collate_fn=torchtune.data.padded_collate_sft` (or remove the key), or "
        "`dataset.packed=true`.",
        group=NATIVE,
    ),
    "torchtune-max-seq-len": E(
        "error",
        "torchtune: `tokenizer.max_seq_len` is at most the `max_seq_len` the model builder builds.",
        "The first batch longer than the model's context: `ValueError: seq_len (N) of input "
        "tensor should be smaller than max_seq_len (M)` in `TransformerDecoder.forward`.",
        "Lower `tokenizer.max_seq_len` to the builder's `max_seq_len`.",
        group=NATIVE,
    ),
    "torchtune-packed-max-seq-len": E(
        "error",
        "torchtune: `dataset.packed=true` needs `tokenizer.max_seq_len` (the pack length).",
        "`ValueError: PackedDataset requires a max_seq_len to be set on the tokenizer.` when "
        "the dataset is built.",
        "Set `tokenizer.max_seq_len`, or `dataset.packed=false`.",
        group=NATIVE,
    ),
    "torchtune-lora-modules": E(
        "error / warning",
        "torchtune: `model.lora_attn_modules` uses torchtune's names: `q_proj`, `k_proj`, "
        "`v_proj`, `output_proj`.",
        "The builders skip any other name silently (`o_proj` gets no adapter: a warning); "
        "with nothing left to train, `RuntimeError: element 0 of tensors does not require grad "
        "and does not have a grad_fn` at the first backward; an empty list: `ValueError: Must "
        "pass one or more of ... as lora_modules`.",
        "Use torchtune's names (`output_proj`, not `o_proj`).",
        group=NATIVE,
    ),
    "torchtune-lora-output-tied": E(
        "error",
        "torchtune: no `apply_lora_to_output` on Llama 3.2 1B/3B, whose output is tied to the "
        "embedding.",
        "The builder raises `ValueError: apply_lora_to_output is currently not supporting in "
        "llama3.2 1b and 3b,as the projection layer weights are tied to the embeddings`.",
        "Set `model.apply_lora_to_output=false`.",
        group=NATIVE,
    ),
    "torchtune-unexpected-argument": E(
        "error",
        "torchtune: every key of a `_component_` section is an argument its callable takes "
        "(read from torchtune's source).",
        "`config.instantiate` passes every key: `TypeError: f() got an unexpected keyword "
        "argument 'x'` before training starts.",
        "Spell the argument as the fix says, or remove it.",
        group=NATIVE,
    ),
    "torchtune-missing-argument": E(
        "error",
        "torchtune: a `_component_` section gives every required argument its callable takes "
        "(besides those the recipe passes itself, such as a dataset's tokenizer).",
        "`TypeError: f() missing 1 required positional argument: 'path'` from "
        "`config.instantiate`.",
        "Set the missing argument in the section.",
        group=NATIVE,
    ),
    "torchtune-component-unknown": E(
        "error",
        "torchtune: a `torchtune.*` `_component_` path names something torchtune has.",
        "`InstantiationError: Error loading '...'` from `config.instantiate`.",
        "Use the path the fix names (a did-you-mean among torchtune's components).",
        group=NATIVE,
    ),
    "torchtune-missing-key": E(
        "error",
        "torchtune: the keys the recipe reads without a default (`cfg.batch_size`; LoRA "
        "recipes: `model.lora_rank`, `lora_alpha`, `lora_attn_modules`, `apply_lora_to_mlp`) "
        "are set.",
        "`omegaconf.errors.ConfigAttributeError: Missing key batch_size` when the recipe starts.",
        "Set the key (a LoRA recipe needs a `lora_` builder with its LoRA keys).",
        group=NATIVE,
    ),
    "torchtune-dtype": E(
        "error",
        "torchtune: `dtype` is one of `fp16`, `bf16`, `fp32`, `fp64`.",
        "`ValueError: Dtype bfloat16 must be one of fp16, bf16, fp32, fp64 for finetuning.` "
        "(`training.get_dtype`).",
        "Set `dtype=bf16` (or `fp32`).",
        group=NATIVE,
    ),
    "torchtune-fp16": E(
        "error",
        "torchtune: the fine-tuning recipes train in bf16 or fp32, not fp16.",
        "`ValueError: fp16 precision is not supported in this recipe. Please use fp32 or "
        "bf16.` in the recipe's `__init__`.",
        "Set `dtype=bf16` (or `fp32`).",
        group=NATIVE,
    ),
    "torchtune-offloading": E(
        "error",
        "torchtune: `enable_activation_offloading` goes with `enable_activation_checkpointing`.",
        "`RuntimeError: enable_activation_offloading should only be True when "
        "enable_activation_checkpointing is True` in the recipe's `__init__`.",
        "Set `enable_activation_checkpointing=true`, or turn offloading off.",
        group=NATIVE,
    ),
    "torchtune-recipe-not-distributed": E(
        "error",
        "torchtune: a single-device recipe runs in one process.",
        "`tune run --nproc_per_node N` stops: `Recipe ... does not support distributed "
        "training.Please run without torchrun commands.`",
        "Run the `*_distributed` recipe for several GPUs, or one process.",
        group=NATIVE,
    ),
    "llamafactory-invalid-choice": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): a value outside the set its arguments dataclass "
        "allows (`stage`, `finetuning_type`, `quantization_method`, `flash_attn`).",
        "`llamafactory-cli train` fails parsing the file: the enum or Literal field refuses the "
        "value (`hparams/*_args.py`).",
        "Use one of the listed values; the fix offers the closest.",
        group=NATIVE,
    ),
    "llamafactory-v1-fsdpturbo-model": E(
        "error",
        "LLaMA-Factory v1 (`--from llamafactory`, a v1 file): `dist_config.name: fsdpturbo` "
        "only with a model type FSDPTurbo's expert-parallel adapter has a spec for (qwen3_moe, "
        "qwen3_5_moe; generated from `fsdpturbo.py`).",
        'LLaMA-Factory v1 refuses to start: "ValueError: No FSDPTurbo EP spec is registered '
        'for model_type=..." (`FSDPTurboFSDP2Engine.prepare_model_ep`, whatever `ep_size`).',
        "Use `dist_config.name: fsdp2` for other models.",
        group=NATIVE,
    ),
    "llamafactory-unknown-template": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): `template` names a chat template LLaMA-Factory "
        "registers (`data/template.py`, 124 templates).",
        'LLaMA-Factory refuses to start: "Template X does not exist."',
        "Use the model's registered template (the closest one is offered).",
        group=NATIVE,
    ),
    "llamafactory-quantization-needs-adapters": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): `quantization_bit` is set only with "
        "`finetuning_type: lora` or `oft`.",
        'LLaMA-Factory refuses to start: "Quantization is only compatible with the LoRA or OFT '
        'method." (`hparams/parser.py` `_verify_model_args`).',
        "Train adapters (`finetuning_type=lora`) or drop `quantization_bit`.",
        group=NATIVE,
    ),
    "llamafactory-quantization-bits": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): bitsandbytes quantization uses 4 or 8 bits.",
        'LLaMA-Factory refuses to start: "Bitsandbytes only accepts 4-bit or 8-bit quantization." '
        "(`model_utils/quantization.py`).",
        "`quantization_bit=4` or `8` (or `quantization_method=hqq` for 2 or 3 bits).",
        group=NATIVE,
    ),
    "llamafactory-quantization-pissa": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): `pissa_init` is not combined with a quantized "
        "base.",
        'LLaMA-Factory refuses to start: "Please use scripts/pissa_init.py to initialize PiSSA '
        'for a quantized model."',
        "Initialise PiSSA offline with `scripts/pissa_init.py`, then train with "
        "`pissa_init=false`.",
        group=NATIVE,
    ),
    "llamafactory-lora-only-option": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): LoRA-only options (`use_dora`, `use_rslora`, "
        "`pissa_init`, `create_new_adapter`, ...) are set only with `finetuning_type: lora`.",
        'LLaMA-Factory refuses to start: "X is only valid for LoRA training." '
        "(`FinetuningArguments.__post_init__`).",
        "Remove the option, or set `finetuning_type=lora`.",
        group=NATIVE,
    ),
    "llamafactory-lora-with-optimizer": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): GaLore, APOLLO and BAdam are not combined with "
        "LoRA.",
        'LLaMA-Factory refuses to start: "Cannot use LoRA with GaLore, APOLLO or BAdam together."',
        "Use that optimizer with `finetuning_type=full`, or remove it.",
        group=NATIVE,
    ),
    "llamafactory-sft-only-option": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): SFT-only options (`neat_packing`, "
        "`train_on_prompt`, `mask_history`, `predict_with_generate`) are set only with `stage: "
        "sft`.",
        'LLaMA-Factory refuses to start: "`X` cannot be set as True except SFT." '
        "(`hparams/parser.py`).",
        "Remove the option (it applies to `stage=sft` only).",
        group=NATIVE,
    ),
    "llamafactory-ppo-reward-model": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): `stage: ppo` names a `reward_model`.",
        'LLaMA-Factory refuses to start: "`reward_model` is necessary for PPO training."',
        "Set `reward_model` to a reward model (or adapter) trained with `stage=rm`.",
        group=NATIVE,
    ),
    "llamafactory-zero3-conflict": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): Options DeepSpeed ZeRO-3 excludes (`pure_bf16`, "
        "`use_unsloth`, ...) are not combined with a ZeRO-3 `deepspeed` config.",
        'LLaMA-Factory refuses to start: "`pure_bf16` is incompatible with DeepSpeed ZeRO-3." '
        "(and the like, `hparams/parser.py`).",
        "Remove the option, or use a ZeRO-2 DeepSpeed config.",
        group=NATIVE,
    ),
    "llamafactory-streaming-max-steps": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): `streaming: true` comes with `max_steps`.",
        'LLaMA-Factory refuses to start: "Please specify `max_steps` in streaming mode."',
        "Set `max_steps`: a streamed dataset has no length to count epochs by.",
        group=NATIVE,
    ),
    "llamafactory-argument-conflict": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): Combinations `hparams/parser.py` refuses at start "
        "(each quoted with its message and source line).",
        "`llamafactory-cli train` exits before loading the model with the quoted `ValueError`.",
        "Apply the change the hint names.",
        group=NATIVE,
    ),
    "llamafactory-transformers-key": E(
        "warning",
        "LLaMA-Factory (`--from llamafactory`): A TrainingArguments key that only some "
        "transformers releases in LLaMA-Factory's range (4.55 to 5.8) define.",
        'With the other release, `HfArgumentParser` refuses the file: "Some keys are not used by '
        'the HfArgumentParser".',
        "Keep the key only with the transformers release that has it, or use its replacement.",
        group=NATIVE,
    ),
    "llamafactory-no-do-train": E(
        "warning",
        "LLaMA-Factory (`--from llamafactory`): `do_train` (or `do_eval`/`do_predict`) is set.",
        "No error: LLaMA-Factory loads the model and data, trains nothing and saves nothing "
        "(`train/sft/workflow.py` trains only `if training_args.do_train`).",
        "`do_train=true`.",
        group=NATIVE,
    ),
    "llamafactory-no-dataset": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): A training run names its `dataset`.",
        'LLaMA-Factory refuses to start: "Please specify dataset for training."',
        "Set `dataset` to names registered in `dataset_dir/dataset_info.json`.",
        group=NATIVE,
    ),
    "llamafactory-packing-contamination": E(
        "warning",
        "LLaMA-Factory (`--from llamafactory`): `packing: true` for SFT comes with `neat_packing: "
        "true`.",
        "No error: packed samples share an all-ones attention mask, so each sample attends to the "
        "samples packed before it (`PackedSupervisedDatasetProcessor`).",
        "`neat_packing=true` (block-diagonal attention per sample).",
        group=NATIVE,
    ),
    "llamafactory-dataset-info-missing": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): `dataset_dir` holds `dataset_info.json` (unless "
        "it is `ONLINE`).",
        'LLaMA-Factory refuses to start: "Cannot open .../dataset_info.json" (`data/parser.py`).',
        "Point `dataset_dir` at the folder holding `dataset_info.json`, relative to where "
        "`llamafactory-cli` runs.",
        group=NATIVE,
    ),
    "llamafactory-dataset-undefined": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): Every name in `dataset` / `eval_dataset` is "
        "defined in `dataset_info.json`.",
        'LLaMA-Factory refuses to start: "Undefined dataset X in dataset_info.json."',
        "Register the dataset, or use the closest defined name (offered).",
        group=NATIVE,
    ),
    "llamafactory-deepspeed-missing": E(
        "error",
        "LLaMA-Factory (`--from llamafactory`): The `deepspeed` JSON exists relative to the "
        "working directory.",
        'transformers refuses to start: "Expected a string path to an existing deepspeed config, '
        'or a dictionary, or a base64 encoded string".',
        "Fix the path (relative to the folder `llamafactory-cli` runs in).",
        group=NATIVE,
    ),
    "launch-unknown-flag": E(
        "error",
        "Launch scripts (`--from launch`): every flag of the training command is a field of "
        "the entry point's `HfArgumentParser` dataclasses (transformers' `TrainingArguments` "
        "of the installed release, or of `--transformers-version`'s, included) or one of its "
        "`argparse` options.",
        'The run stops before training: "ValueError: Some specified arguments are not used '
        "by the HfArgumentParser: ['--evaluation_strategy', 'steps']\" (transformers "
        "`hf_argparser.py`); a flag a release renamed is named with its new name and the "
        "first tabled release that refuses it (`--evaluation_strategy` is `--eval_strategy`: "
        "4.46.3 declares it, 4.51.3 refuses it).",
        "Rename the flag as the message says, or remove it.",
        group=NATIVE,
    ),
    "launch-fp16-and-bf16": E(
        "error",
        "Launch scripts (`--from launch`): `--fp16` and `--bf16` are not both True.",
        '`TrainingArguments.__post_init__` refuses it before training: "ValueError: At most '
        'one of fp16 and bf16 can be True, but not both" (transformers `training_args.py`).',
        "Keep one of the two: `--bf16 False`, or `--fp16 False`.",
        group=NATIVE,
    ),
    "launch-deepspeed-mismatch": E(
        "error",
        "Launch scripts (`--from launch`): every value of the `--deepspeed` JSON that the "
        "Trainer fills (`train_micro_batch_size_per_gpu`, `gradient_accumulation_steps`, "
        "`train_batch_size` = processes x micro batch x accumulation, `gradient_clipping`, the "
        "optimizer's `lr`/`betas`/`eps`/`weight_decay`, `warmup_max_lr`, `fp16`/`bf16` "
        '`enabled`) is `"auto"` or equal to the flag it comes from.',
        'transformers refuses to start: "ValueError: Please correct the following DeepSpeed '
        'config values that mismatch TrainingArguments values" (integrations/deepspeed.py '
        "`trainer_config_process`, raised by `trainer_config_finalize`).",
        'Set the value to `"auto"` in the JSON, or give the flag the JSON\'s value.',
        group=NATIVE,
    ),
    "launch-lora-module-unmatched": E(
        "error",
        "Launch scripts (`--from launch`), DeepSpeed-Chat entry points: with `--lora_dim` above "
        "0, `--lora_module_name` is part of the name of at least one linear module of the model.",
        "DeepSpeed-Chat's `convert_linear_layer_to_lora` replaces only the `nn.Linear` modules "
        "whose name contains it: LoRA is applied to nothing, silently (and with "
        "`--only_optimize_lora` no parameter trains).",
        "Give a part of the model's layer names (`layers.` for Llama, `decoder.layers.` for OPT).",
        group=NATIVE,
    ),
    "launch-entry-refuses": E(
        "error",
        "Launch scripts (`--from launch`): the flags pass the entry point's own argument "
        "checks, read from its source: transformers' `run_clm.py` (`run_mlm.py`, `run_plm.py`) "
        "needs `--dataset_name` or a `--train_file` / `--validation_file` ending in csv, json "
        "or txt, and refuses `--config_overrides` with a pretrained model.",
        "The run stops in the argument dataclasses' `__post_init__`: \"ValueError: Need either a "
        'dataset name or a training/validation file.", "AssertionError: `train_file` should '
        'be a csv, a json or a txt file."',
        "Give the data flag, or a file of a format the entry point loads.",
        group=NATIVE,
    ),
    "launch-unknown-value": E(
        "warning",
        "Launch scripts (`--from launch`): a flag's value comes from a variable the script "
        "never sets, a positional argument not given, or a command's output (`$(...)`).",
        "cfgcheck reads the script without running it: the checks that need the value are "
        "left out and their failures are not caught before launch.",
        "Set the value in the script, or give the script's arguments after the file.",
        group=NATIVE,
    ),
    "launch-deepspeed-missing": E(
        "error",
        "Launch scripts (`--from launch`): the `--deepspeed` JSON exists in the folder the "
        "script runs from.",
        "`TrainingArguments.__post_init__` opens the file (`HfTrainerDeepSpeedConfig`) and "
        "the run stops before training with a missing-file error.",
        "Give the path relative to the folder the script runs from (`--cwd`).",
        group=NATIVE,
    ),
    "python-unknown-value": E(
        "warning",
        "A run written as code (`--from python`): every setting a check needs is a literal the "
        "code writes, or follows from literals (constants, arithmetic, f-strings, `**dict`, "
        "arguments passed through the file's own functions).",
        "Nothing fails here: a value computed when the code runs (`os.environ`, `input()`, "
        "`argparse`, a call's result, a call on one branch of an `if`) is never guessed, so "
        "the checks that need it are left out and their failures are not caught before launch.",
        "Write a literal in the code, or give the value on the command line in the call's "
        "keys (`args.per_device_train_batch_size=4`).",
        group=NATIVE,
    ),
    "axolotl-positions-past-context": E(
        "error / warning",
        "Axolotl (`--from axolotl`): `sequence_len` against the model's `max_position_embeddings`.",
        'Axolotl logs "increasing model.config.max_position_embeddings" and sets the config '
        "value (`src/axolotl/loaders/model.py` `_adjust_model_config`). RoPE models train on "
        "positions they never saw (a warning); a learned position table (GPT-2, OPT) keeps its "
        'rows and fails: "IndexError: index out of range in self" (an error with sample '
        "packing, where every row is `sequence_len` long).",
        "Lower `sequence_len` to the model's context, or scale RoPE to extend it.",
        group=NATIVE,
    ),
    "axolotl-gptq-not-gptq-model": E(
        "error",
        "Axolotl (`--from axolotl`): `gptq: true` names a model whose config.json has a GPTQ "
        "`quantization_config`.",
        'Axolotl refuses it before loading: "ValueError: model_config.quantization_config is '
        'not set or quant_method is not set to gptq." (`src/axolotl/loaders/utils.py` '
        "`check_model_config`).",
        "Point `base_model` at a GPTQ checkpoint, or remove `gptq`.",
        group=NATIVE,
    ),
    "trl-positions-past-context": E(
        "error / warning",
        "TRL (`--from trl`): the sequence length (`max_length`, or `max_seq_length` in older "
        "releases) against the model's `max_position_embeddings`.",
        'Learned absolute positions (GPT-2, OPT) fail on the first longer sample: "IndexError: '
        'index out of range in self" (an error). RoPE models compute rotary angles for any '
        "position and train, on positions they never saw (a warning).",
        "Lower `max_length` to the model's context, or use a model with a longer one.",
        group=NATIVE,
    ),
    "trl-prompt-unbounded": E(
        "warning",
        "TRL (`--from trl`) GRPO from 0.26, RLOO from 0.27: no key of the config bounds the "
        "prompts (`max_prompt_length` is no longer read; a colocated vLLM's "
        "`vllm_max_model_length` would cap prompt + completion).",
        "Prompts are tokenized whole and fed with their completion to generation and to the "
        "forward, so memory grows with the longest prompt in the data; the estimate assumes "
        "the worst case, the model's context minus `max_completion_length`.",
        "Filter the dataset before training so that no prompt exceeds the length planned for "
        "(TRL's advice); with vLLM colocated, set `vllm_max_model_length`.",
        group=NATIVE,
    ),
    "trl-padding-free-max-length": E(
        "error",
        "`padding_free: true` comes with `packing: true` (TRL 1.0 and later).",
        'SFTTrainer refuses to start: "When `padding_free=True` without packing, `max_length` is '
        'not enforced" (`trl/trainer/sft_trainer.py`).',
        "`packing=true`, or `padding_free=false`.",
        group=NATIVE,
    ),
    "trl-padding-free-attention": E(
        "warning",
        "`padding_free: true` with an attention other than flash attention, in TRL releases "
        "before 1.16.",
        "TRL warns that `attn_implementation` \"is not set to 'flash_attention_2'\": padding-free "
        "batches then attend across samples (cross-contamination) on sdpa and eager.",
        "`attn_implementation=flash_attention_2`, or `padding_free=false`.",
        group=NATIVE,
    ),
    "trl-fp16-and-bf16": E(
        "error",
        "At most one of `fp16` and `bf16` is true.",
        '`TrainingArguments.__post_init__` raises: "At most one of fp16 and bf16 can be True, but '
        'not both".',
        "Keep one: `fp16=false` on a bf16 GPU.",
        group=NATIVE,
    ),
    "trl-grpo-generation-batch": E(
        "error",
        "GRPO: the generation batch is a multiple of `num_generations`, and `num_generations` is "
        "at least 2.",
        'GRPOConfig refuses to start: the generation batch size "must be evenly divisible by the '
        'number of generations per prompt".',
        "Set `num_generations` to a divisor of the generation batch (the fix names one).",
        group=NATIVE,
    ),
    "trl-packing-without-max-length": E(
        "error",
        "`packing: true` comes with a `max_length`.",
        'SFTTrainer refuses to start: "When packing is enabled, `max_length` can\'t be `None`".',
        "Set `max_length` to the packed sequence length.",
        group=NATIVE,
    ),
    "trl-peft-lm-head": E(
        "error",
        "`lora_target_modules` does not name `lm_head`.",
        'SFTTrainer refuses to start: "Applying a PEFT adapter to `lm_head` is not supported".',
        "Remove `lm_head` from `lora_target_modules`.",
        group=NATIVE,
    ),
    "trl-deepspeed-batch-mismatch": E(
        "error",
        "The DeepSpeed JSON's batch sizes agree with the trainer's "
        "(`train_micro_batch_size_per_gpu`, `gradient_accumulation_steps`, `train_batch_size` "
        "against the per-device batch, the accumulation and the process count).",
        "transformers' DeepSpeed integration refuses to start "
        '(`HfTrainerDeepSpeedConfig.trainer_config_process`): "Please correct the following '
        'DeepSpeed config values that mismatch TrainingArguments values".',
        "Set the JSON's values to `\"auto\"`, or to the trainer's values.",
        group=NATIVE,
    ),
    "seq-len-over-block-size": E(
        "error / warning",
        "The longest sequence the pipeline feeds (packed rows: `data.max_seq_length`; else the "
        "tokenizer's `max_length`, which `padding=max_length` pads every sample to) is at most "
        "`model.block_size`; a warning when `data.max_seq_length` is above it but truncation "
        "to a shorter `max_length` keeps batches within it.",
        "LitGPT: `ValueError: Cannot attend to 3063, block size is only 2048` on the first batch "
        "this long; transformers models index past their position table.",
        "Lower `data.max_seq_length` to the block size (keep `data.truncation=true`), or pick a "
        "model with a longer context.",
    ),
    "pad-multiple-over-block-size": E(
        "error",
        "Rounding the sequence length up to `data.pad_to_multiple_of` stays within "
        "`model.block_size`.",
        "Padding to the multiple produces batches longer than the model's positions: "
        "`Cannot attend to N, block size is only M`.",
        "Lower `data.max_seq_length` so the rounded length fits, or remove "
        "`data.pad_to_multiple_of`.",
    ),
    "max-length-over-max-seq-length": E(
        "warning",
        "With truncation, `data.max_length` is at most `data.max_seq_length` (not for packed "
        "rows, which are always `max_seq_length`).",
        "Nothing fails: sequences up to `max_length` tokens silently reach the model, and "
        "what is sized by `max_seq_length` (the memory estimate, the declared context) is too "
        "small for them.",
        "Set `data.max_length<=data.max_seq_length` (or remove it), or raise "
        "`data.max_seq_length` to the length really fed.",
    ),
    "pad-multiple-mismatch": E(
        "error",
        "With padding and truncation, the truncation length is a multiple of "
        "`data.pad_to_multiple_of`.",
        "transformers: `ValueError: Truncation and padding are both activated but truncation "
        "length (1024) is not a multiple of pad_to_multiple_of (12).` on the first tokenizer call.",
        "Set the length to a multiple of the value, or remove `data.pad_to_multiple_of`.",
    ),
    "vocab-mismatch": E(
        "error / warning / info",
        "Token ids stay below the embedding rows (model.padded_vocab_size; a config.json's "
        "vocab_size), and a checkpoint is used with the tokenizer it was trained with. A larger "
        "embedding than the tokenizer is fine; a smaller or other tokenizer is graded by what is "
        "known: an error when weights are loaded (model.pretrained, LoRA / QLoRA), a warning "
        "from scratch, an info for rows past the trained vocabulary. Ids past the rows that "
        "the tokenizer section declares placeholders (tokenizer.placeholder_tokens_from: "
        "tokens neither text nor the chat template produces, Gemma 3 1B's image placeholder) "
        "are a warning.",
        "`IndexError: index out of range in self` (CPU) or a CUDA device-side assert on the "
        "first batch holding a token id at or above the embedding rows; with the wrong "
        "tokenizer, ids map to the wrong embeddings and training silently degrades.",
        "Use the checkpoint's own tokenizer; after adding tokens, resize the embedding "
        "(resize_token_embeddings) and declare it with model.padded_vocab_size (model folders) "
        "or model.vocab_size (a hand-written shape).",
    ),
    "pretrained-shape-mismatch": E(
        "error / warning",
        "A shape key written in the config agrees with the model.pretrained folder (its "
        "config.json or model_config.yaml); the finding names both values, the YAML line and "
        "the folder file's key.",
        "Loading the checkpoint into another shape fails (size mismatch for every weight) or "
        "silently checks a model that is not the one trained; a block_size past GPT-2's "
        "learned positions is an IndexError, past RoPE's trained range a quality loss.",
        "Remove the key (the folder decides it) or set the folder's value; drop a whole-shape "
        "model group with '~model' before +model.pretrained=...",
        group=MODEL_FOLDER,
    ),
    "special-token-out-of-range": E(
        "error",
        "The pad, eos, bos and unk ids are below the model's embedding rows.",
        "`IndexError: index out of range in self` when the special token is embedded (every "
        "padded batch, for the pad token).",
        "Use a special token that exists in the model's vocabulary, or resize the embeddings.",
    ),
    "pad-token-missing": E(
        "error",
        "Where the pipeline needs a pad id (tokenizer padding; transformers' padding "
        "collator, which asks for one even for a batch of one; the last packed row), the "
        "tokenizer has a pad token the vocabulary gives an id.",
        "transformers: `ValueError: Asking to pad but the tokenizer does not have a padding "
        "token.`",
        "Set `tokenizer.pad_token` (to the eos or unk token, or a new `<pad>` with resized "
        "embeddings), or stop padding. A declared pad missing from the vocabulary without "
        "an unk token fails with `TypeError: '<' not supported between instances of "
        "'NoneType' and 'int'`.",
    ),
    "pad-is-eos": E(
        "warning",
        "The pad token differs from the eos token when the padded collator masks pad labels.",
        "Masking pad labels also masks every real EOS: the model never learns to stop and "
        "generates until max_new_tokens (no error is raised).",
        "Use a distinct pad token (the unk token, or a new `<pad>`).",
    ),
    "tokenizer-unreadable": E(
        "error",
        "`tokenizer.path` points to a readable `tokenizer.json`, tokenizer folder or "
        "SentencePiece `tokenizer.model`.",
        "The training script fails loading it: `OSError: Can't load tokenizer for '...'` or "
        "`Exception: data did not match any variant of untagged enum ModelWrapper`.",
        "Point `tokenizer.path` at the tokenizer files, or unset it to check against the "
        "declared values only.",
    ),
    "tokenizer-model-mismatch": E(
        "error / warning",
        "The tokenizer's special-token ids are those the model states: `bos_token_id`, "
        "`eos_token_id` (one id or a list) and `pad_token_id` of the model folder's "
        "`config.json` / `generation_config.json` (`model.*_token_id`). A different eos id is an "
        "error; a different bos or pad id a warning.",
        "No error at all: a Qwen2.5 checkpoint trained with a Llama-2 tokenizer appends eos "
        "id 2 to every sample, so the model learns to stop on a token it never stopped on, "
        "while `generate` stops only on the config's eos (151643): the fine-tuned model does "
        "not stop. An eos id past the embedding rows is an `IndexError` in the lookup.",
        "Use the tokenizer saved with the model (`~tokenizer tokenizer.path=<model folder>`; a "
        "config that leaves `tokenizer` unset uses the folder's tokenizer by default), or the "
        "tokenizer group of the model's family.",
    ),
    "tokenizer-declared-mismatch": E(
        "error",
        "A declared `tokenizer.vocab_size` or `*_token_id` agrees with the tokenizer files.",
        "Rules and scripts that trust the declared number size embeddings or mask labels with "
        "the wrong value (a silent error, or the IndexError above).",
        "Declare the files' value, or remove the declared one and let cfgcheck read the files.",
    ),
    "special-token-not-in-vocab": E(
        "warning",
        "A declared special-token string exists in the tokenizer's vocabulary.",
        "transformers silently maps an unknown token string to the unk id: the pad or eos "
        "token becomes `<unk>`.",
        "Use a token the tokenizer has, or add it with `add_special_tokens` and resize the "
        "embeddings.",
    ),
    "ignore-index-is-token": E(
        "warning",
        "`data.ignore_index` is not a real token id.",
        "Labels of that token are ignored by the loss (`CrossEntropyLoss(ignore_index=...)`): "
        "the model never learns to produce it; no error is raised.",
        "Use a negative ignore index (`-100`, PyTorch's default).",
    ),
    "ragged-batch": E(
        "error",
        "With `micro_batch_size` > 1 and torch's default collate, every sample of a batch has "
        "the same length.",
        "`ValueError: expected sequence of length 4096 at dim 1 (got 3999)` or `RuntimeError: "
        "each element in list of batch should be of equal size` on the first batch.",
        "Use the padding collator (`data.collator=padded`), or pad to `max_length` with "
        "truncation.",
    ),
    "batch-size-mismatch": E(
        "error",
        "`global_batch_size` equals micro batch x accumulation x devices x nodes.",
        "LitGPT asserts `global_batch_size % (micro_batch_size * devices) == 0`; elsewhere the "
        "run silently trains with another batch size than the learning rate was tuned for.",
        "Set `trainer.gradient_accumulation_steps` to make the product match, or declare the "
        "global batch the settings compute.",
    ),
    "strategy-device-count": E(
        "error / warning",
        "The parallel strategy fits the device count: `single` on one device, a distributed "
        "strategy on several.",
        "Lightning: `MisconfigurationException` for a single-device strategy on several "
        "devices; a sharding strategy on one device only adds communication set-up (warning).",
        "Pick `ddp` / `fsdp` for several devices, `single` for one (keeping the global batch).",
    ),
    "head-size-mismatch": E(
        "error / warning",
        "`n_embd` divides into `n_head` heads when the head size is derived; with an explicit "
        "`head_size`, per `trainer.framework`: LitGPT builds it, transformers' Llama, Gemma 2/3 "
        "and GPT-NeoX configs refuse it (`ValueError: The hidden size (30) is not a multiple "
        "of the number of attention heads (4).`), Mistral, Qwen2/3, Gemma, Phi-3 and OLMo "
        "accept it.",
        "`RuntimeError: shape '[1, 1024, 30, 68]' is invalid for input of size ...` when the "
        "q/k/v projections are split into heads.",
        "Choose `n_head` among the divisors of `n_embd`, or set `model.head_size`.",
    ),
    "query-groups-mismatch": E(
        "error",
        "`n_head` is a multiple of `n_query_groups` (grouped-query attention).",
        "The key/value heads cannot be repeated to the query heads: a shape error in attention "
        "(`RuntimeError: shape ... is invalid`).",
        "Set `model.n_query_groups` to a divisor of `n_head`.",
    ),
    "expert-parallel-mismatch": E(
        "error / warning",
        "`trainer.expert_parallel_size` divides the world size and the model's number of "
        "routed experts (and the model has experts to split: a warning on a dense model).",
        "Axolotl: `ValueError: expert_parallel_size (3) must divide world_size (4).` when it "
        "builds the device mesh, `ValueError: Expert module ...: num_experts=60 not divisible "
        "by ep_size=8.` when it slices the experts; LLaMA-Factory's fsdpturbo: `ValueError: "
        "dp_size must be divisible by ep_size`.",
        "Set `trainer.expert_parallel_size` to a common divisor of the GPUs and the experts.",
    ),
    "rotary-dims-odd": E(
        "error",
        "`head_size x rotary_fraction` is a whole even number (RoPE rotates pairs).",
        "`RuntimeError: The size of tensor a (...) must match the size of tensor b (...)` when "
        "the rotary embedding is applied.",
        "Set `model.rotary_fraction` so the rotated dimensions are even.",
    ),
    "offload-strategy": E(
        "error / warning",
        "CPU / NVMe offload (`trainer.offload`) that the strategy refuses or ignores: torch "
        "FSDP offloads to the CPU only and only with the parameters; DeepSpeed reads "
        "`offload_param` at ZeRO-3 only and keeps `nvme` optimizer states in host memory at "
        "ZeRO-1/2; DDP and one GPU offload nothing (warnings where the run starts anyway).",
        "FSDP has no NVMe device and no optimizer-only offload, so the config cannot be built "
        "as written; an ignored offload leaves the states or weights on the GPU, where the "
        "run then meets `CUDA out of memory` the offload was meant to avoid.",
        "Use `trainer.strategy=zero3` for weights or NVMe, `cpu` under FSDP, or drop the offload.",
    ),
    "qlora-needs-4bit": E(
        "error",
        "QLoRA trains adapters on a 4-bit quantized base (`nf4`, `nf4-dq`, `fp4`).",
        "The run is plain LoRA on a full-precision or 8-bit base: it needs several times the "
        "memory the QLoRA plan assumed, and fails with `CUDA out of memory`.",
        "Set `trainer.quantization=nf4`, or `trainer.finetuning=lora` on an unquantized base.",
    ),
    "lora-needs-rank": E(
        "error",
        "LoRA and QLoRA have a rank and at least one target module.",
        "PEFT: `LoraConfig` without `r`, or `ValueError: Target modules [] not found in the base "
        "model` / nothing trains.",
        "Set `trainer.lora.rank` (8 to 64 is usual) and `trainer.lora.targets`.",
    ),
    "lora-target-unknown": E(
        "error / warning",
        "Every `trainer.lora.targets` entry names a LoRA-able module of the architecture, as PEFT "
        "matches names (a module path equal to the entry or ending with `.entry`).",
        "PEFT: `ValueError: Target modules {...} not found in the base model` when no entry "
        "matches (error); fewer adapters, silently, when some do not (warning); `ValueError: "
        "Target module ... is not supported` for a norm or a block (error).",
        "Use the architecture's names (Phi-3: `qkv_proj`, `o_proj`, `gate_up_proj`, `down_proj`; "
        "Phi-1.5/2: `dense`, `fc1`, `fc2`; GPT-2: `c_attn`, `c_proj`, `c_fc`) or `[all-linear]`.",
    ),
    "lora-target-experts": E(
        "warning",
        "On a mixture-of-experts model, MLP targets (or `[all-linear]`) reach the routed experts.",
        "transformers 5 stores each layer's experts as fused 3D parameters (`MixtralExperts."
        "gate_up_proj`), not `nn.Linear`: PEFT's `target_modules` silently adapts only the "
        "attention (and shared-expert) linears.",
        "Adapt the experts with `trainer.lora.target_parameters` (PEFT's `target_parameters`), "
        "or accept attention-only LoRA.",
    ),
    "lora-target-parameter-unknown": E(
        "error",
        "Every entry of `trainer.lora.target_parameters` matches a parameter of the model, the "
        "LoRA dropout is 0 with them, and the framework is PEFT's (`trainer.framework=hf`).",
        "PEFT adapts a parameter whose full name ends with `.` + the entry (`7.mlp.experts."
        "gate_up_proj`: layer 7's fused experts); an entry matching nothing is dropped silently, "
        "or only warned about (`target_parameters=[...] were set but no parameter was "
        "matched.`), so fewer adapters train than asked. `lora.ParamWrapper` raises with "
        "`lora_dropout != 0`. LitGPT and torchtune have no `target_parameters`: nothing "
        "would be adapted.",
        "Name the model's parameters (layer indices within `num_hidden_layers`), and set "
        "`trainer.lora.dropout=0`; outside PEFT, adapt the MLP instead (LitGPT `lora_mlp`).",
    ),
    "attention-unsupported": E(
        "error",
        "The architecture's transformers class implements `trainer.attention`.",
        "transformers: `ValueError: Gemma2ForCausalLM does not support an attention "
        "implementation through torch.nn.functional.scaled_dot_product_attention yet.`",
        "Set `trainer.attention=eager` (more memory), or `flash` with flash-attn >= 2.6.",
    ),
    "quantized-full-finetuning": E(
        "error",
        "Quantized weights are trained through adapters, never directly.",
        "transformers: `ValueError: You cannot perform fine-tuning on purely quantized models. "
        "Please attach trainable adapters on top of the quantized model`.",
        "Use `trainer.finetuning=qlora` / `lora`, or `trainer.quantization=none`.",
    ),
    "prequantized-training": E(
        "error",
        "A pre-quantized checkpoint (GPTQ, AWQ, bitsandbytes, FP8, MXFP4 in its config.json) "
        "trains through adapters, with a method transformers can train.",
        "transformers: `ValueError: You cannot perform fine-tuning on purely quantized models` "
        "(full fine-tuning); `... quantized with mxfp4 but that quantization method do not "
        "support training` (gpt-oss's MXFP4 experts).",
        "Use `trainer.finetuning=lora`; load MXFP4 with `Mxfp4Config(dequantize=True)` and set "
        "`model.weight_format=null`.",
    ),
    "flash-attention-precision": E(
        "error",
        "FlashAttention runs in fp16 or bf16.",
        "flash-attn: `RuntimeError: FlashAttention only support fp16 and bf16 data type`.",
        "Use bf16 or fp16 mixed precision, or `trainer.attention=sdpa`.",
    ),
    "lora-settings-unused": E(
        "info",
        "A LoRA rank with full fine-tuning is ignored.",
        "Nothing fails: the run trains every weight, not adapters, which may not be the plan.",
        "Set `trainer.finetuning=lora`, or remove `trainer.lora.rank`.",
    ),
    "learning-rate-range": E(
        "warning",
        "The learning rate lies in the range the fine-tuning method's published recipes use "
        "(full fine-tuning up to 1e-3, LoRA/QLoRA up to 1e-2).",
        "No error: the loss diverges to `nan` or the model forgets what it knew within the "
        "first hundred steps, after the queue wait.",
        "Use a learning rate in the method's usual range (the fix proposes the recipes' value).",
    ),
    "gpu-name": E(
        "error",
        "`trainer.gpu.name` names one GPU of cfgcheck's table (or comes with "
        "`trainer.gpu.memory_gib`); an ambiguous name (`A100`: 40 or 80 GB) asks which.",
        "The memory check would use the wrong card's memory, or none: `A100` read as the 80 GB "
        "card passes a run that fails with `CUDA out of memory` on the 40 GB one.",
        "Name the exact card (`trainer.gpu.name=A100-40GB`), or set `trainer.gpu.memory_gib`.",
    ),
    "gpu-memory": E(
        "error / warning / info",
        "The estimated peak memory per GPU fits the live or declared GPU with the estimate's "
        "stated margin (10 % where calibrated on measured runs, 25 % elsewhere): error when the "
        "estimate exceeds the GPU, warning when only the margin does; info when no GPU is known.",
        "`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...` minutes into the "
        "run, after the queue wait.",
        "Apply a fix from the list (activation checkpointing, a smaller micro batch with more "
        "accumulation, sharding, quantization), or use a larger GPU.",
    ),
    "gpu-capability": E(
        "error",
        "bf16 and FlashAttention run on compute capability 8.0 (Ampere) or newer.",
        "`RuntimeError: Current CUDA Device does not support bfloat16` / `FlashAttention only "
        "supports Ampere GPUs or newer.`",
        "Use fp16 mixed precision (`trainer.precision=16-mixed`) and SDPA attention on older "
        "GPUs (T4, V100).",
    ),
    "data-longer-than-block-size": E(
        "error",
        "No tokenized sample longer than `model.block_size` reaches the model (the scan "
        "tokenizes `data.paths` with the real tokenizer).",
        "`Cannot attend to N, block size is only M` (LitGPT) or an index error in the position "
        "embeddings, at the batch holding the longest sample.",
        "Keep `data.truncation=true` with a max length within the block size.",
        group=SCAN,
    ),
    "data-truncated": E(
        "warning",
        "At most 5 % of samples, and of all tokens, are cut by `data.max_seq_length`.",
        "No error: the ends of the samples (often the answers) are silently dropped.",
        "Raise `data.max_seq_length` (within the block size), or filter long samples.",
        group=SCAN,
    ),
    "data-padding-waste": E(
        "info",
        "Less than half of the positions of the configured padding scheme are padding.",
        "No error: most compute and memory go to pad tokens.",
        "Pad per batch (`data.padding=longest` with the padded collator) or pack samples.",
        group=SCAN,
    ),
    "data-no-labels": E(
        "warning",
        "Every sample keeps at least one label after truncation (the loss reads positions 1 "
        "to the length; with `data.completion_only_loss` only the completion's tokens, with "
        "`data.assistant_only_loss` only the assistant's).",
        "A micro batch of only such samples gives a NaN loss in transformers (cross-entropy "
        "averaged over zero labels); TRL's SFTTrainer silently drops them.",
        "Raise `data.max_length` past the prompt, or drop the samples.",
        group=SCAN,
    ),
    "data-empty-samples": E(
        "warning",
        "No sample's text (or conversation) is empty.",
        "No error: the model trains on the special tokens alone; often a wrong field name.",
        "Drop empty records, or point `data.text_field` / `data.messages_field` / "
        "`data.prompt_field` at the text.",
        group=SCAN,
    ),
    "data-ids-over-embedding": E(
        "error",
        "Every token id of the tokenized data is below the model's embedding rows.",
        "`IndexError: index out of range in self` (CPU) or a device-side assert (CUDA) in the "
        "embedding lookup.",
        "Give the model as many embedding rows as the tokenizer has ids, or use its tokenizer.",
        group=SCAN,
    ),
    "data-unreadable": E(
        "error",
        "Every file of `data.paths` exists and parses as JSONL, text, Parquet or Arrow.",
        "The training script fails reading the dataset (`FileNotFoundError`, "
        "`json.decoder.JSONDecodeError`, `pyarrow.lib.ArrowInvalid`).",
        "Fix the file named in the message, or point `data.paths` at readable files.",
        group=SCAN,
    ),
    "data-not-local": E(
        "info",
        "`--scan-data` reads the dataset: `data.paths` names local files, or the Hub dataset "
        "(`data.hub_dataset`, TRL's `dataset_name`) is in the local Hugging Face cache.",
        "Nothing fails; the dataset was not checked. cfgcheck never downloads a dataset.",
        "Run the training script (or `datasets.load_dataset`) once on this machine so the "
        "cache holds the dataset, or point `data.paths` at local files.",
        group=SCAN,
    ),
    "data-scan-skipped": E(
        "warning",
        "`--scan-data` can run: `tokenizer.path` is set, and conversations that LLaMA-Factory "
        "or Axolotl render with a template of their own have a tokenizer chat template to be "
        "rendered with.",
        "Nothing fails; the dataset was not checked.",
        "Set `tokenizer.path` (give the tokenizer a chat template), or drop `--scan-data`.",
        group=SCAN,
    ),
    "unused-suppression": E(
        "warning",
        "Every `# cfgcheck: ignore[rule-id]` comment in a composed file silences a finding of "
        "that rule whose value sits on its line, and names a rule id cfgcheck emits.",
        "Nothing fails: a stale or misspelled suppression (`ignore[seq-len-over-blocksize]`) "
        "silences nothing, and would hide the finding once the line changes again.",
        "Remove the id from the comment, or correct its spelling (the warning suggests one).",
        group=PROJECT,
    ),
}


def doc_link(rule_id: str) -> str:
    """Where a finding's explanation lives: the anchor of ``docs/rules.md``."""
    return f"{DOC_FILE}#{anchor(rule_id)}"


def anchor(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading: lower case, word characters
    and hyphens, spaces as hyphens."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def emitted_ids() -> list[str]:
    """Every finding id cfgcheck can emit, by group: the catalogue's entries, plus any
    registered rule that has none yet (listed, so a missing entry shows)."""
    from cfgcheck.rules import all_rules

    ids = [*EXPLANATIONS, *(r.id for r in all_rules() if r.id not in EXPLANATIONS)]
    order = {g: n for n, g in enumerate(GROUPS)}
    return sorted(ids, key=lambda i: order.get(group(i), len(GROUPS)))


def group(rule_id: str) -> str:
    e = EXPLANATIONS.get(rule_id)
    return e.group if e else RULES


def _team_rules() -> dict[str, Rule]:
    """Rules a team registered (``@cfgcheck.rule``, entry points): explained by their docstring."""
    from cfgcheck.rules import all_rules

    return {r.id: r for r in all_rules() if not r.builtin}


def missing_ids() -> list[str]:
    """Registered rules without an explanation (a test keeps this empty; ids emitted outside
    the registry are found by tests/test_rule_catalogue.py). A team's rules are explained by
    their docstrings."""
    team = _team_rules()
    return [i for i in emitted_ids() if i not in EXPLANATIONS and i not in team]


def summary(rule_id: str) -> str:
    e = EXPLANATIONS.get(rule_id)
    if e is None:
        team = _team_rules().get(rule_id)
        if team is not None:
            return f"{team.summary or '(no docstring)'} [{team.func.__module__}]"
    return e.checks.split(". ")[0].rstrip(".") + "." if e else "(no explanation yet)"


def render_markdown() -> str:
    """``docs/rules.md``: every finding id with its explanation, by group."""
    lines = [
        "# Rules",
        "",
        "<!-- Generated by `cfgcheck rules --format markdown`; edit "
        "cfgcheck/rules/explanations.py instead. -->",
        "",
        "Every finding cfgcheck reports, by id. `cfgcheck rules` lists them, `cfgcheck explain "
        'ID` prints the same text, and each finding\'s JSON links here (`"doc"`).',
    ]
    team = _team_rules()  # a team's rules are not cfgcheck's docs
    ids = [i for i in emitted_ids() if i not in team]
    groups = [g for g in GROUPS if any(group(i) == g for i in ids)]
    groups += sorted({group(i) for i in ids} - set(groups))
    for g in groups:
        members = [i for i in ids if group(i) == g]
        lines += ["", f"## {g}", ""]
        if g in _GROUP_INTRO:
            lines += [_GROUP_INTRO[g], ""]
        lines += ["| id | severity | checks |", "|---|---|---|"]
        lines += [f"| [`{i}`](#{anchor(i)}) | {_severity(i)} | {summary(i)} |" for i in members]
        for i in members:
            e = EXPLANATIONS.get(i)
            lines += ["", f"### {i}", ""]
            if e is None:
                lines.append("(no explanation yet)")
                continue
            lines += [
                f"**Severity:** {e.severity}",
                "",
                f"**Checks:** {e.checks}",
                "",
                f"**Prevents:** {e.prevents}",
                "",
                f"**Fix:** {e.fix}",
            ]
    return "\n".join(lines) + "\n"


def _severity(rule_id: str) -> str:
    e = EXPLANATIONS.get(rule_id)
    return e.severity if e else "?"


def explain_text(rule_id: str) -> str | None:
    """``cfgcheck explain``'s text for ``rule_id``, or None for an id nothing emits."""
    if rule_id not in emitted_ids():
        return None
    e = EXPLANATIONS.get(rule_id)
    team = _team_rules().get(rule_id)
    if e is None and team is not None:
        where = f"{team.func.__module__}.{team.func.__qualname__}"
        requires = ", ".join(sorted(team.requires)) or "nothing"
        return "\n".join(
            [f"{rule_id} (team rule {where}; reads {requires})", "", team.doc or "(no docstring)"]
        )
    if e is None:
        return f"{rule_id}: no explanation yet (add it to cfgcheck/rules/explanations.py)"
    return "\n".join(
        [
            f"{rule_id} ({e.severity})",
            "",
            f"checks:    {e.checks}",
            f"prevents:  {e.prevents}",
            f"fix:       {e.fix}",
            f"docs:      {doc_link(rule_id)}",
        ]
    )
