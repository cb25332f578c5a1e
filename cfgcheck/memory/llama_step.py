"""A Llama decoder layer and a whole micro-batch op by op, from the modules' ops of
:mod:`cfgcheck.memory.layer_ops` (whose docstring has the sources): the allocations and frees
of ``model(**batch).loss`` and its ``backward()`` in the order the CUDA caching allocator
sees them (called from :func:`cfgcheck.memory.events.step_events`).

Non-reentrant gradient checkpointing (``gradient_checkpointing_kwargs={"use_reentrant":
False}``; transformers 5.24 ``modeling_layers.py`` line 123 wraps each decoder layer's forward
in ``torch.utils.checkpoint.checkpoint``; torch 2.13.0 ``torch/utils/checkpoint.py``):

* the forward runs each layer under ``_checkpoint_hook`` (lines 1153-1163): every tensor
  autograd would save is packed into an empty ``_Holder``, so each op's output goes once
  Python drops it (``Ops.saving`` False); the layer's input stays, saved by the frame
  (``frame.save_inputs``, line 1702);
* in the backward the first node of the layer that unpacks a saved tensor (down_proj's
  ``MmBackward0``, after the residual's ``AddBackward0``) reruns the layer
  (``unpack_hook``, lines 1165-1186) under ``_recomputation_hook`` (lines 1088-1133), which
  keeps each packed tensor in ``frame.recomputed`` and raises ``_StopRecomputationError`` once
  as many are packed as in the forward (early stop, the default): the rerun ends inside
  down_proj, before its output (:func:`_stopped`);
* each recomputed tensor goes when the node that unpacked it is done (``holder.handles[gid] =
  None`` drops the dictionary's entry, line 1206): before the node's incoming gradient, not
  after it as ``release_variables`` orders saved tensors (``Ops.unpacked``);
* the frame, and with it the layer's input (and the mask, a keyword argument of every layer,
  with the first layer's), goes when the last node holding one of its holders is done: the
  input norm's ``PowBackward0``. With PEFT, checkpointing makes the embedding's output
  require a gradient (a leaf): it stays to the end of the backward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cfgcheck.memory import gemma_ops
from cfgcheck.memory.layer_ops import (
    Adapter,
    Linears,
    Norm,
    Ops,
    norm_backward,
    norm_forward,
    rope_backward,
    rope_forward,
    sdpa_mask,
)

if TYPE_CHECKING:
    from cfgcheck.memory.events_moe import Moe, Saved


def _norm_forward(o: Ops, x: int, graph: bool = True) -> Norm:
    """The layout's RMSNorm: Llama's, or Gemma's (fp32 weight multiplication)."""
    return (gemma_ops.norm_forward if o.gemma else norm_forward)(o, x, graph)


def _norm_backward(o: Ops, g: int, nm: Norm, weight: tuple[int, int], buf: int | None) -> int:
    return (gemma_ops.norm_backward if o.gemma else norm_backward)(o, g, nm, weight, buf)


@dataclass
class Layer:
    """A layer's tensors kept for the backward."""

    norm1: Norm
    norm2: Norm
    q: int  # the rotary q (kept by the kernel)
    k: int  # the kernel's k and v (repeat_kv's copies with GQA)
    v: int
    bias: int | None
    attn: int
    lse: int
    gate: int
    act: int
    up: int
    prod: int
    out: int
    adapters: dict[str, Adapter]
    graph: bool  # the layer's input has a gradient
    moe: Saved | None = None  # a mixture-of-experts block's saved tensors (events_moe.py)
    qk: tuple[Norm, Norm] | None = None  # the q and k norms (Qwen3)
    # Gemma 3's further norms (gemma_ops.py), and its output's gradient cast to fp32 before
    # a checkpoint's recomputation (the post-feedforward norm's ToCopyBackward0 saves nothing)
    norms: dict[str, Norm] = field(default_factory=dict)
    cast: int | None = None


