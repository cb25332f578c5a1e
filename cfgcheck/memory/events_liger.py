"""The loss of a run with Liger's fused linear cross-entropy (``trainer.loss_chunking=fused``)
as allocations and frees: the piece of :func:`cfgcheck.memory.events.step_events` that
replaces the logits, their upcast and log-softmax and the loss's backward.

Modelled from Liger's source (liger-kernel 0.8.5 from PyPI, the version that measured the H100
row; ``liger_kernel/ops/fused_linear_cross_entropy.py``): it needs Triton and CUDA, so no CPU
trace checks it. ``apply_liger_kernel_to_<arch>(fused_linear_cross_entropy=True)`` replaces
the causal LM's forward (``transformers/model/llama.py`` ``lce_forward``): in training the
logits are never made; ``LigerForCausalLMLoss`` (``transformers/model/loss_utils.py``) flattens
the final norm's output (a view) and calls ``LigerFusedLinearCrossEntropyFunction``, whose
``fused_linear_cross_entropy_forward``

* makes ``grad_input = torch.zeros_like(_input)`` (tokens x hidden, the input's dtype), the
  weight's gradient (``zeros_like(weight)``) only when the lm_head trains, ``loss_1d`` (fp32
  per token) and ``target_mask`` (bool per token);
* cuts the tokens into chunks of ``next_power_of_2(cdiv(BT, cdiv(V, chunk_mem_const * H)))``
  rows (``_CHUNK_MEM_CONST = 1``), at most BT, and, where ``_can_use_mm_out`` (CUDA, grad mode
  off inside the autograd function, input and weight of one dtype), makes one
  ``logits_storage`` of chunk x V in the input's dtype that every chunk's ``torch.mm(...,
  out=)`` writes and the Triton cross-entropy kernel overwrites with the logits' gradient in
  place; each chunk's input gradient goes into ``grad_input`` with ``mm(out=)``; the buffer is
  freed after the last chunk (``del logits_storage``);
* saves ``grad_input`` (``ctx.save_for_backward``); the backward scales it in place
  (``element_mul_kernel``, the loss divided by the accumulation steps) and returns it as the
  final norm output's gradient: no allocation.

Covered: the lm_head frozen (LoRA), input and lm_head of one dtype (``bf16-true``,
``32-true``); see :func:`covered_fused`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cfgcheck.memory.stack import stack
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.trainer import TrainerConfig

if TYPE_CHECKING:  # events.py imports this module
    from cfgcheck.memory.event_seq import Seq

CHUNK_MEM_CONST = 1  # fused_linear_cross_entropy.py ``_CHUNK_MEM_CONST``


def covered_fused(m: ModelConfig, t: TrainerConfig) -> bool:
    """Liger's fused loss with the lm_head frozen, without autocast (``_can_use_mm_out``)."""
    return (
        t.loss_chunking == "fused"
        and t.framework == "hf"
        and t.finetuning != "full"
        and t.precision in ("bf16-true", "32-true")
    )


def _next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def chunk_rows(tokens: int, vocab: int, hidden: int) -> int:
    """Rows of one chunk (``fused_linear_cross_entropy_forward``)."""
    inc = -(-vocab // (CHUNK_MEM_CONST * hidden))
    return min(_next_power_of_2(-(-tokens // inc)), tokens)


def fused_loss(ev: Seq, m: ModelConfig, t: TrainerConfig, tokens: int, later: list[int]) -> int:
    """The forward of the fused loss after the final norm; ``later``: what goes when the
    forward returns (the final norm's output). Returns ``grad_input``, the final norm output's
    gradient in the backward."""
    act = stack(m, t).act
    v = m.head_rows
    grad_input = ev.alloc(act * m.n_embd * tokens)
    loss_1d = ev.alloc(4 * tokens)
    target_mask = ev.alloc(tokens)
    ev.free(target_mask)  # ``target_mask.sum().item()``: not used after
    logits = ev.alloc(act * chunk_rows(tokens, v, m.n_embd) * v)  # logits_storage
    ev.free(logits)
    ev.free(loss_1d, *later)
    return grad_input
