"""Gemma's and Gemma 3's layouts op by op: what differs from Llama's
(:mod:`cfgcheck.memory.layer_ops`, whose docstring has the autograd rules, and
:mod:`cfgcheck.memory.llama_step`, which puts the modules together and calls these where
``Ops.gemma`` / ``qk_norm`` / ``sandwich`` / ``sliding`` are set).

Covered (:func:`cfgcheck.memory.gemma_layout.exact`, with the linears' kinds and the layout's
:class:`Ops` fields): transformers' Gemma (``model_type`` gemma), Gemma 3's text model
(gemma3_text) and its multimodal model's (gemma3): GeGLU MLP, RMSNorm, tied embeddings, SDPA,
with or without non-reentrant gradient checkpointing, full fine-tuning in 16 or 32-bit weights
(the tied embedding trains) or PEFT LoRA as :func:`layer_ops.kinds` allows. The sources, as
installed and traced (transformers 5.24 ``models/gemma/modeling_gemma.py``,
``models/gemma3/modeling_gemma3.py``):

* ``GemmaTextScaledWordEmbedding.forward`` (gemma lines 60-61): ``super().forward(input_ids)
  * self.embed_scale.to(self.weight.dtype)``: the embedding's output is a temporary, the
  model's input a new tensor (:func:`scaled_embedding`); its ``MulBackward0`` keeps only the
  scale and multiplies the gradient before ``embedding_dense_backward``
  (:func:`embedding_backward`);
* ``GemmaRMSNorm`` (gemma lines 70-78, ``Gemma3RMSNorm`` line 119 the same):
  ``_norm(x.float())`` (its statistics unnamed temporaries), then ``output * (1.0 +
  self.weight.float())`` in fp32 and ``output.type_as(x)``: the weight's ``MulBackward0``
  keeps the fp32 normalised input when the weight trains, and the backward starts with the
  cast back to fp32 (:func:`norm_forward`, :func:`norm_backward`);
* ``GemmaMLP``: ``gelu_pytorch_tanh``'s ``gelu`` and ``gelu_backward`` make what SiLU's do;
* ``GemmaForCausalLM`` ties ``lm_head.weight`` (``_tied_weights_keys``): with full fine-tuning
  the lm_head's weight gradient waits in the shared weight's input buffer until the
  embedding's, then both are summed out of place (``InputBuffer::add``);
* Gemma 3: ``q_norm`` / ``k_norm`` per head after the projections (gemma3 line 329,
  :func:`qk_norm_forward`), ``post_attention_layernorm`` and ``post_feedforward_layernorm``
  on each sub-block's output (lines 394, 400, :func:`post_norm_forward`), a full and a
  sliding window's mask (``causal_mask_mapping``, line 525; the multimodal model's from
  ``create_masks_for_generate``, line 883, in ``set(layer_types)`` order) and rotary tables
  per attention type (line 533); under checkpointing the recomputation stops in the
  post-feedforward norm (:func:`stopped`). The multimodal model builds its vision tower
  (:func:`cfgcheck.memory.gemma_layout.outside_tensors`), which a text batch never runs.

tests/test_gemma_ops.py checks the generated sequence equals the traced one above 1 MiB (the
large pool), as tests/test_layer_ops.py does for Llama.
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory.layer_ops import Norm, Ops, add_grad


def scaled_embedding(o: Ops, emb: int) -> int:
    """``embedding(ids) * embed_scale.to(weight.dtype)``: the product is the model's input; the
    embedding's output and the cast scale (a copy unless the weights are fp32) go."""
    scale = o.alloc(o.p) if o.p != 4 else None
    out = o.alloc(o.p * o.h)
    o.free(emb)
    if scale is not None:
        o.free(scale)
    return out


