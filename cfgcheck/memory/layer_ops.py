"""One micro-batch of a Llama-architecture model, op by op: every tensor the forward and the
backward allocate, with its size, in the order the CUDA caching allocator sees them (the input
of :mod:`cfgcheck.memory.allocsim`, called from :func:`cfgcheck.memory.events.step_events`).

Covered (:func:`exact`): transformers' ``LlamaForCausalLM`` layout (RMSNorm, SwiGLU MLP, rotary
on every head dimension, no biases, an untied lm_head), full fine-tuning in 16 or 32-bit
weights, SDPA, no checkpointing. The sources, as installed and traced (transformers 5.24
``models/llama/modeling_llama.py``, torch 2.13.0 ``torch/csrc/autograd``):

* ``LlamaRMSNorm.forward``: ``hidden_states.to(torch.float32)`` (a copy for 16-bit weights,
  the tensor itself in fp32), ``variance = hidden_states.pow(2).mean(-1, keepdim=True)``,
  ``hidden_states * torch.rsqrt(variance + eps)``, ``self.weight * hidden_states.to(dtype)``;
  autograd keeps ``pow``'s input, the ``rsqrt``, ``mul``'s two inputs and, when the weight
  trains, the cast (``MulBackward0`` saves ``other`` for ``self``'s gradient,
  ``tools/autograd/derivatives.yaml`` ``mul.Tensor``);
* ``LlamaAttention.forward``: the q, k, v projections, ``apply_rotary_pos_emb`` (``q * cos +
  rotate_half(q) * sin``, ``rotate_half``: ``cat((-x2, x1))``), ``repeat_kv`` (a copy of k and
  v per query head, grouped-query attention), the kernel (its output and log-sum-exp kept),
  ``o_proj``; the rotary k and the projected v go when the function returns;
* ``LlamaDecoderLayer.forward``: ``residual + hidden_states`` twice; the first sum (``residual``)
  and the layer's input (the caller's ``hidden_states``) go when the layer returns, unless an
  fp32 norm saved them;
* ``LlamaMLP``: ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``;
* the backward: autograd runs the ready node made last in the forward first
  (``ReadyQueue::CompareNodeTaskTime``, ``engine.h``), AccumulateGrad right after the node
  that made the gradient (its ``sequence_nr`` is ``UINT64_MAX``); each node allocates its
  outputs, then its inputs go, then its saved tensors (``Engine::evaluate_function``:
  ``call_function``, then ``fn.release_variables()``), then each output is added into the
  next node's input buffer, out of place when one is already there (``InputBuffer::add``);
  ``mm``'s backward makes the weight's gradient before the input's
  (``mm_mat2_backward`` / ``mm_mat1_backward``); AccumulateGrad keeps the first gradient as
  ``.grad`` and adds the others in place, freeing them.

The traced step (tests/alloc_tracer.py on meta tensors at full size,
benchmarks/allocator_meta_trace.py) is the reference: tests/test_layer_ops.py checks this
sequence equals it for every tensor above 1 MiB (the large pool, ``kSmallSize``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cfgcheck.memory.params import block_linears, count_params
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

Alloc = Callable[[int], int]
Free = Callable[..., None]


@dataclass
class Ops:
    """The event sink (:class:`cfgcheck.memory.events.Seq`'s alloc and free) and the sizes of
    one micro-batch; ``grads`` maps a parameter's id to its ``.grad``'s id."""

    alloc: Alloc
    free: Free
    matmul: Callable[[str], None]
    p: int  # bytes of the compute dtype (the weights')
    b: int
    s: int
    h: int  # hidden elements of the batch (n_embd x tokens)
    q: int  # query elements (heads x head size x tokens)
    kv: int  # key / value elements
    inter: int  # the MLP's intermediate elements
    head_dim: int
    n_head: int
    vocab: int
    mask: bool  # SDPA gets a boolean mask (made an additive bias per call)
    grads: dict[int, int] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.b * self.s

    @property
    def gqa(self) -> bool:
        return self.q != self.kv

    def grad(self, param: int, g: int) -> None:
        """AccumulateGrad: the first gradient becomes ``.grad``, the next ones are added into it
        and freed."""
        if param in self.grads:
            self.free(g)
        else:
            self.grads[param] = g


def exact(m: ModelConfig, d: DataConfig, t: TrainerConfig) -> bool:
    """The settings this module generates op by op (see the module docstring)."""
    linears = block_linears(m)
    return (
        t.finetuning == "full"
        and not t.gradient_checkpointing
        and t.attention == "sdpa"
        and t.precision in ("bf16-true", "16-true", "32-true")
        and m.norm == "rmsnorm"
        and m.mlp == "swiglu"
        and [x.name for x in linears]
        == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        and not any(x.bias for x in linears)
        and not m.shared_attention_norm
        and not m.post_attention_norm
        and not m.post_mlp_norm
        and not m.parallel_residual
        and (m.rotary_fraction or 1.0) == 1.0
        and not m.tie_embeddings
        and bool(count_params(m).lm_head)
        and "gemma" not in m.name.lower()
        and m.sliding_window_size is None
    )


@dataclass
class Norm:
    """What an RMSNorm keeps for its backward."""

    x: int  # the fp32 input (a copy for 16-bit weights, the input itself in fp32)
    rsqrt: int
    normed: int  # the input of the weight's multiplication (cast back for 16-bit weights)
    out: int


def norm_forward(o: Ops, x: int) -> Norm:
    """``LlamaRMSNorm`` with a trained weight."""
    h4, small = 4 * o.h, 4 * o.tokens
    c = o.alloc(h4) if o.p != 4 else x  # hidden_states.to(torch.float32)
    pw = o.alloc(h4)  # pow(2)
    mean = o.alloc(small)
    o.free(pw)
    add = o.alloc(small)  # variance + eps
    r = o.alloc(small)
    o.free(add)
    n = o.alloc(h4)  # hidden_states * rsqrt
    if o.p != 4:
        normed = o.alloc(o.p * o.h)  # .to(input_dtype), kept for the weight's gradient
        out = o.alloc(o.p * o.h)
        o.free(n)
    else:
        normed = n
        out = o.alloc(h4)
    o.free(mean)
    return Norm(c, r, normed, out)


def norm_backward(
    o: Ops, g: int, nm: Norm, weight: tuple[int, int], buf: int | None
) -> int:
    """The backward of :func:`norm_forward` for the incoming gradient ``g``, the norm's input
    gradient added into ``buf`` (what its input's node holds already, or None). Returns the
    input's gradient (the buffer)."""
    h4, small, row = 4 * o.h, 4 * o.tokens, o.p * o.h
    # MulBackward0 of weight * normed: normed's gradient (g * weight), the weight's (g * normed,
    # summed); then g and normed go
    gn = o.alloc(row)
    tmp = o.alloc(row)
    wg = o.alloc(weight[1])
    o.free(tmp, g, nm.normed)
    o.grad(weight[0], wg)
    if o.p != 4:  # ToCopyBackward0: the gradient back to fp32
        g32 = o.alloc(h4)
        o.free(gn)
        gn = g32
    # MulBackward0 of x * rsqrt: rsqrt's gradient (g * x, summed), x's (g * rsqrt)
    tmp = o.alloc(h4)
    gx = o.alloc(h4)
    rs = o.alloc(small)
    o.free(tmp, gn)
    if o.p == 4 and buf is not None:  # fp32: x is the norm's input, its buffer adds
        gx = _add(o, h4, buf, gx)
    # rsqrt, add, mean: their backward on the statistics
    a, b_, c_ = o.alloc(small), o.alloc(small), o.alloc(small)
    o.free(b_, a, rs, nm.rsqrt)
    dv = o.alloc(h4)  # MeanBackward0: the gradient spread over the row
    o.free(c_)
    pw = o.alloc(h4)  # PowBackward0: 2 * x * grad
    t1 = o.alloc(h4)
    gp = o.alloc(h4)
    o.free(t1, pw, dv, nm.x)
    gx = _add(o, h4, gx, gp)
    if o.p != 4:  # ToCopyBackward0 of the fp32 copy
        gin = o.alloc(row)
        o.free(gx)
        gx = gin if buf is None else _add(o, row, buf, gin)
    return gx


def _add(o: Ops, size: int, old: int, new: int) -> int:
    """``InputBuffer::add`` out of place: the sum, then the two gradients go."""
    s = o.alloc(size)
    o.free(old, new)
    return s


def _rope_forward(o: Ops, size: int) -> int:
    """``x * cos + rotate_half(x) * sin``; ``rotate_half``: ``cat((-x2, x1), dim=-1)``."""
    a = o.alloc(size)  # x * cos
    neg = o.alloc(size // 2)
    cat = o.alloc(size)
    o.free(neg)
    b = o.alloc(size)  # rotate_half(x) * sin
    o.free(cat)
    out = o.alloc(size)
    o.free(a, b)
    return out


def _rope_backward(o: Ops, g: int, size: int, tables: tuple[int, int] | None) -> int:
    """The rotary embedding's backward: ``rotate_half(x) * sin`` first (made last), its cat's
    two halves (one negated) each spread back to full size (``slice_backward``) and summed,
    then ``x * cos``; returns x's gradient. ``tables``: (cos, sin) when these are the last
    nodes that keep them (the first layer's q)."""
    a = o.alloc(size)  # g * sin
    if tables:
        o.free(tables[1])
    neg = o.alloc(size // 2)
    s1 = o.alloc(size)
    o.free(neg)
    s2 = o.alloc(size)
    o.free(a)
    acc = _add(o, size, s1, s2)
    b = o.alloc(size)  # g * cos
    o.free(g)
    if tables:
        o.free(tables[0])
    return _add(o, size, acc, b)


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


def layer_forward(o: Ops, x: int, free_input: bool) -> Layer:
    """``LlamaDecoderLayer.forward`` with the module's ops; ``free_input``: the caller drops its
    reference to ``x`` when the layer returns (not the embedding output)."""
    row, qb, kvb = o.p * o.h, o.p * o.q, o.p * o.kv
    n1 = norm_forward(o, x)
    qm = o.alloc(qb)
    o.matmul("forward")
    km, vm = o.alloc(kvb), o.alloc(kvb)
    q = _rope_forward(o, qb)
    k = _rope_forward(o, kvb)
    o.free(qm, km)
    kk, vv = (o.alloc(qb), o.alloc(qb)) if o.gqa else (k, vm)  # repeat_kv
    bias = None
    if o.mask:  # the boolean mask as an additive bias: where(mask.logical_not(), -inf, 0)
        nt = o.alloc(o.b * o.s * o.s)
        bias = o.alloc(o.p * o.b * o.s * o.s)
        o.free(nt)
    attn = o.alloc(qb)
    lse = o.alloc(4 * o.b * o.n_head * -(-o.s // 32) * 32)  # fp32, rows padded to 32
    out = o.alloc(row)  # o_proj
    if o.gqa:
        o.free(k, vm)
    r1 = o.alloc(row)
    o.free(out)
    n2 = norm_forward(o, r1)
    ib = o.p * o.inter
    gate = o.alloc(ib)
    act = o.alloc(ib)
    up = o.alloc(ib)
    prod = o.alloc(ib)
    down = o.alloc(row)
    r2 = o.alloc(row)
    o.free(down)
    if o.p != 4:  # the fp32 norms keep their inputs themselves
        o.free(r1)
        if free_input:
            o.free(x)
    return Layer(n1, n2, q, kk, vv, bias, attn, lse, gate, act, up, prod, r2)


def layer_backward(
    o: Ops, g: int, lay: Layer, w: list[int], wb: list[int], tables: tuple[int, int] | None
) -> int:
    """The layer's backward for the gradient ``g`` of its output; ``w``: the ids of its
    parameters (q, k, v, o, gate, up, down, input norm, post norm), ``wb`` their bytes.
    Returns the gradient of the layer's input."""
    row, ib, qb, kvb = o.p * o.h, o.p * o.inter, o.p * o.q, o.p * o.kv
    # the MLP: down, the product, up, SiLU, gate (the order of their sequence numbers)
    dw = o.alloc(wb[6])
    gp = o.alloc(ib)
    o.free(lay.prod)
    o.grad(w[6], dw)
    gu, ga = o.alloc(ib), o.alloc(ib)  # MulBackward0: other's gradient, then self's
    o.free(gp, lay.up, lay.act)
    dw = o.alloc(wb[5])
    gx1 = o.alloc(row)
    o.free(gu)
    o.grad(w[5], dw)
    gg = o.alloc(ib)  # SiluBackward0
    o.free(ga, lay.gate)
    dw = o.alloc(wb[4])
    gx2 = o.alloc(row)
    o.free(gg, lay.norm2.out)
    gx = _add(o, row, gx1, gx2)  # the output into its buffer, then AccumulateGrad runs
    o.grad(w[4], dw)
    # the post-attention norm; its input's buffer holds g (the residual's path)
    s = norm_backward(o, gx, lay.norm2, (w[8], wb[8]), g)
    # the attention: o_proj, the kernel, repeat_kv's sums, the rotary k then q, then v, k, q
    dw = o.alloc(wb[3])
    go = o.alloc(qb)
    o.grad(w[3], dw)
    dq, dk, dv = o.alloc(qb), o.alloc(qb if o.gqa else kvb), o.alloc(qb if o.gqa else kvb)
    o.free(go)
    if lay.bias is not None:
        o.free(lay.bias)
    o.free(lay.k, lay.q, lay.v, lay.lse, lay.attn)
    if o.gqa:
        sv = o.alloc(kvb)
        o.free(dv)
        sk = o.alloc(kvb)
        o.free(dk)
        dv, dk = sv, sk
    dk = _rope_backward(o, dk, kvb, None)
    dq = _rope_backward(o, dq, qb, tables)
    total: int | None = None
    for grad_out, size, j in ((dv, kvb, 2), (dk, kvb, 1), (dq, qb, 0)):
        c = o.alloc(size)  # the transposed gradient made contiguous for the view
        o.free(grad_out)
        dw = o.alloc(wb[j])
        gin = o.alloc(row)
        o.free(c)
        if j == 0:
            o.free(lay.norm1.out)
        total = gin if total is None else _add(o, row, total, gin)
        o.grad(w[j], dw)
    assert total is not None
    return norm_backward(o, total, lay.norm1, (w[7], wb[7]), s)


def micro_batch(o: Ops, params: list[tuple[int, int]]) -> None:
    """Forward, loss and backward of one micro-batch (``model(**batch).loss``, then
    ``backward()``). ``params``: (id, bytes) of every parameter in module order (embedding;
    per layer q, k, v, o, gate, up, down, the two norms; the final norm; the lm_head)."""
    row = o.p * o.h
    emb = o.alloc(row)  # the embedding's output (``inputs_embeds``, kept by LlamaModel)
    mask = None
    if o.mask:  # masking_utils' sdpa_mask: the causal and padding masks and-ed, bool
        le = o.alloc(o.s * o.s)
        both = o.alloc(o.s * o.s)
        o.free(le)
        mask = o.alloc(o.b * o.s * o.s)
        o.free(both)
    # LlamaRotaryEmbedding: fp32 frequencies, cat, cos and sin (times attention_scaling),
    # cast to the compute dtype; kept by every rotary multiplication
    hd = o.tokens * o.head_dim
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
        cos, sin = cos16, sin16
    else:
        o.free(freqs, cat)
    n_layer = (len(params) - 3) // 9
    layers: list[Layer] = []
    x = emb
    for i in range(n_layer):
        layers.append(layer_forward(o, x, free_input=i > 0))
        x = layers[-1].out
    final = norm_forward(o, x)
    if o.p != 4:  # LlamaModel returns: the last hidden state and the embedding output go
        o.free(x, emb)
    if mask is not None:
        o.free(mask)
    # the lm_head, then ForCausalLMLoss: logits.float(), cross_entropy (log_softmax, nll)
    v = o.vocab * o.tokens
    logits = o.alloc(o.p * v)
    up = o.alloc(4 * v) if o.p != 4 else logits
    logp = o.alloc(4 * v)
    if up != logits:
        o.free(up)
    o.free(logits)  # the output object goes: only the loss is kept
    # backward: nll_loss, log_softmax, the cast back, the lm_head
    g_nll = o.alloc(4 * v)
    g_ls = o.alloc(4 * v)
    o.free(g_nll, logp)
    g_logits = g_ls
    if o.p != 4:
        g_logits = o.alloc(o.p * v)
        o.free(g_ls)
    dw = o.alloc(params[-1][1])
    o.matmul("backward")  # the backward's first matmul: its thread's cuBLAS workspace
    gx = o.alloc(row)
    o.free(g_logits, final.out)
    o.grad(params[-1][0], dw)
    g = norm_backward(o, gx, final, params[-2], None)
    for i in reversed(range(n_layer)):
        first = 1 + 9 * i
        w = [pid for pid, _ in params[first : first + 9]]
        wb = [nb for _, nb in params[first : first + 9]]
        g = layer_backward(o, g, layers[i], w, wb, (cos, sin) if i == 0 else None)
    dw = o.alloc(params[0][1])  # embedding_dense_backward
    o.free(g)
    o.grad(params[0][0], dw)
