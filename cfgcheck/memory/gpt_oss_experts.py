"""gpt-oss's mixture-of-experts block op by op (:func:`experts_forward`,
:func:`experts_backward`), for :mod:`cfgcheck.memory.gpt_oss_ops`' layer; the experts and the
router frozen. Sources (transformers 5.24; line numbers of those files):

* ``GptOssTopKRouter.forward`` (l.126-131): the biased linear, ``topk`` then ``softmax`` over
  the k values (their dtype); ``integrations/moe.py`` ``grouped_mm_experts_forward``
  (l.424-530): ``sort``, the routed copies, the bias gathers
  (``self.gate_up_proj_bias[expert_ids_g]``, l.480, alive until reassigned at l.508),
  ``_grouped_mm``, ``GptOssExperts._apply_gate`` (l.82-88: two clamps, ``gate * alpha``,
  ``sigmoid``, the product, ``up + 1``, the gated output; the clamped ``up`` a local), the
  down projection, the weighting, the un-permutation and the sum.
* the backward node by node in the order autograd runs them (highest sequence number first;
  saved tensors released after each node, recomputed ones with the node's apply, before its
  inputs): the sum's expand, the un-permutation's index (under checkpointing the first to
  unpack: the layer recomputed), the weighting, the down projection, ``(up + 1) * glu``,
  ``gate * sigmoid``, the sigmoid, ``gate * alpha``, the two clamps (``ge``/``le`` masks,
  ``where``), the strided slices' zeros, their sum, the up projection, the gathers, the
  router's softmax, ``topk``'s scatter and the linear.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cfgcheck.memory import param_wrapper
from cfgcheck.memory.layer_ops import Ops


@dataclass(frozen=True)
class Experts:
    """E experts, k per token, W one expert's width; the fused parameters PEFT's
    ``ParamWrapper`` adapts (``target_parameters``) and their LoRA rank."""

    n_expert: int
    top_k: int
    width: int
    adapted: tuple[str, ...] = ()
    rank: int = 0

    def shapes(self, h: int) -> dict[str, tuple[int, int]]:
        """One expert's stored matrix of each fused parameter, gpt-oss's transposed layout
        (``is_transposed``: experts x in x out); PEFT's ``lhs`` (lora_A's transpose) is the
        first dimension's side, cast first (:func:`cfgcheck.memory.param_wrapper.register`)."""
        return {"gate_up_proj": (h, 2 * self.width), "down_proj": (self.width, h)}


