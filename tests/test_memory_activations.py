"""The activation formula against the tensors real transformers code saves for backward.

A tiny random Llama (GQA, SwiGLU, RMSNorm) runs forward on CPU under
``torch.autograd.graph.saved_tensors_hooks``; the unique storages it saves (parameters
excluded) are summed. Per layer, that must equal cfgcheck's formula to the byte: the
difference between 3 and 2 layers removes what is saved once per model (token ids, RoPE
tables, the padding mask).
"""

from __future__ import annotations

import pytest

from cfgcheck.memory import activations as act
from cfgcheck.schema import ModelConfig, TrainerConfig
from tests.saved_tensors import saved_storages

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def shape(n_layer: int) -> ModelConfig:
    return ModelConfig(
        name="tiny",
        block_size=256,
        vocab_size=128,
        n_layer=n_layer,
        n_embd=64,
        n_head=4,
        n_query_groups=2,
        head_size=16,
        intermediate_size=176,
    )


def saved_bytes(m: ModelConfig, attention: str, full: bool, dtype: object, padded: bool) -> int:
    from cfgcheck.memory.hf_shapes import hf_config

    cfg = hf_config(m)
    cfg._attn_implementation = attention
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(dtype)
    if not full:  # a frozen base: only the embedding output needs a gradient
        for p in model.parameters():
            p.requires_grad_(False)
        model.get_input_embeddings().weight.requires_grad_(True)
    ids = torch.randint(0, 128, (2, 32))
    mask = torch.ones(2, 32, dtype=torch.long)
    if padded:
        mask[0, -3:] = 0  # right padding: sdpa gets a mask, as in padded training batches
    with saved_storages(model) as seen:
        model(input_ids=ids, attention_mask=mask)
    return sum(seen.values())


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("full", [True, False], ids=["full", "frozen"])
@pytest.mark.parametrize("precision", ["bf16-true", "32-true"])
@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_per_layer_bytes_equal_transformers(
    attention: str, full: bool, precision: str, padded: bool
) -> None:
    dtype = torch.bfloat16 if precision == "bf16-true" else torch.float32
    t = TrainerConfig(
        micro_batch_size=2,
        precision=precision,  # type: ignore[arg-type]
        finetuning="full" if full else "lora",
        attention=attention,  # type: ignore[arg-type]
        lora={"rank": None, "targets": []},  # type: ignore[arg-type]
    )
    measured = saved_bytes(shape(3), attention, full, dtype, padded) - saved_bytes(
        shape(2), attention, full, dtype, padded
    )
    three, two = (act.activation_bytes(shape(n), t, 2, 32, masked=padded) for n in (3, 2))
    formula = three - two
    assert measured == formula


# --- the stack's conventions: PEFT adapters, Phi's gelu_new MLP, packed rows -------------------

ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PHI = {
    "mlp": "gelu",
    "norm": "layernorm",
    "bias": True,
    "shared_attention_norm": True,
    "parallel_residual": True,
    "lm_head_bias": True,
    "rotary_fraction": 0.4,
    "n_query_groups": 4,
    "intermediate_size": 256,
}
PHI_NAMES = {"o_proj": "dense", "up_proj": "fc1", "down_proj": "fc2"}


def peft_saved_bytes(
    m: ModelConfig, attention: str, targets: list[str], packed: bool = False
) -> int:
    """Saved bytes of a real PEFT LoRA model (peft's defaults: fp32 adapters), dropout 0 (CPU
    dropout keeps an fp32 noise tensor where CUDA's fused kernel keeps a 1-byte mask)."""
    peft = pytest.importorskip("peft")
    from cfgcheck.memory.hf_shapes import hf_config

    cfg = hf_config(m)
    cfg._attn_implementation = attention
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    model.config.use_cache = False  # as trainers set it (and packing detection needs it)
    names = [PHI_NAMES.get(x, x) for x in targets] if m.mlp == "gelu" else targets
    lora = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=names)
    model = peft.get_peft_model(model, lora)
    ids = torch.randint(0, 128, (2, 32))
    kwargs: dict[str, torch.Tensor] = {"input_ids": ids}
    if packed:  # four samples per row, positions restarting (the packed collator's layout)
        kwargs["position_ids"] = torch.arange(32).remainder(8).unsqueeze(0).expand(2, 32)
    else:
        mask = torch.ones(2, 32, dtype=torch.long)
        mask[0, -3:] = 0
        kwargs["attention_mask"] = mask
    with saved_storages(model) as seen:
        model(**kwargs)
    return sum(seen.values())


