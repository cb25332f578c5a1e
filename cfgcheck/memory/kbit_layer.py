"""One decoder layer of a QLoRA model (transformers' ``LlamaDecoderLayer`` with bitsandbytes
4-bit linears and PEFT LoRA), forward and backward op by op, with non-reentrant checkpointing's
recomputation and early stop: the layer of :func:`cfgcheck.memory.events_kbit.kbit_step_events`
(the mechanisms and sources are listed there)."""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory.kbit_ops import (
    ATTN_IN,
    KbitOps,
    Linear,
    Recompute,
    linear_backward,
    linear_forward,
)
from cfgcheck.memory.layer_ops import (
    Adapter,
    Norm,
    norm_backward,
    norm_forward,
    rope_backward,
    rope_forward,
)


@dataclass(frozen=True)
class Layout:
    """One decoder layer's shapes (bytes of fp32 tensors of the micro-batch)."""

    h: int  # hidden size
    q: int  # bytes of the queries (and of k / v once repeated to every head)
    kv: int  # bytes of the keys (values)
    mask: int  # the boolean mask made an additive fp32 bias (``where``), 0 without one
    inter: int  # bytes of an intermediate-size tensor
    lin: dict[str, Linear]

    @property
    def repeat(self) -> bool:
        return self.kv != self.q


@dataclass
class Saved:
    """What one layer's forward leaves for its backward (ids; 0 where nothing)."""

    lin: dict[str, Adapter | None]
    n1: int = 0
    qe: int = 0
    ke: int = 0
    v: int = 0
    kr: int = 0
    vr: int = 0
    mask: int = 0
    att: int = 0
    h1: int = 0
    n2: int = 0
    g: int = 0
    act: int = 0
    u: int = 0
    p: int = 0


def _keeps_input(c: KbitOps, L: Layout, *names: str) -> bool:
    """A LoRA without dropout keeps its input itself (PEFT's ``lora_A(dropout(x))``)."""
    return not c.dropout and any(L.lin[n].adapted for n in names)


def norm(c: KbitOps) -> int:
    """``LlamaRMSNorm`` on an fp32 input with a frozen fp32 weight (its output)."""
    return norm_forward(c, 0).out


def norm_back(c: KbitOps, g: int, x: int, res: int | None = None) -> int:
    """``LlamaRMSNorm``'s backward (fp32, frozen weight) for the gradient ``g`` (freed), the
    saved input ``x`` (released; 0 where the caller holds it; a recomputed one where
    ``c.unpacked``), into ``res``, the gradient the input already has (the residual's)."""
    return norm_backward(c, g, Norm(x, 0, None, 0), (0, 0), res)


def input_norm_back(c: KbitOps, g: int, x: int, res: int) -> int:
    """The input norm's backward: its input ``x`` is the layer's (under checkpointing the
    frame's, not recomputed: it goes as a saved tensor does)."""
    c.frame = (x,) if c.unpacked and x else ()
    return norm_back(c, g, 0 if c.frame else x, res)


def layer_forward(c: KbitOps, L: Layout, keep: bool, stop: bool = False) -> tuple[int, Saved]:
    """A decoder layer's forward as transformers' ``LlamaDecoderLayer`` runs it (the input is
    the caller's). ``keep``: the saved tensors stay (not checkpointed, or a recomputation);
    ``stop``: the recomputation's early stop after the last saved tensor. Returns the output
    (0 when stopped) and the saved tensors."""
    R = 4 * c.tokens * L.h
    c.saving = keep
    sv = Saved(lin={})
    n1 = norm(c)
    outs = {}
    for name in ("q_proj", "k_proj", "v_proj"):
        outs[name], sv.lin[name] = linear_forward(c, L.lin[name])
    qe, ke = rope_forward(c, L.q), rope_forward(c, L.kv)
    c.free(outs["q_proj"], outs["k_proj"])
    v = outs["v_proj"]
    kr, vr = (c.alloc(L.q), c.alloc(L.q)) if L.repeat else (ke, v)  # repeat_kv: expand + reshape
    mask = c.alloc(L.mask) if L.mask else 0
    att = c.alloc(L.q)  # sdpa's output (and a per-row log-sum-exp, left out)
    if not keep:
        c.free(*([mask] if mask else []), *([kr, vr] if L.repeat else []))
    o, sv.lin["o_proj"] = linear_forward(c, L.lin["o_proj"])
    attn_in = _keeps_input(c, L, "q_proj", "k_proj", "v_proj")
    if not keep:
        c.free(att, qe, ke, v, n1)
    else:
        c.free(*([ke, v] if L.repeat else []), *([] if attn_in else [n1]))
        sv.n1, sv.qe, sv.ke, sv.v, sv.kr, sv.vr = n1 if attn_in else 0, qe, ke, v, kr, vr
        sv.mask, sv.att = mask, att
    h1 = c.alloc(R)
    c.free(o)
    n2 = norm(c)
    g, sv.lin["gate_proj"] = linear_forward(c, L.lin["gate_proj"])
    act = c.alloc(L.inter)  # silu
    if not keep:
        c.free(g)
    u, sv.lin["up_proj"] = linear_forward(c, L.lin["up_proj"])
    down = L.lin["down_proj"]
    mlp_in = _keeps_input(c, L, "gate_proj", "up_proj")
    if stop and not down.adapted:
        # MulBackward's inputs were the last saved, packed before the product is made
        sv.h1, sv.n2, sv.g, sv.act, sv.u = h1, n2 if mlp_in else 0, g, act, u
        sv.lin["down_proj"] = None
        c.free(*([] if mlp_in else [n2]))
        return 0, sv
    p = c.alloc(L.inter)
    if not keep:
        c.free(act, u)
    down_in = _keeps_input(c, L, "down_proj")
    if keep:
        sv.h1, sv.n2, sv.g, sv.act, sv.u = h1, n2 if mlp_in else 0, g, act, u
        sv.p = p if down_in else 0
    dn, sv.lin["down_proj"] = linear_forward(c, down, stop)
    if stop:
        c.free(*([] if down_in else [p]), *([] if mlp_in else [n2]))
        return 0, sv
    c.free(*([p] if not (keep and down_in) else []), *([n2] if not (keep and mlp_in) else []))
    h2 = c.alloc(R)
    c.free(dn, *([] if keep else [h1]))
    return h2, sv


