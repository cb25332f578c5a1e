"""gpt-oss's step op by op: the allocations and frees of transformers' ``GptOssForCausalLM``
(``model(**batch).loss`` and its ``backward()``) as the CUDA caching allocator sees them, for
PEFT LoRA on the attention projections, eager attention (transformers has no other path with
sinks), 16-bit weights, frozen experts and router, with or without non-reentrant gradient
checkpointing (:func:`micro_batch`, called from :func:`cfgcheck.memory.events.step_events`;
the runs covered: :mod:`cfgcheck.memory.gpt_oss_layout`). tests/test_gpt_oss_ops.py checks two
optimizer steps against transformers' own, traced on meta tensors.

Sources (transformers 5.24 ``models/gpt_oss/modeling_gpt_oss.py``; line numbers of that file):

* the masks, the rotary tables, the RMSNorm and the rotary embedding:
  :mod:`cfgcheck.memory.gpt_oss_pieces`;
* ``GptOssAttention.forward`` (l.288-329) with biased q/k/v/o (``addmm``);
  ``_apply_rotary_emb`` (l.205-213): ``chunk``, four half-width products, ``sub``, ``add``,
  ``cat``; ``eager_attention_forward`` (l.226-256): ``repeat_kv``'s copies, the scores'
  ``bmm``, ``* scaling``, ``+ attention_mask``, ``cat`` with the sinks (one column more),
  ``max`` (its int64 indices kept by ``MaxBackward``), the shifted logits, ``softmax`` in
  their own dtype (kept), the sink column dropped by a view, ``bmm`` with v, the transposed
  copy. The first ``bmm`` keeps the rotary q only when k has a gradient (``BmmBackward0``
  saves ``self`` for ``mat2``'s gradient).
* the MoE block: :mod:`cfgcheck.memory.gpt_oss_experts`;
* the backward node by node as autograd orders them (highest sequence number first), each
  node's saved tensors released after it (recomputed ones with its apply, before its
  inputs): o_proj, the transposed gradient's copy (a view for one row), the second
  ``bmm`` (mat2's gradient first), the sink column's ``SliceBackward0``, the softmax's, the
  shift's negation, ``MaxBackward0``'s ``scatter``, the scaling, the first ``bmm``,
  ``repeat_kv``'s sums (v's first), the rotary's halves (k's, then q's), v, k and q
  (:func:`cfgcheck.memory.layer_ops.linear_backward`), the input norm;
* non-reentrant checkpointing as :mod:`cfgcheck.memory.llama_step` models it, the first
  node to unpack being the un-permutation's index; the recomputation's biased linears run
  on autograd's thread, whose first ``addmm`` takes that thread's cuBLASLt workspace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cfgcheck.memory.gpt_oss_experts import Experts, experts_backward, experts_forward
from cfgcheck.memory.gpt_oss_pieces import (
    masks,
    norm,
    norm_backward,
    rotary,
    rotary_backward,
    rotary_tables,
)
from cfgcheck.memory.layer_ops import Adapter, Linears, Norm, Ops


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


def layer_forward(
    o: Ops, x: int, graph: bool, ex: Experts, free_input: bool, stop: bool = False
) -> Layer:
    """``GptOssDecoderLayer.forward`` on ``x`` (``graph``: it has a gradient; ``free_input``:
    the caller drops ``x`` when the layer returns). Under checkpointing (``o.saving`` False)
    nothing is kept: each tensor goes when Python drops it, the attention's probabilities
    (returned as ``_``) when the MLP's return rebinds ``_``; ``stop``: the checkpoint's
    recomputation, which ends inside the experts (:func:`experts_forward`)."""
    kd, qb, kvb, hd = o.kinds, o.p * o.q, o.p * o.kv, o.h
    lin = Linears(o)
    linear, ad = lin.forward, lin.adapters

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
    o.free(n1)  # the adapters keep their own fp32 copies, the frozen bases nothing
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

    gm = experts_backward(o, g, lay.moe, ex, rerun if recompute is not None else None, w)
    lay = box[0]
    un = o.unpacked
    frame, o.frame = o.frame, ()  # the checkpoint's frame: its last holder is norm1's
    s = norm_backward(o, gm, lay.norm2, g)
    lin = Linears(o, lay.adapters, w)

    def node(inputs: tuple[int, ...], saved: tuple[int, ...]) -> None:
        # after a node its inputs, then its saved tensors; recomputed ones go first
        o.free(*(x for x in (saved + inputs if un else inputs + saved) if x != -1))

    go = lin.backward("o_proj", s, not lay.norm1.graph, o.q, hd, None)
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
        total = lin.backward(x + "_proj", c, True, hd, nout, total, (), lay.norm1.graph)
    if not lay.norm1.graph:
        o.free(*frame)
        return None
    assert total is not None
    o.frame = frame
    return norm_backward(o, total, lay.norm1, s)


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
