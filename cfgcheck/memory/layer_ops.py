"""One micro-batch of a Llama-architecture model, op by op: every tensor the forward and the
backward allocate, with its size, in the order the CUDA caching allocator sees them (the input
of :mod:`cfgcheck.memory.allocsim`, called from :func:`cfgcheck.memory.events.step_events`).

Covered (:func:`exact`): transformers' Llama, Mistral (a sliding window no shorter than the
sequence) and Qwen2 layouts (RMSNorm, SwiGLU MLP, rotary on every head dimension), SDPA, with
or without non-reentrant gradient checkpointing (see :mod:`cfgcheck.memory.llama_step`; not
with an adapter on down_proj); full fine-tuning in 16 or 32-bit weights without biases and
with an untied lm_head, or PEFT LoRA (fp32 adapters on 16-bit weights; Qwen2's q, k, v biases
and tied embeddings allowed) on any of the block's linears in every layer, q_proj among them. The
sources, as installed and traced (transformers 5.24 ``models/llama/modeling_llama.py``,
``models/qwen2/modeling_qwen2.py``, ``masking_utils.py``, peft ``tuners/lora/layer.py``, torch
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

This module has the modules' ops (norm, linear and its LoRA branch, rotary embedding, gradient
accumulation) and their recorder :class:`Ops`; :mod:`cfgcheck.memory.llama_step` puts them
together into a layer and a micro-batch, and QLoRA's layer (:mod:`cfgcheck.memory.kbit_layer`)
calls them too, with bitsandbytes' 4-bit linear (:mod:`cfgcheck.memory.kbit_ops`) as one more
kind of linear. Under checkpointing a recomputed saved tensor goes with its node's apply, before
the node's incoming gradient (``Ops.unpacked``; tests/test_alloc_identity.py checks which
tensor each free undoes). The
traced step (tests/alloc_tracer.py on meta tensors at full size,
benchmarks/allocator_meta_trace.py) is the reference: tests/test_layer_ops.py checks the
sequence equals it for every tensor above 1 MiB (the large pool, ``kSmallSize``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cfgcheck.memory.modules import architecture_of
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
    # the model's forward keeps the embedding output in a dict of mask arguments, cleared
    # after the masks (Qwen2Model.forward's ``mask_kwargs``, LlamaModel's has none)
    mask_first: bool = False
    kinds: dict[str, str] = field(default_factory=dict)
    rank: int = 0
    dropout: bool = False  # the adapters' dropout (p > 0), else ``nn.Identity``
    grads: dict[int, int] = field(default_factory=dict)
    # non-reentrant gradient checkpointing (cfgcheck/memory/llama_step.py): ``saving`` is
    # False in the checkpointed forward (autograd keeps holders, not tensors); ``unpacked``:
    # the backward's saved tensors are recomputed ones, which go with their node's apply,
    # before its inputs
    saving: bool = True
    unpacked: bool = False
    # the checkpointed layer's input, kept by its frame until the last node holding one of
    # its saved tensors' holders is done
    frame: tuple[int, ...] = ()
    # Gemma's scaled embedding, fp32 norm and tied lm_head (cfgcheck/memory/gemma_ops.py)
    gemma: bool = False
    # Gemma 3: q_norm / k_norm, norms on each sub-block's output (``sandwich``), and each
    # layer's attention type (True: sliding window; its own mask and rotary tables)
    qk_norm: bool = False
    sandwich: bool = False
    sliding: tuple[bool, ...] = ()
    # the order the attention types' rotary tables and (multimodal) masks are made in:
    # ``set(layer_types)``'s, which string hashing decides per process (gemma_layout.layout)
    table_order: tuple[bool, ...] = ()
    mask_order: tuple[bool, ...] = ()
    # the small pool's per-token statistics (the norms' mean and rsqrt) are made: the QLoRA
    # generator (cfgcheck/memory/events_kbit.py) leaves them out
    stats: bool = True
    # derived from the sizes and kinds above once, when made (``dataclasses.replace`` makes
    # them again): the ops read them for every tensor
    tokens: int = field(init=False, default=0)
    gqa: bool = field(init=False, default=False)
    # ``repeat_kv`` copies k and v: grouped heads, more than one k/v head (with one its
    # ``expand`` and ``reshape`` are views)
    repeat: bool = field(init=False, default=False)
    full: bool = field(init=False, default=False)  # every block linear's weight trains
    # a per-token statistic's tensor: ``alloc`` itself, or 0 (not made, see ``stats``)
    small: Alloc = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.tokens = self.b * self.s
        self.gqa = self.q != self.kv
        self.repeat = self.gqa and self.kv > self.head_dim * self.tokens
        self.full = all(k == "full" for k in self.kinds.values())
        self.small = self.alloc if self.stats else _not_made

    def drop(self, *ids: int) -> None:
        """Free the tensors made (not the statistics left out, id 0)."""
        self.free(*(filter(None, ids) if 0 in ids else ids))

    def grad(self, param: int, g: int) -> None:
        """AccumulateGrad: the first gradient becomes ``.grad``, the next ones are added into it
        and freed."""
        if param in self.grads:
            self.free(g)
        else:
            self.grads[param] = g


def _not_made(size: int) -> int:
    """A statistic's id when it is not made (``Ops.stats`` False)."""
    return 0


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
    full = t.finetuning == "full"
    return (
        # the checkpointed recomputation stops in down_proj's frozen base or its weight
        not (t.gradient_checkpointing and (kinds(m, t) or {}).get("down_proj") == "lora")
        and t.loss_chunking == "none"
        and t.attention == "sdpa"
        and t.precision in ("bf16-true", "16-true", "32-true")
        and m.norm == "rmsnorm"
        and m.mlp == "swiglu"
        and tuple(x.name for x in linears) == LINEARS
        # q, k, v biases (Qwen2: ``addmm``) only on frozen weights (LoRA)
        and not any(x.bias and (full or x.name not in LINEARS[:3]) for x in linears)
        and not m.shared_attention_norm
        and not m.post_attention_norm
        and not m.post_mlp_norm
        and not m.parallel_residual
        and (m.rotary_fraction or 1.0) == 1.0
        and (not full or (not m.tie_embeddings and bool(count_params(m).lm_head)))
        and architecture_of(m) in ("llama", "mistral", "qwen2")
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
    mean = o.small(small)
    o.free(pw)
    add = o.small(small)  # variance + eps
    r = o.small(small)
    o.drop(add)
    n = o.alloc(h4)  # hidden_states * rsqrt
    if not graph or not o.saving:  # the rsqrt and the fp32 copy go as names are rebound
        o.drop(r)
        if c != x:
            o.free(c)
    trains = o.full and o.saving
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
    o.drop(mean)
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
        o.free(*((nm.normed, tmp, g) if o.unpacked else (tmp, g, nm.normed)))
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
    rs = o.small(small)
    o.free(tmp, gn)
    if o.p == 4 and buf is not None:  # fp32: x is the norm's input, its buffer adds
        gx = add_grad(o, h4, buf, gx)
    # rsqrt, add, mean: their backward on the statistics
    a, b_, c_ = o.small(small), o.small(small), o.small(small)
    o.drop(b_, a, rs, nm.rsqrt)
    dv = o.alloc(h4)  # MeanBackward0: the gradient spread over the row
    o.drop(c_)
    pw = o.alloc(h4)  # PowBackward0: 2 * x * grad
    t1 = o.alloc(h4)
    gp = o.alloc(h4)
    # x (0 where the caller holds it): a recomputed one goes with the node's apply, before
    # its input (the checkpoint's frame's input after it, as saved tensors go)
    recomputed = o.unpacked and nm.x not in o.frame
    o.drop(t1, pw, *((nm.x, dv) if recomputed else (dv, nm.x)))
    o.free(*o.frame)  # PowBackward0 held the frame's last holder: the frame goes
    o.frame = ()
    gx = add_grad(o, h4, gx, gp)
    if o.p != 4:  # ToCopyBackward0 of the fp32 copy
        gin = o.alloc(row)
        o.free(gx)
        gx = gin if buf is None else add_grad(o, row, buf, gin)
    return gx


def add_grad(o: Ops, size: int, old: int | None, new: int) -> int:
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


def linear_forward(
    o: Ops, kind: str, nin: int, nout: int, graph: bool
) -> tuple[int, Adapter | None]:
    """A block linear's forward (``graph``: its input has a gradient); returns its output and
    a LoRA adapter's saved tensors."""
    out = o.alloc(o.p * nout)
    o.matmul("forward")  # the forward's first matmul: its thread's cuBLAS workspace
    if kind != "lora":
        return out, None
    xc = o.alloc(4 * nin)  # _cast_input_dtype(x, float32)
    mul, saved = lora_forward(o, xc, nin, nout, graph)
    add = o.alloc(4 * nout)  # result + ..., fp32
    o.free(mul, out)
    res = o.alloc(o.p * nout)  # result.to(torch_result_dtype)
    o.free(add)
    if o.dropout or not o.saving:
        o.free(xc)
    return res, saved


def lora_forward(
    o: Ops, x: int, nin: int, nout: int, graph: bool, stop: bool = False
) -> tuple[int, Adapter]:
    """PEFT's LoRA branch ``lora_B(lora_A(dropout(x))) * scaling`` on the fp32 ``x`` (the
    caller's; ``graph``: it has a gradient): returns the scaled product and what the backward
    keeps. ``stop``: a checkpoint's recomputation that ends once lora_A's output, the last
    saved tensor, is made (no product: 0)."""
    mask = None
    if o.dropout:  # native_dropout: the output and a bool mask (kept when x has a gradient)
        x = o.alloc(4 * nin)
        mask = o.alloc(nin)
        if not graph or not o.saving:
            o.free(mask)
            mask = None
    a = o.alloc(4 * o.rank * o.tokens)
    if not o.saving and o.dropout:  # lora_A's input goes when lora_A returns
        o.free(x)
    if stop:
        return 0, Adapter(x, mask, a)
    bb = o.alloc(4 * nout)
    if not o.saving:  # lora_B's input
        o.free(a)
    mul = o.alloc(4 * nout)  # * scaling
    o.free(bb)
    return mul, Adapter(x, mask, a)


def lora_backward(
    o: Ops,
    m: int,
    saved: Adapter,
    nin: int,
    nout: int,
    w: tuple[tuple[int, int], ...],
    graph: bool,
    into: int | None = None,
) -> int | None:
    """The backward of :func:`lora_forward` from the product's gradient ``m`` (freed):
    lora_B's and lora_A's ``MmBackward0`` (the weight's gradient first, its AccumulateGrad
    right after the node), then the dropout's. ``w``: (id, bytes) of lora_A and lora_B;
    ``saved.x``: lora_A's saved input (0 where the caller releases it); ``into``: the buffer
    lora_A's input gradient is added to when no node lies between (no dropout), before
    lora_A's AccumulateGrad runs. Returns the gradient of ``x`` (None without ``graph``)."""
    db = o.alloc(4 * nout // o.tokens * o.rank)  # lora_B's weight: out x rank
    ga = o.alloc(4 * o.rank * o.tokens)
    o.free(*((saved.a, m) if o.unpacked else (m, saved.a)))
    o.grad(w[1][0], db)
    da = o.alloc(4 * o.rank * nin // o.tokens)
    done = (saved.x, ga) if o.unpacked else (ga, saved.x)
    if not graph:
        o.drop(*done)
        o.grad(w[0][0], da)
        return None
    gd = o.alloc(4 * nin)
    o.drop(*done)
    if saved.mask is None:
        gd = add_grad(o, 4 * nin, into, gd)
    o.grad(w[0][0], da)
    if saved.mask is not None:  # NativeDropoutBackward0
        gm = o.alloc(4 * nin)
        o.free(*((saved.mask, gd) if o.unpacked else (gd, saved.mask)))
        gd = gm
    return gd


def linear_backward(
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
        if o.unpacked:  # a recomputed input goes with the node's apply, before g (a view)
            o.free(*release)
        if free_g:
            o.free(g)
        if not o.unpacked:
            o.free(*release)
        buf = add_grad(o, o.p * nin, buf, gin)
        o.grad(w[0][0], dw)
        return buf
    if kind == "frozen":
        if not graph:
            return buf
        gin = o.alloc(o.p * nin)
        if free_g:
            o.free(g)
        return add_grad(o, o.p * nin, buf, gin)
    assert saved is not None
    g32 = o.alloc(4 * nout)  # ToCopyBackward0 of the result's cast
    if free_g:
        o.free(g)
    gb = o.alloc(o.p * nout) if graph else None  # AddBackward0: the base's, cast back
    m = o.alloc(4 * nout)  # MulBackward0 (scaling)
    o.free(g32)
    gd = lora_backward(o, m, saved, nin, nout, w, graph)
    if gd is None:
        return buf
    gx = o.alloc(o.p * nin)  # ToCopyBackward0 of the fp32 copy
    o.free(gd)
    buf = add_grad(o, o.p * nin, buf, gx)
    assert gb is not None
    gbx = o.alloc(o.p * nin)  # the frozen base's MmBackward0
    o.free(gb)
    return add_grad(o, o.p * nin, buf, gbx)


@dataclass
class Linears:
    """A layer's block linears by name (their kinds in ``o.kinds``), bound to the ops and the
    layer's LoRA adapters: :meth:`forward` records what each adapted linear keeps in
    ``adapters``, :meth:`backward` reads it; ``w``: (id, bytes) of each linear's trained
    tensors (the backward's)."""

    o: Ops
    adapters: dict[str, Adapter] = field(default_factory=dict)
    w: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)

    def forward(self, name: str, nin: int, nout: int, graph: bool) -> int:
        """:func:`linear_forward` of the linear ``name``: its output."""
        out, saved = linear_forward(self.o, self.o.kinds[name], nin, nout, graph)
        if saved is not None:
            self.adapters[name] = saved
        return out

    def backward(
        self,
        name: str,
        g: int,
        free_g: bool,
        nin: int,
        nout: int,
        buf: int | None,
        release: tuple[int, ...] = (),
        graph: bool = True,
    ) -> int | None:
        """:func:`linear_backward` of the linear ``name``."""
        o = self.o
        return linear_backward(
            o, o.kinds[name], g, free_g, nin, nout, self.adapters.get(name), buf, release,
            self.w[name], graph,
        )  # fmt: skip


def rope_forward(o: Ops, size: int) -> int:
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


def rope_backward(o: Ops, g: int, size: int, tables: tuple[int, int] | None) -> int:
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
    acc = add_grad(o, size, s1, s2)
    b = o.alloc(size)  # g * cos
    o.free(g)
    if tables:
        o.free(tables[0])
    return add_grad(o, size, acc, b)


def sdpa_mask(o: Ops, window: bool) -> int:
    """transformers' ``masking_utils.sdpa_mask``: and_masks(causal, padding), each ``and`` a
    new bool tensor, the batch's mask last; with a sliding window the causal function is
    and_masks(sliding_window_overlay, causal)."""
    ss = o.s * o.s
    if window:
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
    mask = o.alloc(o.b * ss)
    o.free(causal)
    return mask
