"""QLoRA's own op: bitsandbytes' 4-bit linear (with PEFT's LoRA branch when adapted), forward
and backward, in the order the CPU trace of the step shows it; one more kind of block linear
for the recorder of :mod:`cfgcheck.memory.layer_ops` (:class:`KbitOps`), whose norm, rotary
embedding, LoRA branch and gradient accumulation the QLoRA layer
(:mod:`cfgcheck.memory.kbit_layer`) shares with the dense one. The mechanisms and their
sources: :mod:`cfgcheck.memory.events_kbit`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from cfgcheck.memory.layer_ops import Adapter, Ops, add_grad, lora_backward, lora_forward

BLOCK = 64  # ``bnb_4bit_quant_storage`` blocks (QuantState.blocksize)
NESTED_BLOCK = 256  # double quantization's state2 blocksize
ATTN_IN = ("q_proj", "k_proj", "v_proj")  # the linears on the layer's (normed) input


class Recompute(Protocol):
    def __call__(self) -> tuple[Adapter | None, int]: ...


@dataclass(frozen=True)
class Linear:
    name: str
    n_in: int
    n_out: int
    adapted: bool

    @property
    def kind(self) -> str:
        """The block linear's kind in :class:`KbitOps`' ``kinds``."""
        return "4bit-lora" if self.adapted else "4bit"


@dataclass
class KbitOps(Ops):
    """The recorder of :mod:`cfgcheck.memory.layer_ops` (the stream fp32: ``p`` 4; no per-token
    statistics: ``stats`` False) with how the 4-bit linears run."""

    fallback: bool = False  # CUDA's dequantize-then-linear path of gemm_4bit (inside the op)
    nested: bool = False  # double quantization: the absmax is itself quantized
    # adapted linear -> ((lora_A id, bytes), (lora_B id, bytes)) of the current layer
    lora: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    recomputing: bool = False
    input_grad: bool = True  # the layer's input needs its gradient


def _dequant(o: KbitOps, x: Linear) -> list[int]:
    """``F.dequantize_4bit``'s fp32 absmax under double quantization (then ``+= offset`` in
    place); the caller allocates the weight and frees these."""
    if not o.nested:
        return []
    return [o.alloc(4 * -(-x.n_in * x.n_out // BLOCK))]


def linear_forward(o: KbitOps, x: Linear, stop: bool = False) -> tuple[int, Adapter | None]:
    """``Linear4bit`` (+ the LoRA branch when adapted) on an fp32 input: returns the fp32
    output and what the LoRA branch keeps (``o.saving``: not checkpointed; a LoRA without
    dropout keeps the input itself, the caller's: ``x`` 0). ``stop``: a recomputation that
    ends once the LoRA's last saved tensor is made (the base output's copy dropped; no
    output)."""
    T = o.tokens
    xc = o.alloc(2 * T * x.n_in)  # x.to(compute_dtype)
    inner = []
    if o.fallback:
        if o.nested:  # absmax_dq, then absmax_dq + offset
            nb = 4 * -(-x.n_in * x.n_out // BLOCK)
            inner = [o.alloc(nb), o.alloc(nb)]
        inner.append(o.alloc(2 * x.n_in * x.n_out))  # B_dq
    y = o.alloc(2 * T * x.n_out)  # gemm_4bit
    o.matmul("backward" if o.recomputing else "forward")
    o.free(*inner)
    y32 = o.alloc(4 * T * x.n_out)  # .to(inp_dtype)
    o.free(y, xc)
    if not x.adapted:
        return y32, None
    base = o.alloc(4 * T * x.n_out)  # result.clone()
    o.free(y32)
    # the mask is kept for the input's gradient only
    graph = o.input_grad or x.name not in ATTN_IN
    scaled, saved = lora_forward(o, 0, T * x.n_in, T * x.n_out, graph, stop)
    if stop:
        o.free(base)
        return 0, saved
    out = o.alloc(4 * T * x.n_out)  # result = result + output (``output`` named: it goes last)
    o.free(base, scaled)
    return out, saved


def linear_backward(
    o: KbitOps, x: Linear, g: int, own: bool, saved: Adapter | None, buf: int | None,
    recompute: Recompute | None = None, release: int = 0, need_input: bool = True,
) -> int | None:  # fmt: skip
    """The backward of :func:`linear_forward` for the output gradient ``g`` (freed here when
    ``own``), its ``saved`` tensors released node by node, into the input's gradient ``buf``.
    ``recompute``: a callable run where the LoRA branch first unpacks a saved tensor (a
    checkpointed layer's recomputation); it returns the saved tensors and the kept input.
    ``release``: the input a LoRA without dropout keeps, released after its ``lora_A`` (the
    last node holding it). ``buf`` None: the input has no gradient yet; returns it (None:
    none). ``need_input``: False when the input needs no gradient (only the adapter's
    weights)."""
    T = o.tokens
    if x.adapted:
        scaled = o.alloc(4 * T * x.n_out)  # grad * scaling
        if own and not need_input:  # no base branch: its last use
            o.free(g)
        if recompute is not None:
            saved, release = recompute()
        assert saved is not None
        if not o.dropout:  # lora_A's input is the caller's
            saved = Adapter(release, None, saved.a)
        nin, nout = T * x.n_in, T * x.n_out
        gx = lora_backward(o, scaled, saved, nin, nout, o.lora[x.name], need_input, buf)
        if gx is None:
            return buf
        buf = add_grad(o, 4 * T * x.n_in, buf, gx) if o.dropout else gx
    if not need_input:  # the base's output needs no gradient
        return buf
    gc = o.alloc(2 * T * x.n_out)  # the gradient cast to the compute dtype
    if own:
        o.free(g)
    nested = _dequant(o, x)
    w = o.alloc(2 * x.n_in * x.n_out)  # F.dequantize_4bit
    o.free(*nested)
    g_a = o.alloc(2 * T * x.n_in)
    o.free(w, gc)
    g32 = o.alloc(4 * T * x.n_in)  # back to the input's dtype
    o.free(g_a)
    return add_grad(o, 4 * T * x.n_in, buf, g32)
