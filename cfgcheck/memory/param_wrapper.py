"""PEFT's ``ParamWrapper`` on a mixture-of-experts' fused expert parameters
(``LoraConfig(target_parameters=[...])``), op by op for :mod:`cfgcheck.memory.events_moe`
(peft 0.21.2 ``tuners/lora/layer.py``, as installed and traced; tests/test_memory_events_moe.py):

* the factors: ``lora_A`` ``(rank * n_expert) x in`` and ``lora_B`` ``out x (rank *
  n_expert)`` per adapted parameter (``ParamWrapper.update_layer``), fp32;
* each forward (``ParamWrapper.forward`` -> ``_activate_lora``) registers a parametrization
  per adapted parameter (``down_proj`` first, then ``gate_up_proj``): the factors viewed as
  batched ``lhs`` (out side) and ``rhs`` (in side) and cast to the weights' dtype (kept
  until the backward), and ``register_parametrization`` evaluates it once
  (``torch/nn/utils/parametrize.py``): a merged weight ``baddbmm(W, lhs, rhs,
  alpha=scaling)`` (``_LoraFactorsProxy.forward``) made and dropped; every read of the
  parameter by the experts makes it again, kept by the grouped linear with its input;
* the backward: the grouped linear's weight gradient (the merged weight's size), then
  ``baddbmm``'s (``bmm`` and the scaling for lhs and rhs), the casts' ``ToCopyBackward0``
  to fp32 (the last made first); lora_B's gradient, of a permuted view, copied contiguous
  for ``AccumulateGrad``; lora_A's accumulated after lora_B's;
* under non-reentrant checkpointing the forward drops the casts and merged weights as
  ``ParamWrapper.forward`` returns, the recomputation makes them again, and each backward node
  frees its recomputed saved tensors before its inputs (events_moe.py).
"""

from __future__ import annotations

from cfgcheck.memory.layer_ops import Ops
from cfgcheck.schema.trainer import TrainerConfig

# the fused expert parameters generated (every layer's), in the order ParamWrapper registers
# their parametrizations on each forward
EXPERT_PARAMS = ("down_proj", "gate_up_proj")

Shapes = dict[str, tuple[int, int]]  # parameter -> (out, in) of one expert's matrix


def adapted_experts(t: TrainerConfig) -> tuple[str, ...] | None:
    """The fused expert parameters ``target_parameters`` adapts, in :data:`EXPERT_PARAMS`
    order, or None when an entry is not one generated (``mlp.experts.gate_up_proj`` /
    ``mlp.experts.down_proj`` on every layer)."""
    names = []
    for entry in t.lora.target_parameters:
        name = entry.removeprefix("mlp.experts.")
        if name == entry or name not in EXPERT_PARAMS:
            return None
        names.append(name)
    return tuple(n for n in EXPERT_PARAMS if n in names)


def sizes(names: tuple[str, ...], r: int, shapes: Shapes) -> list[tuple[str, int, int]]:
    """(name, lora_A elements, lora_B elements) of each adapted parameter in the order the
    step's parameters list them; ``r``: rank x experts."""
    return [(n, r * shapes[n][1], shapes[n][0] * r) for n in reversed(names)]


def register(
    o: Ops, names: tuple[str, ...], r: int, n_expert: int, shapes: Shapes
) -> dict[str, tuple[int, int]]:
    """The parametrizations registered: per parameter its factors' casts (out side, in
    side), kept; the merged weight evaluated once and dropped."""
    casts: dict[str, tuple[int, int]] = {}
    for name in names:
        out_f, in_f = shapes[name]
        casts[name] = (o.alloc(o.p * r * out_f), o.alloc(o.p * r * in_f))
        o.free(o.alloc(o.p * n_expert * out_f * in_f))
    return casts


def baddbmm_backward(
    o: Ops, r: int, shape: tuple[int, int], dw: int, casts: tuple[int, int]
) -> tuple[int, int]:
    """``baddbmm``'s backward for the merged weight's gradient ``dw`` (freed with the saved
    casts): lhs's and rhs's gradients (``bmm``, then times ``alpha``). Returns them (out side,
    in side)."""
    out_f, in_f = shape
    mm = o.alloc(o.p * r * out_f)
    g_out = o.alloc(o.p * r * out_f)
    o.free(mm)
    mm = o.alloc(o.p * r * in_f)
    g_in = o.alloc(o.p * r * in_f)
    o.free(mm)
    # then its saved casts and its input, the gradient (recomputed casts first, last first)
    o.free(*((casts[1], casts[0], dw) if o.unpacked else (dw, *casts)))
    return g_out, g_in


def factor_grads(
    o: Ops,
    names: tuple[str, ...],
    grads: dict[str, tuple[int, int]],
    weights: dict[str, tuple[tuple[int, int], ...]],
) -> None:
    """The casts' ``ToCopyBackward0``, the last made first: each factor's fp32 gradient into
    its ``.grad`` (``weights["experts." + name]``: lora_A's and lora_B's (id, bytes));
    ``grads``: the factors' gradients in the weights' dtype (out side, in side)."""
    for name in reversed(names):
        (a_id, a_nb), (b_id, b_nb) = weights["experts." + name]
        out_g, in_g = grads[name]
        ga = o.alloc(a_nb)  # lora_A's gradient, fp32
        o.free(in_g)
        gb = o.alloc(b_nb)
        o.free(out_g)
        c = o.alloc(b_nb)  # a permuted view's gradient: made contiguous for AccumulateGrad
        o.free(gb)
        o.grad(b_id, c)
        # lora_A's AccumulateGrad waits behind its view's node, which comes after lora_B's
        # (CPU-traced: with accumulation its gradient is freed after lora_B's)
        o.grad(a_id, ga)
