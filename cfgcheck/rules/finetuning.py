"""Fine-tuning method, quantization, precision and attention kernel."""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.findings import Fix
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig
from cfgcheck.schema.trainer import TrainerConfig

FOUR_BIT = ("nf4", "nf4-dq", "fp4")
DEFAULT_RANK = 16


def _adapters(t: TrainerConfig, method: str) -> tuple[str, ...]:
    """Overrides that switch to ``method`` (lora / qlora) with a rank when none is set."""
    rank = () if t.lora.rank is not None else (f"trainer.lora.rank={DEFAULT_RANK}",)
    return (f"trainer.finetuning={method}", *rank)


@rule("qlora-needs-4bit", requires=("trainer",))
def qlora_needs_4bit(cfg: RunConfig) -> Iterator[Problem]:
    """QLoRA trains adapters on a 4-bit quantized base model."""
    t = cfg.trainer
    if t.finetuning == "qlora" and t.quantization not in FOUR_BIT:
        yield Problem(
            "error",
            ("trainer.finetuning", "trainer.quantization"),
            f"trainer.finetuning=qlora needs a 4-bit base model but trainer.quantization="
            f"{t.quantization}",
            "set trainer.quantization=nf4 (or nf4-dq for double quantization), or "
            "trainer.finetuning=lora for adapters on an unquantized base",
            fixes=(
                Fix(("trainer.quantization=nf4",), "quantize the base to 4-bit NF4 (QLoRA)"),
                Fix(
                    ("trainer.finetuning=lora", "trainer.quantization=none"),
                    "train LoRA adapters on the unquantized base",
                ),
            ),
        )


@rule("lora-needs-rank", requires=("trainer",))
def lora_needs_rank(cfg: RunConfig) -> Iterator[Problem]:
    """LoRA and QLoRA need a rank and at least one target module."""
    t = cfg.trainer
    if t.finetuning == "full":
        return
    if t.lora.rank is None:
        yield Problem(
            "error",
            ("trainer.finetuning", "trainer.lora.rank"),
            f"trainer.finetuning={t.finetuning} but trainer.lora.rank is not set",
            "set trainer.lora.rank (8 to 64 is usual, e.g. trainer.lora.rank=16)",
            fixes=(Fix((f"trainer.lora.rank={DEFAULT_RANK}",), "LoRA rank 16"),),
        )
    if not t.lora.targets:
        yield Problem(
            "error",
            ("trainer.finetuning", "trainer.lora.targets"),
            f"trainer.finetuning={t.finetuning} but trainer.lora.targets is empty: no "
            f"adapter is attached and nothing trains",
            "set trainer.lora.targets, e.g. [q_proj, v_proj] or all linear layers",
            fixes=(
                Fix(("trainer.lora.targets=[q_proj,v_proj]",), "adapters on q_proj and v_proj"),
                Fix(("trainer.lora.targets=[all-linear]",), "adapters on every linear layer"),
            ),
        )


@rule("quantized-full-finetuning", requires=("trainer",))
def quantized_full_finetuning(cfg: RunConfig) -> Iterator[Problem]:
    """Quantized weights cannot be trained directly; they need adapters."""
    t = cfg.trainer
    if t.finetuning == "full" and t.quantization != "none":
        yield Problem(
            "error",
            ("trainer.finetuning", "trainer.quantization"),
            f"trainer.finetuning=full with trainer.quantization={t.quantization}: quantized "
            f'weights take no gradients (transformers: "You cannot perform fine-tuning on '
            f'purely quantized models")',
            "set trainer.finetuning=qlora (4-bit) or lora, or trainer.quantization=none",
            fixes=(
                Fix(
                    _adapters(t, "qlora" if t.quantization in FOUR_BIT else "lora"),
                    "train adapters on the quantized base",
                ),
                Fix(("trainer.quantization=none",), "fully fine-tune unquantized weights"),
            ),
        )


@rule("flash-attention-precision", requires=("trainer",))
def flash_attention_precision(cfg: RunConfig) -> Iterator[Problem]:
    """FlashAttention kernels run only in fp16 or bf16."""
    t = cfg.trainer
    if t.attention == "flash" and t.precision == "32-true":
        yield Problem(
            "error",
            ("trainer.attention", "trainer.precision"),
            "trainer.attention=flash with trainer.precision=32-true: FlashAttention fails "
            'with "FlashAttention only support fp16 and bf16 data type" on fp32 inputs',
            "set trainer.precision=bf16-mixed (or bf16-true / 16-mixed), or trainer.attention=sdpa",
            fixes=(
                Fix(("trainer.precision=bf16-mixed",), "bf16 mixed precision"),
                Fix(("trainer.precision=16-mixed",), "fp16 mixed precision (pre-Ampere GPUs)"),
                Fix(("trainer.attention=sdpa",), "PyTorch SDPA attention, which runs in fp32"),
            ),
        )


