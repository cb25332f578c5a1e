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
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    ids = torch.randint(0, 128, (2, 32))
    mask = torch.ones(2, 32, dtype=torch.long)
    if padded:
        mask[0, -3:] = 0  # right padding: sdpa gets a mask, as in padded training batches
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
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
