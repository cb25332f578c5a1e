"""Which mixture-of-experts runs :mod:`cfgcheck.memory.events_moe` generates op by op
(:func:`covered`), the attention linears' kinds (:func:`kinds`), the factors PEFT's
``ParamWrapper`` adds per layer (:func:`adapter_sizes`) and a layer's parameters in module
order (:func:`layer_params`): what :func:`cfgcheck.memory.events.step_events` reads of the
model before the step runs."""

from __future__ import annotations

from cfgcheck.memory import layer_ops, param_wrapper
from cfgcheck.memory.events_moe import Moe
from cfgcheck.memory.modules import architecture_of, traced
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

# the routers events_moe generates: softmax over every expert in fp32, top-k, the top-k
# renormalised (Qwen3-MoE: ``norm_topk_prob``), Qwen3-MoE's cast back to the logits' dtype
FAMILIES = frozenset({"mixtral", "qwen3_moe", "olmoe"})
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def kinds(m: ModelConfig, t: TrainerConfig) -> dict[str, str] | None:
    """The attention linears' kinds (:func:`cfgcheck.memory.layer_ops.kinds`) of a MoE run,
    PEFT's ``target_parameters`` on the experts aside
    (:func:`cfgcheck.memory.param_wrapper.adapted_experts`)."""
    if not m.n_expert or param_wrapper.adapted_experts(t) is None:
        return None
    lora = t.lora.model_copy(update={"target_parameters": []})
    return layer_ops.kinds(m, t.model_copy(update={"lora": lora}))


def covered(m: ModelConfig, t: TrainerConfig) -> bool:
    """The MoE runs :mod:`cfgcheck.memory.events_moe` generates op by op (see its
    docstring)."""
    tr = traced(m) if m.n_expert else None
    if tr is None or len(tr.experts) != m.n_layer or architecture_of(m) not in FAMILIES:
        return False
    first = tr.experts[0]
    if any((e.n_expert, e.top_k, e.width) != (first.n_expert, first.top_k, first.width)
           for e in tr.experts):  # fmt: skip
        return False  # layers of their own (not in the families generated)
    k = kinds(m, t)
    hf = m.hf_config or {}
    return (
        t.finetuning in ("lora", "full")
        and k is not None
        and t.loss_chunking == "none"
        and t.attention == "sdpa"
        and t.precision in ("bf16-true", "16-true")
        and not hf.get("output_router_logits")
        and (architecture_of(m) != "qwen3_moe" or bool(hf.get("norm_topk_prob")))
        and m.sliding_window_size is None
        and not m.tie_embeddings
        and not m.attn_bias
        # LoRA's target_modules on attention projections only: PEFT maps expert names
        # (w1, gate_proj ...) onto the fused experts, and all-linear takes the router too
        and (t.finetuning == "full" or set(t.lora.targets) <= set(ATTENTION))
    )


def adapter_sizes(m: ModelConfig, t: TrainerConfig) -> list[tuple[str, int, int]]:
    """Per layer, PEFT's ``ParamWrapper`` factors of each adapted expert parameter, in the
    order the step's parameters list them (:func:`cfgcheck.memory.param_wrapper.sizes`)."""
    names = param_wrapper.adapted_experts(t) or ()
    if not names:
        return []
    moe = Moe.of(m, t)
    return param_wrapper.sizes(names, moe.rank * moe.n_expert, moe.shapes(m.n_embd))


def layer_params(m: ModelConfig) -> list[tuple[str, int]]:
    """(name, elements) of each parameter of a decoder layer in module order (the traced
    model's ``param_shapes``, layer 0): ``q_proj`` ... ``o_proj``, Qwen3's ``q_norm`` and
    ``k_norm``, the ``router`` (``mlp.gate``), ``gate_up_proj``, ``down_proj``, the two
    norms."""
    tr = traced(m)
    if tr is None or not tr.experts:
        return []
    prefix = tr.layers + ".0."
    out = []
    for name, shape in tr.param_shapes.items():
        if name.startswith(prefix):
            short = name[len(prefix) :].removesuffix(".weight").rsplit(".", 1)[-1]
            n = 1
            for x in shape:
                n *= x
            out.append(("router" if short == "gate" else short, n))
    return out
