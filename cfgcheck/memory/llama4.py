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
* The shared expert (``Llama4TextMLP`` of ``intermediate_size``) is the MLP term's dense part.
"""

from __future__ import annotations

from cfgcheck.memory.modules import traced
from cfgcheck.memory.stack import Stack
from cfgcheck.schema.model import ModelConfig


def every_expert(m: ModelConfig) -> bool:
    """The layer runs every token through every expert (Llama 4)."""
    return m.architecture in ("llama4_text", "llama4") and bool(m.n_expert)


def expert_width(m: ModelConfig) -> int:
    tr = traced(m)
    return tr.experts[-1].width if tr is not None and tr.experts else 0


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
