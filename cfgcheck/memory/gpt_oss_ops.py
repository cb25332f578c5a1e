"""gpt-oss's forward op by op: the allocations and frees of transformers' ``GptOssModel`` as
the CUDA caching allocator sees them, for PEFT LoRA on the attention projections, eager
attention, 16-bit weights, no checkpointing (:func:`forward`). Not yet the backward: the step
stays on the pattern figure (:func:`cfgcheck.memory.events.covered` is false for gpt-oss);
tests/test_gpt_oss_ops.py checks this forward against transformers' own, traced on meta.

Sources (transformers 5.24 ``models/gpt_oss/modeling_gpt_oss.py``; line numbers of that file):

* ``GptOssModel.forward`` (l.435-480): ``create_causal_mask`` then
  ``create_sliding_window_causal_mask`` (eager: each a boolean mask made by ``and_masks``
  then ``where``'d into an additive mask in the compute dtype, both alive to the model's
  end); ``GptOssRotaryEmbedding.forward`` (l.186-192): ``freqs`` only half a head wide (no
  ``cat``), ``cos()``/``sin()`` times ``attention_scaling`` (YaRN), cast to the dtype.
* ``GptOssRMSNorm.forward`` (l.57-62): the weight multiplies the fp32 normalised tensor
  before the cast (``(self.weight * hidden_states).to(input_dtype)``), so both fp32 products
  are alive at the cast; the fp32 copy is kept when the input has a gradient.
* ``GptOssAttention.forward`` (l.288-329) with biased q/k/v/o (``addmm``);
  ``_apply_rotary_emb`` (l.205-213): ``chunk``, four half-width products, ``sub``, ``add``,
  ``cat``; ``eager_attention_forward`` (l.226-256): ``repeat_kv``'s copies, the scores'
  ``bmm``, ``* scaling``, ``+ attention_mask``, ``cat`` with the sinks (one column more),
  ``max`` (its int64 indices kept by ``MaxBackward``), the shifted logits, ``softmax`` in
  their own dtype (kept), the sink column dropped by a view, ``bmm`` with v, the transposed
  copy. The first ``bmm`` keeps the rotary q only when k has a gradient (``BmmBackward0``
  saves ``self`` for ``mat2``'s gradient).
* ``GptOssTopKRouter.forward`` (l.126-131): the biased linear, ``topk`` then ``softmax`` over
  the k values (their dtype); ``integrations/moe.py`` ``grouped_mm_experts_forward``
  (l.424-530): ``sort``, the routed copies, the bias gathers
  (``self.gate_up_proj_bias[expert_ids_g]``, l.480, alive until reassigned at l.508),
  ``_grouped_mm``, ``GptOssExperts._apply_gate`` (l.82-88: two clamps, ``gate * alpha``,
  ``sigmoid``, the product, ``up + 1``, the gated output; the clamped ``up`` a local), the
  down projection, the weighting, the un-permutation and the sum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from cfgcheck.memory.allocsim import Event
from cfgcheck.memory import layer_ops
from cfgcheck.memory.layer_ops import Adapter, Norm, Ops, add_grad, linear_backward, linear_forward
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig


@dataclass(frozen=True)
class Experts:
    """E experts, k per token, W one expert's width."""

    n_expert: int
    top_k: int
    width: int


@dataclass
class Layer:
    """What a gpt-oss layer keeps for its backward (ids; -1: not kept)."""

    norm1: Norm
    norm2: Norm
    q: int  # the rotary q (kept by the scores' bmm when k has a gradient)
    k: int  # repeat_kv's copies
    v: int
    max_idx: int
    probs: int
    out: int
    adapters: dict[str, Adapter] = field(default_factory=dict)
    moe: dict[str, int] = field(default_factory=dict)