def layer_backward(c: KbitOps, L: Layout, g_out: int, x: int, sv: Saved | None) -> int | None:
    """The layer's backward for the gradient of its output ``g_out`` (freed) and its input
    ``x`` (released with norm 1's backward); ``sv`` None: checkpointed, recomputed (early
    stop) where the first saved tensor is unpacked. Returns the input's gradient."""
    held: list[Saved] = [sv] if sv is not None else []

    def recompute() -> tuple[Adapter | None, int]:
        c.recomputing = True
        _, s = layer_forward(c, L, keep=True, stop=True)
        c.recomputing = False
        held.append(s)
        return s.lin["down_proj"], s.p

    down = L.lin["down_proj"]
    if sv is not None:
        rc: Recompute | None = None
        down_saved = sv.lin["down_proj"]
    else:
        rc, down_saved = (recompute if down.adapted else None), None

    def last(names: tuple[str, ...], saved_input: int) -> dict[str, int]:
        """The saved input goes with the last (in backward order) adapter holding it."""
        holders = [n for n in names if L.lin[n].adapted]
        return {holders[-1]: saved_input} if holders and saved_input else {}

    p_release = sv.p if sv is not None else 0  # recomputed: known after the recomputation
    g_p = linear_backward(c, down, g_out, False, down_saved, None, rc, p_release)
    assert g_p is not None
    if not held:
        recompute()
    s = held[0]
    g_u, g_act = c.alloc(L.inter), c.alloc(L.inter)  # MulBackward
    c.free(*((s.act, s.u, g_p) if c.unpacked else (g_p, s.u, s.act)))
    rel = last(("up_proj", "gate_proj"), s.n2)
    buf = linear_backward(
        c, L.lin["up_proj"], g_u, True, s.lin["up_proj"], None, release=rel.get("up_proj", 0)
    )
    g_g = c.alloc(L.inter)  # silu's backward
    c.free(*((s.g, g_act) if c.unpacked else (g_act, s.g)))
    buf = linear_backward(
        c, L.lin["gate_proj"], g_g, True, s.lin["gate_proj"], buf,
        release=rel.get("gate_proj", 0),
    )  # fmt: skip
    assert buf is not None
    g_h1 = norm_back(c, buf, s.h1, g_out)
    # without an input gradient the residual's gradient has no other use
    g_att = linear_backward(c, L.lin["o_proj"], g_h1, not c.input_grad, s.lin["o_proj"], None)
    assert g_att is not None
    # the projections whose output needs a gradient: all, unless the layer's input needs
    # none (the first layer without checkpointing): then only the adapted ones
    need = {n: c.input_grad or L.lin[n].adapted for n in ATTN_IN}
    gq, gk, gv = c.alloc(L.q), c.alloc(L.q), c.alloc(L.q)  # sdpa's backward
    c.free(*(g for g, n in ((gq, "q_proj"), (gk, "k_proj"), (gv, "v_proj")) if not need[n]))
    kept = (s.att, s.vr, s.qe, s.kr, *([s.mask] if s.mask else []))
    if c.unpacked:  # recomputed tensors go with the node's apply, before its input
        c.free(*kept, g_att)
    else:
        c.free(g_att, *reversed(kept))
    if L.repeat:  # repeat_kv's backward: the heads summed, v's first
        if need["v_proj"]:
            gv2 = c.alloc(L.kv)
            c.free(gv)
            gv = gv2
        if need["k_proj"]:
            gk2 = c.alloc(L.kv)
            c.free(gk)
            gk = gk2
    if need["k_proj"]:
        gk = rope_backward(c, gk, L.kv, None)
    if need["q_proj"]:
        gq = rope_backward(c, gq, L.q, None)
    buf = None
    rel = last(("v_proj", "k_proj", "q_proj"), s.n1)
    for name, g, n in (("v_proj", gv, L.kv), ("k_proj", gk, L.kv), ("q_proj", gq, L.q)):
        if not need[name]:
            continue
        contiguous = c.alloc(n)  # the view's backward of a transposed gradient
        c.free(g)
        buf = linear_backward(
            c, L.lin[name], contiguous, True, s.lin[name], buf, release=rel.get(name, 0),
            need_input=c.input_grad,
        )  # fmt: skip
    if not c.input_grad:
        c.free(*([buf] if buf else []))
        return None
    assert buf is not None
    return input_norm_back(c, buf, x, g_h1)
