"""DeepSeek's multi-head latent attention (cfgcheck/memory/mla.py) against what autograd saves in
transformers' own ``DeepseekV2Attention`` / ``DeepseekV3Attention`` forward on CPU (a tiny
random-weight layer, no training step: the whole step is traced in
tests/test_memory_tracer_moe.py, marked slow), and the margin the estimate states."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import requires

BASE: dict[str, Any] = {
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256,
    "max_position_embeddings": 256, "kv_lora_rank": 32, "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16, "v_head_dim": 24, "n_routed_experts": 8,
    "num_experts_per_tok": 2, "moe_intermediate_size": 48, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
    "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
}  # fmt: skip
FAMILIES = {
    "deepseek_v2": {"model_type": "deepseek_v2", "q_lora_rank": None, "topk_method": "greedy"},
    "deepseek_v3": {"model_type": "deepseek_v3", "q_lora_rank": 48},
}


def model_config(family: str) -> Any:
    from cfgcheck.models.generic import generic_model
    from cfgcheck.schema import ModelConfig

    data = {**BASE, **FAMILIES[family]}
    values = {k: v.value for k, v in generic_model(data, "config.json", "").items()}
    return ModelConfig(name=family, vocab_size=256, **values)


def saved_per_row(family: str, kernel: str, rows: int, seq: int) -> int:
    """Bytes autograd saves in one attention forward (bf16, every weight trained, the input
    and the weights excluded) for ``rows`` padded rows."""
    import torch
    import transformers
    from transformers.masking_utils import create_causal_mask
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from tests.saved_tensors import saved_storages

    cfg = CONFIG_MAPPING[family].from_dict({**BASE, **FAMILIES[family]})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        cfg, dtype=torch.bfloat16, attn_implementation=kernel
    )
    model.train()
    attn = model.model.layers[0].self_attn
    x = torch.randn(rows, seq, 64, dtype=torch.bfloat16, requires_grad=True)
    pos = torch.arange(seq).unsqueeze(0)
    mask = torch.ones(rows, seq, dtype=torch.long)
    mask[0, -4:] = 0
    causal = create_causal_mask(
        config=model.config, inputs_embeds=x, attention_mask=mask, cache=None, position_ids=pos
    )
    with saved_storages(model) as seen:
        attn(
            hidden_states=x,
            attention_mask=causal,
            position_embeddings=model.model.rotary_emb(x, pos),
        )
    return sum(n for ptr, n in seen.items() if ptr != x.untyped_storage().data_ptr())


@requires("torch", "transformers")
@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_latent_attention_bytes_equal_transformers(family: str, kernel: str) -> None:
    """One more row of the batch adds, per token: the latent norms (fp32 input, statistic,
    normalized tensor), the latent inputs of q_b_proj / kv_b_proj, the kernel's q, k, v (the
    whole kv_b output for sdpa, a copy of v for eager) and output, and o_proj's input; per
    key position the sdpa mask in bf16 or eager's fp32 softmax and its bf16 copy. The
    per-position cos/sin tables cancel out."""
    from cfgcheck.memory import mla

    m = model_config(family)
    x = mla.mla(m)
    assert x is not None
    seq, p, a = 32, 2, m.n_head
    measured = saved_per_row(family, kernel, 3, seq) - saved_per_row(family, kernel, 2, seq)
    core, scores = mla.kernel_bytes(x, a, p, kernel, one_row=False)
    if kernel == "sdpa":
        scores = p  # the mask, converted to the compute dtype
    per_token = mla.latent_norms(x, p, True) + p * (x.q_lora_rank + x.kv_lora_rank)
    per_token += core + p * a * x.v  # o_proj's input
    assert measured == seq * (per_token + scores * seq)


@requires("torch", "transformers")
def test_mla_is_counted_not_given_the_unmodelled_margin() -> None:
    """MLA is counted: DeepSeek-V2 (DeepSeek-V2-Lite measured on an H200) states the
    calibrated margin; DeepSeek-V3, never measured, the usual margin for what no GPU measured,
    saying MLA is traced on CPU, not that it is not modelled."""
    from cfgcheck.memory.coverage import CALIBRATED_MARGIN, UNCALIBRATED_MARGIN
    from cfgcheck.memory.estimate import estimate
    from cfgcheck.schema import DataConfig, TrainerConfig

    for family in FAMILIES:
        t = TrainerConfig(micro_batch_size=2, finetuning="full", precision="bf16-true")
        est = estimate(model_config(family), DataConfig(max_seq_length=256), t)
        assert not any("not modelled" in n for n in est.notes)
        if family == "deepseek_v2":
            assert est.margin == CALIBRATED_MARGIN
            continue
        assert est.margin == UNCALIBRATED_MARGIN
        assert any("latent attention" in n and "traced on CPU" in n for n in est.notes)