def rotary_tables(o: Ops) -> tuple[int, int]:
    """``GptOssRotaryEmbedding.forward``: the position ids as float, ``freqs`` (half a head
    wide, fp32), cos and sin times ``attention_scaling``, cast; returns cos and sin."""
    half = o.s * o.head_dim // 2
    pos = o.alloc(4 * o.s)
    freqs = o.alloc(4 * half)
    o.free(pos)
    tables = []
    for _ in range(2):
        raw = o.alloc(4 * half)
        scaled = o.alloc(4 * half)
        o.free(raw)
        tables.append(scaled)
    cos, sin = o.alloc(o.p * half), o.alloc(o.p * half)
    o.free(freqs, *tables)
    return cos, sin


def masks(o: Ops) -> tuple[int, int]:
    """The full and the sliding additive masks (``where`` of the boolean ``and_masks``)."""
    ss, bss = o.s * o.s, o.b * o.s * o.s
    le = o.alloc(ss)
    causal = o.alloc(ss)
    o.free(le)
    both = o.alloc(bss)
    o.free(causal)
    full = o.alloc(o.p * bss)
    o.free(both)
    gt = o.alloc(ss)  # sliding_window_overlay and causal
    inner = o.alloc(ss)
    o.free(gt)
    le = o.alloc(ss)
    both = o.alloc(ss)
    o.free(le, inner)
    causal = o.alloc(ss)
    o.free(both)
    mask = o.alloc(bss)
    o.free(causal)
    sliding = o.alloc(o.p * bss)
    o.free(mask)
    return full, sliding


def norm(o: Ops, graph: bool) -> Norm:
    """``GptOssRMSNorm`` on a 16-bit input (``graph``: it has a gradient, the fp32 copy and
    the rsqrt are kept)."""
    h4, small = 4 * o.h, 4 * o.tokens
    c = o.alloc(h4)
    pw = o.alloc(h4)
    mean = o.small(small)
    o.free(pw)
    add = o.small(small)
    r = o.small(small)
    o.drop(add)
    n = o.alloc(h4)
    if not graph or not o.saving:
        o.drop(r)
        o.free(c)
    wn = o.alloc(h4)  # self.weight * hidden_states, fp32
    out = o.alloc(o.p * o.h)
    o.free(wn, n)
    o.drop(mean)
    return Norm(c, r, None, out, graph)


def norm_backward(o: Ops, g: int, nm: Norm, buf: int | None) -> int:
    """The backward of :func:`norm` (a frozen weight) for ``g`` (freed), added into ``buf``:
    the cast's ``ToCopyBackward0`` first, the weight's product in fp32, then Llama's fp32
    norm's backward (:func:`cfgcheck.memory.layer_ops.norm_backward`), cast back."""
    g32 = o.alloc(4 * o.h)
    o.free(g)
    gx = layer_ops.norm_backward(replace(o, p=4), g32, nm, (0, 0), None)
    o.frame = ()  # freed with PowBackward0 (the copy's)
    gin = o.alloc(o.p * o.h)
    o.free(gx)
    return add_grad(o, o.p * o.h, buf, gin)


def rotary(o: Ops, size: int) -> int:
    """``_apply_rotary_emb`` on a tensor of ``size`` bytes: returns the ``cat``."""
    half = size // 2
    m1, m2 = o.alloc(half), o.alloc(half)
    sub = o.alloc(half)
    o.free(m1, m2)
    m3, m4 = o.alloc(half), o.alloc(half)
    add = o.alloc(half)
    o.free(m3, m4)
    cat = o.alloc(size)
    o.free(sub, add)
    return cat