def embedding_backward(o: Ops, g: int, weight: tuple[int, int], head_grad: int | None) -> None:
    """The scale's ``MulBackward0`` (g times the scale), ``embedding_dense_backward``, then the
    tied weight's buffer: the lm_head's gradient ``head_grad`` and the embedding's summed out
    of place (``InputBuffer::add``), the sum made ``.grad`` or added into it."""
    gm = o.alloc(o.p * o.h)
    o.free(g)
    dw = o.alloc(weight[1])
    o.free(gm)
    o.grad(weight[0], add_grad(o, weight[1], head_grad, dw))


@dataclass
class GemmaNorm(Norm):
    """:class:`Norm` plus ``1.0 + weight.float()``, kept by the weight's multiplication while
    its input has a gradient."""

    one: int | None = None


def norm_forward(
    o: Ops, x: int, graph: bool = True, size: int = 0, rows: int = 0, stop: bool = False
) -> Norm:
    """``GemmaRMSNorm`` (``Gemma3RMSNorm``) over ``size`` elements in ``rows`` rows (the hidden
    state by default, or q / k per head); its weight trains with full fine-tuning; ``graph``
    as in :func:`cfgcheck.memory.layer_ops.norm_forward`; ``stop``: a checkpoint's
    recomputation ends here, as the weight's multiplication packs its inputs (before its
    output: autograd saves inputs before the op runs)."""
    size, rows = size or o.h, rows or o.tokens
    h4, small, wrow = 4 * size, 4 * rows, 4 * (size // rows)
    c = o.alloc(h4) if o.p != 4 else x  # x.float()
    pw = o.alloc(h4)  # pow(2), freed once mean ran; mean once the sum ran
    mean = o.alloc(small)
    o.free(pw)
    add = o.alloc(small)
    o.free(mean)
    r = o.alloc(small)  # rsqrt (kept with x by the multiplication)
    o.free(add)
    n = o.alloc(h4)  # x * rsqrt
    keep = graph and o.saving
    if not keep:  # the rsqrt as the expression ends, x.float() as _norm returns
        o.free(r)
        if c != x:
            o.free(c)
    wf = o.alloc(wrow) if o.p != 4 else None  # self.weight.float()
    one = o.alloc(wrow)  # 1.0 + ...
    if wf is not None:
        o.free(wf)
    if stop:
        return GemmaNorm(c, r, n, -1, graph, one)
    y = o.alloc(h4)  # output * (1.0 + weight)
    trains = o.full and o.saving  # the weight's gradient needs the normalised input
    if not keep:
        o.free(one)
    if not trains:
        o.free(n)
    out = y
    if o.p != 4:  # output.type_as(x)
        out = o.alloc(o.p * size)
        o.free(y)
    return GemmaNorm(c, r, n if trains else None, out, graph, one if keep else None)


def cast_grad(o: Ops, g: int, size: int = 0, free_g: bool = True) -> int:
    """``type_as``'s ``ToCopyBackward0``: the gradient back to fp32 (``free_g``: nothing else
    holds ``g``)."""
    if o.p == 4:
        return g
    g32 = o.alloc(4 * (size or o.h))
    if free_g:
        o.free(g)
    return g32


def norm_backward(
    o: Ops,
    g: int,
    nm: Norm,
    weight: tuple[int, int],
    buf: int | None,
    size: int = 0,
    rows: int = 0,
    g32: int | None = None,
    owned: bool = True,
) -> int:
    """The backward of :func:`norm_forward`, as :func:`layer_ops.norm_backward` (same
    arguments and result); ``g32``: the gradient already cast back (:func:`cast_grad`);
    ``owned``: nothing else holds ``g`` (a residual's buffer does)."""
    size, rows = size or o.h, rows or o.tokens
    h4, small, row, wrow = 4 * size, 4 * rows, o.p * size, 4 * (size // rows)
    one = nm.one if isinstance(nm, GemmaNorm) else None
    if g32 is None:
        g32 = cast_grad(o, g, size, owned)
    drop = (g32,) if g32 != g or owned else ()
    # MulBackward0 of normed * (1 + weight): normed's gradient, then the weight's (summed)
    gn = o.alloc(h4)
    if nm.normed is not None:
        tmp = o.alloc(h4)
        ws = o.alloc(wrow)
        o.free(tmp, *drop, nm.normed, *(() if one is None else (one,)))
        # AddBackward0 passes it on; ToCopyBackward0 of weight.float() casts it back
        wg = ws
        if weight[1] != wrow:
            wg = o.alloc(weight[1])
            o.free(ws)
        o.grad(weight[0], wg)
    else:
        o.free(*drop, *(() if one is None else (one,)))
    # MulBackward0 of x * rsqrt, then the statistics, as in LlamaRMSNorm
    tmp = o.alloc(h4)
    gx = o.alloc(h4)
    rs = o.alloc(small)
    o.free(tmp, gn)
    if o.p == 4 and buf is not None:
        gx = add_grad(o, h4, buf, gx)
    a, b_, c_ = o.alloc(small), o.alloc(small), o.alloc(small)
    o.free(b_, a, rs, nm.rsqrt)
    dv = o.alloc(h4)  # MeanBackward0
    o.free(c_)
    pw = o.alloc(h4)  # PowBackward0
    t1 = o.alloc(h4)
    gp = o.alloc(h4)
    o.free(t1, pw, dv, nm.x)
    o.free(*o.frame)
    o.frame = ()
    gx = add_grad(o, h4, gx, gp)
    if o.p != 4:  # ToCopyBackward0 of x.float()
        gin = o.alloc(row)
        o.free(gx)
        gx = gin if buf is None else add_grad(o, row, buf, gin)
    return gx


def qk_norm_forward(o: Ops, qm: int, km: int, graph: bool, ex: dict[str, Norm]) -> tuple[int, int]:
    """Gemma 3's ``q_norm`` and ``k_norm`` on each head of q and k (modeling_gemma3.py
    ``Gemma3Attention.forward``, after the projections, before the rotary embedding); each
    projection's output goes as its name is rebound unless the fp32 norm keeps it."""
    out = []
    for x, t, size in (("q", qm, o.q), ("k", km, o.kv)):
        g = graph or o.kinds[x + "_proj"] != "frozen"
        nm = norm_forward(o, t, g, size, size // o.head_dim)
        if o.p != 4 or not (g and o.saving):
            o.free(t)
        ex[x + "_norm"] = nm
        out.append(nm.out)
    return out[0], out[1]


def qk_norm_backward(
    o: Ops,
    grads: dict[str, int],
    need: dict[str, bool],
    ex: dict[str, Norm],
    w: dict[str, tuple[tuple[int, int], ...]],
) -> None:
    """The backward of :func:`qk_norm_forward`, after the rotary embedding's: ``k_norm``'s
    nodes were made after ``q_norm``'s (autograd runs the later first)."""
    for x, size in (("k", o.kv), ("q", o.q)):
        if need[x]:
            name = x + "_norm"
            grads[x] = norm_backward(
                o, grads[x], ex[name], w[name][0], None, size, size // o.head_dim
            )


def post_norm_forward(o: Ops, x: int, ex: dict[str, Norm], name: str, stop: bool = False) -> int:
    """Gemma 2 / 3's norm on a sub-block's output (``post_attention_layernorm`` on the
    attention's, ``post_feedforward_layernorm`` on the MLP's), before the residual sum; its
    input goes as the name is rebound unless the fp32 norm keeps it."""
    nm = norm_forward(o, x, True, stop=stop)
    ex[name] = nm
    if stop:
        return -1
    if o.p != 4 or not o.saving:
        o.free(x)
    return nm.out


def stopped(o: Ops, down: int, r1: int, ex: dict[str, Norm]) -> None:
    """The recomputation's stop in ``post_feedforward_layernorm`` (see :func:`norm_forward`):
    the norm's frame goes (its normalised input unless the trained weight's multiplication
    packed it), then the layer's (the MLP's output, the residual) unless fp32 norms saved
    them."""
    nm = ex["post_feedforward_layernorm"]
    if not o.full and nm.normed is not None:
        o.free(nm.normed)
        nm.normed = None
    if o.p != 4:
        o.free(down, r1)