def experts_forward(o: Ops, x: int, ex: Experts, stop: bool = False) -> dict[str, int]:
    """``GptOssMLP.forward``: the router, then ``grouped_mm_experts_forward`` with the
    experts' biases and the clamped SwiGLU; returns the kept tensors and ``out``. Under
    checkpointing (``o.saving`` False) each goes as Python drops it; ``stop``: the
    recomputation ends where the un-permutation's index packs ``inv_perm``, its last saved
    tensor (its output never made), the function's locals going with the exception."""
    keep = o.saving
    p, t, e, k, w = o.p, o.tokens, ex.n_expert, ex.top_k, ex.width
    h, s = o.h // t, t * k
    logits = o.alloc(p * t * e)  # F.linear(hidden_states, weight, bias)
    top_v, top_i = o.alloc(p * s), o.alloc(8 * s)
    scores = o.alloc(p * s)  # softmax over the k values, their dtype
    o.free(top_v)
    # ParamWrapper.forward: each adapted parameter's parametrization registered
    r, shapes = ex.rank * e, ex.shapes(h)
    casts = param_wrapper.register(o, ex.adapted, r, e, shapes)
    merged: dict[str, int] = {}
    sort_v, perm = o.alloc(8 * s), o.alloc(8 * s)
    token_idx = o.alloc(8 * s)  # perm // top_k
    routed = o.alloc(p * s * h)
    if not keep:
        o.free(token_idx)
    weights_g = o.alloc(p * s)
    hist_in = o.alloc(4 * s)
    hist = o.alloc(4 * e)
    offsets = o.alloc(4 * e)
    if "gate_up_proj" in casts:  # self.gate_up_proj read: the parametrization's baddbmm
        merged["gate_up_proj"] = o.alloc(p * e * h * 2 * w)
    bias_up = o.alloc(p * s * 2 * w)  # self.gate_up_proj_bias[expert_ids_g]
    gate_up = o.alloc(p * s * 2 * w)  # _grouped_mm, the bias added in place
    gate = o.alloc(p * s * w)  # gate.clamp(max=limit)
    up = o.alloc(p * s * w)  # up.clamp(-limit, limit)
    ga = o.alloc(p * s * w)  # gate * alpha
    sig = o.alloc(p * s * w)
    o.free(ga)
    glu = o.alloc(p * s * w)
    if not keep:
        o.free(sig)
    up1 = o.alloc(p * s * w)  # up + 1
    prod = o.alloc(p * s * w)
    if keep:
        o.free(up)  # _apply_gate returns: its local
    else:  # the temporary up + 1, the locals, then the grouped linear's output (rebound)
        o.free(up1, gate, up, glu, gate_up)
    if "down_proj" in casts:
        merged["down_proj"] = o.alloc(p * e * w * h)
    bias_down = o.alloc(p * s * h)  # self.down_proj_bias[expert_ids_g]
    o.free(bias_up)
    down = o.alloc(p * s * h)
    if not ("down_proj" in merged and keep):
        o.free(prod)  # a frozen down projection keeps not its input
    weighted = o.alloc(p * s * h)
    inv_perm = o.alloc(8 * s)
    o.free(o.alloc(8 * s))  # arange
    saved = {"scores": scores, "top_i": top_i, "perm": perm, "token_idx": token_idx,
             "weights_g": weights_g, "offsets": offsets, "gate_up": gate_up, "gate": gate,
             "sig": sig, "glu": glu, "up1": up1, "down": down, "inv_perm": inv_perm,
             "routed": routed, "prod": prod}  # fmt: skip
    for name, (lhs, rhs) in casts.items():
        saved |= {name + ".lhs": lhs, name + ".rhs": rhs, name + ".merged": merged[name]}
    kept_routed = () if "gate_up_proj" in merged and keep else (routed,)
    if stop:
        o.free(sort_v, *kept_routed, hist_in, hist, bias_down, weighted, logits)
        return saved
    unperm = o.alloc(p * s * h)
    o.free(weighted)
    out = o.alloc(p * t * h)  # sum over top_k
    if keep:
        o.free(sort_v, *kept_routed, hist_in, hist, bias_down, unperm, logits)
    else:
        o.free(sort_v, perm, routed, weights_g, hist_in, hist, offsets, bias_down, down, unperm)
        o.free(inv_perm, logits, top_i)
        return {"out": out, "scores": scores}
    return {"out": out, **saved}


