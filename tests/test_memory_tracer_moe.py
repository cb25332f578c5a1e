"""The CPU allocation tracer (tests/alloc_tracer.py) on tiny random-weight mixture-of-experts
models: the whole training step transformers runs (router, per-expert dispatch of
``MixtralExperts.forward``, backward, AdamW) against cfgcheck's estimate, which counts the
router and dispatch from the source (cfgcheck/memory/activations.py ``_router_bytes``) and
states the uncalibrated margin for it."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from tests.conftest import requires

pytestmark = [requires("torch", "transformers", "peft"), pytest.mark.slow]

SMALL: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 256,
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": None,
}
MOE: dict[str, dict[str, Any]] = {
    "mixtral": {"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen3_moe": {"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 48, "head_dim": 16},
    "olmoe": {"model_type": "olmoe", "num_experts": 8, "num_experts_per_tok": 2},
}  # fmt: skip
# The dense differential test's tolerance (tests/test_memory_tracer.py), well inside the
# margin the estimate states for a MoE (coverage.py: not measured on a GPU).
UNDER, OVER = -0.03, 0.05


def run_of(family: str, finetuning: str, aux: bool = False) -> dict[str, dict[str, Any]]:
    """``aux``: the router's load-balancing loss on (output_router_logits)."""
    from cfgcheck.models.generic import generic_model

    data = {**SMALL, **MOE[family], "output_router_logits": aux}
    model = {k: v.value for k, v in generic_model(data, "config.json", "").items()}
    trainer: dict[str, Any] = {
        "micro_batch_size": 2,
        "finetuning": finetuning,
        "precision": "bf16-true",
        "attention": "sdpa",
        "optimizer": "adamw",
        "gradient_checkpointing": False,
    }
    if finetuning == "lora":
        trainer["lora"] = {"rank": 8, "alpha": 16, "dropout": 0.0,
                           "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]}  # fmt: skip
    return {
        "model": {"name": f"tiny-{family}", "vocab_size": 256, **model},
        "trainer": trainer,
        "data": {"max_seq_length": 128},
    }


@pytest.mark.parametrize("aux", [False, True], ids=["", "aux-loss"])
@pytest.mark.parametrize("seq", [128, 512])
@pytest.mark.parametrize("finetuning", ["full", "lora"])
@pytest.mark.parametrize("family", sorted(MOE))
def test_moe_step_matches_the_trace(family: str, finetuning: str, seq: int, aux: bool) -> None:
    import torch

    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    run = run_of(family, finetuning, aux)
    run["data"]["max_seq_length"] = seq
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(run)
    label = (
        f"{family} {finetuning} {seq} aux={aux}: traced {c.traced.peak.bytes} at "
        f"{c.traced.peak.phase}, estimate {c.estimated} at {c.phase} ({100 * c.error:+.1f}%)"
    )
    print(label)
    assert UNDER <= c.error <= OVER, label


# --- the dense families read generically ---------------------------------------------------------

DENSE: dict[str, dict[str, Any]] = {
    "gemma3_text": {"head_dim": 16, "sliding_window": 32,
                    "layer_types": ["sliding_attention", "full_attention"]},
    "smollm3": {},
    "olmo2": {},
    "granite": {},
    "starcoder2": {"sliding_window": None},
    "stablelm": {},
    "gpt_neox": {},
    "falcon": {"num_kv_heads": 2, "new_decoder_architecture": True},
    "cohere": {},
}  # fmt: skip


def dense_run(
    family: str,
    finetuning: str,
    checkpointing: bool,
    intermediate: int = 96,
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``config``: config.json keys on top of the family's."""
    from cfgcheck.models.generic import generic_model

    data = {**SMALL, "intermediate_size": intermediate, "model_type": family}
    data.update(DENSE.get(family, {}))
    data.update(config or {})
    model = {k: v.value for k, v in generic_model(data, "config.json", "").items()}
    trainer: dict[str, Any] = {
        "micro_batch_size": 2, "finetuning": finetuning, "precision": "bf16-true",
        "attention": "sdpa", "optimizer": "adamw", "gradient_checkpointing": checkpointing,
    }  # fmt: skip
    if finetuning == "lora":
        fused = family in ("gpt_neox", "falcon")
        targets = ["query_key_value"] if fused else ["q_proj", "v_proj"]
        trainer["lora"] = {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": targets}
    return {
        "model": {"name": family, "vocab_size": 256, **model},
        "trainer": trainer,
        "data": {"max_seq_length": 256},
    }


@pytest.mark.parametrize("family", sorted(DENSE))
def test_traced_dense_family_matches_the_trace(family: str) -> None:
    """Full fine-tuning of every generically read dense family, within the dense tolerance:
    OLMo 2's norms multiply in fp32 and its q/k norms span the whole projection, GPT-NeoX's
    and StableLM's partial rotary concatenates, a parallel block's two LayerNorms share their
    input, and the k/v heads and MLP width are the built ones (GPT-NeoX has no GQA, Falcon
    builds ffn_hidden_size whatever intermediate_size says)."""
    import torch

    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(dense_run(family, "full", False))
    print(f"{family}: traced {c.traced.peak.bytes}, estimate {c.estimated} ({c.error:+.3f})")
    assert UNDER <= c.error <= OVER


@pytest.mark.parametrize("finetuning", ["full", "lora"])
@pytest.mark.parametrize("family", ["olmo2", "gemma3_text", "gpt_neox"])
def test_checkpointed_block_ending_in_a_norm_matches_the_trace(
    family: str, finetuning: str
) -> None:
    """OLMo 2 and Gemma 3 end each block with a norm on the MLP output: with checkpointing the
    block is recomputed whole at that norm's backward, whose fp32 temporaries come on top
    (activations.post_norm_backward_bytes; without it -10 % to -23 %). GPT-NeoX (parallel
    block) alongside. Full fine-tuning holds only the norm's weight gradient of the recomputed
    layer there, and its normalized tensor is freed (recompute.full_finetuning_moments: +9.1 %
    and +5.3 % for OLMo 2 and Gemma 3 when the layer's and the embedding's gradients were
    counted)."""
    import torch

    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(dense_run(family, finetuning, True))
    label = f"{family} {finetuning} checkpointed: {100 * c.error:+.1f}%"
    print(label)
    assert UNDER <= c.error <= OVER, label


def test_shared_experts_are_not_under_counted() -> None:
    """Qwen2-MoE (a gated shared expert next to the routed ones), full fine-tuning and LoRA on
    the attention: -0.8 % and -3.2 % on this trace (the shared expert's down projection reads
    its own width, not the whole MLP term's: +1.8 % before)."""
    import torch

    from cfgcheck.models.generic import generic_model
    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    data = {**SMALL, "model_type": "qwen2_moe", "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 48, "shared_expert_intermediate_size": 96}  # fmt: skip
    model = {k: v.value for k, v in generic_model(data, "config.json", "").items()}
    for finetuning in ("full", "lora"):
        trainer: dict[str, Any] = {
            "micro_batch_size": 2, "finetuning": finetuning, "precision": "bf16-true",
            "attention": "sdpa", "optimizer": "adamw", "gradient_checkpointing": False,
        }  # fmt: skip
        if finetuning == "lora":
            trainer["lora"] = {"rank": 8, "alpha": 16, "dropout": 0.0,
                               "targets": ["q_proj", "v_proj"]}  # fmt: skip
        run = {"model": {"name": "qwen2_moe", "vocab_size": 256, **model}, "trainer": trainer,
               "data": {"max_seq_length": 256}}  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c = compare(run)
        label = f"qwen2_moe {finetuning}: {100 * c.error:+.1f}%"
        print(label)
        assert -0.04 <= c.error <= OVER, label


GPT_OSS: dict[str, Any] = {
    "model_type": "gpt_oss", "num_local_experts": 8, "num_experts_per_tok": 2, "head_dim": 16,
    "sliding_window": 32, "layer_types": ["sliding_attention", "full_attention"],
}  # fmt: skip
# LoRA targets: on gpt-oss target_modules reach only the attention projections (the router's
# weight is a bare Parameter, the experts 3D parameters PEFT converts no name to: traced.py);
# LoRA on the experts is PEFT's target_parameters (trainer.lora.target_parameters), as the
# gpt-oss recipe sets it (huggingface/gpt-oss-recipes, lora recipe: layers 7, 15, 23 of 24)
GPT_OSS_TARGETS = {
    "qv": ["q_proj", "v_proj"],
    "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "params": ["q_proj", "k_proj", "v_proj", "o_proj"],
}
GPT_OSS_PARAMS = {
    "params": ["1.mlp.experts.gate_up_proj", "1.mlp.experts.down_proj"],
    "allparams": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
}
GPT_OSS_TARGETS["allparams"] = GPT_OSS_TARGETS["params"]


@pytest.mark.parametrize("precision", ["bf16-true", "bf16-mixed"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["", "ckpt"])
@pytest.mark.parametrize(
    "finetuning", ["full", "lora-qv", "lora-attention", "lora-params", "lora-allparams"]
)
def test_gpt_oss_step_matches_the_trace(
    finetuning: str, checkpointing: bool, precision: str
) -> None:
    """gpt-oss (cfgcheck/memory/gpt_oss.py): eager attention with sinks softmaxed in the
    scores' dtype, sliding and full layers (two masks), the top-k router, the clamped SwiGLU
    of biased experts. Before these terms the estimate was +12 % to +35 % over in bf16-true
    and -8 % to -26 % under in bf16-mixed. With checkpointing the recomputed layer peaks
    inside its experts (the per-token bias gathers and the locals no linear saves) or, under
    autocast, at its attention's fp32 softmax (gpt_oss.recompute_bytes,
    recompute_attention_bytes), with the two eager masks in the embeddings' dtype; checkpointed
    full fine-tuning counts only the gradients autograd has made by then (the lm_head's and
    the final norm's, recompute.backward_front). Within the dense tolerance, LoRA on the
    experts (PEFT's ParamWrapper), autocast and checkpointing included."""
    import torch

    from cfgcheck.models.generic import generic_model
    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    model = {k: v.value for k, v in generic_model({**SMALL, **GPT_OSS}, "config.json", "").items()}
    trainer: dict[str, Any] = {
        "micro_batch_size": 2, "finetuning": finetuning.split("-")[0], "precision": precision,
        "attention": "eager", "optimizer": "adamw", "gradient_checkpointing": checkpointing,
    }  # fmt: skip
    if finetuning.startswith("lora"):
        kind = finetuning.split("-")[1]
        targets = GPT_OSS_TARGETS[kind]
        trainer["lora"] = {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": targets,
                           "target_parameters": GPT_OSS_PARAMS.get(kind, [])}  # fmt: skip
    run = {"model": {"name": "gpt_oss", "vocab_size": 256, **model}, "trainer": trainer,
           "data": {"max_seq_length": 256}}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(run)
    label = f"gpt_oss {finetuning} {checkpointing} {precision}: {100 * c.error:+.1f}%"
    print(label)
    assert UNDER <= c.error <= OVER, label


@pytest.mark.parametrize("precision", ["bf16-true", "bf16-mixed"])
@pytest.mark.parametrize("finetuning", ["full", "lora-qv", "lora-allparams"])
def test_gpt_oss_recomputed_softmax_matches_the_trace(finetuning: str, precision: str) -> None:
    """gpt-oss checkpointed at 512 tokens: the recomputed layer peaks at its attention's
    softmax (the masked and shifted scores beside the saved softmax output, nothing after
    the attention saved yet; gpt_oss.recompute_attention_bytes), in bf16-true as under
    autocast, as it does with gpt-oss-20b's 64 heads at any usual length. Counted as the
    experts' backward only, the estimate was 12 % to 27 % under this trace."""
    import torch

    from cfgcheck.models.generic import generic_model
    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    model = {k: v.value for k, v in generic_model({**SMALL, **GPT_OSS}, "config.json", "").items()}
    trainer: dict[str, Any] = {
        "micro_batch_size": 2, "finetuning": finetuning.split("-")[0], "precision": precision,
        "attention": "eager", "optimizer": "adamw", "gradient_checkpointing": True,
    }  # fmt: skip
    if finetuning.startswith("lora"):
        kind = finetuning.split("-")[1]
        trainer["lora"] = {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": GPT_OSS_TARGETS[kind],
                           "target_parameters": GPT_OSS_PARAMS.get(kind, [])}  # fmt: skip
    run = {"model": {"name": "gpt_oss", "vocab_size": 256, **model}, "trainer": trainer,
           "data": {"max_seq_length": 512}}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(run)
    label = f"gpt_oss {finetuning} 512 {precision}: {100 * c.error:+.1f}% at {c.traced.peak.op}"
    print(label)
    assert c.traced.peak.phase == "backward" and c.phase == "backward (recomputation)", label
    assert UNDER <= c.error <= OVER, label


@pytest.mark.parametrize(
    ("checkpointing", "precision"),
    [(True, "bf16-true"), (False, "bf16-mixed"), (True, "bf16-mixed")],
)
@pytest.mark.parametrize("finetuning", ["full", "lora"])
@pytest.mark.parametrize("family", sorted(MOE))
def test_moe_with_checkpointing_or_autocast_matches_the_trace(
    family: str, finetuning: str, checkpointing: bool, precision: str
) -> None:
    """Gradient checkpointing and mixed precision on a MoE, the mechanisms modelled
    (activations.dispatch_backward_bytes, Stack.experts, weights._uncast_experts): under
    autocast the fp32 experts run and keep fp32 (grouped_mm is not autocast-enabled) and get no
    16-bit casts; a checkpointed MoE layer is recomputed with the routed gradient expanded
    top_k-fold, the weighted outputs and the forward's locals alive, and the boolean mask is a
    layer input; the routing weights' backward then holds three routed gradients. Full
    fine-tuning holds none of the recomputed layer's gradients at that moment, nor the
    embedding's (recompute.backward_front: +1.8 % to +8.0 % when they were counted, which hid
    a routed gradient Mixtral's fp32 weighting was short of). The margin stated is the
    uncalibrated one, as for every MoE run (no GPU measurement)."""
    import torch

    from cfgcheck.memory.coverage import (
        ARCHITECTURES,
        CALIBRATED_MARGIN,
        UNCALIBRATED_MARGIN,
        coverage,
    )
    from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig
    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    run = run_of(family, finetuning)
    run["data"]["max_seq_length"] = 256
    run["trainer"].update(gradient_checkpointing=checkpointing, precision=precision)
    cov = coverage(
        ModelConfig(**run["model"]), DataConfig(**run["data"]), TrainerConfig(**run["trainer"])
    )
    # the stated margin is the calibrated one only where the family and every setting were
    # measured (the H200 rows: Mixtral, Qwen3-MoE, OLMoE in bf16-true)
    measured = run["model"].get("architecture") in ARCHITECTURES and precision == "bf16-true"
    assert cov.margin == (CALIBRATED_MARGIN if measured else UNCALIBRATED_MARGIN)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(run)
    label = f"{family} {finetuning} {checkpointing} {precision}: {100 * c.error:+.1f}%"
    print(label)
    assert UNDER <= c.error <= OVER, label


@pytest.mark.parametrize("finetuning", ["full", "lora"])
@pytest.mark.parametrize("family", ["llama", "granite", "smollm3", "cohere"])
def test_checkpointed_mlp_backward_matches_the_trace(family: str, finetuning: str) -> None:
    """The recomputed layer's MLP backward holds three intermediate-size tensors while the
    gate, activation and up outputs are kept (activations.recompute_backward_bytes): with an
    MLP 3.5 x the hidden size, a checkpointed Llama (hand-written layout) and the generically
    read SmolLM3 / Granite / Cohere were 20 to 22 % under the trace without it (LoRA). In full
    fine-tuning the down projection's backward has run by then: its weight's gradient exists
    and its saved input is freed, and none of the layer's other gradients nor the embedding's
    exist yet (recompute.full_finetuning_moments, recompute.backward_front: +9.4 % to +11.5 %
    when they were counted)."""
    import torch

    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(dense_run(family, finetuning, True, intermediate=224))
    label = f"{family} {finetuning} checkpointed, MLP 3.5 x hidden: {100 * c.error:+.1f}%"
    print(label)
    assert UNDER <= c.error <= OVER, label


@pytest.mark.parametrize("precision", ["bf16-true", "bf16-mixed"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["", "ckpt"])
@pytest.mark.parametrize("finetuning", ["full", "lora"])
@pytest.mark.parametrize("qk_norm", [False, True], ids=["", "qk-norm"])
def test_cohere_block_matches_the_trace(
    qk_norm: bool, finetuning: str, checkpointing: bool, precision: str
) -> None:
    """Cohere's parallel block with one shared ``CohereLayerNorm`` (fp32 tensor ops: two
    ``hidden - mean`` kept, the fp32 normalized tensor a trained weight multiplies, an fp32
    copy of a 16-bit weight; activations._norm_bytes / _norm_fixed), and Command R+'s per-head
    q/k norms of that kind. Read as a sequential RMSNorm block it was -8.1 % (checkpointed
    full fine-tuning, the final norm at the loss's backward) to +6.9 % (LoRA) off the trace;
    with q/k norms -3.4 % to -7.8 %."""
    import torch

    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    run = dense_run("cohere", finetuning, checkpointing, config={"use_qk_norm": qk_norm})
    run["trainer"]["precision"] = precision
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(run)
    label = f"cohere qk_norm={qk_norm} {finetuning} {checkpointing} {precision}: "
    label += f"{100 * c.error:+.1f}%"
    print(label)
    assert UNDER <= c.error <= OVER, label


# Parallel blocks with one shared norm, as the published checkpoints lay them out: Falcon-7B
# (tiiuae/falcon-7b config.json: new_decoder_architecture false, parallel_attn, multi_query,
# no alibi, no bias) and GPT-J (EleutherAI/gpt-j-6b: rotary_dim 64 of 256 per head, gelu_new,
# biased MLP); tests/test_models_recent.py checks the full-size readings and parameter counts.
PARALLEL: dict[str, dict[str, Any]] = {
    "falcon-7b": {"model_type": "falcon", "new_decoder_architecture": False,
                  "parallel_attn": True, "multi_query": True, "alibi": False, "bias": False},
    "gpt-j": {"model_type": "gptj", "rotary_dim": 8, "activation_function": "gelu_new"},
}  # fmt: skip


@pytest.mark.parametrize("precision", ["bf16-true", "bf16-mixed"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["", "ckpt"])
@pytest.mark.parametrize("finetuning", ["full", "lora"])
@pytest.mark.parametrize("name", sorted(PARALLEL))
def test_parallel_block_family_matches_the_trace(
    name: str, finetuning: str, checkpointing: bool, precision: str
) -> None:
    """Falcon-7B's sdpa runs torch's math kernel (one k/v head against n_head query heads,
    no ``enable_gqa``: fp32 q, k, v broadcast and an fp32 softmax, stack.sdpa_math; read as a
    fused kernel it was -54.6 % full, -63 % LoRA, -66 % / -70 % checkpointed); GPT-J's
    ``rotary_dim`` and ``gelu_new`` (four saved tensors) were not read (-30.9 % full, -17.3 %
    LoRA). One ``input_layernorm`` / ``ln_1`` output feeds attention and MLP, kept once.
    Checkpointed, Falcon's layer inputs include its boolean sdpa mask, built padded or not
    (activations.checkpoint_mask_bytes; as an eager fp32 mask +5.9 % under autocast)."""
    import torch

    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    config = PARALLEL[name]
    run = dense_run(config["model_type"], finetuning, checkpointing, config=config)
    run["trainer"]["precision"] = precision
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(run)
    label = f"{name} {finetuning} ckpt={checkpointing} {precision}: {100 * c.error:+.1f}%"
    print(label)
    assert UNDER <= c.error <= OVER, label


MLA: dict[str, dict[str, Any]] = {
    "deepseek_v2": {"model_type": "deepseek_v2", "num_key_value_heads": 4, "kv_lora_rank": 32,
                    "q_lora_rank": None, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16,
                    "v_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2,
                    "moe_intermediate_size": 48, "n_shared_experts": 1,
                    "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
                    "topk_method": "greedy"},
    "deepseek_v3": {"model_type": "deepseek_v3", "num_key_value_heads": 4, "kv_lora_rank": 32,
                    "q_lora_rank": 48, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16,
                    "v_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2,
                    "moe_intermediate_size": 48, "n_shared_experts": 1,
                    "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1},
}  # fmt: skip


# LoRA targets: the output projection alone, and every attention projection (the latent
# q_b_proj / kv_b_proj read the latent norms' outputs, not the attention input)
MLA_TARGETS = {
    "o_proj": ["o_proj"],
    "attention": ["q_a_proj", "q_b_proj", "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"],
    # PEFT converts these to LoRA on the fused experts (lora.ParamWrapper, traced.py
    # PEFT_MOE_NAMES); the shared experts' linears of the same names are then not adapted
    "experts": ["q_a_proj", "q_b_proj", "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj",
                "gate_proj", "up_proj", "down_proj"],
}  # fmt: skip


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("precision", ["bf16-true", "bf16-mixed"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["", "ckpt"])
@pytest.mark.parametrize("finetuning", ["full", "lora-o_proj", "lora-attention", "lora-experts"])
@pytest.mark.parametrize("family", sorted(MLA))
def test_mla_step_matches_the_trace(
    family: str, finetuning: str, checkpointing: bool, precision: str, attention: str
) -> None:
    """DeepSeek-V2 (plain q_proj) and V3 (q LoRA) with multi-head latent attention, the
    group-limited router, shared experts and a dense first layer (cfgcheck/memory/mla.py),
    LoRA on the attention and on the fused experts (PEFT's ParamWrapper keeps the
    parametrized expert weights and the experts' inputs: activations._expert_lora_weights;
    -7 % to -10 % under without them), sdpa and eager attention, with and without
    checkpointing, bf16 and autocast: within the dense families' tolerance (-1.6 % to +3.8 %).
    Eager attention peaks at the softmax's backward (attention_backward.py: 11-19 % under
    with checkpointing, 5-6 % without, before it was counted); with checkpointing under
    autocast the first norm's fp32 input is the checkpoint itself and the shared experts,
    which run after the routed ones, are not alive at the routed experts' moments
    (activations.checkpoint_norm_input, mla.shared_experts_last: 7-10 % over before). Full
    fine-tuning with checkpointing keeps the generic over-count of the recomputed layer's
    own gradients and the embedding's, counted early (estimate._backward_front: up to +8 %).
    ``v_head_dim`` equals ``qk_nope + qk_rope`` here: torch's CPU flash kernel needs one
    head dim for q, k and v and otherwise runs the fp32 math path, which CUDA's
    memory-efficient kernel does not. The margin stated is the uncalibrated one (no GPU
    measurement), and the notes say MLA is traced, not measured."""
    import torch

    from cfgcheck.memory.coverage import CALIBRATED_MARGIN, UNCALIBRATED_MARGIN
    from cfgcheck.memory.estimate import estimate
    from cfgcheck.models.generic import generic_model
    from cfgcheck.schema import DataConfig, ModelConfig, TrainerConfig
    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    data = {**SMALL, **MLA[family], "v_head_dim": 24}
    model = {k: v.value for k, v in generic_model(data, "config.json", "").items()}
    trainer: dict[str, Any] = {
        "micro_batch_size": 2, "finetuning": finetuning.split("-")[0], "precision": precision,
        "attention": attention, "optimizer": "adamw", "gradient_checkpointing": checkpointing,
    }  # fmt: skip
    if finetuning.startswith("lora"):
        targets = MLA_TARGETS[finetuning.split("-")[1]]
        targets = [x for x in targets if (x == "q_proj") == (family == "deepseek_v2") or
                   x not in ("q_proj", "q_a_proj", "q_b_proj")]  # fmt: skip
        trainer["lora"] = {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": targets}
    run = {"model": {"name": family, "vocab_size": 256, **model}, "trainer": trainer,
           "data": {"max_seq_length": 256}}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(run)
    est = estimate(
        ModelConfig(**run["model"]), DataConfig(**run["data"]), TrainerConfig(**run["trainer"])
    )
    # DeepSeek-V2 (V2-Lite LoRA measured on the H200) in bf16-true and sdpa is calibrated;
    # DeepSeek-V3, mixed precision or eager attention are not
    calibrated = family == "deepseek_v2" and precision == "bf16-true"
    assert est.margin == (CALIBRATED_MARGIN if calibrated else UNCALIBRATED_MARGIN)
    if family == "deepseek_v3":
        assert any("latent attention" in n and "traced on CPU" in n for n in est.notes)
    assert not any("not modelled" in n for n in est.notes)
    label = f"{family} {finetuning} {checkpointing} {precision} {attention}: {100 * c.error:+.1f}%"
    print(label)
    assert UNDER <= c.error <= OVER, label


LLAMA4: dict[str, Any] = {
    "model_type": "llama4_text", "num_local_experts": 8, "num_experts_per_tok": 1,
    "head_dim": 16, "intermediate_size": 48, "intermediate_size_mlp": 96,
    "attention_chunk_size": 64, "no_rope_layers": [1, 0], "moe_layers": [0, 1],
    "layer_types": ["chunked_attention", "full_attention"], "interleave_moe_layer_step": 1,
}  # fmt: skip


@pytest.mark.parametrize("precision", ["bf16-true", "bf16-mixed"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["", "ckpt"])
@pytest.mark.parametrize("finetuning", ["full", "lora"])
def test_llama4_step_matches_the_trace(
    finetuning: str, checkpointing: bool, precision: str
) -> None:
    """Llama 4 text (cfgcheck/memory/llama4.py): transformers runs every token through every
    expert (``hidden_states.repeat(n_expert, 1)`` weighted by sigmoid scores, ``torch.bmm``
    over all experts), so the routed activations scale with ``num_local_experts``: counted as
    top-k routing the estimate was 33 % to 50 % under this trace. The recomputed layer peaks
    at its experts' second bmm or at the end of its shared expert, with the expanded
    gradient, routed_in and the decoder's locals alive (llama4.recompute_bytes); the shared
    expert is ``intermediate_size`` wide and the chunked layers get their own mask. The
    gradients alive at the recomputation match the trace byte for byte (the layers' after the
    recomputed one, the lm_head's and the final norm's, recompute.backward_front)."""
    import torch

    from cfgcheck.models.generic import generic_model
    from tests.alloc_tracer import compare

    torch.set_num_threads(1)
    model = {k: v.value for k, v in generic_model({**SMALL, **LLAMA4}, "config.json", "").items()}
    trainer: dict[str, Any] = {
        "micro_batch_size": 2, "finetuning": finetuning, "precision": precision,
        "attention": "sdpa", "optimizer": "adamw", "gradient_checkpointing": checkpointing,
    }  # fmt: skip
    if finetuning == "lora":
        trainer["lora"] = {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": ["q_proj", "v_proj"]}
    run = {"model": {"name": "llama4", "vocab_size": 256, **model}, "trainer": trainer,
           "data": {"max_seq_length": 256}}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(run)
    label = f"llama4 {finetuning} {checkpointing} {precision}: {100 * c.error:+.1f}%"
    print(label)
    assert UNDER <= c.error <= OVER, label
