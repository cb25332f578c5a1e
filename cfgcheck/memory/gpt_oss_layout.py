"""Which gpt-oss runs :mod:`cfgcheck.memory.gpt_oss_ops` generates op by op (:func:`covered`:
PEFT LoRA on the attention projections, and on the fused experts through ``target_parameters``
when not checkpointed; eager attention, 16-bit weights, the published alternating sliding and
full layers) and the experts' sizes of such a run (:func:`experts`)."""

from __future__ import annotations

from cfgcheck.memory import param_wrapper
from cfgcheck.memory.gpt_oss_experts import Experts
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def covered(m: ModelConfig, t: TrainerConfig) -> bool:
    """The gpt-oss runs generated op by op (see the module docstring)."""
    from cfgcheck.memory.modules import architecture_of, traced

    tr = traced(m) if m.n_expert else None
    if tr is None or architecture_of(m) != "gpt_oss" or len(tr.experts) != m.n_layer:
        return False
    first = tr.experts[0]
    hf = m.hf_config or {}
    types = hf.get("layer_types") or []
    alternating = [("sliding_attention", "full_attention")[i % 2] for i in range(m.n_layer)]
    return (
        all(
            (e.n_expert, e.top_k, e.width) == (first.n_expert, first.top_k, first.width)
            for e in tr.experts
        )
        and list(types[: m.n_layer]) == alternating
        and t.finetuning == "lora"
        and set(t.lora.targets) <= set(ATTENTION)
        # LoRA on the fused experts (PEFT's ParamWrapper) not checkpointed
        and param_wrapper.adapted_experts(t) is not None
        and not (t.lora.target_parameters and t.gradient_checkpointing)
        and t.loss_chunking == "none"
        and t.attention == "eager"
        and t.precision in ("bf16-true", "16-true")
        and not hf.get("output_router_logits")
        and not m.tie_embeddings
    )


def experts(m: ModelConfig, t: TrainerConfig) -> Experts | None:
    """The experts' sizes of a covered run (None otherwise)."""
    from cfgcheck.memory.modules import traced

    tr = traced(m)
    if not covered(m, t) or tr is None:
        return None
    e = tr.experts[0]
    adapted = param_wrapper.adapted_experts(t) or ()
    return Experts(e.n_expert, e.top_k, e.width, adapted, (t.lora.rank or 0) if adapted else 0)