def layer_forward(
    o: Ops, x: int, graph: bool, ex: Experts, free_input: bool, stop: bool = False
) -> Layer:
    """``GptOssDecoderLayer.forward`` on ``x`` (``graph``: it has a gradient; ``free_input``:
    the caller drops ``x`` when the layer returns). Under checkpointing (``o.saving`` False)
    nothing is kept: each tensor goes when Python drops it, the attention's probabilities
    (returned as ``_``) when the MLP's return rebinds ``_``; ``stop``: the checkpoint's
    recomputation, which ends inside the experts (:func:`experts_forward`)."""
    kd, qb, kvb, hd = o.kinds, o.p * o.q, o.p * o.kv, o.h
    ad: dict[str, Adapter] = {}

    def linear(name: str, nin: int, nout: int, g: bool) -> int:
        out, saved = linear_forward(o, kd[name], nin, nout, g)
        if saved is not None:
            ad[name] = saved
        return out

    nm1 = norm(o, graph)
    n1 = nm1.out
    qm = linear("q_proj", hd, o.q, graph)
    km = linear("k_proj", hd, o.kv, graph)
    vm = linear("v_proj", hd, o.kv, graph)
    q = rotary(o, qb)
    k = rotary(o, kvb)
    o.free(qm, km)
    kk, vv = o.alloc(qb), o.alloc(qb)  # repeat_kv
    k_grad = graph or kd["k_proj"] != "frozen"
    sc = o.p * o.b * o.n_head * o.s * o.s
    rows = o.b * o.n_head * o.s
    scores = o.alloc(sc)
    scaled = o.alloc(sc)
    o.free(scores)
    masked = o.alloc(sc)
    o.free(scaled)
    cat = o.alloc(sc + o.p * rows)
    values, idx = o.alloc(o.p * rows), o.alloc(8 * rows)
    if not o.saving:  # max's namedtuple goes once .values is read
        o.free(idx)
    shifted = o.alloc(sc + o.p * rows)
    o.free(values, cat)
    probs = o.alloc(sc + o.p * rows)
    o.free(masked)
    av = o.alloc(qb)
    attn = o.alloc(qb)  # transpose(1, 2).contiguous()
    o.free(av)
    if not o.saving:  # eager_attention_forward's locals: repeat_kv's copies, the logits
        o.free(kk, vv)
    o.free(shifted)
    out = linear("o_proj", o.q, hd, True)
    if kd["o_proj"] == "frozen" or not o.saving:
        o.free(attn)
    if not k_grad or not o.saving:
        o.free(q)
        q = -1
    o.free(k, vm)
    if kd["q_proj"] == "frozen" or o.dropout or not o.saving:  # only adapters' copies kept it
        o.free(n1)
    r1 = o.alloc(o.p * hd)
    o.free(out)
    nm2 = norm(o, True)
    n2 = nm2.out
    moe = experts_forward(o, n2, ex, stop)
    o.free(n2)  # a frozen router keeps not its input
    if stop:
        o.free(r1)
        return Layer(nm1, nm2, q, kk, vv, idx, probs, -1, ad, moe)
    if not o.saving:
        o.free(probs, moe.pop("scores"))
    r2 = o.alloc(o.p * hd)
    o.free(moe.pop("out"), r1)
    if free_input:
        o.free(x)
    return Layer(nm1, nm2, q, kk, vv, idx, probs, r2, ad, moe)


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
    sort_v, perm = o.alloc(8 * s), o.alloc(8 * s)
    token_idx = o.alloc(8 * s)  # perm // top_k
    routed = o.alloc(p * s * h)
    if not keep:
        o.free(token_idx)
    weights_g = o.alloc(p * s)
    hist_in = o.alloc(4 * s)
    hist = o.alloc(4 * e)
    offsets = o.alloc(4 * e)
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
    bias_down = o.alloc(p * s * h)  # self.down_proj_bias[expert_ids_g]
    o.free(bias_up)
    down = o.alloc(p * s * h)
    o.free(prod)  # a frozen down projection keeps not its input
    weighted = o.alloc(p * s * h)
    inv_perm = o.alloc(8 * s)
    o.free(o.alloc(8 * s))  # arange
    saved = {"scores": scores, "top_i": top_i, "perm": perm, "token_idx": token_idx,
             "weights_g": weights_g, "offsets": offsets, "gate_up": gate_up, "gate": gate,
             "sig": sig, "glu": glu, "up1": up1, "down": down, "inv_perm": inv_perm}  # fmt: skip
    if stop:
        o.free(sort_v, routed, hist_in, hist, bias_down, weighted, logits)
        return saved
    unperm = o.alloc(p * s * h)
    o.free(weighted)
    out = o.alloc(p * t * h)  # sum over top_k
    if keep:
        o.free(sort_v, routed, hist_in, hist, bias_down, unperm, logits)
    else:
        o.free(sort_v, perm, routed, weights_g, hist_in, hist, offsets, bias_down, down, unperm)
        o.free(inv_perm, logits, top_i)
        return {"out": out, "scores": scores}
    return {"out": out, **saved}