def lora_trainer(targets: list[str], attention: str) -> TrainerConfig:
    return TrainerConfig(
        micro_batch_size=2,
        precision="bf16-true",
        finetuning="lora",
        attention=attention,  # type: ignore[arg-type]
        lora={"rank": 8, "targets": targets, "dropout": 0.0},  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("targets", [["q_proj", "v_proj"], ALL_TARGETS], ids=["qv", "all"])
def test_peft_lora_layer_bytes_equal_peft(attention: str, targets: list[str]) -> None:
    """fp32 adapters, each casting its input to fp32 (a copy per adapter)."""
    t = lora_trainer(targets, attention)
    measured = peft_saved_bytes(shape(3), attention, targets) - peft_saved_bytes(
        shape(2), attention, targets
    )
    formula = act.activation_bytes(shape(3), t, 2, 32) - act.activation_bytes(shape(2), t, 2, 32)
    assert measured == formula


def test_packed_rows_pay_like_a_padding_mask() -> None:
    """transformers turns restarting position_ids into a block-diagonal sdpa mask."""
    t = lora_trainer(["q_proj", "v_proj"], "sdpa")
    measured = peft_saved_bytes(shape(3), "sdpa", ["q_proj", "v_proj"], packed=True)
    measured -= peft_saved_bytes(shape(2), "sdpa", ["q_proj", "v_proj"], packed=True)
    three, two = (act.activation_bytes(shape(n), t, 2, 32, masked=True) for n in (3, 2))
    assert measured == three - two


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize(
    "targets", [["q_proj", "v_proj"], ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj"]]
)
def test_phi_gelu_new_parallel_block_equals_transformers(
    attention: str, targets: list[str]
) -> None:
    """Phi: gelu_new keeps four intermediate-size tensors, one shared LayerNorm, partial
    rotary. CPU LayerNorm keeps its two statistics in bf16, CUDA in fp32: 4 bytes per token."""
    m3, m2 = shape(3).model_copy(update=PHI), shape(2).model_copy(update=PHI)
    m3, m2 = (ModelConfig.model_validate(x.model_dump()) for x in (m3, m2))
    # PEFT resolves the names on Phi's modules (dense, fc1), and so does the estimate
    t = lora_trainer([PHI_NAMES.get(x, x) for x in targets], attention)
    measured = peft_saved_bytes(m3, attention, targets) - peft_saved_bytes(m2, attention, targets)
    formula = act.activation_bytes(m3, t, 2, 32) - act.activation_bytes(m2, t, 2, 32)
    assert measured == formula - 4 * 2 * 32


def autocast_saved_bytes(m: ModelConfig, attention: str, targets: list[str]) -> int:
    """Saved bytes (weight casts included) of fp32 weights under bf16 autocast: PEFT LoRA on
    ``targets``, or full fine-tuning when there are none."""
    from cfgcheck.memory.hf_shapes import hf_config

    cfg = hf_config(m)
    cfg._attn_implementation = attention
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float()
    model.config.use_cache = False
    if targets:
        peft = pytest.importorskip("peft")
        lora = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets)
        model = peft.get_peft_model(model, lora)
    ids = torch.randint(0, 128, (2, 32))
    mask = torch.ones(2, 32, dtype=torch.long)
    mask[0, -3:] = 0
    with saved_storages(model) as seen, torch.autocast("cpu", dtype=torch.bfloat16):
        model(input_ids=ids, attention_mask=mask)
    return sum(seen.values())


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize(
    "targets", [[], ["q_proj", "v_proj"], ALL_TARGETS], ids=["full", "qv", "all"]
)
def test_mixed_precision_layer_bytes_equal_autocast(attention: str, targets: list[str]) -> None:
    """bf16-mixed: fp32 residual stream and norm outputs, a 16-bit cast per linear that trains
    and per adapter, and the 16-bit weight casts autograd keeps (estimate's autocast copies)."""
    from cfgcheck.memory import weights

    t = TrainerConfig(
        micro_batch_size=2,
        precision="bf16-mixed",
        finetuning="lora" if targets else "full",
        attention=attention,  # type: ignore[arg-type]
        lora={"rank": 8, "targets": targets, "dropout": 0.0},  # type: ignore[arg-type]
    )
    measured = autocast_saved_bytes(shape(3), attention, targets)
    measured -= autocast_saved_bytes(shape(2), attention, targets)
    formula = sum(
        sign * (act.activation_bytes(shape(n), t, 2, 32) + weights.autocast_copy_bytes(shape(n), t))
        for n, sign in ((3, 1), (2, -1))
    )
    assert measured == formula


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_gemma_norms_keep_fp32_outputs_when_they_train(attention: str) -> None:
    """GemmaRMSNorm multiplies the weight in fp32 and casts after: a trained norm keeps the
    fp32 normalized tensor (Llama's keeps it in the compute dtype)."""
    gemma = {"mlp": "geglu", "architecture": "gemma"}
    m3, m2 = (ModelConfig.model_validate(shape(n).model_dump() | gemma) for n in (3, 2))
    t = TrainerConfig(
        micro_batch_size=2,
        precision="bf16-true",
        finetuning="full",
        attention=attention,  # type: ignore[arg-type]
    )
    measured = saved_bytes(m3, attention, True, torch.bfloat16, True)
    measured -= saved_bytes(m2, attention, True, torch.bfloat16, True)
    # the formula includes, per layer and not per token, the fp32 (1 + weight) of each norm
    formula = act.activation_bytes(m3, t, 2, 32) - act.activation_bytes(m2, t, 2, 32)
    assert measured == formula
