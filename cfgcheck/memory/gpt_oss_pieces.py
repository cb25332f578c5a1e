"""gpt-oss's own small pieces op by op, for :mod:`cfgcheck.memory.gpt_oss_ops` (transformers
5.24 ``models/gpt_oss/modeling_gpt_oss.py``; line numbers of that file):

* ``GptOssModel.forward`` (l.435-480): ``create_causal_mask`` then
  ``create_sliding_window_causal_mask`` (eager: each a boolean mask made by ``and_masks``
  then ``where``'d into an additive mask in the compute dtype, both alive to the model's
  end, or under checkpointing to the backward of the lowest layer of their type);
  ``GptOssRotaryEmbedding.forward`` (l.186-192): ``freqs`` only half a head wide (no
  ``cat``), ``cos()``/``sin()`` times ``attention_scaling`` (YaRN), cast to the dtype.
* ``GptOssRMSNorm.forward`` (l.57-62): the weight multiplies the fp32 normalised tensor
  before the cast (``(self.weight * hidden_states).to(input_dtype)``), so both fp32 products
  are alive at the cast; the fp32 copy is kept when the input has a gradient. Its backward
  starts with the cast's ``ToCopyBackward0`` (fp32), then the weight's product in fp32.
* ``_apply_rotary_emb`` (l.205-213): ``chunk``, four half-width products, ``sub``, ``add``,
  ``cat``; nothing of q or k is kept (cos and sin are).
"""

from __future__ import annotations

from dataclasses import replace

from cfgcheck.memory import layer_ops
from cfgcheck.memory.layer_ops import Norm, Ops, add_grad


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
    """The full and the sliding additive masks: each boolean mask
    (:func:`cfgcheck.memory.layer_ops.sdpa_mask`), then its ``where`` in the compute dtype."""
    full = layer_ops.sdpa_mask(o, False)
    additive = o.alloc(o.p * o.b * o.s * o.s)
    o.free(full)
    sliding = layer_ops.sdpa_mask(o, True)
    additive_sliding = o.alloc(o.p * o.b * o.s * o.s)
    o.free(sliding)
    return additive, additive_sliding


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