def rotary_backward(o: Ops, g: int, size: int) -> int:
    """The backward of :func:`rotary` for ``g`` (freed): ``CatBackward0``'s halves (views),
    ``AddBackward0``, the products by sequence number (``first * sin``, ``second * cos``),
    ``SubBackward0``'s negation, ``second * sin``, ``first * cos``, each half's two gradients
    summed, then ``chunk``'s ``cat``."""
    half = size // 2
    a4, a3 = o.alloc(half), o.alloc(half)
    neg = o.alloc(half)
    a2 = o.alloc(half)
    o.free(neg)
    s2 = o.alloc(half)
    o.free(a3, a2)
    a1 = o.alloc(half)
    o.free(g)
    s1 = o.alloc(half)
    o.free(a4, a1)
    cat = o.alloc(size)
    o.free(s1, s2)
    return cat


def layer_backward(
    o: Ops,
    g: int,
    lay: Layer,
    w: dict[str, tuple[tuple[int, int], ...]],
    ex: Experts,
    recompute: Callable[[], Layer] | None = None,
) -> int | None:
    """The layer's backward for ``g`` (its output's gradient, held by the residual): the
    experts, the post-attention norm, the attention; the layer input's gradient (None when it
    has none). ``recompute``: under checkpointing, the layer's recomputation, which the
    un-permutation's ``IndexBackward0`` runs (the first node to unpack a saved tensor)."""
    kd, qb, kvb, hd = o.kinds, o.p * o.q, o.p * o.kv, o.h
    box = [lay]

    def rerun() -> dict[str, int]:
        assert recompute is not None
        box[0] = recompute()
        return box[0].moe

    gm = experts_backward(o, g, lay.moe, ex, rerun if recompute is not None else None)
    lay = box[0]
    ad, un = lay.adapters, o.unpacked
    frame, o.frame = o.frame, ()  # the checkpoint's frame: its last holder is norm1's
    s = norm_backward(o, gm, lay.norm2, g)

    def linear(
        name: str, g: int, free_g: bool, nin: int, nout: int, buf: int | None, graph: bool
    ) -> int | None:
        return linear_backward(o, kd[name], g, free_g, nin, nout, ad.get(name), buf, (), w[name],
                               graph)  # fmt: skip

    def node(inputs: tuple[int, ...], saved: tuple[int, ...]) -> None:
        # after a node its inputs, then its saved tensors; recomputed ones go first
        o.free(*(x for x in (saved + inputs if un else inputs + saved) if x != -1))

    go = linear("o_proj", s, not lay.norm1.graph, o.q, hd, None, True)
    assert go is not None
    gc = go
    if o.b > 1:  # the transposed gradient made contiguous (a view for one row)
        gc = o.alloc(qb)
        o.free(go)
    need = {x: lay.norm1.graph or kd[x + "_proj"] != "frozen" for x in "qkv"}
    # attn_weights @ value_states: mat2's gradient, then self's (the scores' width)
    sc = o.p * o.b * o.n_head * o.s * o.s
    rows = o.b * o.n_head * o.s
    gv = o.alloc(qb)
    gp = o.alloc(sc)
    node((gc,), (lay.v,))
    sl = o.alloc(sc + o.p * rows)  # the sink column's zeros: SliceBackward0
    o.free(gp)
    gs = o.alloc(sc + o.p * rows)  # SoftmaxBackward0
    node((sl,), (lay.probs,))
    o.free(o.alloc(sc + o.p * rows))  # SubBackward0: the max's gradient negated, summed
    gmax = o.alloc(o.p * rows)
    z = o.alloc(sc + o.p * rows)  # MaxBackward0: new_zeros, scatter
    sct = o.alloc(sc + o.p * rows)
    o.free(z)
    node((gmax,), (lay.max_idx,))
    both = o.alloc(sc + o.p * rows)
    o.free(gs, sct)
    gm2 = o.alloc(sc)  # CatBackward0's slice (a view), the mask's add, the scaling's mul
    o.free(both)
    gk = o.alloc(qb) if need["k"] else -1  # query @ key^T: mat2's gradient, then self's
    gq = o.alloc(qb)
    if un:
        o.free(*(x for x in (lay.q, lay.k, gm2) if x != -1))
    else:
        o.free(*(x for x in (gm2, lay.k, lay.q) if x != -1))
    grads: dict[str, int] = {}
    if need["v"]:  # repeat_kv's sums, v's first
        grads["v"] = o.alloc(kvb)
    o.free(gv)
    if need["k"]:
        grads["k"] = o.alloc(kvb)
        o.free(gk)
        grads["k"] = rotary_backward(o, grads["k"], kvb)
    grads["q"] = rotary_backward(o, gq, qb)
    total: int | None = None
    for x, size in (("v", kvb), ("k", kvb), ("q", qb)):
        if not need[x]:
            continue
        c = o.alloc(size)  # the transposed gradient made contiguous for the view
        o.free(grads[x])
        nout = o.q if x == "q" else o.kv
        total = linear(x + "_proj", c, True, hd, nout, total, lay.norm1.graph)
    if not lay.norm1.graph:
        o.free(*frame)
        return None
    assert total is not None
    o.frame = frame
    return norm_backward(o, total, lay.norm1, s)


