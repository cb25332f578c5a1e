"""One micro-batch of a Llama-architecture model, op by op: every tensor the forward and the
backward allocate, with its size, in the order the CUDA caching allocator sees them (the input
of :mod:`cfgcheck.memory.allocsim`, called from :func:`cfgcheck.memory.events.step_events`).

Covered (:func:`exact`): transformers' ``LlamaForCausalLM`` layout (RMSNorm, SwiGLU MLP, rotary
on every head dimension, no biases, an untied lm_head), SDPA, no checkpointing; full
fine-tuning in 16 or 32-bit weights, or PEFT LoRA (fp32 adapters on 16-bit weights) on any of
the block's linears in every layer, q_proj among them. The sources, as installed and traced
(transformers 5.24 ``models/llama/modeling_llama.py``, peft ``tuners/lora/layer.py``, torch
2.13.0 ``torch/csrc/autograd``):

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
* PEFT's ``Linear.forward``: ``result = self.base_layer(x)``, ``x =
  self._cast_input_dtype(x, lora_A.weight.dtype)`` (an fp32 copy), ``result = result +
  lora_B(lora_A(dropout(x))) * scaling`` (fp32, by type promotion), ``result.to(dtype)``;
  CUDA's dropout keeps a one-byte mask (``native_dropout``); a frozen linear keeps nothing
  (``MmBackward0`` saves ``self`` for ``mat2``'s gradient only), so a frozen norm's output
  goes once its linears ran, and with a frozen embedding the first layer's input norm and
  its q, k, v inputs have no gradient at all (nothing saved, their backward not run);
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

from cfgcheck.memory.params import adapted_modules, block_linears, count_params
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

Alloc = Callable[[int], int]
Free = Callable[..., None]


@dataclass
class Ops:
    """The event sink (:class:`cfgcheck.memory.events.Seq`'s alloc and free) and the sizes of
    one micro-batch; ``grads`` maps a parameter's id to its ``.grad``'s id; ``kinds`` says of
    each block linear whether its weight trains (``full``), a LoRA adapter does (``lora``) or
    nothing (``frozen``)."""

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
    packed: bool = False  # the batch carries position_ids (packed rows)
    window: bool = False  # the config has a sliding window (Mistral), not shorter than s
    kinds: dict[str, str] = field(default_factory=dict)
    rank: int = 0
    dropout: bool = False  # the adapters' dropout (p > 0), else ``nn.Identity``
    grads: dict[int, int] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.b * self.s

    @property
    def gqa(self) -> bool:
        return self.q != self.kv

    @property
    def full(self) -> bool:
        return all(k == "full" for k in self.kinds.values())

    def grad(self, param: int, g: int) -> None:
        """AccumulateGrad: the first gradient becomes ``.grad``, the next ones are added into it
        and freed."""
        if param in self.grads:
            self.free(g)
        else:
            self.grads[param] = g


LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def kinds(m: ModelConfig, t: TrainerConfig) -> dict[str, str] | None:
    """Each block linear's kind (see :class:`Ops`), or None where this module does not
    generate the run (see the module docstring)."""
    if t.finetuning == "full":
        return dict.fromkeys(LINEARS, "full")
    if (
        t.finetuning != "lora"
        or t.lora.target_parameters
        or t.precision
        not in (
            "bf16-true",
            "16-true",
        )
    ):
        return None
    adapted = adapted_modules(m, t.lora.targets, t.framework)
    if adapted.lm_head or adapted.embedding_rows:
        return None
    if any(n not in (0, m.n_layer) for _, n in adapted.linears):
        return None  # adapters on some layers only
    names = {x.name for x, n in adapted.linears if n}
    if "q_proj" not in names:  # without it the first layer's attention has no gradient
        return None
    return {x: "lora" if x in names else "frozen" for x in LINEARS}


def exact(m: ModelConfig, d: DataConfig, t: TrainerConfig) -> bool:
    """The settings this module generates op by op (see the module docstring)."""
    linears = block_linears(m)
    return (
        not t.gradient_checkpointing
        and t.loss_chunking == "none"
        and t.attention == "sdpa"
        and t.precision in ("bf16-true", "16-true", "32-true")
        and m.norm == "rmsnorm"
        and m.mlp == "swiglu"
        and tuple(x.name for x in linears) == LINEARS
        and not any(x.bias for x in linears)
        and not m.shared_attention_norm
        and not m.post_attention_norm
        and not m.post_mlp_norm
        and not m.parallel_residual
        and (m.rotary_fraction or 1.0) == 1.0
        and not m.tie_embeddings
        and bool(count_params(m).lm_head)
        and "gemma" not in m.name.lower()
        and (
            m.sliding_window_size is None
            or (
                m.sliding_window_size >= Pipeline.from_data(d).memory_length()
                and d.collator != "packed"
            )
        )
        and kinds(m, t) is not None
    )


@dataclass
class Norm:
    """What an RMSNorm keeps for its backward (nothing when its input has no gradient)."""

    x: int  # the fp32 input (a copy for 16-bit weights, the input itself in fp32)
    rsqrt: int
    normed: int | None  # the weight's multiplication's input, kept when the weight trains
    out: int
    graph: bool = True


def norm_forward(o: Ops, x: int, graph: bool = True) -> Norm:
    """``LlamaRMSNorm``; its weight trains with full fine-tuning. ``graph``: its input has a
    gradient (else autograd keeps nothing and each temporary goes when Python drops it)."""
    h4, small = 4 * o.h, 4 * o.tokens
    c = o.alloc(h4) if o.p != 4 else x  # hidden_states.to(torch.float32)
    pw = o.alloc(h4)  # pow(2)
    mean = o.alloc(small)
    o.free(pw)
    add = o.alloc(small)  # variance + eps
    r = o.alloc(small)
    o.free(add)
    n = o.alloc(h4)  # hidden_states * rsqrt
    if not graph:  # the rsqrt and the fp32 copy go as the names are rebound
        o.free(r)
        if c != x:
            o.free(c)
    trains = o.full
    normed: int | None = None
    if o.p != 4:
        cast = o.alloc(o.p * o.h)  # .to(input_dtype)
        out = o.alloc(o.p * o.h)
        if trains:
            normed = cast
        else:
            o.free(cast)
        o.free(n)
    else:
        out = o.alloc(h4)
        if trains:
            normed = n
        else:
            o.free(n)
    o.free(mean)
    return Norm(c, r, normed, out, graph)


def norm_backward(o: Ops, g: int, nm: Norm, weight: tuple[int, int], buf: int | None) -> int:
    """The backward of :func:`norm_forward` for the incoming gradient ``g``, the norm's input
    gradient added into ``buf`` (what its input's node holds already, or None). Returns the
    input's gradient (the buffer)."""
    h4, small, row = 4 * o.h, 4 * o.tokens, o.p * o.h
    # MulBackward0 of weight * normed: normed's gradient (g * weight), and when the weight
    # trains its own (g * normed, summed); then g and normed go
    gn = o.alloc(row)
    if nm.normed is not None:
        tmp = o.alloc(row)
        wg = o.alloc(weight[1])
        o.free(tmp, g, nm.normed)
        o.grad(weight[0], wg)
    else:
        o.free(g)
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


def _add(o: Ops, size: int, old: int | None, new: int) -> int:
    """``InputBuffer::add`` out of place: the sum, then the two gradients go (the new one
    alone when the buffer was empty)."""
    if old is None:
        return new
    s = o.alloc(size)
    o.free(old, new)
    return s


@dataclass
class Adapter:
    """What a LoRA linear keeps: the dropout's output (lora_A's input), its mask, lora_A's
    output (lora_B's input)."""

    x: int
    mask: int | None
    a: int


def _linear_forward(
    o: Ops, kind: str, nin: int, nout: int, graph: bool
) -> tuple[int, Adapter | None]:
    """A block linear's forward (``graph``: its input has a gradient); returns its output and
    a LoRA adapter's saved tensors."""
    out = o.alloc(o.p * nout)
    o.matmul("forward")  # the forward's first matmul: its thread's cuBLAS workspace
    if kind != "lora":
        return out, None
    xc = o.alloc(4 * nin)  # _cast_input_dtype(x, float32)
    mask = None
    x = xc
    if o.dropout:  # native_dropout: the output and a bool mask (kept when x has a gradient)
        x = o.alloc(4 * nin)
        mask = o.alloc(nin)
        if not graph:
            o.free(mask)
            mask = None
    a = o.alloc(4 * o.rank * o.tokens)
    bb = o.alloc(4 * nout)
    mul = o.alloc(4 * nout)  # * scaling
    o.free(bb)
    add = o.alloc(4 * nout)  # result + ..., fp32
    o.free(mul, out)
    res = o.alloc(o.p * nout)  # result.to(torch_result_dtype)
    o.free(add)
    if o.dropout:
        o.free(xc)
    return res, Adapter(x, mask, a)


def _linear_backward(
    o: Ops,
    kind: str,
    g: int,
    free_g: bool,
    nin: int,
    nout: int,
    saved: Adapter | None,
    buf: int | None,
    release: tuple[int, ...],
    w: tuple[tuple[int, int], ...],
    graph: bool,
) -> int | None:
    """A block linear's backward for the gradient ``g`` of its output (``free_g``: nothing else
    holds it); its input's gradient added into ``buf``; ``release``: the saved input when this
    is its last node; ``w``: (id, bytes) of the weight (full) or of lora_A and lora_B."""
    if kind == "full":
        dw = o.alloc(w[0][1])
        gin = o.alloc(o.p * nin)
        if free_g:
            o.free(g)
        o.free(*release)
        buf = _add(o, o.p * nin, buf, gin)
        o.grad(w[0][0], dw)
        return buf
    if kind == "frozen":
        if not graph:
            return buf
        gin = o.alloc(o.p * nin)
        if free_g:
            o.free(g)
        return _add(o, o.p * nin, buf, gin)
    assert saved is not None
    g32 = o.alloc(4 * nout)  # ToCopyBackward0 of the result's cast
    if free_g:
        o.free(g)
    gb = o.alloc(o.p * nout) if graph else None  # AddBackward0: the base's, cast back
    m = o.alloc(4 * nout)  # MulBackward0 (scaling)
    o.free(g32)
    db = o.alloc(4 * nout // o.tokens * o.rank)  # lora_B's weight: out x rank
    ga = o.alloc(4 * o.rank * o.tokens)
    o.free(m, saved.a)
    o.grad(w[1][0], db)
    da = o.alloc(4 * o.rank * nin // o.tokens)
    if not graph:
        o.free(ga, saved.x)
        o.grad(w[0][0], da)
        return buf
    gd = o.alloc(4 * nin)
    o.free(ga, saved.x)
    o.grad(w[0][0], da)
    if saved.mask is not None:  # NativeDropoutBackward0
        gm = o.alloc(4 * nin)
        o.free(gd, saved.mask)
        gd = gm
    gx = o.alloc(o.p * nin)  # ToCopyBackward0 of the fp32 copy
    o.free(gd)
    buf = _add(o, o.p * nin, buf, gx)
    assert gb is not None
    gbx = o.alloc(o.p * nin)  # the frozen base's MmBackward0
    o.free(gb)
    return _add(o, o.p * nin, buf, gbx)


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
    adapters: dict[str, Adapter]
    graph: bool  # the layer's input has a gradient


def layer_forward(o: Ops, x: int, free_input: bool, graph: bool) -> Layer:
    """``LlamaDecoderLayer.forward`` with the module's ops; ``free_input``: the caller drops its
    reference to ``x`` when the layer returns (not the embedding output); ``graph``: ``x``
    has a gradient."""
    row, qb, kvb = o.p * o.h, o.p * o.q, o.p * o.kv
    kd = o.kinds
    hd = o.h
    ad: dict[str, Adapter] = {}

    def linear(name: str, nin: int, nout: int, g: bool) -> int:
        out, saved = _linear_forward(o, kd[name], nin, nout, g)
        if saved is not None:
            ad[name] = saved
        return out

    n1 = norm_forward(o, x, graph)
    qm = linear("q_proj", hd, o.q, graph)
    km = linear("k_proj", hd, o.kv, graph)
    vm = linear("v_proj", hd, o.kv, graph)
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
    out = linear("o_proj", o.q, hd, True)
    if o.gqa:
        o.free(k, vm)
    if not o.full:  # nothing kept the norm's output: it goes when self_attn returns
        o.free(n1.out)
    r1 = o.alloc(row)
    o.free(out)
    n2 = norm_forward(o, r1)
    ib = o.p * o.inter
    gate = linear("gate_proj", hd, o.inter, True)
    act = o.alloc(ib)
    up = linear("up_proj", hd, o.inter, True)
    prod = o.alloc(ib)
    down = linear("down_proj", o.inter, hd, True)
    if kd["down_proj"] != "full":
        o.free(prod)
    if not o.full:
        o.free(n2.out)
    r2 = o.alloc(row)
    o.free(down)
    if o.p != 4:  # the fp32 norms keep their inputs themselves
        o.free(r1)
        if free_input:
            o.free(x)
    return Layer(n1, n2, q, kk, vv, bias, attn, lse, gate, act, up, prod, r2, ad, graph)


def layer_backward(
    o: Ops,
    g: int,
    lay: Layer,
    w: dict[str, tuple[tuple[int, int], ...]],
    tables: tuple[int, int] | None,
) -> int | None:
    """The layer's backward for the gradient ``g`` of its output; ``w``: (id, bytes) of each
    linear's trained tensors (the weight, or lora_A and lora_B) and of the two norms'
    weights (``input_layernorm``, ``post_attention_layernorm``). Returns the gradient of the
    layer's input (None when it has none)."""
    ib, qb, kvb = o.p * o.inter, o.p * o.q, o.p * o.kv
    kd, ad, hd = o.kinds, lay.adapters, o.h

    def linear(
        name: str, g: int, free_g: bool, nin: int, nout: int, buf: int | None,
        release: tuple[int, ...] = (), graph: bool = True,
    ) -> int | None:  # fmt: skip
        return _linear_backward(
            o, kd[name], g, free_g, nin, nout, ad.get(name), buf, release, w[name], graph
        )

    full = kd["down_proj"] == "full"
    # the MLP: down, the product, up, SiLU, gate (the order of their sequence numbers)
    gp = linear("down_proj", g, False, o.inter, hd, None, (lay.prod,) if full else ())
    assert gp is not None
    gu, ga = o.alloc(ib), o.alloc(ib)  # MulBackward0: other's gradient, then self's
    o.free(gp, lay.up, lay.act)
    gx = linear("up_proj", gu, True, hd, o.inter, None)
    gg = o.alloc(ib)  # SiluBackward0
    o.free(ga, lay.gate)
    gate_full = kd["gate_proj"] == "full"
    gx = linear("gate_proj", gg, True, hd, o.inter, gx, (lay.norm2.out,) if gate_full else ())
    assert gx is not None
    # the post-attention norm; its input's buffer holds g (the residual's path)
    s = norm_backward(o, gx, lay.norm2, w["post_attention_layernorm"][0], g)
    # the attention: o_proj, the kernel, repeat_kv's sums, the rotary k then q, then v, k, q;
    # without a gradient on the layer's input only o_proj holds s
    go = linear("o_proj", s, not lay.graph, o.q, hd, None)
    assert go is not None
    need = {x: lay.graph or kd[x + "_proj"] != "frozen" for x in "qkv"}
    grads = {x: o.alloc(qb if o.gqa or x == "q" else kvb) for x in "qkv"}
    o.free(*(grads[x] for x in "qkv" if not need[x]))  # outputs nobody asked for
    o.free(go)
    if lay.bias is not None:
        o.free(lay.bias)
    o.free(lay.k, lay.q, lay.v, lay.lse, lay.attn)
    if o.gqa:
        for x in "vk":
            if need[x]:
                sm = o.alloc(kvb)
                o.free(grads[x])
                grads[x] = sm
    if need["k"]:
        grads["k"] = _rope_backward(o, grads["k"], kvb, None)
    grads["q"] = _rope_backward(o, grads["q"], qb, tables)
    total: int | None = None
    for x, size in (("v", kvb), ("k", kvb), ("q", qb)):
        if not need[x]:
            continue
        c = grads[x]
        if x != "v" or o.gqa:  # the transposed gradient made contiguous for the view; the
            # kernel's own v gradient has the input's strides (no copy)
            c = o.alloc(size)
            o.free(grads[x])
        name = x + "_proj"
        last = (lay.norm1.out,) if x == "q" and kd[name] == "full" else ()
        nout = o.q if x == "q" else o.kv
        total = linear(name, c, True, hd, nout, total, last, lay.graph)
    if not lay.graph:
        return None
    assert total is not None
    return norm_backward(o, total, lay.norm1, w["input_layernorm"][0], s)


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


def micro_batch(o: Ops, w: Weights) -> None:
    """Forward, loss and backward of one micro-batch (``model(**batch).loss``, then
    ``backward()``)."""
    row = o.p * o.h
    emb = o.alloc(row)  # the embedding's output (``inputs_embeds``, kept by LlamaModel)
    mask = None
    bss = o.b * o.s * o.s
    if o.mask and o.packed:  # masking_utils: causal and the packed sequences' mask, per row
        le = o.alloc(bss)
        causal = o.alloc(bss)
        o.free(le)
        same = o.alloc(bss)  # packed_sequence_mask_function: same sequence index
        mask = o.alloc(bss)
        o.free(same, causal)
    elif o.mask:  # sdpa_mask: and_masks(causal, padding), each and a new bool tensor
        ss = o.s * o.s
        if o.window:  # the causal function is and_masks(sliding_window_overlay, causal)
            gt = o.alloc(ss)
            inner = o.alloc(ss)
            o.free(gt)
            le = o.alloc(ss)
            both = o.alloc(ss)
            o.free(le, inner)
            causal = o.alloc(ss)
            o.free(both)
        else:
            le = o.alloc(ss)
            causal = o.alloc(ss)
            o.free(le)
        mask = o.alloc(bss)
        o.free(causal)
    # LlamaRotaryEmbedding: fp32 frequencies, cat, cos and sin (times attention_scaling),
    # cast to the compute dtype; kept by every rotary multiplication. Without position_ids
    # LlamaModel makes them for one row (``arange(...).unsqueeze(0)``, modeling_llama.py
    # lines 379-380), broadcast over the batch
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
        cos, sin = cos16, sin16
    else:
        o.free(freqs, cat)
    layers: list[Layer] = []
    x = emb
    graph = w.embedding is not None  # the embedding trains: its output has a gradient
    for i in range(len(w.layers)):
        layers.append(layer_forward(o, x, free_input=i > 0, graph=graph or i > 0))
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
    if w.head is None:  # a frozen lm_head keeps not its input
        o.free(final.out)
    o.free(logits)  # the output object goes: only the loss is kept
    # backward: nll_loss, log_softmax, the cast back, the lm_head
    g_nll = o.alloc(4 * v)
    g_ls = o.alloc(4 * v)
    o.free(g_nll, logp)
    g_logits = g_ls
    if o.p != 4:
        g_logits = o.alloc(o.p * v)
        o.free(g_ls)
    if w.head is not None:
        dw = o.alloc(w.head[1])
        o.matmul("backward")  # the backward's first matmul: its thread's cuBLAS workspace
        gx = o.alloc(row)
        o.free(g_logits, final.out)
        o.grad(w.head[0], dw)
    else:
        gx = o.alloc(row)
        o.matmul("backward")
        o.free(g_logits)
    g: int | None = norm_backward(o, gx, final, w.final_norm, None)
    for i in reversed(range(len(layers))):
        assert g is not None
        g = layer_backward(o, g, layers[i], w.layers[i], (cos, sin) if i == 0 else None)
    if w.embedding is not None:
        assert g is not None
        dw = o.alloc(w.embedding[1])  # embedding_dense_backward
        o.free(g)
        o.grad(w.embedding[0], dw)