@rule("lora-settings-unused", requires=("trainer",))
def lora_settings_unused(cfg: RunConfig) -> Iterator[Problem]:
    """A LoRA rank with full fine-tuning is ignored."""
    t = cfg.trainer
    if t.finetuning == "full" and t.lora.rank is not None:
        yield Problem(
            "info",
            ("trainer.finetuning", "trainer.lora.rank"),
            f"trainer.lora.rank={t.lora.rank} is ignored because trainer.finetuning=full "
            f"trains every weight",
            "set trainer.finetuning=lora to train adapters, or remove trainer.lora.rank",
        )


# Learning rates of published fine-tuning recipes, and the bounds far outside them:
# - full fine-tuning: Axolotl examples/llama-3/fft-8b.yaml uses 2e-5; LitGPT
#   config_hub/finetune/llama-2-7b/full.yaml uses 2e-4 (bf16-true, 4 GPUs).
# - LoRA / QLoRA: LitGPT config_hub/finetune/llama-2-7b/lora.yaml and Axolotl
#   examples/llama-3/lora-8b.yml use 2e-4 (QLoRA recipes likewise 2e-4).
# A warning, not an error: nothing crashes, the loss diverges or the model forgets.
LR_RANGES: dict[str, tuple[float, float, float, str]] = {
    # method: (lowest usual, highest usual, recipe value, sources)
    "full": (1e-7, 1e-3, 2e-5, "Axolotl llama-3 fft-8b: 2e-5; LitGPT llama-2-7b full: 2e-4"),
    "lora": (1e-6, 1e-2, 2e-4, "LitGPT llama-2-7b lora: 2e-4; Axolotl llama-3 lora-8b: 2e-4"),
    "qlora": (1e-6, 1e-2, 2e-4, "LitGPT and Axolotl QLoRA recipes: 2e-4"),
}


@rule("learning-rate-range", requires=("trainer",))
def learning_rate_range(cfg: RunConfig) -> Iterator[Problem]:
    """The learning rate lies in the range the fine-tuning method's recipes use."""
    t = cfg.trainer
    low, high, recipe, sources = LR_RANGES[t.finetuning]
    lr = t.learning_rate
    if low <= lr <= high:
        return
    side = "above" if lr > high else "below"
    effect = (
        "the loss diverges (nan) or the model forgets what it knew within the first steps"
        if lr > high
        else "the weights barely move: the run spends its budget and learns nothing"
    )
    yield Problem(
        "warning",
        ("trainer.learning_rate", "trainer.finetuning"),
        f"trainer.learning_rate={lr:g} is far {side} what {t.finetuning} fine-tuning uses "
        f"({low:g} to {high:g}): {effect}",
        f"use a learning rate between {low:g} and {high:g} for {t.finetuning} "
        f"(recipes: {sources}), e.g. trainer.learning_rate={recipe:g}; from-scratch "
        f"pretraining of small models may use up to ~3e-3 with finetuning=full",
        fixes=(
            Fix(
                (f"trainer.learning_rate={recipe!r}",),
                f"the {t.finetuning} recipes' learning rate",
            ),
        ),
    )


# transformers' quantizers whose ``is_trainable`` is False (quantizers/quantizer_mxfp4.py,
# quantizer_fbgemm_fp8.py): trainer_utils.validate_quantization_for_training raises for them.
_NOT_TRAINABLE = {"mxfp4": "Mxfp4Config(dequantize=True)", "fbgemm-fp8": "dequantize=True"}


@rule("prequantized-training", requires=("model", "trainer"))
def prequantized_training(cfg: RunConfig) -> Iterator[Problem]:
    """A pre-quantized checkpoint (config.json ``quantization_config``) trains only through
    adapters, and only with a quantization method transformers can train."""
    m, t = cfg.model, cfg.trainer
    fmt = m.weight_format
    if fmt is None:
        return
    if fmt in _NOT_TRAINABLE:
        yield Problem(
            "error",
            ("model.weight_format", "trainer.finetuning"),
            f"model.pretrained stores its weights as {fmt}: transformers' quantizer cannot train "
            f'it ("The model you are trying to fine-tune is quantized with {fmt.split("-")[-1]} '
            f'but that quantization method do not support training", '
            f"trainer_utils.validate_quantization_for_training)",
            f"load it dequantized ({_NOT_TRAINABLE[fmt]} in from_pretrained) and set "
            f"model.weight_format=null, or start from the 16-bit checkpoint",
            fixes=(Fix(("model.weight_format=null",), "train the dequantized weights"),),
        )
    elif t.finetuning == "full":
        yield Problem(
            "error",
            ("trainer.finetuning", "model.weight_format"),
            f"trainer.finetuning=full on a {fmt} checkpoint: quantized weights take no "
            f'gradients (transformers: "You cannot perform fine-tuning on purely quantized '
            f'models. Please attach trainable adapters on top of the quantized model")',
            "train adapters (trainer.finetuning=lora) or start from the 16-bit checkpoint",
            fixes=(Fix(_adapters(t, "lora"), "train adapters on the quantized base"),),
        )
