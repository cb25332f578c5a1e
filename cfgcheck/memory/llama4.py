"""Llama 4's mixture-of-experts layer as transformers 5 trains it (models/llama4/
modeling_llama4.py, 5.24; line numbers of that file): every token runs through **every**
expert, weighted by a score that is zero outside its top-k, so the routed activations scale
with ``num_local_experts``, not ``num_experts_per_tok``.

* ``Llama4Router.forward`` (l.147-152): an ``nn.Linear`` (its input kept when it trains),
  ``topk`` (int64 indices), ``scatter_`` of the top values into a ``-inf`` tensor, ``sigmoid``
  of its fp32 cast (kept: fp32, ``n_expert`` wide) cast back to the logits' dtype.
* ``Llama4TextMoe.forward`` (l.166-174): ``hidden_states.repeat(n_expert, 1)`` times the
  scores ``transpose(0, 1).reshape(-1, 1)`` (a copy): the product keeps both, the repeated
  input for the scores' gradient (they need one whenever the router's input does).
* ``Llama4TextExperts.forward`` (l.66-84): ``torch.bmm`` over all experts (autocast-enabled,
  unlike transformers' grouped_mm): the gate/up output (two expert widths, kept through the
  ``chunk`` views by the activation and the product) and the activation output, per expert
  and token; when the experts train also both bmm inputs (hidden wide and one expert width).
* The shared expert (``Llama4TextMLP`` of ``intermediate_size``, the experts' width) is the
  MLP term's dense part: ``mlp_width`` less the routed ``top_k * width``
  (:func:`shared_width`), which :func:`moe_bytes` counts for every expert.
* Masks (l.540-547): one per layer type present, ``create_chunked_causal_mask`` for the
  ``chunked_attention`` layers beside ``create_causal_mask`` (:func:`mask_kinds`); with
  checkpointing both are layer inputs.
* The recomputed layer under gradient checkpointing (:func:`recompute_bytes`) peaks at its
  experts' second ``bmm``: beside what the layer saves so far, the incoming gradient expanded
  to every expert (the backward of ``routed_out.reshape(n_expert, ...).sum(dim=0)``: a copy,
  ``n_expert`` hidden-wide rows per token, made before the recomputation starts), the
  weighted repeated input ``routed_in`` (a local; fp32 under autocast, the residual stream
  being fp32), the product ``up * act_fn(gate)`` (the second bmm's input, saved only when the
  experts train), that bmm's output, and the decoder layer's locals
  (``Llama4TextDecoderLayer.forward`` l.420-442: ``attention_states``, the MoE input); the
  shared expert has not run yet. The backward of ``routed_in * scores`` comes later, with the
  experts' saved tensors freed: the input gradient (cast to the residual's dtype) and the two
  products of the multiplication, ``n_expert`` hidden-wide rows each.
"""

from __future__ import annotations

from cfgcheck.memory.modules import traced
from cfgcheck.memory.stack import Stack
from cfgcheck.memory.traced import text_config
from cfgcheck.schema.model import ModelConfig


def every_expert(m: ModelConfig) -> bool:
    """The layer runs every token through every expert (Llama 4)."""
    return m.architecture in ("llama4_text", "llama4") and bool(m.n_expert)


def expert_width(m: ModelConfig) -> int:
    tr = traced(m)
    return tr.experts[-1].width if tr is not None and tr.experts else 0


def shared_width(m: ModelConfig) -> int:
    """The shared expert's width: ``mlp_width`` is ``top_k * width`` plus it
    (models/generic.py ``_mlp_width``)."""
    return max(0, m.mlp_width - (m.n_expert_per_token or 0) * expert_width(m))