def experts_backward(
    o: Ops,
    g: int,
    sv: dict[str, int],
    ex: Experts,
    recompute: Callable[[], dict[str, int]] | None,
    weights: dict[str, tuple[tuple[int, int], ...]] | None = None,
) -> int:
    """The backward of :func:`experts_forward` for ``g`` (not freed), the experts frozen:
    returns the block input's gradient. ``recompute``: reruns the layer when the
    un-permutation's index unpacks ``inv_perm`` and returns the block's saved tensors."""
    p, t, e, k, w = o.p, o.tokens, ex.n_expert, ex.top_k, ex.width
    h, s = o.h // t, t * k
    a, f = o.alloc, o.free
    expanded = a(p * s * h)  # SumBackward0's expand, made contiguous
    if recompute is not None:
        sv = recompute()
    un = o.unpacked

    def node(inputs: tuple[int, ...], saved: tuple[int, ...]) -> None:
        f(*(saved + inputs if un else inputs + saved))

    gw = a(p * s * h)  # IndexBackward0 of the un-permutation: new_zeros, index_put_
    node((expanded,), (sv["inv_perm"],))
    x1, x2 = a(p * s * h), a(p * s * h)  # MulBackward0 of the weighting
    if un:
        f(sv["down"], sv["weights_g"])
    g_wsum = a(p * s)  # the routing weights' gradient, summed over the hidden size
    f(x1, gw)
    if not un:
        f(sv["weights_g"], sv["down"])
    r, shapes = ex.rank * e, ex.shapes(h)
    lora: dict[str, tuple[int, int]] = {}  # the factors' gradients, the weights' dtype
    if "down_proj.merged" in sv:  # the merged weight's gradient, then the input's
        dw = a(p * e * w * h)
        g_prod = a(p * s * w)
        kept = (sv["down_proj.merged"], sv["prod"])
        f(*((kept[1], kept[0], x2) if un else (x2, *kept)))
        casts = (sv["down_proj.lhs"], sv["down_proj.rhs"])
        lora["down_proj"] = param_wrapper.baddbmm_backward(o, r, shapes["down_proj"], dw, casts)
    else:
        g_prod = a(p * s * w)  # the down projection's grouped backward
        f(x2)
    g_glu, g_up1 = a(p * s * w), a(p * s * w)  # (up + 1) * glu
    f(*((sv["up1"], sv["glu"], g_prod) if un else (g_prod, sv["glu"], sv["up1"])))
    g_sig, g_gate = a(p * s * w), a(p * s * w)  # gate * sigmoid(...)
    node((g_glu,), (sv["gate"],))
    g_in = a(p * s * w)  # SigmoidBackward0
    node((g_sig,), (sv["sig"],))
    g_alpha = a(p * s * w)  # gate * alpha
    f(g_in)
    g_sum = a(p * s * w)  # the clamped gate's two gradients
    f(g_gate, g_alpha)
    ge, le = a(s * w), a(s * w)  # up's clamp: where((x >= -limit) & (x <= limit), g, 0)
    g_upc = a(p * s * w)
    f(le, ge, g_up1)
    le = a(s * w)  # gate's clamp (max only)
    g_gc = a(p * s * w)
    f(le)
    node((g_sum,), (sv["gate_up"],))
    sl_up = a(p * s * 2 * w)  # the strided slices' backward, up's first
    f(g_upc)
    sl_gate = a(p * s * 2 * w)
    f(g_gc)
    g_cat = a(p * s * 2 * w)
    f(sl_up, sl_gate)
    if "gate_up_proj.merged" in sv:
        dw = a(p * e * h * 2 * w)
        g_routed = a(p * s * h)
        kept = (sv["gate_up_proj.merged"], sv["routed"])
        f(*((kept[1], kept[0], g_cat) if un else (g_cat, *kept)))
        casts = (sv["gate_up_proj.lhs"], sv["gate_up_proj.rhs"])
        lora["gate_up_proj"] = param_wrapper.baddbmm_backward(
            o, r, shapes["gate_up_proj"], dw, casts
        )
        f(sv["offsets"])
    else:
        g_routed = a(p * s * h)  # the up projection's grouped backward
        node((g_cat,), (sv["offsets"],))
    g_wg = a(p * s)  # the routing weights' gather backward
    node((g_wsum,), (sv["perm"],))
    g_x = a(p * t * h)  # the routed copies' gather backward
    node((g_routed,), (sv["token_idx"],))
    if lora:
        assert weights is not None
        factor_grads(o, ex.adapted, lora, weights)
    sb = a(p * s)  # SoftmaxBackward0 over the k values
    node((g_wg,), (sv["scores"],))
    z, sc = a(p * t * e), a(p * t * e)  # TopkBackward0: new_zeros, scatter
    f(z)
    node((sb,), (sv["top_i"],))
    gm = a(p * t * h)  # the router's linear: its input's gradient
    o.matmul("backward")
    f(sc)
    total = a(p * t * h)  # the block input's two gradients summed
    f(g_x, gm)
    return total


def factor_grads(
    o: Ops,
    names: tuple[str, ...],
    grads: dict[str, tuple[int, int]],
    weights: dict[str, tuple[tuple[int, int], ...]],
) -> None:
    """The casts' ``ToCopyBackward0`` (the last made first), gpt-oss's transposed layout:
    ``rhs`` is lora_B's transposed view, ``lhs`` lora_A's (peft ``ParamWrapper.
    get_delta_factors``, not swapped), so lora_B's fp32 gradient comes first; each made
    contiguous for ``AccumulateGrad`` (a transposed view's gradient), lora_B's first."""
    for name in reversed(names):
        (a_id, a_nb), (b_id, b_nb) = weights["experts." + name]
        lhs_g, rhs_g = grads[name]
        gb = o.alloc(b_nb)
        o.free(rhs_g)
        ga = o.alloc(a_nb)
        o.free(lhs_g)
        cb = o.alloc(b_nb)
        o.free(gb)
        o.grad(b_id, cb)
        ca = o.alloc(a_nb)
        o.free(ga)
        o.grad(a_id, ca)
