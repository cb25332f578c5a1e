"""What torch's caching allocator reserves beyond the peak it hands out.

``torch.cuda.max_memory_reserved()`` grows only when a request finds no cached free block big
enough (torch docs, "CUDA memory management": freed blocks stay cached, large blocks are split
but never merged across segments). Three patterns of a training step do that; each term below
is one of them, sized from the tensors involved, never from a per-run constant:

* **loss buffers** (transformers, 16-bit logits, ``loss_chunking=none``): at the start of
  backward the bf16 logits (2 bytes per token x vocab row) and their fp32 upcast (4) are free;
  the NLL gradient takes the 4-byte block, the log-softmax gradient (4) finds only the 2-byte
  one and gets a new segment: the 2-byte block stays cached, unused.
* **recomputation** (gradient checkpointing, frozen base): the layer recomputed during backward
  is allocated between the cached loss-phase blocks and the gradient buffers; the measurements
  (benchmarks/calibration/) hold about one recomputed layer on top of the peak.
* **gradients under recomputation** (full fine-tuning with checkpointing): the gradients are
  created during backward while recomputed layers come and go, so they land in new segments,
  except for what the freed loss blocks absorb.
* **block rounding and split remainders** of every other allocation: 2.5 % of the peak (the
  H100 runs without the patterns above hold 1 % to 5 %).
"""

from __future__ import annotations

from dataclasses import dataclass

from cfgcheck.memory.stack import Stack
from cfgcheck.schema.trainer import TrainerConfig

ROUNDING = 0.025


@dataclass(frozen=True)
class Cache:
    bytes: int
    note: str


def rounding_bytes(allocated: int) -> int:
    """Block rounding and split remainders of a peak of ``allocated`` bytes: cached inside
    segments that hold live blocks, so torch cannot free them."""
    return int(allocated * ROUNDING)


def loss_hole(t: TrainerConfig, s: Stack, vocab_tokens: int) -> int:
    """The cached 16-bit logits block the fp32 loss gradients cannot reuse."""
    if s.framework == "hf" and t.loss_chunking == "none" and s.act == 2:
        return 2 * vocab_tokens
    return 0


def cached_bytes(
    t: TrainerConfig,
    s: Stack,
    allocated: int,
    vocab_tokens: int,
    layer: int,
    grads: int,
    backward_below_step: int | None = None,
) -> Cache:
    """Reserved minus allocated at the reserved peak, with what makes it up.
    ``backward_below_step``: where the allocated peak is the optimizer step, how much less the
    backward's (recomputation) moment holds. The gradients' new segments are made at that
    moment; the step's allocations (the first step's states, the foreach temporaries) then
    reuse what the backward freed in them, so only what the backward moment's reserved
    exceeds the step by remains (OLMoE-1B-7B full fine-tuning on an H200: reserved 1.9 GiB
    above allocated, where adding every gradient again would say 14.5)."""
    parts: list[tuple[str, int]] = [("rounding", rounding_bytes(allocated))]
    hole = loss_hole(t, s, vocab_tokens)
    if hole:
        parts.append(("loss buffers", hole))
    if t.gradient_checkpointing:
        if t.finetuning == "full":
            under = max(0, grads - hole)
            if backward_below_step is not None:
                under = max(0, under - backward_below_step)
            parts.append(("gradients under recomputation", under))
        else:
            parts.append(("recomputed layer", layer))
    note = " + ".join(f"{name}" for name, n in parts if n)
    return Cache(sum(n for _, n in parts), note)
