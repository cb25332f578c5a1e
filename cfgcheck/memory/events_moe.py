"""A mixture-of-experts block op by op: the allocations and frees of transformers' sparse MoE
block, as :mod:`cfgcheck.memory.llama_step` runs it in place of the Llama MLP (called from
:func:`cfgcheck.memory.events.step_events`).

Covered (:func:`cfgcheck.memory.moe_layout.covered`): Mixtral, Qwen3-MoE and OLMoE
(transformers 5.24 ``models/mixtral/modeling_mixtral.py``,
``models/qwen3_moe/modeling_qwen3_moe.py``, ``models/olmoe/modeling_olmoe.py``: no
renormalisation of the top-k, :attr:`Moe.renorm`; q / k norms over the whole projection,
:attr:`Moe.qk_whole`) with PEFT LoRA on the attention projections (q_proj among them), frozen
router, or full fine-tuning (the router's and the experts' weight gradients), SDPA, 16-bit
weights, with or without non-reentrant gradient checkpointing (the recomputation:
:meth:`Moe.forward`, :meth:`Moe.backward`); the fused experts frozen, or adapted through
``target_parameters`` (PEFT's ``ParamWrapper``, :mod:`cfgcheck.memory.param_wrapper`). The
sources, as installed and traced (tests/test_memory_events_moe.py):

* ``MixtralTopKRouter.forward``: ``F.linear(hidden_states, weight)`` (the logits, in the
  compute dtype), ``softmax(router_logits.float())`` (fp32, kept by its backward), ``topk``
  (fp32 values, int64 indices: the indices kept by ``TopkBackward0``), the values divided in
  place by their sum (the sum and a copy of the values kept by ``DivBackward0``);
* ``integrations/moe.py`` ``grouped_mm_experts_forward`` (the default
  ``experts_implementation``): ``sort`` of the expert ids (values and permutation, int64),
  ``perm // top_k`` (kept: the gather's backward), the routed copies
  ``hidden_states[perm // top_k]`` (top_k hidden rows per token, a local), the routing weights
  gathered (fp32, kept by the weighting), ``histc`` and ``cumsum`` of the counts (the offsets,
  kept by the grouped linears); ``_grouped_mm`` up (gate and up, two expert widths, kept by
  the SiLU and the product through their chunk views), ``silu`` (kept), the product (a
  frozen down projection keeps not its input), ``_grouped_mm`` down (kept by the weighting),
  ``proj_out * sample_weights_g`` (fp32 by promotion with Mixtral's fp32 weights), the
  un-permutation (``inv_perm``: ``empty_like``, ``arange``; ``weighted_out[inv_perm]``), the
  ``sum`` over top_k (fp32) and the cast back; the locals go when the function returns;
* the backward, node by node in the order autograd runs them (``ReadyQueue``, highest
  sequence number first, saved tensors released after each node): the cast's and the sum's
  (a copy of the expanded gradient), the un-permutation's ``IndexBackward0`` (``new_zeros``,
  ``index_put_`` in place), the weighting's ``MulBackward0`` (both inputs' gradients, the
  routing weights' summed over the hidden size), the down projection's grouped backward, the
  product's, the SiLU's, the chunk's ``cat``, the up projection's, the gathers' backward
  (``new_zeros`` each), the router's division, ``topk``'s ``scatter``, the softmax's and the
  logits' linear; the MoE input's two gradients summed (``InputBuffer::add``).

Elements: T tokens, E experts, k experts per token, S = T * k routed rows, W one expert's
width, h the hidden size. Tensors of E elements (counts, offsets) are in the small pool and
counted too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cfgcheck.memory import param_wrapper
from cfgcheck.memory.activations import ROUTER_WEIGHTS_IN_LOGITS_DTYPE, _weighted_bytes
from cfgcheck.memory.layer_ops import Ops
from cfgcheck.memory.modules import architecture_of, traced
from cfgcheck.memory.stack import stack
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig


@dataclass
class Saved:
    """What the block keeps for its backward (ids)."""

    softmax: int
    top_idx: int
    top_sum: int
    top_copy: int
    perm: int
    token_idx: int
    weights_g: int
    offsets: int
    gate_up: int
    act: int
    down: int
    inv_perm: int
    routed: int = -1  # kept when gate_up_proj trains (its grouped linear saves its input)
    prod: int = -1  # kept when down_proj trains
    # PEFT's ParamWrapper: per adapted parameter its factors cast to the weights' dtype (the
    # out side, the in side) and the merged weight ``baddbmm(W, lhs, rhs)``, kept by the
    # grouped linear
    casts: dict[str, tuple[int, int]] = field(default_factory=dict)
    merged: dict[str, int] = field(default_factory=dict)
    x: int = -1  # the block's input, kept by the router's linear when its weight trains


@dataclass(frozen=True)
class Moe:
    """The block's sizes: E experts, top_k per token, W one expert's width, ``wb`` the bytes
    per element of the weighted outputs (:func:`cfgcheck.memory.activations._weighted_bytes`)."""

    n_expert: int
    top_k: int
    width: int
    wb: int
    rw: int  # bytes per element of the routing weights (fp32, or the logits' dtype)
    rank: int = 0
    adapted: tuple[str, ...] = ()  # the experts' parameters PEFT's ParamWrapper adapts
    renorm: bool = True  # the top-k values divided by their sum (OLMoE's norm_topk_prob: not)
    # OLMoE's q / k norms run over the whole projection (statistics per token), Qwen3's per head
    qk_whole: bool = False

    @classmethod
    def of(cls, m: ModelConfig, t: TrainerConfig) -> Moe:
        tr = traced(m)
        assert tr is not None and tr.experts
        e = tr.experts[0]
        s = stack(m, t)
        rw = s.act if m.architecture in ROUTER_WEIGHTS_IN_LOGITS_DTYPE else 4
        adapted = () if t.finetuning == "full" else param_wrapper.adapted_experts(t) or ()
        olmoe = architecture_of(m) == "olmoe"
        renorm = not olmoe or bool((m.hf_config or {}).get("norm_topk_prob"))
        return cls(e.n_expert, e.top_k, e.width, _weighted_bytes(m, s), rw, t.lora.rank or 0,
                   adapted, renorm, olmoe)  # fmt: skip

    def shapes(self, h: int) -> dict[str, tuple[int, int]]:
        """(out, in) of one expert's matrix of each fused parameter."""
        return {"gate_up_proj": (2 * self.width, h), "down_proj": (h, self.width)}

    def forward(self, o: Ops, x: int, stop: bool = False) -> tuple[int, Saved]:
        """The block on its input ``x`` (the post-attention norm's output, freed by the
        caller): returns its output (compute dtype; -1 when ``stop``) and its saved tensors.
        Under checkpointing (``o.saving`` False) nothing is saved: each tensor goes when
        Python drops it; ``stop``: the checkpoint's recomputation, which ends where the
        un-permutation's index packs ``inv_perm``, its last saved tensor (``VariableType``
        saves an op's inputs before it runs: its output is never made), the experts'
        function's locals then the router's going as the exception leaves their frames."""
        a, f, p, keep = o.alloc, o.free, o.p, o.saving
        t, e, k, w, h = o.tokens, self.n_expert, self.top_k, self.width, o.h // o.tokens
        s = t * k
        logits = a(p * t * e)  # the router's linear
        c = a(4 * t * e)  # .float()
        sm = a(4 * t * e)
        f(c)
        top_v, top_i = a(4 * s), a(8 * s)
        top_sum = top_copy = -1
        if self.renorm:
            top_sum = a(4 * t)
            top_copy = a(4 * s)  # the in-place division's saved copy
        if self.rw != 4:  # .to(router_logits.dtype): the fp32 values go
            cast = a(self.rw * s)
            f(top_v)
            top_v = cast
        if not keep:
            f(*(x for x in (top_copy, top_sum) if x != -1), sm)
        # ParamWrapper.forward: each adapted parameter's parametrization registered (its
        # factors cast to the weights' dtype; register_parametrization evaluates it once,
        # a merged weight made and dropped)
        casts = param_wrapper.register(o, self.adapted, self.rank * e, e, self.shapes(h))
        merged: dict[str, int] = {}
        sort_v, perm = a(8 * s), a(8 * s)
        token_idx = a(8 * s)  # perm // top_k
        routed = a(p * s * h)
        if not keep:
            f(token_idx)
        weights_g = a(self.rw * s)
        hist_in = a(4 * s)  # histc's input: int32 on CUDA (float on CPU), 4 bytes either way
        hist = a(4 * e)
        offsets = a(4 * e)
        if "gate_up_proj" in casts:  # self.gate_up_proj: the parametrization's baddbmm
            merged["gate_up_proj"] = a(p * e * 2 * w * h)
        gate_up = a(p * s * 2 * w)
        act = a(p * s * w)
        prod = a(p * s * w)
        if not keep:
            f(act, gate_up)
        if "down_proj" in casts:
            merged["down_proj"] = a(p * e * h * w)
        down = a(p * s * h)
        if not (("down_proj" in casts or o.full) and keep):
            f(prod)  # a frozen down projection keeps not its input
        weighted = a(self.wb * s * h)
        inv_perm = a(8 * s)
        f(a(8 * s))  # arange
        saved = Saved(
            sm, top_i, top_sum, top_copy, perm, token_idx, weights_g, offsets, gate_up, act,
            down, inv_perm, routed, prod, casts, merged, x,
        )  # fmt: skip
        kept_routed = () if ("gate_up_proj" in merged or o.full) and keep else (routed,)
        if stop:
            f(sort_v, *kept_routed, hist_in, hist, weighted, logits, top_v)
            return -1, saved
        unperm = a(self.wb * s * h)
        f(weighted)
        summed = a(self.wb * t * h)
        out = summed
        if self.wb != p:  # .to(hidden_states.dtype)
            out = a(p * t * h)
        summed_cast = (summed,) if out != summed else ()
        if keep:
            f(sort_v, *kept_routed, hist_in, hist, unperm, *summed_cast, logits, top_v)
        else:
            f(sort_v, perm, routed, weights_g, hist_in, hist, offsets, down, unperm, inv_perm)
            f(*summed_cast)
            # ParamWrapper's parametrizations removed as its forward returns: the last
            # registered's casts, the merged weights, then the first's casts; then the
            # block's own locals (the router's outputs)
            if casts:
                first, *rest = self.adapted
                f(*(x for n in rest for x in casts[n]))
                f(*(merged[n] for n in reversed(self.adapted)), *casts[first])
            f(logits, top_v, top_i)
        return out, saved

    def backward(
        self,
        o: Ops,
        g: int,
        sv: Saved,
        recompute: Callable[[], Saved] | None = None,
        weights: dict[str, tuple[tuple[int, int], ...]] | None = None,
    ) -> int:
        """The block's backward for the gradient ``g`` of its output (not freed: the residual
        holds it); returns its input's gradient. ``recompute``: under checkpointing, reruns
        the layer when the first node that unpacks a saved tensor runs (the un-permutation's
        index, after the cast's and the sum's backward) and returns the block's saved
        tensors. ``weights``: the layer's trained tensors, (id, bytes) of lora_A and lora_B under
        ``experts.<name>`` for each adapted expert parameter."""
        a, f, p = o.alloc, o.free, o.p
        lora: dict[str, tuple[int, int]] = {}  # the factors' gradients, in the weights' dtype
        t, e, k, w, h = o.tokens, self.n_expert, self.top_k, self.width, o.h // o.tokens
        s, wb = t * k, self.wb
        g32 = a(wb * t * h) if wb != p else g  # ToCopyBackward0
        expanded = a(wb * s * h)  # SumBackward0's expand, made contiguous
        if g32 != g:
            f(g32)
        if recompute is not None:  # IndexBackward0 unpacks inv_perm: the layer recomputed
            sv = recompute()
        un = o.unpacked

        def node(inputs: tuple[int, ...], saved: tuple[int, ...]) -> None:
            # after a node: its inputs, then its saved tensors (Engine::evaluate_function);
            # a recomputed saved tensor goes with the node's apply, before its inputs
            f(*(saved + inputs if un else inputs + saved))

        gw = a(wb * s * h)  # IndexBackward0: new_zeros, index_put_
        node((expanded,), (sv.inv_perm,))
        x1 = a(wb * s * h)  # MulBackward0: both inputs' gradients (hidden wide)
        x2 = a(wb * s * h)
        if un:
            f(sv.down, sv.weights_g)
        if wb != p:  # proj_out's cast to its dtype, the weights' summed over the hidden size
            g_down = a(p * s * h)
            f(x2)
            g_wsum = a(self.rw * s)
            f(x1, gw)
        else:
            g_wsum = a(self.rw * s)
            f(x1, gw)
            g_down = x2
        if not un:
            f(sv.weights_g, sv.down)
        full = o.full  # the router's and the experts' weights train
        trains = "down_proj" in sv.merged or full
        dw = a(p * e * h * w) if trains else -1  # the (merged) weight's gradient
        g_prod = a(p * s * w)  # the down projection's grouped backward
        if full:
            f(*((sv.prod, g_down) if un else (g_down, sv.prod)))
            o.grad(_param(weights, "down_proj"), dw)
        elif dw != -1:  # the grouped linear's saved weight and input, recomputed ones first
            kept = (sv.merged["down_proj"], sv.prod)
            f(*((kept[1], kept[0], g_down) if un else (g_down, *kept)))
            lora["down_proj"] = param_wrapper.baddbmm_backward(
                o, self.rank * e, self.shapes(h)["down_proj"], dw, sv.casts["down_proj"]
            )
        else:
            f(g_down)
        g_up, g_act = a(p * s * w), a(p * s * w)  # MulBackward0
        node((g_prod,), (sv.act,))
        g_gate = a(p * s * w)  # SiluBackward0
        node((g_act,), (sv.gate_up,))
        g_cat = a(p * s * 2 * w)  # the chunk's backward
        f(g_gate, g_up)
        dw = a(p * e * 2 * w * h) if "gate_up_proj" in sv.merged or full else -1
        g_routed = a(p * s * h)  # the up projection's grouped backward
        if full:
            f(*((sv.routed, g_cat) if un else (g_cat, sv.routed)))
            o.grad(_param(weights, "gate_up_proj"), dw)
            f(sv.offsets)
        elif dw != -1:
            kept = (sv.merged["gate_up_proj"], sv.routed)
            f(*((kept[1], kept[0], g_cat) if un else (g_cat, *kept)))
            lora["gate_up_proj"] = param_wrapper.baddbmm_backward(
                o, self.rank * e, self.shapes(h)["gate_up_proj"], dw, sv.casts["gate_up_proj"]
            )
            f(sv.offsets)
        else:
            node((g_cat,), (sv.offsets,))
        g_wg = a(self.rw * s)  # the routing weights' gather backward
        node((g_wsum,), (sv.perm,))
        g_x = a(p * t * h)  # the routed copies' gather backward
        node((g_routed,), (sv.token_idx,))
        if self.adapted:  # the factors' casts' ToCopyBackward0
            assert weights is not None
            param_wrapper.factor_grads(o, self.adapted, lora, weights)
        if self.rw != 4:  # ToCopyBackward0 of the cast to the logits' dtype
            g32 = a(4 * s)
            f(g_wg)
            g_wg = g32
        add = g_wg
        if self.renorm:  # DivBackward0 of the renormalised top-k values
            d1, d2, neg, mul = a(4 * s), a(4 * s), a(4 * s), a(4 * s)
            f(neg, d2, d1)
            d3 = a(4 * s)
            if un:
                f(sv.top_copy, sv.top_sum)
            ssum = a(4 * t)
            f(mul, g_wg)
            if not un:
                f(sv.top_sum, sv.top_copy)
            add = a(4 * s)
            f(d3, ssum)
        z = a(4 * t * e)  # TopkBackward0: new_zeros, scatter
        sc = a(4 * t * e)
        f(z)
        node((add,), (sv.top_idx,))
        sb = a(4 * t * e)  # SoftmaxBackward0
        node((sc,), (sv.softmax,))
        tc = a(p * t * e)  # ToCopyBackward0
        f(sb)
        dr = a(p * e * h) if full else -1  # the router's weight's gradient, then its input's
        gm = a(p * t * h)
        o.matmul("backward")
        node((tc,), (sv.x,) if full else ())
        if full:
            o.grad(_param(weights, "router"), dr)
        total = a(p * t * h)  # the MoE input's two gradients summed
        f(g_x, gm)
        return total


def _param(weights: dict[str, tuple[tuple[int, int], ...]] | None, name: str) -> int:
    """The id of a trained parameter of the layer (full fine-tuning)."""
    assert weights is not None
    return weights[name][0][0]
