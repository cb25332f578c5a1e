"""The step's allocations and frees under QLoRA as users run it (a 4-bit bitsandbytes base,
``prepare_model_for_kbit_training``, PEFT LoRA): the input of :mod:`cfgcheck.memory.allocsim`
for the runs :func:`cfgcheck.memory.events.step_events` leaves out.

Unlike the dense sequence, this one is op by op: every tensor of the token dimension (hidden,
query/key/value, intermediate, rank-r), every dequantized weight and the attention mask, each
made and freed where the CPU trace of gpu_measure.py's loop makes and frees it
(tests/alloc_tracer.py with bitsandbytes 0.50's CPU backend; tests/test_memory_events_kbit.py
checks the sizes and their order). Left out: per-token statistics and scalars (norm variances,
rotary tables, the loss), which the small pool holds.

The mechanisms, per source:

* the stream is fp32: ``prepare_model_for_kbit_training`` (peft src/peft/utils/other.py) casts
  the embedding, norms and lm_head to fp32; ``Linear4bit.forward`` (bitsandbytes
  nn/modules.py) casts its input to the compute dtype (bf16) and its output back
  (``.to(inp_dtype)``); LoRA keeps fp32 (its output added to PEFT's copy of the base output,
  ``result = result.clone()``, peft tuners/lora/bnb.py ``Linear4bit.forward``);
* ``MatMul4Bit`` (bitsandbytes autograd/_functions.py) saves nothing of its input; its
  backward dequantizes the weight (``F.dequantize_4bit``: with double quantization the fp32
  absmax first, ``dequantize_blockwise`` then ``absmax += offset``), ``matmul``s, frees it;
* on CUDA ``gemm_4bit`` above 1536 rows (``_gemm_4bit_custom_max_m``, backends/cuda/ops.py)
  runs ``_dequant_linear_fallback`` inside the op: the nested absmax (two fp32 vectors), the
  weight in the compute dtype, then ``F.linear``'s output, all but the output freed when it
  returns. A CPU trace cannot see it (one op): :func:`linear_forward` adds it for CUDA;
* the lm_head is fp32: the logits are fp32 and ``logits.float()`` (transformers
  ``ForCausalLMLoss``) makes no copy; nothing saves the final norm's output (frozen head);
* autograd frees each node's saved tensors once it ran; non-reentrant checkpointing
  recomputes a layer when its first saved tensor is unpacked and stops after the last one is
  packed (torch/utils/checkpoint.py, ``_StopRecomputationError``), dropping the rest;
* the optimizer: bitsandbytes' paged 8-bit AdamW keeps its states in managed memory (outside
  the caching allocator: ``F.get_paged``); in the allocator only its per-block fp32 absmax
  (``Optimizer8bit.init_state``, block 256, two per tensor of 4096 elements or more).
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory.allocsim import END, REPEAT, Event
from cfgcheck.memory.events import BLAS_LT_WORKSPACE, Seq, blas_workspace
from cfgcheck.memory.params import adapted_modules, block_linears, count_params
from cfgcheck.memory.stack import FOUR_BIT, sdpa_masked, stack
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

GEMM_4BIT_CUSTOM_MAX_M = 1536  # bitsandbytes backends/cuda/ops.py ``_gemm_4bit_custom_max_m``
BLOCK = 64  # ``bnb_4bit_quant_storage`` blocks (QuantState.blocksize)
NESTED_BLOCK = 256  # double quantization's state2 blocksize
OPT_BLOCK = 256  # bitsandbytes' blockwise 8-bit optimizer states
ATTN_IN = ("q_proj", "k_proj", "v_proj")  # the linears on the layer's (normed) input


def kbit_covered(m: ModelConfig, t: TrainerConfig) -> bool:
    """QLoRA on a Llama-like decoder (RMSNorm, gated MLP, no biases, sdpa) as gpu_measure.py
    runs it: transformers + PEFT + bitsandbytes, one GPU."""
    return (
        t.framework == "hf"
        and t.quantization in FOUR_BIT
        and t.finetuning in ("qlora", "lora")
        and t.precision == "bf16-true"
        and not m.weight_format
        and not (m.n_expert or 0)
        and m.norm == "rmsnorm"
        and m.mlp == "swiglu"
        and not any(x.bias for x in block_linears(m))
        and not (m.shared_attention_norm or m.post_attention_norm or m.post_mlp_norm)
        and not m.parallel_residual
        and t.attention == "sdpa"
        and t.devices * t.num_nodes == 1
        and t.optimizer in ("adamw", "sgd", "adamw_8bit", "paged_adamw_8bit")
        and t.loss_chunking == "none"
        and t.sequences_per_sample == 1
        and t.context_parallel == 1
        and not t.activation_offloading
        and not t.reference_model
        and t.offload.optimizer == "none"
        and t.offload.params == "none"
        and (t.lora.rank or 0) > 0
        # without checkpointing the first layer's input needs no gradient: generated where an
        # attention input projection is adapted (the gradient then reaches the rest)
        and (
            t.gradient_checkpointing
            or bool({"q_proj", "k_proj", "v_proj"} & adapted_modules(m, t.lora.targets, t.framework).names)
        )
    )


@dataclass(frozen=True)
class Linear:
    name: str
    n_in: int
    n_out: int
    adapted: bool


@dataclass
class Ctx:
    """The shapes of one micro-batch and how the linears run."""

    ev: Seq
    tokens: int
    rank: int
    dropout: bool
    fallback: bool  # CUDA's dequantize-then-linear path of gemm_4bit (inside the op)
    nested: bool  # double quantization: the absmax is itself quantized
    lora: dict[str, tuple[int, int]]  # adapted linear -> (lora_A, lora_B) parameter ids
    grads: dict[int, int]
    recomputing: bool = False
    input_grad: bool = True  # the layer's input needs its gradient

    def a(self, n: int) -> int:
        return self.ev.alloc(n)

    def f(self, *ids: int) -> None:
        self.ev.free(*ids)


def quantized_tensors(n: int, quant: str) -> list[int]:
    """Bytes of a 4-bit weight of ``n`` elements as bitsandbytes stores it (``Params4bit``,
    functional.py ``quantize_4bit``): the packed uint8 weight, the absmax (fp32 per block of
    64; double quantization: uint8, with its own fp32 absmax per 256 and a 256-entry code),
    and the 16-entry code."""
    blocks = -(-n // BLOCK)
    packed = (n + 1) // 2
    if quant == "nf4-dq":
        return [packed, blocks, 4 * -(-blocks // NESTED_BLOCK), 4 * 256, 4 * 16]
    return [packed, 4 * blocks, 4 * 16]


def _dequant(c: Ctx, x: Linear) -> list[int]:
    """``F.dequantize_4bit``'s fp32 absmax under double quantization (then ``+= offset`` in
    place); the caller allocates the weight and frees these."""
    if not c.nested:
        return []
    return [c.a(4 * -(-x.n_in * x.n_out // BLOCK))]


def linear_forward(c: Ctx, x: Linear, keep: bool, stop: bool = False) -> tuple[int, list[int]]:
    """``Linear4bit`` (+ the LoRA branch when adapted) on an fp32 input: returns the fp32
    output and what its backward keeps (``keep``: not checkpointed; a LoRA without dropout
    keeps the input itself, the caller's). ``stop``: a recomputation that ends once the LoRA's
    last saved tensor is made (the base output's copy dropped; no output)."""
    T = c.tokens
    xc = c.a(2 * T * x.n_in)  # x.to(compute_dtype)
    inner = []
    if c.fallback:
        if c.nested:  # absmax_dq, then absmax_dq + offset
            nb = 4 * -(-x.n_in * x.n_out // BLOCK)
            inner = [c.a(nb), c.a(nb)]
        inner.append(c.a(2 * x.n_in * x.n_out))  # B_dq
    y = c.a(2 * T * x.n_out)  # gemm_4bit
    c.ev.matmul("backward" if c.recomputing else "forward")
    c.f(*inner)
    y32 = c.a(4 * T * x.n_out)  # .to(inp_dtype)
    c.f(y, xc)
    if not x.adapted:
        return y32, []
    base = c.a(4 * T * x.n_out)  # result.clone()
    c.f(y32)
    saved: list[int] = []
    if c.dropout:
        d, mask = c.a(4 * T * x.n_in), c.a(T * x.n_in)  # native_dropout: output, 1-byte mask
        # the mask is kept for the input's gradient only
        grad_in = c.input_grad or x.name not in ATTN_IN
        if not (keep and grad_in):
            c.f(mask)
        la = c.a(4 * T * c.rank)
        saved += ([d, mask] if grad_in else [d]) if keep else []
        if not keep:
            c.f(d)
    else:
        la = c.a(4 * T * c.rank)
    if stop:
        c.f(base)
        return 0, [*saved, la]
    lb = c.a(4 * T * x.n_out)
    if keep:
        saved.append(la)
    else:
        c.f(la)
    scaled = c.a(4 * T * x.n_out)
    c.f(lb)
    out = c.a(4 * T * x.n_out)
    c.f(base, scaled)
    return out, saved


def rms_norm(c: Ctx, h: int) -> int:
    """``LlamaRMSNorm`` on an fp32 input with a frozen fp32 weight: ``pow(2)`` (freed after
    ``mean``), ``x * rsqrt``, ``weight * ...`` (the product freed: nothing saves it)."""
    c.f(c.a(4 * c.tokens * h))
    normed = c.a(4 * c.tokens * h)
    out = c.a(4 * c.tokens * h)
    c.f(normed)
    return out


def rotary(c: Ctx, n: int) -> int:
    """``apply_rotary_pos_emb`` on one fp32 tensor of ``n`` bytes: ``x * cos``,
    ``rotate_half`` (``-x2`` and the cat), ``* sin``, the sum."""
    a = c.a(n)
    neg = c.a(n // 2)
    cat = c.a(n)
    c.f(neg)
    b = c.a(n)
    c.f(cat)
    out = c.a(n)
    c.f(b, a)
    return out


def rotary_backward(c: Ctx, n: int, g: int) -> int:
    """``apply_rotary_pos_emb``'s backward for a gradient ``g`` of ``n`` bytes (freed)."""
    a = c.a(n)
    neg = c.a(n // 2)
    s1 = c.a(n)
    c.f(neg)
    s2 = c.a(n)
    c.f(a)
    added = c.a(n)
    c.f(s1, s2)
    b = c.a(n)
    c.f(g)
    out = c.a(n)
    c.f(added, b)
    return out


def rms_norm_backward(c: Ctx, h: int, g: int, x: int, res: int | None = None) -> int:
    """``LlamaRMSNorm``'s backward (fp32, frozen weight) for the gradient ``g`` (freed), the
    saved input ``x`` (released) and ``res``, the gradient the input already has (the
    residual's), as the CPU trace runs it: ``g * weight``; ``x * rsqrt``'s backward (the
    input's first gradient, summed into ``res``); ``mean`` and ``pow``'s backward; the sum."""
    R = 4 * c.tokens * h
    first = c.a(R)  # grad * weight
    c.f(g)
    a, b = c.a(R), c.a(R)  # grad * rsqrt, grad * x (summed into rsqrt's gradient)
    c.f(b, first)
    total = accumulate(c, res, a, R)
    div, pw, m1, m2 = c.a(R), c.a(R), c.a(R), c.a(R)
    c.f(m1, pw, div, *([x] if x else []))
    out = c.a(R)
    c.f(total, m2)
    return out


def weight_grad(c: Ctx, param: int, nbytes: int) -> list[int]:
    """A LoRA weight's gradient: the first one becomes ``.grad``; later ones (accumulation)
    are added into it by the ``AccumulateGrad`` node, which runs after the node that made them
    released its tensors: returned, for the caller to free then."""
    if param not in c.grads:
        c.grads[param] = c.a(nbytes)
        return []
    return [c.a(nbytes)]


def accumulate(c: Ctx, buf: int | None, g: int, n: int) -> int:
    """A second gradient of one tensor, summed out of place into autograd's input buffer
    (torch/csrc/autograd/input_buffer.cpp ``accumulate``)."""
    if buf is None:
        return g
    total = c.a(n)
    c.f(buf, g)
    return total


def linear_backward(
    c: Ctx, x: Linear, g: int, own: bool, saved: list[int], buf: int | None,
    recompute: object = None, release: int = 0, need_input: bool = True,
) -> int | None:  # fmt: skip
    """The backward of :func:`linear_forward` for the output gradient ``g`` (freed here when
    ``own``), its ``saved`` tensors released node by node, into the input's gradient ``buf``.
    ``recompute``: a callable run where the LoRA branch first unpacks a saved tensor (a
    checkpointed layer's recomputation); it returns the saved tensors and the kept input. ``release``: the input
    a LoRA without dropout keeps, released after its ``lora_A`` (the last node holding it).
    ``need_input``: False when the input needs no gradient (only the adapter's weights)."""
    T = c.tokens
    if x.adapted:
        scaled = c.a(4 * T * x.n_out)  # grad * scaling
        if own and not need_input:  # no base branch: its last use
            c.f(g)
        if callable(recompute):
            saved, release = recompute()
        la = saved[-1]
        a_id, b_id = c.lora[x.name]
        tmp = weight_grad(c, b_id, 4 * c.rank * x.n_out)
        g_la = c.a(4 * T * c.rank)
        c.f(la, scaled, *tmp)
        tmp = weight_grad(c, a_id, 4 * x.n_in * c.rank)
        kept = [*([release] if release else []), *saved[:-1]]  # lora_A's input (and mask)
        if not need_input:
            c.f(*kept, g_la, *tmp)
            return buf
        g_d = c.a(4 * T * x.n_in)
        if c.dropout:
            c.f(kept[0], g_la, *tmp)
            g_x = c.a(4 * T * x.n_in)  # native_dropout_backward
            c.f(kept[1], g_d)
            tmp = []
        else:  # g_d goes into the input's buffer before AccumulateGrad runs
            c.f(*kept, g_la)
            g_x = g_d
        buf = accumulate(c, buf, g_x, 4 * T * x.n_in)
        c.f(*tmp)
    if not need_input:  # the base's output needs no gradient
        return buf
    gc = c.a(2 * T * x.n_out)  # the gradient cast to the compute dtype
    if own:
        c.f(g)
    nested = _dequant(c, x)
    w = c.a(2 * x.n_in * x.n_out)  # F.dequantize_4bit
    c.f(*nested)
    g_a = c.a(2 * T * x.n_in)
    c.f(w, gc)
    g32 = c.a(4 * T * x.n_in)  # back to the input's dtype
    c.f(g_a)
    return accumulate(c, buf, g32, 4 * T * x.n_in)


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

    lin: dict[str, list[int]]
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


def _keeps_input(c: Ctx, L: Layout, *names: str) -> bool:
    """A LoRA without dropout keeps its input itself (PEFT's ``lora_A(dropout(x))``)."""
    return not c.dropout and any(L.lin[n].adapted for n in names)


def layer_forward(c: Ctx, L: Layout, keep: bool, stop: bool = False) -> tuple[int, Saved]:
    """A decoder layer's forward as transformers' ``LlamaDecoderLayer`` runs it (the input is
    the caller's). ``keep``: the saved tensors stay (not checkpointed, or a recomputation);
    ``stop``: the recomputation's early stop after the last saved tensor. Returns the output
    (0 when stopped) and the saved tensors."""
    R = 4 * c.tokens * L.h
    sv = Saved(lin={})
    n1 = rms_norm(c, L.h)
    outs = {}
    for name in ("q_proj", "k_proj", "v_proj"):
        outs[name], sv.lin[name] = linear_forward(c, L.lin[name], keep)
    qe, ke = rotary(c, L.q), rotary(c, L.kv)
    c.f(outs["q_proj"], outs["k_proj"])
    v = outs["v_proj"]
    kr, vr = (c.a(L.q), c.a(L.q)) if L.repeat else (ke, v)  # repeat_kv: expand + reshape
    mask = c.a(L.mask) if L.mask else 0
    att = c.a(L.q)  # sdpa's output (and a per-row log-sum-exp, left out)
    if not keep:
        c.f(*([mask] if mask else []), *([kr, vr] if L.repeat else []))
    o, sv.lin["o_proj"] = linear_forward(c, L.lin["o_proj"], keep)
    attn_in = _keeps_input(c, L, "q_proj", "k_proj", "v_proj")
    if not keep:
        c.f(att, qe, ke, v, n1)
    else:
        c.f(*([ke, v] if L.repeat else []), *([] if attn_in else [n1]))
        sv.n1, sv.qe, sv.ke, sv.v, sv.kr, sv.vr = n1 if attn_in else 0, qe, ke, v, kr, vr
        sv.mask, sv.att = mask, att
    h1 = c.a(R)
    c.f(o)
    n2 = rms_norm(c, L.h)
    g, sv.lin["gate_proj"] = linear_forward(c, L.lin["gate_proj"], keep)
    act = c.a(L.inter)  # silu
    if not keep:
        c.f(g)
    u, sv.lin["up_proj"] = linear_forward(c, L.lin["up_proj"], keep)
    down = L.lin["down_proj"]
    mlp_in = _keeps_input(c, L, "gate_proj", "up_proj")
    if stop and not down.adapted:
        # MulBackward's inputs were the last saved, packed before the product is made
        sv.h1, sv.n2, sv.g, sv.act, sv.u = h1, n2 if mlp_in else 0, g, act, u
        sv.lin["down_proj"] = []
        c.f(*([] if mlp_in else [n2]))
        return 0, sv
    p = c.a(L.inter)
    if not keep:
        c.f(act, u)
    down_in = _keeps_input(c, L, "down_proj")
    if keep:
        sv.h1, sv.n2, sv.g, sv.act, sv.u = h1, n2 if mlp_in else 0, g, act, u
        sv.p = p if down_in else 0
    dn, sv.lin["down_proj"] = linear_forward(c, down, keep, stop)
    if stop:
        c.f(*([] if down_in else [p]), *([] if mlp_in else [n2]))
        return 0, sv
    c.f(*([p] if not (keep and down_in) else []), *([n2] if not (keep and mlp_in) else []))
    h2 = c.a(R)
    c.f(dn, *([] if keep else [h1]))
    return h2, sv


def layer_backward(c: Ctx, L: Layout, g_out: int, x: int, sv: Saved | None) -> int | None:
    """The layer's backward for the gradient of its output ``g_out`` (freed) and its input
    ``x`` (released with norm 1's backward); ``sv`` None: checkpointed, recomputed (early
    stop) where the first saved tensor is unpacked. Returns the input's gradient."""
    R = 4 * c.tokens * L.h
    held: list[Saved] = [sv] if sv is not None else []

    def recompute() -> tuple[list[int], int]:
        c.recomputing = True
        _, s = layer_forward(c, L, keep=True, stop=True)
        c.recomputing = False
        held.append(s)
        return s.lin["down_proj"], s.p

    down = L.lin["down_proj"]
    if sv is not None:
        rc: object = None
        down_saved = sv.lin["down_proj"]
    else:
        rc, down_saved = (recompute if down.adapted else None), []
    def last(names: tuple[str, ...], saved_input: int) -> dict[str, int]:
        """The saved input goes with the last (in backward order) adapter holding it."""
        holders = [n for n in names if L.lin[n].adapted]
        return {holders[-1]: saved_input} if holders and saved_input else {}

    p_release = sv.p if sv is not None else 0  # recomputed: known after the recomputation
    g_p = linear_backward(c, down, g_out, False, down_saved, None, rc, p_release)
    if not held:
        recompute()
    s = held[0]
    g_u, g_act = c.a(L.inter), c.a(L.inter)  # MulBackward
    c.f(s.act, s.u, g_p)
    rel = last(("up_proj", "gate_proj"), s.n2)
    buf = linear_backward(
        c, L.lin["up_proj"], g_u, True, s.lin["up_proj"], None, release=rel.get("up_proj", 0)
    )
    g_g = c.a(L.inter)  # silu's backward
    c.f(s.g, g_act)
    buf = linear_backward(
        c, L.lin["gate_proj"], g_g, True, s.lin["gate_proj"], buf,
        release=rel.get("gate_proj", 0),
    )  # fmt: skip
    g_h1 = rms_norm_backward(c, L.h, buf, s.h1, g_out)
    # without an input gradient the residual's gradient has no other use
    g_att = linear_backward(c, L.lin["o_proj"], g_h1, not c.input_grad, s.lin["o_proj"], None)
    # the projections whose output needs a gradient: all, unless the layer's input needs
    # none (the first layer without checkpointing): then only the adapted ones
    need = {n: c.input_grad or L.lin[n].adapted for n in ATTN_IN}
    gq, gk, gv = c.a(L.q), c.a(L.q), c.a(L.q)  # sdpa's backward
    unused = [g for g, n in ((gq, "q_proj"), (gk, "k_proj"), (gv, "v_proj")) if not need[n]]
    c.f(s.att, s.kr, s.qe, s.vr, *([s.mask] if s.mask else []), g_att, *unused)
    if L.repeat:  # repeat_kv's backward: the heads summed
        if need["k_proj"]:
            gk2 = c.a(L.kv)
            c.f(gk)
            gk = gk2
        if need["v_proj"]:
            gv2 = c.a(L.kv)
            c.f(gv)
            gv = gv2
    if need["k_proj"]:
        gk = rotary_backward(c, L.kv, gk)
    if need["q_proj"]:
        gq = rotary_backward(c, L.q, gq)
    buf = None
    rel = last(("v_proj", "k_proj", "q_proj"), s.n1)
    for name, g, n in (("v_proj", gv, L.kv), ("k_proj", gk, L.kv), ("q_proj", gq, L.q)):
        if not need[name]:
            continue
        contiguous = c.a(n)  # the view's backward of a transposed gradient
        c.f(g)
        buf = linear_backward(
            c, L.lin[name], contiguous, True, s.lin[name], buf, release=rel.get(name, 0),
            need_input=c.input_grad,
        )  # fmt: skip
    if not c.input_grad:
        c.f(*([buf] if buf else []))
        return 0
    assert buf is not None
    return rms_norm_backward(c, L.h, buf, x, g_h1)


def kbit_step_events(
    m: ModelConfig, d: DataConfig, t: TrainerConfig, steps: int = 2, cuda: bool = True
) -> list[Event]:
    """The build (module order, then PEFT's fp32 adapters, then the batch), the reset, then
    ``steps`` optimizer steps of gpu_measure.py's loop under QLoRA. ``cuda``: with what a
    CPU trace cannot see (gemm_4bit's dequantized weight inside the op, cuBLAS's
    workspaces); False gives the CPU trace's sequence."""
    seq = Pipeline.from_data(d).memory_length()
    b = t.micro_batch_size
    T = b * seq
    h = m.n_embd
    ws = blas_workspace(t) if cuda else 0
    ev = Seq(workspace=ws, lt_workspace=BLAS_LT_WORKSPACE if cuda else 0)
    ev.lt_workspace = 0  # no biased linear (kbit_covered)
    adapted = adapted_modules(m, t.lora.targets, t.framework).names
    rank = t.lora.rank or 0
    lin = {
        x.name: Linear(x.name, x.in_features, x.out_features, x.name in adapted)
        for x in block_linears(m)
    }
    load_quantized(ev, m, t.quantization)
    loras: list[dict[str, tuple[int, int]]] = []
    trainable: list[tuple[int, int]] = []
    for _ in range(m.n_layer):
        layer = {}
        for x in lin.values():
            if x.adapted:
                a_n, b_n = 4 * rank * x.n_in, 4 * rank * x.n_out
                layer[x.name] = (ev.alloc(a_n), ev.alloc(b_n))
                trainable += [(layer[x.name][0], a_n), (layer[x.name][1], b_n)]
        loras.append(layer)
    for _ in range(3 if b > 1 or d.collator != "packed" else 2):  # ids, mask / positions, labels
        ev.alloc(8 * T)
    ev.reset()
    s = stack(m, t)
    masked = sdpa_masked(m, d, t, s, seq)
    L = Layout(
        h=h,
        q=4 * T * m.n_head * m.head_size,
        kv=4 * T * m.n_query_groups * m.head_size,
        mask=4 * b * seq * seq if masked else 0,
        inter=4 * T * m.mlp_width,
        lin=lin,
    )
    fallback = cuda and T > GEMM_4BIT_CUSTOM_MAX_M
    ckpt = t.gradient_checkpointing
    v = m.head_rows
    accum = t.gradient_accumulation_steps
    states_made = False
    for _ in range(steps):
        grads: dict[int, int] = {}
        for micro in range(min(accum, 2)):
            if micro == 1:  # the other micro-batches: the same allocations (see events.py)
                ev.mark((accum - 1, REPEAT))
                start = ev.next_id
            c = Ctx(ev, T, rank, t.lora.dropout > 0, fallback, t.quantization == "nf4-dq",
                    {}, grads)  # fmt: skip
            hidden = ev.alloc(4 * h * T)  # the embedding's fp32 output
            inputs, saved = [hidden], []
            for i in range(m.n_layer):
                c.lora = loras[i]
                c.input_grad = i > 0 or ckpt  # see the backward below
                out, sv = layer_forward(c, L, keep=not ckpt)
                saved.append(None if ckpt else sv)
                inputs.append(out)
            normed = rms_norm(c, h)
            if not ckpt:  # nothing saves the embedding's output: LlamaModel.forward returns
                ev.free(hidden)
            logits = ev.alloc(4 * v * T)  # fp32 head: logits.float() is the same tensor
            logp = ev.alloc(4 * v * T)
            ev.free(normed, logits)
            g_nll = ev.alloc(4 * v * T)
            g_ls = ev.alloc(4 * v * T)
            ev.free(g_nll, logp)
            g = ev.alloc(4 * h * T)  # the head's input gradient (its weight is frozen)
            ev.matmul("backward")
            ev.free(g_ls)
            g = rms_norm_backward(c, h, g, inputs[-1])
            for i in reversed(range(m.n_layer)):
                c.lora = loras[i]
                # the embedding's output: a leaf that needs its gradient under checkpointing
                # (``enable_input_require_grads``), held to the end; else none flows into it
                c.input_grad = i > 0 or ckpt
                g = layer_backward(c, L, g, inputs[i] if i else 0, saved[i])
            ev.free(*([g] if g else []), *([hidden] if ckpt else []))
            if micro == 1:
                ev.mark((0, END))
                ev.next_id = start
        if not states_made:
            states_made = True
            _optimizer_states(ev, t, trainable)
        if t.optimizer == "adamw":
            ev.free(*[ev.alloc(nb) for _, nb in trainable])  # _foreach_sqrt(exp_avg_sqs)
        ev.free(*(grads[i] for i, _ in trainable if i in grads))  # zero_grad, in param order
    return ev.events


def load_quantized(ev: Seq, m: ModelConfig, quant: str) -> None:
    """The model as gpu_measure.py loads it onto the GPU: transformers 5's loader
    (core_model_loading.py ``convert_and_load_state_dict_in_model``: synchronous with
    on-the-fly quantization, keys in ``dot_natural_key`` order: lm_head, embedding, layer by
    layer, each layer's keys sorted, the final norm) materializes each bf16 tensor on the
    device; a 4-bit linear's is quantized (``Bnb4bitQuantize`` -> ``Params4bit._quantize`` ->
    ``quantize_4bit``: the fp32 absmax, the packed weight, the code; double quantization then
    ``absmax.mean()``, ``absmax - offset``, ``quantize_blockwise``'s absmax and uint8 output,
    the temporaries and the fp32 absmax freed) and the bf16 tensor freed. Then
    ``prepare_model_for_kbit_training`` casts each other parameter to fp32 in parameter order
    (``param.data = param.data.to(torch.float32)``: the fp32 copy, the bf16 one freed)."""
    h = m.n_embd
    linears = {x.path: x.in_features * x.out_features for x in block_linears(m)}
    bf16: dict[str, int] = {}  # the unquantized parameters: name -> id
    maps = False

    def plain(name: str, n: int) -> None:
        bf16[name] = ev.alloc(2 * n)

    if count_params(m).lm_head:
        plain("lm_head", m.head_rows * h)
    plain("embed", m.rows * h)
    for i in range(m.n_layer):
        for key in sorted([*linears, "input_layernorm", "post_attention_layernorm"]):
            if key not in linears:
                plain(f"{i}.{key}", h)
                continue
            n = linears[key]
            w = ev.alloc(2 * n)
            blocks = -(-n // BLOCK)
            absmax = ev.alloc(4 * blocks)
            ev.alloc((n + 1) // 2)
            ev.alloc(4 * 16)  # get_4bit_type's code
            if quant == "nf4-dq":
                ev.alloc(4)  # offset
                tmp = ev.alloc(4 * blocks)
                if not maps:  # quantize_blockwise's dynamic map, once per device
                    maps = True
                    ev.alloc(4 * 256)
                ev.alloc(4 * -(-blocks // NESTED_BLOCK))
                ev.alloc(blocks)
                ev.free(tmp, absmax)
            ev.free(w)
    plain("norm", h)
    order = ["embed"]
    order += [f"{i}.{k}" for i in range(m.n_layer) for k in ("input_layernorm", "post_attention_layernorm")]
    order += ["norm", *(["lm_head"] if "lm_head" in bf16 else [])]
    for name in order:
        ev.alloc({"embed": 4 * m.rows * h, "lm_head": 4 * m.head_rows * h}.get(name, 4 * h))
        ev.free(bf16[name])


def _optimizer_states(ev: Seq, t: TrainerConfig, trainable: list[tuple[int, int]]) -> None:
    """The states the first step makes in the caching allocator: torch's AdamW two
    ``zeros_like``, SGD's momentum one; bitsandbytes' 8-bit AdamW per tensor (optim/
    optimizer.py ``Optimizer2State.init_state``): the two code maps once, then two states
    (uint8; fp32 below ``min_8bit_size`` 4096 elements; paged ones, from 1e5 elements, in
    managed memory: ``get_state_buffer``) and two fp32 block absmax vectors."""
    if t.optimizer in ("adamw", "sgd"):
        for _, nb in trainable:
            for _ in range(2 if t.optimizer == "adamw" else 1):
                ev.alloc(nb)
        return
    paged = t.optimizer.startswith("paged")
    maps = False
    for _, nb in trainable:
        n = nb // 4
        eight = n >= 4096
        if eight and not maps:
            maps = True
            ev.alloc(4 * 256)
            ev.alloc(4 * 256)
        if not paged or n < 100_000:
            for _ in range(2):
                ev.alloc(n if eight else 4 * n)
        if eight:
            for _ in range(2):
                ev.alloc(4 * -(-n // OPT_BLOCK))
