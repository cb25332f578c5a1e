"""Gemma's layout op by op: what differs from Llama's (:mod:`cfgcheck.memory.layer_ops`, whose
docstring has the autograd rules, and :mod:`cfgcheck.memory.llama_step`, which puts the
modules together and calls these where ``Ops.gemma`` is set).

Covered (:func:`exact`): transformers' Gemma (``model_type`` gemma: GeGLU MLP, RMSNorm, tied
embeddings), SDPA, with or without non-reentrant gradient checkpointing, full fine-tuning in
16 or 32-bit weights (the tied embedding trains) or PEFT LoRA as :func:`layer_ops.kinds`
allows. The sources, as installed and traced (transformers 5.24
``models/gemma/modeling_gemma.py``):

* ``GemmaTextScaledWordEmbedding.forward`` (lines 60-61): ``super().forward(input_ids) *
  self.embed_scale.to(self.weight.dtype)``: the embedding's output is a temporary, the model's
  ``inputs_embeds`` a new tensor (:func:`scaled_embedding`); its ``MulBackward0`` keeps only
  the scale (a buffer without gradient), and makes the output's gradient times the scale
  before ``embedding_dense_backward`` (:func:`embedding_backward`);
* ``GemmaRMSNorm`` (lines 70-78): ``_norm(x.float())`` (``x * rsqrt(x.pow(2).mean(-1,
  keepdim=True) + eps)``, its statistics unnamed temporaries), then ``output * (1.0 +
  self.weight.float())`` in fp32 and ``output.type_as(x)``: Llama casts before the weight's
  multiplication, Gemma after it, so the weight's ``MulBackward0`` keeps the fp32 normalised
  input when the weight trains, and its backward starts with the cast back to fp32
  (:func:`norm_forward`, :func:`norm_backward`);
* ``GemmaMLP`` (lines 95-96): ``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` with
  ``gelu_pytorch_tanh``: ``gelu`` and ``gelu_backward`` keep and make what SiLU's do (one
  tensor each), so the MLP is Llama's;
* ``GemmaForCausalLM`` ties ``lm_head.weight`` to the embedding (``_tied_weights_keys``,
  line 434): with full fine-tuning the lm_head's weight gradient waits in the shared
  weight's input buffer until the embedding's arrives, then the two are summed out of place
  (``InputBuffer::add``) into ``.grad`` (:func:`embedding_backward`).

The attention (``GemmaAttention``: rotary embedding, ``repeat_kv``, SDPA) and the decoder layer
are Llama's. tests/test_gemma_ops.py checks the generated sequence equals the traced one above
1 MiB (the large pool), as tests/test_layer_ops.py does for Llama.
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory.layer_ops import Norm, Ops, add_grad, kinds
from cfgcheck.memory.modules import architecture_of
from cfgcheck.memory.params import block_linears
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def exact(m: ModelConfig, d: DataConfig, t: TrainerConfig) -> bool:
    """The Gemma settings generated op by op (see the module docstring)."""
    del d  # Gemma has no sliding window; the mask follows the data as for Llama
    return (
        architecture_of(m) == "gemma"
        and not (t.gradient_checkpointing and (kinds(m, t) or {}).get("down_proj") == "lora")
        and t.loss_chunking == "none"
        and t.attention == "sdpa"
        and t.precision in ("bf16-true", "16-true", "32-true")
        and m.norm == "rmsnorm"
        and m.mlp == "geglu"
        and tuple(x.name for x in block_linears(m)) == LINEARS
        and not any(x.bias for x in block_linears(m))
        and not m.norm_qk
        and not m.shared_attention_norm
        and not m.post_attention_norm
        and not m.post_mlp_norm
        and not m.parallel_residual
        and not m.attention_logit_softcapping
        and not m.final_logit_softcapping
        and m.sliding_window_size is None
        and (m.rotary_fraction or 1.0) == 1.0
        and m.tie_embeddings
        and kinds(m, t) is not None
    )


def scaled_embedding(o: Ops, emb: int) -> int:
    """``embedding(ids) * embed_scale.to(weight.dtype)``: the product is the model's input; the
    embedding's output and the cast scale (a copy unless the weights are fp32) go."""
    scale = o.alloc(o.p) if o.p != 4 else None
    out = o.alloc(o.p * o.h)
    o.free(emb)
    if scale is not None:
        o.free(scale)
    return out


def embedding_backward(
    o: Ops, g: int, weight: tuple[int, int], head_grad: int | None
) -> None:
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


def norm_forward(o: Ops, x: int, graph: bool = True) -> Norm:
    """``GemmaRMSNorm``; its weight trains with full fine-tuning; ``graph`` as in
    :func:`cfgcheck.memory.layer_ops.norm_forward`."""
    h4, small, wrow = 4 * o.h, 4 * o.tokens, 4 * (o.h // o.tokens)
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
    y = o.alloc(h4)  # output * (1.0 + weight)
    trains = o.full and o.saving  # the weight's gradient needs the normalised input
    if not keep:
        o.free(one)
    if not trains:
        o.free(n)
    out = y
    if o.p != 4:  # output.type_as(x)
        out = o.alloc(o.p * o.h)
        o.free(y)
    return GemmaNorm(c, r, n if trains else None, out, graph, one if keep else None)


def norm_backward(o: Ops, g: int, nm: Norm, weight: tuple[int, int], buf: int | None) -> int:
    """The backward of :func:`norm_forward`, as :func:`layer_ops.norm_backward` (same
    arguments and result)."""
    h4, small, row, wrow = 4 * o.h, 4 * o.tokens, o.p * o.h, 4 * (o.h // o.tokens)
    one = nm.one if isinstance(nm, GemmaNorm) else None
    g32 = g
    if o.p != 4:  # ToCopyBackward0 of type_as
        g32 = o.alloc(h4)
        o.free(g)
    # MulBackward0 of normed * (1 + weight): normed's gradient, then the weight's (summed)
    gn = o.alloc(h4)
    if nm.normed is not None:
        tmp = o.alloc(h4)
        ws = o.alloc(wrow)
        o.free(tmp, g32, nm.normed, *(() if one is None else (one,)))
        # AddBackward0 passes it on; ToCopyBackward0 of weight.float() casts it back
        wg = ws
        if weight[1] != wrow:
            wg = o.alloc(weight[1])
            o.free(ws)
        o.grad(weight[0], wg)
    else:
        o.free(g32, *(() if one is None else (one,)))
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