def mask_kinds(m: ModelConfig, seq: int) -> int:
    """Masks ``Llama4TextModel.forward`` builds: one per layer type present, the chunked one
    only where a chunk is shorter than the sequence (else it is the causal mask)."""
    cfg = text_config(m.hf_config or {})
    types = cfg.get("layer_types")
    chunk = cfg.get("attention_chunk_size")
    kinds = set(types) if isinstance(types, list) else set()
    chunked = isinstance(chunk, int) and 0 < chunk < seq and "chunked_attention" in kinds
    return 2 if chunked and "full_attention" in kinds else 1


def moe_bytes(m: ModelConfig, s: Stack, full: bool) -> int:
    """Per token: the router and the routed experts of one MoE layer (module doc)."""
    e, k, h, w = m.n_expert or 0, m.n_expert_per_token or 0, m.n_embd, expert_width(m)
    total = 4 * e + 8 * k  # the fp32 sigmoid, the top-k indices
    # the scores' copy and the repeated input the product keeps (the scores need a gradient
    # whenever the router's input has one, trained router or not)
    total += s.act * e + s.residual * h * e
    total += 3 * s.act * w * e  # the gate/up output and the activation, per expert
    if full:  # both bmm inputs (for the weights; the first one's 16-bit cast under autocast)
        total += s.act * h * e + s.act * w * e
    return total


def forward_bytes(m: ModelConfig, s: Stack, full: bool) -> int:
    """Per token, the last MoE layer's forward beyond what it keeps, at its second bmm: the
    weighted repeated input (held by the local ``routed_in``) and its 16-bit cast under
    autocast, and the product ``up * act_fn(gate)`` (all kept anyway when the experts
    train), and the bmm's output (``n_expert`` hidden-wide rows)."""
    e, h, w = m.n_expert or 0, m.n_embd, expert_width(m)
    product = 0 if full else max(s.residual, s.act) * h * e + s.act * w * e
    cast = s.act * h * e if s.linear_cast and not full else 0
    return product + cast + s.act * h * e


def backward_bytes(m: ModelConfig, s: Stack) -> int:
    """Per token, the MoE layer's backward beyond what it keeps: the incoming gradient
    expanded to every expert (``sum(dim=0)``'s backward), the gate/up gradient (two expert
    widths) and the first bmm's input gradient, ``n_expert``-fold."""
    e, h, w = m.n_expert or 0, m.n_embd, expert_width(m)
    return s.act * e * (h + 2 * w)


def recompute_bytes(m: ModelConfig, s: Stack, full: bool, tokens: int) -> int:
    """The recomputed MoE layer at the largest of its moments (module doc), beyond the
    layer's saved tensors and the two hidden-size gradients every recomputed layer is counted
    with (the incoming one and the residual stream's local), for ``tokens`` tokens."""
    e, h, w, a, r = m.n_expert or 0, m.n_embd, expert_width(m), s.act, s.residual
    wide = max(r, a)  # routed_in: the residual's dtype times the 16-bit scores
    shared = (3 + full) * a * shared_width(m)  # what the shared expert saves
    product = e * w * a * (not full)  # the second bmm's input, saved when the experts train
    # the expanded gradient and the second bmm's output, routed_in (saved when the experts
    # train, unless it is an fp32 tensor of which the bmm keeps the 16-bit cast)
    held = 2 * e * h * a + (e * h * wide if not full or wide != a else 0)
    held += h * a  # attention_states
    held += h * a if r != a else 0  # the incoming gradient's cast to the layer's dtype
    held += 0 if full and r == a else r * h  # the MoE input, which a trained router keeps
    held -= r * h if r == 4 else 0  # the residual: the fp32 norm's saved input itself
    second_bmm = held + product - shared  # the shared expert not run yet
    shared_end = held  # the product freed, the shared expert's tensors made
    # backward, the layer's locals and the shared expert's tensors freed: the second bmm's
    # input gradient beside the expanded gradient; then routed_in's gradient and the two
    # products of ``routed_in * scores``, the experts' tensors freed as well
    down = e * h * a + e * w * a - r * h - shared
    scores = 3 * e * h * wide - r * h - shared - 3 * e * w * a
    return max(second_bmm, shared_end, down, scores) * tokens
