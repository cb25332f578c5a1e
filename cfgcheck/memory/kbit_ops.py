"""The tensors one 4-bit linear, RMSNorm and rotary embedding make and free under QLoRA, op by
op (forward and backward), in the order the CPU trace of the step shows them: the pieces of
:mod:`cfgcheck.memory.kbit_layer`. The mechanisms and their sources:
:mod:`cfgcheck.memory.events_kbit`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cfgcheck.memory.event_seq import Seq

BLOCK = 64  # ``bnb_4bit_quant_storage`` blocks (QuantState.blocksize)
NESTED_BLOCK = 256  # double quantization's state2 blocksize
ATTN_IN = ("q_proj", "k_proj", "v_proj")  # the linears on the layer's (normed) input


class Recompute(Protocol):
    def __call__(self) -> tuple[list[int], int]: ...


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


def rms_norm_backward(c: Ctx, h: int, g: int, x: int, res: int = 0) -> int:
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


def accumulate(c: Ctx, buf: int, g: int, n: int) -> int:
    """A second gradient of one tensor, summed out of place into autograd's input buffer
    (torch/csrc/autograd/input_buffer.cpp ``accumulate``)."""
    if not buf:
        return g
    total = c.a(n)
    c.f(buf, g)
    return total


def linear_backward(
    c: Ctx, x: Linear, g: int, own: bool, saved: list[int], buf: int,
    recompute: Recompute | None = None, release: int = 0, need_input: bool = True,
) -> int:  # fmt: skip
    """The backward of :func:`linear_forward` for the output gradient ``g`` (freed here when
    ``own``), its ``saved`` tensors released node by node, into the input's gradient ``buf``.
    ``recompute``: a callable run where the LoRA branch first unpacks a saved tensor (a
    checkpointed layer's recomputation); it returns the saved tensors and the kept input.
    ``release``: the input a LoRA without dropout keeps, released after its ``lora_A`` (the
    last node holding it). ``buf`` 0: the input has no gradient yet; returns it (0: none).
    ``need_input``: False when the input needs no gradient (only the adapter's weights)."""
    T = c.tokens
    if x.adapted:
        scaled = c.a(4 * T * x.n_out)  # grad * scaling
        if own and not need_input:  # no base branch: its last use
            c.f(g)
        if recompute is not None:
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