def experts_backward(
    o: Ops, g: int, sv: dict[str, int], ex: Experts, recompute: Callable[[], dict[str, int]] | None
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
    g_routed = a(p * s * h)  # the up projection's grouped backward
    node((g_cat,), (sv["offsets"],))
    g_wg = a(p * s)  # the routing weights' gather backward
    node((g_wsum,), (sv["perm"],))
    g_x = a(p * t * h)  # the routed copies' gather backward
    node((g_routed,), (sv["token_idx"],))
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


def micro_batch(
    o: Ops, w: list[dict[str, tuple[tuple[int, int], ...]]], ex: Experts, ckpt: bool = False
) -> None:
    """``model(**batch).loss`` then ``backward()`` with a frozen lm_head: the embedding, the
    masks, the rotary tables, each layer (alternating sliding and full masks,
    ``layer_types``), the final norm, ``GptOssModel.forward``'s locals going (the masks, the
    embedding's output), the logits, their fp32 copy and ``log_softmax``
    (``ForCausalLMLoss``); the backward in reverse. ``w``: per layer, (id, bytes) of each
    attention linear's lora_A and lora_B (nothing when frozen). ``ckpt``: each layer under
    non-reentrant gradient checkpointing (as :mod:`cfgcheck.memory.llama_step`: PEFT makes
    the embedding's output require a gradient, a leaf kept to the end of the backward; each
    layer's frame keeps its input and its mask, which goes with the lowest layer of its
    type)."""
    forward_matmul = o.matmul
    emb = o.alloc(o.p * o.h)
    full, sliding = masks(o)
    rotary_tables(o)
    layers: list[Layer] = []
    inputs: list[int] = []
    x = emb
    for i in range(len(w)):
        o.saving = not ckpt
        lay = layer_forward(o, x, i > 0 or ckpt, ex, free_input=i > 0 and not ckpt)
        o.saving = True
        layers.append(lay)
        inputs.append(x)
        x = lay.out
    final = norm(o, True)
    o.free(x)
    if not ckpt:
        o.free(full, sliding, emb)
    v = o.vocab * o.tokens
    logits = o.alloc(o.p * v)
    up = o.alloc(4 * v)
    logp = o.alloc(4 * v)  # log_softmax, kept by nll_loss
    o.free(up, final.out, logits)
    # backward: nll_loss, log_softmax, the cast back, the frozen lm_head's input gradient
    g_nll = o.alloc(4 * v)
    g_ls = o.alloc(4 * v)
    o.free(g_nll, logp)
    g_logits = o.alloc(o.p * v)
    o.free(g_ls)
    gx = o.alloc(o.p * o.h)
    o.matmul("backward")
    o.free(g_logits)
    g: int | None = norm_backward(o, gx, final, None)
    for i in reversed(range(len(layers))):
        assert g is not None

        def rerun(i: int = i) -> Layer:
            # on autograd's thread: its first biased linear takes that thread's cuBLASLt
            # workspace (tests/alloc_tracer.py ``cuda_events``)
            matmul, o.matmul = o.matmul, lambda _: forward_matmul("lt-backward")
            lay = layer_forward(o, inputs[i], True, ex, False, stop=True)
            o.matmul = matmul
            o.unpacked = True
            mask = (sliding,) if i == 0 else (full,) if i == 1 else ()
            o.frame = (*mask, *((inputs[i],) if i > 0 else ()))
            return lay

        g = layer_backward(o, g, layers[i], w[i], ex, rerun if ckpt else None)
        o.unpacked = False
    if ckpt and g is not None:  # the leaf's .grad, then the leaf as the graph goes
        o.free(g, emb)


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
        all((e.n_expert, e.top_k, e.width) == (first.n_expert, first.top_k, first.width)
            for e in tr.experts)  # fmt: skip
        and list(types[: m.n_layer]) == alternating
        and t.finetuning == "lora"
        and set(t.lora.targets) <= set(ATTENTION)
        and not t.lora.target_parameters
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
    return Experts(e.n_expert, e.top_k, e.width)


def micro_batch_events(m: ModelConfig, d: DataConfig, t: TrainerConfig) -> list[Event]:
    """The reset, then one micro-batch (:func:`micro_batch`) of a gpt-oss run with LoRA on
    the attention projections, not checkpointed, the adapters' ids made first."""
    from cfgcheck.memory.event_seq import BLAS_LT_WORKSPACE, Seq, blas_workspace
    from cfgcheck.memory.events_moe import kinds
    from cfgcheck.memory.modules import traced
    from cfgcheck.memory.stack import stack

    tr = traced(m)
    if tr is None or not tr.experts or t.finetuning != "lora":
        raise ValueError("gpt_oss_ops: LoRA on gpt-oss's attention")
    seq = Pipeline.from_data(d).memory_length()
    hs = m.head_size or m.n_embd // m.n_head
    tokens = t.micro_batch_size * seq
    ev = Seq(workspace=blas_workspace(t), lt_workspace=BLAS_LT_WORKSPACE)
    r = t.lora.rank or 0
    k = kinds(m, t) or {}
    kvh = m.n_query_groups or m.n_head
    w = []
    for _ in range(m.n_layer):
        made: dict[str, tuple[tuple[int, int], ...]] = {}
        for name, nout in (("q_proj", m.n_head * hs), ("k_proj", kvh * hs), ("v_proj", kvh * hs),
                           ("o_proj", m.n_embd)):  # fmt: skip
            nin = m.n_head * hs if name == "o_proj" else m.n_embd
            made[name] = ()
            if k[name] == "lora":
                made[name] = tuple((ev.alloc(4 * n), 4 * n) for n in (r * nin, nout * r))
        w.append(made)
    ev.reset()
    o = Ops(
        ev.alloc, ev.free, ev.matmul, p=stack(m, t).act, b=t.micro_batch_size, s=seq,
        h=m.n_embd * tokens, q=m.n_head * hs * tokens,
        kv=(m.n_query_groups or m.n_head) * hs * tokens, inter=m.mlp_width * tokens,
        head_dim=hs, n_head=m.n_head, vocab=m.head_rows, mask=True,
        kinds=k, rank=t.lora.rank or 0, dropout=bool(t.lora.dropout),
    )  # fmt: skip
    e = tr.experts[0]
    micro_batch(o, w, Experts(e.n_expert, e.top_k, e.width), t.gradient_checkpointing)
    return ev.events