def layer_forward(
    o: Ops,
    x: int,
    free_input: bool,
    graph: bool,
    stop: bool = False,
    moe: Moe | None = None,
    qk_norm: bool = False,
) -> Layer:
    """``LlamaDecoderLayer.forward`` with the module's ops; ``free_input``: the caller drops its
    reference to ``x`` when the layer returns (not the embedding output); ``graph``: ``x``
    has a gradient; ``stop``: a checkpoint's recomputation, which stops once the last saved
    tensor is packed (down_proj's, see :func:`recompute`); ``moe``: a mixture-of-experts
    block in the MLP's place (:mod:`cfgcheck.memory.events_moe`); ``qk_norm``: an RMSNorm on
    each head of q and of k before the rotary embedding (Qwen3: ``self.q_norm(self.q_proj(
    hidden_states).view(hidden_shape))``, then k's, then v_proj)."""
    row, qb, kvb = o.p * o.h, o.p * o.q, o.p * o.kv
    kd = o.kinds
    hd = o.h
    lin = Linears(o)
    linear, ad = lin.forward, lin.adapters

    n1 = _norm_forward(o, x, graph)
    qm = linear("q_proj", hd, o.q, graph)
    qk: tuple[Norm, Norm] | None = None
    if qk_norm:  # q_norm on each head, its input gone once it ran
        qn = norm_forward(_per_head(o, o.q, moe), qm, True)
        o.free(qm)
        qm = qn.out
    km = linear("k_proj", hd, o.kv, graph)
    if qk_norm:
        kn = norm_forward(_per_head(o, o.kv, moe), km, graph or kd["k_proj"] != "frozen")
        o.free(km)
        km, qk = kn.out, (qn, kn)
    vm = linear("v_proj", hd, o.kv, graph)
    ex: dict[str, Norm] = {}
    if o.qk_norm:  # Gemma 3: the rotary embedding takes the normed q and k
        qm, km = gemma_ops.qk_norm_forward(o, qm, km, graph, ex)
    q = rope_forward(o, qb)
    k = rope_forward(o, kvb)
    o.free(qm, km)
    kk, vv = (o.alloc(qb), o.alloc(qb)) if o.repeat else (k, vm)  # repeat_kv
    bias = None
    if o.mask:  # the boolean mask as an additive bias: where(mask.logical_not(), -inf, 0)
        nt = o.alloc(o.b * o.s * o.s)
        bias = o.alloc(o.p * o.b * o.s * o.s)
        o.free(nt)
    attn = o.alloc(qb)
    lse = o.alloc(4 * o.b * o.n_head * -(-o.s // 32) * 32)  # fp32, rows padded to 32
    if not o.saving:  # the kernel's log-sum-exp, the mask's bias, then repeat_kv's copies
        o.free(lse)
        if bias is not None:
            o.free(bias)
        if o.repeat:
            o.free(kk, vv)
    out = linear("o_proj", o.q, hd, True)
    if not o.saving:  # attn_output rebound, then self_attn's locals
        o.free(attn, q)
    if o.repeat or not o.saving:
        o.free(k, vm)
    if not o.full or not o.saving:  # nothing kept the norm's output: it goes with self_attn
        o.free(n1.out)
    if o.sandwich:
        out = gemma_ops.post_norm_forward(o, out, ex, "post_attention_layernorm")
    r1 = o.alloc(row)
    o.free(out)
    n2 = _norm_forward(o, r1)
    if moe is not None:  # the block's output, then the layer's end as below
        y, saved = moe.forward(o, n2.out, stop)
        if not o.full or not o.saving:  # a frozen router keeps not its input
            o.free(n2.out)
        r2 = -1
        if not stop:
            r2 = o.alloc(row)
            o.free(y)
        if o.p != 4 or not o.saving:
            o.free(r1)
            if free_input:
                o.free(x)
        return Layer(n1, n2, q, kk, vv, bias, attn, lse, -1, -1, -1, -1, r2, ad, graph, saved, qk)
    ib = o.p * o.inter
    gate = linear("gate_proj", hd, o.inter, True)
    act = o.alloc(ib)
    if not o.saving:
        o.free(gate)
    up = linear("up_proj", hd, o.inter, True)
    prod = o.alloc(ib)
    if not o.saving:
        o.free(act, up)
    if stop and not o.sandwich:  # _StopRecomputationError at down_proj's last pack
        return _stopped(o, x, Layer(n1, n2, q, kk, vv, bias, attn, lse, gate, act, up, prod,
                                    -1, ad, graph, None, qk), r1)  # fmt: skip
    down = linear("down_proj", o.inter, hd, True)
    if kd["down_proj"] != "full" or not o.saving:
        o.free(prod)
    if not o.full or not o.saving:
        o.free(n2.out)
    if o.sandwich:  # a recomputation stops in this norm (gemma_ops.stopped)
        down_in = down
        down = gemma_ops.post_norm_forward(o, down, ex, "post_feedforward_layernorm", stop)
        if stop:
            gemma_ops.stopped(o, down_in, r1, ex)
            return Layer(n1, n2, q, kk, vv, bias, attn, lse, gate, act, up, prod, -1, ad,
                         graph, None, qk, ex)  # fmt: skip
    r2 = o.alloc(row)
    o.free(down)
    if o.p != 4 or not o.saving:  # the fp32 norms keep their inputs themselves
        o.free(r1)
        if free_input:
            o.free(x)
    return Layer(
        n1, n2, q, kk, vv, bias, attn, lse, gate, act, up, prod, r2, ad, graph, None, qk, ex
    )


def _stopped(o: Ops, x: int, lay: Layer, r1: int) -> Layer:
    """The recomputation stops in down_proj (torch/utils/checkpoint.py
    ``_recomputation_hook.pack_hook`` raises ``_StopRecomputationError`` once as many tensors
    are packed as in the forward): the temporaries not saved go as the exception leaves each
    frame, then the frames' locals as its traceback goes, innermost first."""
    if o.kinds["down_proj"] != "full":  # the MLP's argument (a frozen linear keeps none)
        o.free(lay.prod)
    if not o.full:
        o.free(lay.norm2.out)
    if o.p != 4:
        o.free(r1)
    return lay


def layer_backward(
    o: Ops,
    g: int,
    lay: Layer,
    w: dict[str, tuple[tuple[int, int], ...]],
    tables: tuple[int, int] | None,
    moe: Moe | None = None,
    recompute: Callable[[], Layer] | None = None,
) -> int | None:
    """The layer's backward for the gradient ``g`` of its output; ``w``: (id, bytes) of each
    linear's trained tensors (the weight, or lora_A and lora_B) and of the two norms'
    weights (``input_layernorm``, ``post_attention_layernorm``). Returns the gradient of the
    layer's input (None when it has none). ``moe``: the layer's mixture-of-experts block;
    ``recompute``: under checkpointing, the layer's recomputation, which its first node that
    unpacks a saved tensor runs (inside the block's backward)."""
    if moe is not None and lay.moe is not None:
        rerun = None
        if recompute is not None:
            box: list[Layer] = []

            def rerun() -> Saved:
                box.append(recompute())
                assert box[0].moe is not None
                return box[0].moe

        gx: int | None = moe.backward(o, g, lay.moe, rerun, w)
        if recompute is not None:
            lay = box[0]
        frame, o.frame = o.frame, ()
    else:
        frame, o.frame = o.frame, ()  # the checkpoint's input: its last holder is norm1's
        gx = _mlp_backward(o, g, lay, w)
    assert gx is not None
    # the post-attention norm; its input's buffer holds g (the residual's path)
    pre = "pre_feedforward_layernorm" if o.sandwich else "post_attention_layernorm"
    s = _norm_backward(o, gx, lay.norm2, w[pre][0], g)
    return _attention_backward(o, s, lay, w, tables, frame, moe)


def _mlp_backward(
    o: Ops, g: int, lay: Layer, w: dict[str, tuple[tuple[int, int], ...]]
) -> int | None:
    """The Llama MLP's backward: its input's gradient."""
    ib, kd, hd = o.p * o.inter, o.kinds, o.h
    linear = Linears(o, lay.adapters, w).backward
    full = kd["down_proj"] == "full"
    ex = lay.norms
    gd = g
    if o.sandwich:  # the post-feedforward norm; the residual's buffer holds g
        name = "post_feedforward_layernorm"
        gd = gemma_ops.norm_backward(o, g, ex[name], w[name][0], None, g32=lay.cast, owned=False)
    # the MLP: down, the product, up, SiLU, gate (the order of their sequence numbers)
    gp = linear("down_proj", gd, o.sandwich, o.inter, hd, None, (lay.prod,) if full else ())
    assert gp is not None
    gu, ga = o.alloc(ib), o.alloc(ib)  # MulBackward0: other's gradient, then self's
    o.free(*((lay.act, lay.up, gp) if o.unpacked else (gp, lay.up, lay.act)))
    gx = linear("up_proj", gu, True, hd, o.inter, None)
    gg = o.alloc(ib)  # SiluBackward0
    o.free(*((lay.gate, ga) if o.unpacked else (ga, lay.gate)))
    gate_full = kd["gate_proj"] == "full"
    return linear("gate_proj", gg, True, hd, o.inter, gx, (lay.norm2.out,) if gate_full else ())


def _attention_backward(
    o: Ops,
    s: int,
    lay: Layer,
    w: dict[str, tuple[tuple[int, int], ...]],
    tables: tuple[int, int] | None,
    frame: tuple[int, ...],
    moe: Moe | None = None,
) -> int | None:
    """The attention's backward for the gradient ``s`` of the post-attention residual."""
    qb, kvb, kd, hd = o.p * o.q, o.p * o.kv, o.kinds, o.h
    linear = Linears(o, lay.adapters, w).backward
    # the attention: o_proj, the kernel, repeat_kv's sums, the rotary k then q, then v, k, q;
    # without a gradient on the layer's input only o_proj holds s
    ga, owned = s, not lay.graph
    if o.sandwich:  # the post-attention norm, s also in the input's buffer
        name = "post_attention_layernorm"
        ga = gemma_ops.norm_backward(o, s, lay.norms[name], w[name][0], None, owned=owned)
        owned = True
    go = linear("o_proj", ga, owned, o.q, hd, None)
    assert go is not None
    need = {x: lay.graph or kd[x + "_proj"] != "frozen" for x in "qkv"}
    grads = {x: o.alloc(qb if o.gqa or x == "q" else kvb) for x in "qkv"}
    o.free(*(grads[x] for x in "qkv" if not need[x]))  # outputs nobody asked for
    bias = () if lay.bias is None else (lay.bias,)
    if o.unpacked:  # recomputed tensors go with the node's apply, before its input
        o.free(lay.attn, lay.lse, lay.v, lay.q, lay.k, *bias, go)
    else:
        o.free(go, *bias, lay.k, lay.q, lay.v, lay.lse, lay.attn)
    if o.gqa:
        for x in "vk":
            if need[x]:
                sm = o.alloc(kvb)
                o.free(grads[x])
                grads[x] = sm
    if need["k"]:
        grads["k"] = rope_backward(o, grads["k"], kvb, None)
    grads["q"] = rope_backward(o, grads["q"], qb, tables)
    if o.qk_norm:
        gemma_ops.qk_norm_backward(o, grads, need, lay.norms, w)
    # OLMoE's q / k norms run on the whole projection, before the heads' views: the views'
    # backward (the transposed gradients' copies, k's then q's) comes before v_proj's
    whole = moe is not None and moe.qk_whole
    for x in ("k", "q") if whole else ():
        if need[x]:
            c = o.alloc(kvb if x == "k" else qb)
            o.free(grads[x])
            grads[x] = c
    total: int | None = None
    for x, size in (("v", kvb), ("k", kvb), ("q", qb)):
        if not need[x]:
            continue
        if x != "v" and lay.qk is not None:  # the head norm's backward first
            nm = lay.qk[0 if x == "q" else 1]
            weight = w.get(x + "_norm", ((0, 0),))[0]  # (id, bytes) when it trains
            grads[x] = norm_backward(_per_head(o, o.q if x == "q" else o.kv, moe), grads[x], nm,
                                     weight, None)  # fmt: skip
        # the transposed gradient made contiguous for the view; the kernel's own v gradient
        # has the input's strides, and with one k/v head (b, 1, s, d) transposed is
        # contiguous: no copy (OLMoE: made above)
        if (x != "v" or o.gqa) and (x == "q" or o.repeat or not o.gqa) and not whole:
            c = o.alloc(size)
            o.free(grads[x])
            grads[x] = c
        c = grads[x]
        name = x + "_proj"
        last = (lay.norm1.out,) if x == "q" and kd[name] == "full" else ()
        nout = o.q if x == "q" else o.kv
        total = linear(name, c, True, hd, nout, total, last, lay.graph)
    if not lay.graph:
        o.free(*frame)
        return None
    assert total is not None
    o.frame = frame
    return _norm_backward(o, total, lay.norm1, w["input_layernorm"][0], s)


def _per_head(o: Ops, size: int, moe: Moe | None = None) -> Ops:
    """The ops of a norm over each head of a tensor of ``size`` elements: its statistics per
    head and token, no checkpoint frame of its own; OLMoE's (``moe.qk_whole``) over the whole
    projection, its statistics per token."""
    heads = 1 if moe is not None and moe.qk_whole else size // (o.tokens * o.head_dim)
    return replace(o, h=size, b=o.b * heads, frame=())


Param = tuple[int, int]  # (id, bytes)


@dataclass(frozen=True)
class Weights:
    """The trained tensors a micro-batch makes gradients for, as (id, bytes): per layer each
    linear's (its weight, or lora_A and lora_B, or nothing) and the two norms' weights (used
    when they train); the final norm's, the lm_head's and the embedding's (None when
    frozen)."""

    layers: list[dict[str, tuple[Param, ...]]]
    final_norm: Param
    head: Param | None
    embedding: Param | None


def _tables(o: Ops) -> tuple[int, int]:
    """LlamaRotaryEmbedding: fp32 frequencies, cat, cos and sin (times attention_scaling),
    cast to the compute dtype; kept by every rotary multiplication. Without position_ids
    LlamaModel makes them for one row (``arange(...).unsqueeze(0)``, modeling_llama.py
    lines 379-380), broadcast over the batch."""
    hd = (o.tokens if o.packed else o.s) * o.head_dim
    freqs = o.alloc(4 * hd // 2)
    cat = o.alloc(4 * hd)
    tmp = o.alloc(4 * hd)
    cos = o.alloc(4 * hd)
    o.free(tmp)
    tmp = o.alloc(4 * hd)
    sin = o.alloc(4 * hd)
    o.free(tmp)
    if o.p != 4:
        cos16, sin16 = o.alloc(o.p * hd), o.alloc(o.p * hd)
        o.free(freqs, cat, cos, sin)
        return cos16, sin16
    o.free(freqs, cat)
    return cos, sin


def micro_batch(
    o: Ops, w: Weights, ckpt: bool = False, moe: Moe | None = None, qk_norm: bool = False
) -> None:
    """Forward, loss and backward of one micro-batch (``model(**batch).loss``, then
    ``backward()``); ``ckpt``: each layer under non-reentrant gradient checkpointing; ``moe``:
    a mixture-of-experts block in each layer's MLP place."""
    row = o.p * o.h
    emb = o.alloc(row)  # the embedding's output (``inputs_embeds``, kept by LlamaModel)
    if o.gemma:  # times the scale, a new tensor (gemma_ops.scaled_embedding)
        emb = gemma_ops.scaled_embedding(o, emb)
    mask = None
    bss = o.b * o.s * o.s
    if o.mask and o.packed:  # masking_utils: causal and the packed sequences' mask, per row
        le = o.alloc(bss)
        causal = o.alloc(bss)
        o.free(le)
        same = o.alloc(bss)  # packed_sequence_mask_function: same sequence index
        mask = o.alloc(bss)
        o.free(same, causal)
    elif o.mask and not o.sliding:
        mask = sdpa_mask(o, o.window)
    # Gemma 3: the full and the sliding window's masks, then rotary tables per attention type
    # (modeling_gemma3.py ``Gemma3TextModel.forward``: ``causal_mask_mapping``, then
    # ``position_embeddings`` for each of ``set(config.layer_types)``)
    masks = [mask] if mask is not None else []
    if o.mask and o.sliding:
        made = {sl: sdpa_mask(o, sl) for sl in o.mask_order or (False, True)}
        masks = [made[False], made[True]]
    types = o.sliding or (False,) * len(w.layers)
    order = list(o.table_order or dict.fromkeys(types))
    tables = {t: _tables(o) for t in order}
    layers: list[Layer] = []
    x = emb
    # the embedding's output has a gradient when the embedding trains, or with checkpointing:
    # PEFT then makes it require one (peft 0.19 ``peft_model.py`` lines 728-741,
    # ``_prepare_model_for_gradient_checkpointing``: ``enable_input_require_grads``)
    graph = w.embedding is not None or ckpt
    inputs: list[int] = []  # each checkpointed layer's input, kept by its frame
    for i in range(len(w.layers)):
        o.saving = not ckpt
        layers.append(
            layer_forward(
                o, x, free_input=i > 0 and not ckpt, graph=graph or i > 0, moe=moe, qk_norm=qk_norm
            )
        )
        o.saving = True
        inputs.append(x)
        x = layers[-1].out
    final = _norm_forward(o, x)
    if o.p != 4:  # the last hidden state goes as the name is rebound
        o.free(x)
    # LlamaModel returns: its locals go in their order, the embedding output (an argument)
    # before the mask; in Qwen2Model the mask's arguments hold the embedding output. Under
    # checkpointing each layer's frame keeps both (its input, the mask among its kwargs)
    # the masks each layer's frame is the last to hold (its type's first layer)
    first = {types.index(t): t for t in order}
    held = {i: (masks[min(t, len(masks) - 1)],) if masks else () for i, t in first.items()}
    live = [] if ckpt else masks
    if o.mask_first:
        o.free(*live)
        live = []
    if o.p != 4 and not ckpt:
        o.free(emb)
    o.free(*live)
    # the lm_head, then ForCausalLMLoss: logits.float(), cross_entropy (log_softmax, nll)
    v = o.vocab * o.tokens
    logits = o.alloc(o.p * v)
    up = o.alloc(4 * v) if o.p != 4 else logits
    logp = o.alloc(4 * v)
    if up != logits:
        o.free(up)
    if w.head is None:  # a frozen lm_head keeps not its input
        o.free(final.out)
    o.free(logits)  # the output object goes: only the loss is kept
    # backward: nll_loss, log_softmax, the cast back, the lm_head
    g_nll = o.alloc(4 * v)
    g_ls = o.alloc(4 * v)
    o.free(g_nll, logp)
    g_logits = g_ls
    head_grad: int | None = None
    if o.p != 4:
        g_logits = o.alloc(o.p * v)
        o.free(g_ls)
    if w.head is not None:
        dw = o.alloc(w.head[1])
        o.matmul("backward")  # the backward's first matmul: its thread's cuBLAS workspace
        gx = o.alloc(row)
        o.free(g_logits, final.out)
        if w.embedding is not None and w.head[0] == w.embedding[0]:
            head_grad = dw  # tied: it waits in the shared weight's input buffer
        else:
            o.grad(w.head[0], dw)
    else:
        gx = o.alloc(row)
        o.matmul("backward")
        o.free(g_logits)
    g: int | None = _norm_backward(o, gx, final, w.final_norm, None)
    for i in reversed(range(len(layers))):
        assert g is not None

        def rerun(i: int = i, g: int = g) -> Layer:
            # (Gemma 3: the post-feedforward norm's gradient, after its output's cast)
            cast = gemma_ops.cast_grad(o, g, free_g=False) if o.sandwich else None
            lay = layer_forward(o, inputs[i], False, graph or i > 0, True, moe, qk_norm)
            lay.cast = cast
            o.unpacked = True
            # the embedding's output made to require a gradient is a leaf: it stays (with
            # its .grad) to the end of the backward
            # (the layer's keyword arguments: its mask, then the rotary tables, which its
            # type's first layer's frame is the last to hold), then its input unless that
            # is a leaf
            own = (*held[i], *tables[types[i]]) if i in first else ()
            o.frame = (*own, inputs[i]) if i > 0 or w.embedding is not None else own
            return lay

        if ckpt and moe is None:  # down_proj's node unpacks first: the layer recomputed
            layers[i] = rerun()
        t = tables[types[i]] if i in first and not ckpt else None
        later = rerun if ckpt and moe is not None else None  # inside the block's backward
        g = layer_backward(o, g, layers[i], w.layers[i], t, moe, later)
        o.unpacked = False
    if w.embedding is not None and o.gemma:
        assert g is not None
        gemma_ops.embedding_backward(o, g, w.embedding, head_grad)
    elif w.embedding is not None:
        assert g is not None
        dw = o.alloc(w.embedding[1])  # embedding_dense_backward
        o.free(g)
        o.grad(w.embedding[0], dw)
    elif ckpt and g is not None:  # the leaf's .grad, then the leaf as the graph goes
        o.free(g, emb)
