"""Which settings the H100 and H200 measurements (benchmarks/calibration/) cover, and the margin the
estimate states for a run: the calibrated error bound where every setting was measured, a wider
one where any was not. The verdict (:mod:`cfgcheck.memory.verdict`) says "fits" only when the
estimate plus its margin fits, so an uncovered setting never gets a confident "fits".
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory.mla import mla
from cfgcheck.memory.stack import sdpa_math
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

# worst device-level |error| the calibration test allows on every measured run
CALIBRATED_MARGIN = 0.10
# stated margin when any setting of the run was not measured
UNCALIBRATED_MARGIN = 0.25

# the architectures of the measured rows: the H100 rows' dense families, and the H200 rows'
# (benchmarks/calibration/h200.jsonl): Gemma 3 text and multimodal (q/k norms, post-attention
# and post-MLP norms, a 512-token sliding window shorter than the sequence, eager and sdpa,
# LoRA and full fine-tuning), gpt-oss (128-token window, sinks, expert LoRA through
# target_parameters), Qwen3-MoE, Mixtral, OLMoE (full fine-tuning too), Qwen1.5-MoE (shared
# experts) and DeepSeek-V2-Lite (multi-head latent attention); allocated within 0.7 % on all
ARCHITECTURES = (
    None,
    "llama",
    "mistral",
    "qwen2",
    "gemma",
    "phi",
    "gemma3_text",
    "gemma3",
    "gpt_oss",
    "qwen3_moe",
    "mixtral",
    "olmoe",
    "qwen2_moe",
    "deepseek_v2",
)
CALIBRATED: dict[str, tuple[object, ...]] = {
    "framework": ("hf",),
    "precision": ("bf16-true", "32-true"),
    # fp4 has nf4's storage and kernels (bitsandbytes: only the 16-entry code table differs);
    # adamw_8bit has paged_adamw_8bit's states, in torch's allocator instead of managed memory
    # (bitsandbytes optim/optimizer.py): both placements are modelled (weights.py)
    "quantization": ("none", "nf4", "nf4-dq", "fp4"),
    "optimizer": ("adamw", "paged_adamw_8bit", "adamw_8bit"),
    "attention": ("sdpa", "eager"),
    "loss_chunking": ("none", "fused"),
}


@dataclass(frozen=True)
class Coverage:
    margin: float
    uncalibrated: tuple[str, ...]  # the settings the measurements do not cover
    notes: tuple[str, ...]


def _feature_gaps(m: ModelConfig, seq: int) -> list[str]:
    """Mechanisms measured only in the H200 rows' architectures: a gap for a shape without
    one of them (a hand-written shape, or another family that has them)."""
    gaps = []
    if mla(m) is not None:
        gaps.append(
            "multi-head latent attention (MLA, DeepSeek-V2/V3; counted from transformers' "
            "source and traced on CPU)"
        )
    if m.n_expert:
        gaps.append(
            "mixture-of-experts router and per-expert dispatch (counted from transformers' "
            "source and traced on CPU)"
        )
    if m.norm_qk:
        gaps.append("model.norm_qk (q/k norms)")
    if m.post_attention_norm or m.post_mlp_norm:
        gaps.append("post-attention / post-MLP norms")
    if m.sliding_window_size is not None and m.sliding_window_size < seq:
        gaps.append(f"a sliding window ({m.sliding_window_size}) shorter than the sequence")
    return gaps


def _model_gaps(m: ModelConfig, seq: int) -> list[str]:
    gaps = []
    if m.architecture is None or m.architecture not in ARCHITECTURES:
        gaps.extend(_feature_gaps(m, seq))
    if m.architecture not in ARCHITECTURES:
        gaps.append(f"model.architecture={m.architecture}")
    if m.weight_format is not None:
        gaps.append(f"a pre-quantized checkpoint ({m.weight_format}), counted from its format")
    if m.attention_logit_softcapping or m.final_logit_softcapping:
        gaps.append("logit soft-capping")
    return gaps


def coverage(m: ModelConfig, d: DataConfig, t: TrainerConfig) -> Coverage:
    gaps = _model_gaps(m, d.max_seq_length)
    for key, values in CALIBRATED.items():
        value = getattr(t, key)
        if key == "quantization" and t.finetuning == "full":
            continue
        if value not in values:
            gaps.append(f"trainer.{key}={value}")
    if sdpa_math(m, t):
        gaps.append(
            "sdpa's math kernel (one k/v head without enable_gqa: fp32 attention; traced on "
            "CPU, not measured on a GPU)"
        )
    if t.world_size > 1 or t.strategy != "single":
        gaps.append(f"trainer.strategy={t.strategy} on {t.world_size} GPUs")
    if t.expert_parallel_size > 1:
        # memory/expert_parallel.py: the experts' split and the dispatch buffer are read from
        # Axolotl's and LLaMA-Factory's source; no expert-parallel run is measured on a GPU
        gaps.append(
            f"trainer.expert_parallel_size={t.expert_parallel_size} (expert parallelism, "
            "from the frameworks' source, not measured on a GPU)"
        )
    # RL trainers' own terms and Axolotl's tiled MLP (memory/rl.py, memory/tiled.py): traced
    # on CPU with the frameworks' code, not measured on a GPU
    if t.rl.logprobs != "loss" or t.rl.generation in ("transformers", "vllm-colocate"):
        gaps.append(f"trainer.rl (log-probabilities {t.rl.logprobs}, generation {t.rl.generation})")
    if t.offload.optimizer != "none" or t.offload.params != "none":
        # memory/offload.py: read from DeepSpeed's and torch's source; no offloading run is
        # measured on a GPU, and on CPU the "device" and the host are the same memory
        gaps.append(
            f"trainer.offload (optimizer {t.offload.optimizer}, params {t.offload.params}: "
            "from DeepSpeed's / torch's source, not measured on a GPU)"
        )
    if t.reference_model:
        gaps.append("trainer.reference_model")
    if t.tiled_mlp:
        gaps.append("trainer.tiled_mlp")
    if not gaps:
        return Coverage(CALIBRATED_MARGIN, (), ())
    margin = UNCALIBRATED_MARGIN
    note = (
        "not calibrated on measured runs: "
        + ", ".join(gaps)
        + f"; the estimate carries a +/-{margin:.0%} margin"
    )
    return Coverage(margin, tuple(gaps), (note,))
